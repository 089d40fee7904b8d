/*
 * ash_replicant 0.4.0 -> 0.4.1: bindings for the update to 1.0.0
 * (docs/operations.md, "Upgrading from 0.4.0").
 *
 * 0.4.1 is not a release of its own: it is the staging step of the update.
 * A 0.4.0 checkpoint is keyed by slot name only; 1.0.0 keys it by source
 * system identifier, source database and slot name.  Which source a legacy
 * watermark belongs to only the operator knows: here they record it, per
 * sink, and see per legacy checkpoint whether the update can convert it.
 * Nothing else changes, and the library still runs nothing on these
 * catalogs.  The update to 1.0.0 consumes the bindings (into its rollback
 * ledger) and drops what this script adds.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '0.4.1'" to load this file. \quit

/*
 * legacy_bindings: the operator's word that sink_name's legacy checkpoint
 * holds a watermark of this source.  Several rows for one sink are kept (and
 * reported ambiguous), never silently replaced.
 */
CREATE TABLE ash_replicant.legacy_bindings (
	sink_name text NOT NULL
		REFERENCES ash_replicant.sinks (sink_name) ON DELETE CASCADE,
	source_system_id text NOT NULL,
	source_database text NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (sink_name, source_system_id, source_database)
);
ALTER TABLE ash_replicant.legacy_bindings ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.legacy_bindings FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.legacy_bindings', '');

CREATE FUNCTION ash_replicant_bind_legacy_checkpoint(
	sink_name text,
	source_system_identifier text,
	source_database text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_sink text := sink_name;
	v_sysid text := source_system_identifier;
	v_db text := source_database;
BEGIN
	-- messages name the sink (a configuration name) and never a given value
	IF v_sink IS NULL OR NOT EXISTS (SELECT 1 FROM ash_replicant.sinks s WHERE s.sink_name = v_sink) THEN
		RAISE EXCEPTION 'ash_replicant: binding rejected: legacy_binding_invalid (no such sink)'
			USING ERRCODE = 'undefined_object';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM ash_replicant.sinks s JOIN ash_replicant.checkpoints c USING (slot_name)
	                WHERE s.sink_name = v_sink) THEN
		RAISE EXCEPTION 'ash_replicant: binding rejected: legacy_binding_invalid (the sink''s slot has no legacy checkpoint)'
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	IF v_sysid IS NULL OR v_sysid !~ '^[0-9]{1,20}$' THEN
		RAISE EXCEPTION 'ash_replicant: binding rejected: legacy_binding_invalid (source_system_identifier must be a decimal system identifier)'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF v_db IS NULL OR v_db = '' OR pg_catalog.octet_length(v_db) > 63 THEN
		RAISE EXCEPTION 'ash_replicant: binding rejected: legacy_binding_invalid (source_database must be 1 to 63 bytes)'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	INSERT INTO ash_replicant.legacy_bindings (sink_name, source_system_id, source_database)
	VALUES (v_sink, v_sysid, v_db)
	ON CONFLICT DO NOTHING;
END
$fn$;
COMMENT ON FUNCTION ash_replicant_bind_legacy_checkpoint(text, text, text)
	IS 'before the update from 0.4: record that the sink''s slot-keyed checkpoint belongs to this source system identifier and database';

CREATE FUNCTION ash_replicant_unbind_legacy_checkpoint(sink_name text)
RETURNS integer
LANGUAGE plpgsql STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_sink text := sink_name;
	n integer;
BEGIN
	DELETE FROM ash_replicant.legacy_bindings b WHERE b.sink_name = v_sink;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$fn$;
COMMENT ON FUNCTION ash_replicant_unbind_legacy_checkpoint(text)
	IS 'before the update from 0.4: remove every binding recorded for the sink; returns how many';

/*
 * One row per legacy checkpoint, in slot-name order, with its structural
 * state only (never a slot name, LSN or identity):
 *
 *   shared     more than one sink names its slot: whose watermark is it?
 *   missing    no binding: no sink names the slot, or its sink has none
 *   ambiguous  its sink has more than one binding
 *   foreign    its one binding names another source than the one the
 *              sink's pipeline is configured for
 *   bound      exactly one binding, consistent with the pipeline
 *
 * sink_name is given when exactly one sink names the slot.  The update to
 * 1.0.0 refuses unless every row is bound (reason legacy_binding_<state>).
 */
CREATE FUNCTION ash_replicant_upgrade_dry_run()
RETURNS TABLE (legacy_checkpoint integer, sink_name text, state text,
	sinks integer, bindings integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
WITH legacy AS (
	SELECT c.slot_name,
	       pg_catalog.row_number() OVER (ORDER BY c.slot_name)::integer AS n
	  FROM ash_replicant.checkpoints c),
claims AS (
	SELECT l.n, pg_catalog.count(s.sink_name)::integer AS sinks,
	       pg_catalog.min(s.sink_name) AS sink_name
	  FROM legacy l LEFT JOIN ash_replicant.sinks s ON s.slot_name = l.slot_name
	 GROUP BY l.n),
binds AS (
	SELECT l.n, pg_catalog.count(b.sink_name)::integer AS bindings,
	       pg_catalog.count(*) FILTER (
	         WHERE (coalesce(p.source_system_identifier, '') <> ''
	                AND p.source_system_identifier <> b.source_system_id)
	            OR (coalesce(p.source_database, '') <> ''
	                AND p.source_database <> b.source_database))::integer AS contradicting
	  FROM legacy l
	  JOIN ash_replicant.sinks s ON s.slot_name = l.slot_name
	  JOIN ash_replicant.legacy_bindings b ON b.sink_name = s.sink_name
	  LEFT JOIN ash_replicant.pipelines p ON p.sink_name = s.sink_name
	 GROUP BY l.n)
SELECT c.n,
       CASE WHEN c.sinks = 1 THEN c.sink_name END,
       CASE WHEN c.sinks > 1 THEN 'shared'
            WHEN coalesce(b.bindings, 0) = 0 THEN 'missing'
            WHEN b.bindings > 1 THEN 'ambiguous'
            WHEN b.contradicting > 0 THEN 'foreign'
            ELSE 'bound' END,
       c.sinks,
       coalesce(b.bindings, 0)
  FROM claims c LEFT JOIN binds b USING (n)
 ORDER BY c.n
$fn$;
COMMENT ON FUNCTION ash_replicant_upgrade_dry_run()
	IS 'before the update from 0.4: per legacy checkpoint its binding state (bound, missing, ambiguous, shared, foreign) and counts; never a slot name, LSN or identity';

REVOKE ALL ON FUNCTION
	ash_replicant_bind_legacy_checkpoint(text, text, text),
	ash_replicant_unbind_legacy_checkpoint(text),
	ash_replicant_upgrade_dry_run()
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	ash_replicant_bind_legacy_checkpoint(text, text, text),
	ash_replicant_unbind_legacy_checkpoint(text)
	TO ash_replicant_admin;
GRANT EXECUTE ON FUNCTION ash_replicant_upgrade_dry_run()
	TO ash_replicant_monitor, ash_replicant_admin;
