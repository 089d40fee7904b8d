-- ash_replicant_add_message_route / ash_replicant_drop_message_route: prefix
-- rules, retention against the recovery horizon, target shapes.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_ash_route_owner;
SELECT ash_replicant_create_sink('mail', recovery_horizon => '1 day',
    ignored_message_prefixes => ARRAY['noise']);
SELECT ash_replicant_create_sink('nohorizon');
SELECT ash_replicant_create_sink('nopriv', recovery_horizon => '1 hour',
    owner => 'regress_ash_route_owner');
SELECT ash_replicant_create_sink('log', sink_kind => 'append_log', initial_state => 'go_forward');

-- route targets
CREATE TABLE regress_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    prefix text,
    content bytea NOT NULL,
    operation_key bytea NOT NULL,
    content_digest bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    note text);
CREATE TABLE regress_outbox_text (content text, operation_key bytea, content_digest bytea);
CREATE TABLE regress_outbox_part (content bytea, operation_key bytea, content_digest bytea, prefix text)
    PARTITION BY LIST (prefix);
CREATE TABLE regress_outbox_cols (content bytea, operation_key bytea, content_digest bytea, secret text);
CREATE FUNCTION regress_route2(text, bytea) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION regress_route4(prefix text, content bytea, operation_key bytea, content_digest bytea)
    RETURNS bigint LANGUAGE sql AS $$SELECT 1::bigint$$;
CREATE VIEW regress_routes AS
  SELECT sink_name, prefix, target, target_function, retention
    FROM ash_replicant.message_routes;

-- happy paths -----------------------------------------------------------------
SELECT sink_name, config_version FROM ash_replicant.sinks WHERE sink_name = 'mail';
SELECT ash_replicant_add_message_route('mail', 'mail', 'regress_outbox'::regclass, '2 days');
-- retention equal to the horizon is enough; text content is accepted
SELECT ash_replicant_add_message_route('mail', 'mail.text', 'regress_outbox_text'::regclass, '1 day');
SELECT ash_replicant_add_message_route('mail', 'mail.part', 'regress_outbox_part'::regclass, '24 hours');
-- an untyped target is ambiguous between the two overloads: cast it
SELECT ash_replicant_add_message_route('mail', 'mail.untyped', 'regress_outbox_part', '24 hours');
-- function targets: (prefix, content) and (prefix, content, operation_key, content_digest)
SELECT ash_replicant_add_message_route('mail', 'fn2', 'regress_route2(text,bytea)'::regprocedure, '7 days');
SELECT ash_replicant_add_message_route('mail', 'fn4', 'regress_route4(text,bytea,bytea,bytea)'::regprocedure, '1 mon');
-- the owner needs INSERT on the written columns only
GRANT INSERT (content, operation_key, content_digest) ON regress_outbox_cols TO regress_ash_route_owner;
SELECT ash_replicant_add_message_route('nopriv', 'cols', 'regress_outbox_cols'::regclass, '1 hour');
-- append log: the target is a non-tenant append-log mapping of the sink; no horizon needed
CREATE TABLE regress_append (id bigint);
INSERT INTO ash_replicant.resources (sink_name, target, source_schema, source_table, append_log)
  VALUES ('log', 'regress_append', 'public', 'events', true);
SELECT ash_replicant_add_message_route('log', 'audit', 'regress_append'::regclass, '1 hour');
SELECT * FROM regress_routes ORDER BY sink_name, prefix;
SELECT sink_name, config_version FROM ash_replicant.sinks ORDER BY sink_name;

-- rejections: each changes nothing --------------------------------------------
CREATE TEMP TABLE regress_before AS
  SELECT (SELECT count(*) FROM ash_replicant.message_routes) AS routes,
         (SELECT sum(config_version) FROM ash_replicant.sinks) AS versions;
-- sink
SELECT ash_replicant_add_message_route(NULL, 'x', 'regress_outbox'::regclass, '1 day');
SELECT ash_replicant_add_message_route('no_such_sink', 'x', 'regress_outbox'::regclass, '1 day');
-- prefix, target, retention
SELECT ash_replicant_add_message_route('mail', NULL, 'regress_outbox'::regclass, '1 day');
SELECT ash_replicant_add_message_route('mail', '', 'regress_outbox'::regclass, '1 day');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', NULL::regclass, '1 day');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', NULL::regprocedure, '1 day');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox'::regclass, NULL);
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox'::regclass, '0');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox'::regclass, '-2 days');
SELECT ash_replicant_add_message_route('log', 'secret-prefix', 'regress_append'::regclass, '0');
-- ash_replicant's own prefix (incremental snapshots' flush requests) is reserved
SELECT ash_replicant_add_message_route('mail', 'ash_replicant.flush', 'regress_outbox'::regclass, '1 day');
-- an ignored prefix cannot be routed; a prefix is routed once
SELECT ash_replicant_add_message_route('mail', 'noise', 'regress_outbox'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'mail', 'regress_outbox_text'::regclass, '2 days');
-- a state mirror needs a recovery horizon, and every retention covers it
SELECT ash_replicant_add_message_route('nohorizon', 'secret-prefix', 'regress_outbox'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox'::regclass, '23 hours');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_route2(text,bytea)'::regprocedure, '1 hour');
-- table target shapes
CREATE VIEW regress_outbox_view AS SELECT * FROM regress_outbox;
CREATE MATERIALIZED VIEW regress_outbox_mv AS SELECT * FROM regress_outbox;
CREATE SEQUENCE regress_outbox_seq;
CREATE TEMP TABLE regress_outbox_temp (content bytea, operation_key bytea, content_digest bytea);
CREATE TABLE regress_no_content (body bytea, operation_key bytea, content_digest bytea);
CREATE TABLE regress_int_content (content int, operation_key bytea, content_digest bytea);
CREATE TABLE regress_no_key (content bytea, content_digest bytea);
CREATE TABLE regress_text_key (content bytea, operation_key text, content_digest bytea);
CREATE TABLE regress_no_digest (content bytea, operation_key bytea);
CREATE TABLE regress_text_digest (content bytea, operation_key bytea, content_digest text);
CREATE TABLE regress_varchar_prefix (content bytea, operation_key bytea, content_digest bytea, prefix varchar);
CREATE TABLE regress_generated (raw bytea, content bytea GENERATED ALWAYS AS (raw) STORED,
    operation_key bytea, content_digest bytea);
CREATE TABLE regress_strict_extra (content bytea, operation_key bytea, content_digest bytea,
    tenant text NOT NULL);
CREATE TABLE regress_mirrored (content bytea, operation_key bytea, content_digest bytea);
INSERT INTO ash_replicant.resources (sink_name, target, source_schema, source_table)
  VALUES ('mail', 'regress_mirrored', 'public', 'mirrored');
CREATE TABLE regress_private (content bytea, operation_key bytea, content_digest bytea);
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox_view'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox_mv'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox_seq'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_outbox_temp'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'pg_catalog.pg_class'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'ash_replicant.message_claims'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 999999::oid::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_no_content'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_int_content'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_no_key'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_text_key'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_no_digest'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_text_digest'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_varchar_prefix'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_generated'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_strict_extra'::regclass, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_mirrored'::regclass, '2 days');
SELECT ash_replicant_add_message_route('nopriv', 'secret-prefix', 'regress_private'::regclass, '2 days');
SELECT ash_replicant_add_message_route('nopriv', 'secret-prefix', 'regress_outbox'::regclass, '2 days');
-- function target shapes
CREATE FUNCTION regress_fn_one(text) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION regress_fn_swapped(bytea, text) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION regress_fn_three(text, bytea, bytea) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION regress_fn_five(text, bytea, bytea, bytea, bytea) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION regress_fn_varchar(varchar, bytea) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION regress_fn_srf(text, bytea) RETURNS SETOF int LANGUAGE sql AS $$SELECT 1$$;
CREATE FUNCTION regress_agg_step(text, text, bytea) RETURNS text LANGUAGE sql AS $$SELECT $1$$;
CREATE AGGREGATE regress_agg(text, bytea) (sfunc = regress_agg_step, stype = text);
CREATE PROCEDURE regress_proc(text, bytea) LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION pg_temp.regress_fn_temp(text, bytea) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION regress_fn_private(text, bytea) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
REVOKE EXECUTE ON FUNCTION regress_fn_private(text, bytea) FROM PUBLIC;
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_fn_one(text)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_fn_swapped(bytea,text)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_fn_three(text,bytea,bytea)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_fn_five(text,bytea,bytea,bytea,bytea)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_fn_varchar(varchar,bytea)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_fn_srf(text,bytea)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_agg(text,bytea)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'regress_proc(text,bytea)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 'pg_temp.regress_fn_temp(text,bytea)'::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('mail', 'secret-prefix', 999999::oid::regprocedure, '2 days');
SELECT ash_replicant_add_message_route('nopriv', 'secret-prefix', 'regress_fn_private(text,bytea)'::regprocedure, '2 days');
-- append log: only non-tenant append-log mappings of the sink
CREATE TABLE regress_append_tenant (id bigint);
INSERT INTO ash_replicant.resources (sink_name, target, source_schema, source_table, append_log,
    tenant_column, tenant_strategy)
  VALUES ('log', 'regress_append_tenant', 'public', 'tenant_events', true, 'tenant', 'attribute');
SELECT ash_replicant_add_message_route('log', 'secret-prefix', 'regress_outbox'::regclass, '2 days');
SELECT ash_replicant_add_message_route('log', 'secret-prefix', 'regress_append_tenant'::regclass, '2 days');
SELECT ash_replicant_add_message_route('log', 'secret-prefix', 'regress_route2(text,bytea)'::regprocedure, '2 days');
-- nothing changed
SELECT (SELECT count(*) FROM ash_replicant.message_routes) = routes AS routes_unchanged,
       (SELECT sum(config_version) FROM ash_replicant.sinks) = versions AS versions_unchanged
  FROM regress_before;

-- drop ------------------------------------------------------------------------
SELECT ash_replicant_drop_message_route('mail', 'mail.text');
SELECT ash_replicant_drop_message_route('mail', 'mail.text');
SELECT ash_replicant_drop_message_route('no_such_sink', 'mail');
SELECT ash_replicant_drop_message_route('mail', NULL) IS NULL AS strict_null;
SELECT prefix FROM regress_routes WHERE sink_name = 'mail' ORDER BY prefix;
SELECT sink_name, config_version FROM ash_replicant.sinks WHERE sink_name = 'mail';
-- dropping the sink drops its routes
SELECT ash_replicant_drop_sink('mail');
SELECT count(*) AS mail_routes FROM ash_replicant.message_routes WHERE sink_name = 'mail';

-- cleanup ---------------------------------------------------------------------
SELECT ash_replicant_drop_sink(s) FROM unnest(ARRAY['nohorizon', 'nopriv', 'log']) s;
SELECT count(*) AS sinks_left, (SELECT count(*) FROM ash_replicant.message_routes) AS routes_left,
       (SELECT count(*) FROM ash_replicant.resources) AS resources_left
  FROM ash_replicant.sinks;
DROP TABLE regress_before;
DROP VIEW regress_routes, regress_outbox_view;
DROP MATERIALIZED VIEW regress_outbox_mv;
DROP SEQUENCE regress_outbox_seq;
DROP TABLE regress_outbox, regress_outbox_text, regress_outbox_part, regress_outbox_cols,
    regress_append, regress_append_tenant, regress_no_content, regress_int_content,
    regress_no_key, regress_text_key, regress_no_digest, regress_text_digest,
    regress_varchar_prefix, regress_generated, regress_strict_extra, regress_mirrored,
    regress_private;
DROP AGGREGATE regress_agg(text, bytea);
DROP PROCEDURE regress_proc(text, bytea);
DROP FUNCTION regress_route2(text, bytea), regress_route4(text, bytea, bytea, bytea),
    regress_fn_one(text), regress_fn_swapped(bytea, text), regress_fn_three(text, bytea, bytea),
    regress_fn_five(text, bytea, bytea, bytea, bytea), regress_fn_varchar(varchar, bytea),
    regress_fn_srf(text, bytea), regress_agg_step(text, text, bytea),
    regress_fn_private(text, bytea);
DROP ROLE regress_ash_route_owner;
