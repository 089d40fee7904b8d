/*
 * ash_replicant 1.0.0 -> 0.4.0: rollback of the update from 0.4
 * (docs/operations.md, "Upgrading from 0.4.0").
 *
 * Restores every checkpoint the update converted to its 0.4 row, keyed by
 * slot name only, from upgrade_ledger: the row as the ledger holds it, with
 * the timeline, watermark (commit_lsn, end_lsn) and updated_at the 1.0.0
 * checkpoint holds now, so a rollback right after the update gives back the
 * 0.4 rows exactly and one after streaming keeps what was applied.  What 0.4
 * never had goes: the recorded contract and decoder, a halt's tombstone (the
 * halt stays in pipelines), the ledger itself.  A ledger row whose
 * checkpoint was removed on 1.0 (ash_replicant_reset_checkpoint) is not
 * restored.  Refused, leaving the catalogs as they were, unless:
 *
 *   - the session says ash_replicant.pipelines_stopped = on
 *     (pipelines_stopped_required);
 *   - no pipeline or snapshot worker runs on the server and no session of
 *     this database holds a sink's slot lock (pipeline_running);
 *   - the ledger's checksum matches its rows (rollback_ledger_mismatch);
 *   - nothing exists that 0.4.0 cannot represent (rollback_state_unrepresentable):
 *     a checkpoint without a ledger row of its identity, a checkpoint with
 *     append-log, snapshot or digest-key state, an append-log sink, an SCD2
 *     mapping, a message route or claim.
 *
 * Every message is value-free: counts and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '0.4.0'" to load this file. \quit

------------------------------------------------------------------------------
-- May the rollback run?
------------------------------------------------------------------------------

DO $guard$
DECLARE
	v_stopped text := pg_catalog.current_setting('ash_replicant.pipelines_stopped', true);
	n bigint;
	n_unledgered bigint;
	n_state bigint;
	n_sinks bigint;
	n_mappings bigint;
	n_routes bigint;
	n_claims bigint;
BEGIN
	IF v_stopped IS NULL OR pg_catalog.lower(v_stopped) NOT IN ('on', 'true', 'yes', '1') THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: pipelines_stopped_required (stop every pipeline, then SET ash_replicant.pipelines_stopped = on in this session)'
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;

	-- one update or rollback at a time
	PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('ash_replicant.upgrade', 0));

	SELECT pg_catalog.count(*) INTO n FROM pg_catalog.pg_stat_activity a
	 WHERE a.backend_type IN ('ash_replicant pipeline', 'ash_replicant snapshot');
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: pipeline_running (% pipeline or snapshot workers run on this server)', n
			USING ERRCODE = 'object_in_use';
	END IF;

	LOCK TABLE ash_replicant.checkpoints, ash_replicant.upgrade_ledger IN ACCESS EXCLUSIVE MODE;
	LOCK TABLE ash_replicant.sinks, ash_replicant.pipelines, ash_replicant.resources,
		ash_replicant.message_routes, ash_replicant.message_claims IN SHARE MODE;

	-- a pipeline worker holds its slot's advisory lock for its whole life
	SELECT pg_catalog.count(*) INTO n FROM ash_replicant.sinks s
	 WHERE NOT pg_catalog.pg_try_advisory_xact_lock(
		pg_catalog.hashtextextended('ash_replicant.slot:' OPERATOR(pg_catalog.||) s.slot_name, 0));
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: pipeline_running (% sinks have their slot held by a session of this database)', n
			USING ERRCODE = 'object_in_use';
	END IF;

	-- the ledger as the update sealed it (the update's checksum expression)
	SELECT pg_catalog.count(*) INTO n FROM ash_replicant.upgrade_ledger l
	 WHERE l.ledger_checksum IS DISTINCT FROM (
		SELECT pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.string_agg(
		         pg_catalog.jsonb_build_array(x.slot_name, x.source_system_id, x.source_database,
		                                      x.sink_name, x.legacy_row)::text,
		         E'\n' ORDER BY x.slot_name), 'UTF8'))
		  FROM ash_replicant.upgrade_ledger x);
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: rollback_ledger_mismatch (% of the ledger''s rows do not match its checksum)', n
			USING ERRCODE = 'data_corrupted';
	END IF;

	SELECT pg_catalog.count(*) INTO n_unledgered FROM ash_replicant.checkpoints c
	 WHERE NOT EXISTS (SELECT 1 FROM ash_replicant.upgrade_ledger l
	                    WHERE l.slot_name = c.slot_name
	                      AND l.source_system_id = c.source_system_id
	                      AND l.source_database = c.source_database);
	SELECT pg_catalog.count(*) INTO n_state FROM ash_replicant.checkpoints c
	 WHERE c.snapshot_state IS NOT NULL OR c.origin_floor IS NOT NULL
	    OR c.digest_key_witness IS NOT NULL;
	SELECT pg_catalog.count(*) INTO n_sinks FROM ash_replicant.sinks s
	 WHERE s.sink_kind <> 'state_mirror';
	SELECT pg_catalog.count(*) INTO n_mappings FROM ash_replicant.resources r
	 WHERE r.history_strategy <> 'scd1';
	SELECT pg_catalog.count(*) INTO n_routes FROM ash_replicant.message_routes;
	SELECT pg_catalog.count(*) INTO n_claims FROM ash_replicant.message_claims;
	IF n_unledgered + n_state + n_sinks + n_mappings + n_routes + n_claims > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: rollback_state_unrepresentable (0.4.0 cannot represent: % checkpoints without a ledger row, % checkpoints with append-log, snapshot or digest-key state, % append-log sinks, % SCD2 mappings, % message routes, % message claims)',
			n_unledgered, n_state, n_sinks, n_mappings, n_routes, n_claims
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
END
$guard$;

------------------------------------------------------------------------------
-- Checkpoints keyed by slot name, from the ledger.
------------------------------------------------------------------------------

ALTER TABLE ash_replicant.checkpoints RENAME TO checkpoints_1_0;
ALTER TABLE ash_replicant.checkpoints_1_0 RENAME CONSTRAINT checkpoints_pkey TO checkpoints_1_0_pkey;

/*
 * checkpoints: one row per slot name — and so, wrongly, per every source
 * that ever used that slot name.  Default-deny: RLS enabled with no policy.
 */
CREATE TABLE ash_replicant.checkpoints (
	slot_name text PRIMARY KEY,
	timeline_id integer NOT NULL,
	commit_lsn pg_lsn NOT NULL DEFAULT '0/0',
	end_lsn pg_lsn NOT NULL DEFAULT '0/0',
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER TABLE ash_replicant.checkpoints ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.checkpoints FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.checkpoints', '');

INSERT INTO ash_replicant.checkpoints
SELECT (pg_catalog.jsonb_populate_record(NULL::ash_replicant.checkpoints,
         l.legacy_row OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(
           'timeline_id', c.timeline_id, 'commit_lsn', c.commit_lsn,
           'end_lsn', c.end_lsn, 'updated_at', c.updated_at))).*
  FROM ash_replicant.upgrade_ledger l
  JOIN ash_replicant.checkpoints_1_0 c
    ON c.slot_name = l.slot_name AND c.source_system_id = l.source_system_id
   AND c.source_database = l.source_database;

-- A dropped table stays in the extension's configuration list (pg_dump reads
-- it) unless it leaves the extension first.
ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.checkpoints_1_0;
DROP TABLE ash_replicant.checkpoints_1_0;
ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.upgrade_ledger;
DROP TABLE ash_replicant.upgrade_ledger;

------------------------------------------------------------------------------
-- What 0.4 had not: other sink kinds, unique slots, SCD2, messages, the API.
------------------------------------------------------------------------------

ALTER TABLE ash_replicant.sinks
	DROP CONSTRAINT sinks_slot_name_key,
	DROP CONSTRAINT sinks_sink_kind_check,
	ADD CONSTRAINT sinks_sink_kind_check CHECK (sink_kind IN ('state_mirror'));
ALTER TABLE ash_replicant.resources
	DROP CONSTRAINT resources_history_strategy_check,
	ADD CONSTRAINT resources_history_strategy_check CHECK (history_strategy IN ('scd1'));

ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.message_routes;
DROP TABLE ash_replicant.message_routes;
ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.message_claims;
DROP TABLE ash_replicant.message_claims;

DROP VIEW ash_replicant.stat_pipelines;
DROP FUNCTION ash_replicant._stat_pipelines();
DROP FUNCTION ash_replicant_create_sink(text, text, text, text, text[], text[], interval, integer, regrole);
DROP FUNCTION ash_replicant_drop_sink(text);
DROP FUNCTION ash_replicant_map_table(text, regclass, text, text, jsonb, text, regprocedure, text, text, text[], text[], text[], text, text, text, text, text[], text, text, text, text, text, boolean, text, text, text, text, text, text, text, text, text, text, boolean, regprocedure);
DROP FUNCTION ash_replicant_unmap_table(text, regclass);
DROP FUNCTION ash_replicant_add_message_route(text, text, regclass, interval);
DROP FUNCTION ash_replicant_add_message_route(text, text, regprocedure, interval);
DROP FUNCTION ash_replicant_drop_message_route(text, text);
DROP FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean);
DROP FUNCTION ash_replicant_start(text);
DROP FUNCTION ash_replicant_stop(text);
DROP FUNCTION ash_replicant_decrypt(bytea, regclass, text);
DROP FUNCTION ash_replicant_keyring_status();
DROP FUNCTION ash_replicant._encrypt_for_test(text, regclass, text);
DROP FUNCTION ash_replicant._crypto_selftest();
DROP FUNCTION ash_replicant_preflight(text);
DROP FUNCTION ash_replicant_reset_checkpoint(text, text, text, boolean);
DROP FUNCTION ash_replicant_adopt_checkpoint(text, text, text, pg_lsn);
DROP FUNCTION ash_replicant_acknowledge_checkpoint_timeline(text, text, text, integer);
