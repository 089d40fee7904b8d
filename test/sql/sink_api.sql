-- ash_replicant_create_sink / ash_replicant_drop_sink, and the privilege model
-- of the configuration API and catalogs.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

CREATE VIEW regress_sinks AS
  SELECT sink_name, slot_name, sink_kind, initial_state, ignored_sources,
         ignored_message_prefixes, recovery_horizon, batch_max_transactions,
         owner = current_user::regrole AS owner_is_caller, config_version
    FROM ash_replicant.sinks;

-- happy paths ---------------------------------------------------------------
-- all defaults: the slot is derived from the sink name, owner is the caller
SELECT ash_replicant_create_sink('orders');
-- every argument, quoted and mixed-case ignored sources are normalised
SELECT ash_replicant_create_sink('Order Lines', slot_name => 'order_lines',
    sink_kind => 'state_mirror', initial_state => 'snapshot',
    ignored_sources => ARRAY['public.audit', '"My Schema"."T"', 'Public.Mixed_Case', '"we""ird".t$1'],
    ignored_message_prefixes => ARRAY['noise', 'telemetry'],
    recovery_horizon => '1 day', batch_max_transactions => 1);
-- append log with its required initial state; NULL arrays mean empty
SELECT ash_replicant_create_sink('events', sink_kind => 'append_log',
    initial_state => 'go_forward', ignored_sources => NULL,
    ignored_message_prefixes => NULL);
SELECT ash_replicant_create_sink('events_snap', sink_kind => 'append_log',
    initial_state => 'snapshot');
-- state mirror declaring go_forward; explicit owner
CREATE ROLE regress_ash_sink_owner;
SELECT ash_replicant_create_sink('fwd', initial_state => 'go_forward',
    owner => 'regress_ash_sink_owner');
SELECT * FROM regress_sinks ORDER BY sink_name;
SELECT owner FROM ash_replicant.sinks WHERE sink_name = 'fwd';

-- rejections: each changes nothing ------------------------------------------
SELECT count(*) AS sinks_before FROM ash_replicant.sinks;
-- sink name
SELECT ash_replicant_create_sink(NULL);
SELECT ash_replicant_create_sink('');
SELECT ash_replicant_create_sink(repeat('s', 64), slot_name => 'long_sink');
SELECT ash_replicant_create_sink('orders', slot_name => 'orders_again');
-- slot name: derived or given, PostgreSQL's rule, unique
SELECT ash_replicant_create_sink('Order Items');
SELECT ash_replicant_create_sink('x1', slot_name => 'Bad-Slot');
SELECT ash_replicant_create_sink('x1', slot_name => '');
SELECT ash_replicant_create_sink('x1', slot_name => repeat('s', 64));
SELECT ash_replicant_create_sink('x1', slot_name => 'orders');
-- sink kind and initial state
SELECT ash_replicant_create_sink('x1', sink_kind => NULL);
SELECT ash_replicant_create_sink('x1', sink_kind => 'mixed');
SELECT ash_replicant_create_sink('x1', initial_state => 'later');
SELECT ash_replicant_create_sink('x1', sink_kind => 'append_log');
SELECT ash_replicant_create_sink('x1', sink_kind => 'append_log', initial_state => 'eventually');
-- ignored sources: strictly schema.table, no NULLs, no duplicates
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['audit']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['a.b.c']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['.t']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['s.']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['"".t']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['"unterminated.t']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['public.t ']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['public. t']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['1abc.t']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['public.' || repeat('t', 64)]);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['public.t', NULL]);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['public.t', 'PUBLIC.T']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY['public.t', '"public"."t"']);
SELECT ash_replicant_create_sink('x1', ignored_sources => ARRAY[['public.a'], ['public.b']]);
-- ignored message prefixes: never echoed, reported by position
SELECT ash_replicant_create_sink('x1', ignored_message_prefixes => ARRAY['secret-a', NULL]);
SELECT ash_replicant_create_sink('x1', ignored_message_prefixes => ARRAY['secret-a', '']);
SELECT ash_replicant_create_sink('x1', ignored_message_prefixes => ARRAY['secret-a', 'secret-b', 'secret-a']);
SELECT ash_replicant_create_sink('x1', ignored_message_prefixes => ARRAY[['a'], ['b']]);
-- recovery horizon: positive, never on an append log
SELECT ash_replicant_create_sink('x1', recovery_horizon => '0');
SELECT ash_replicant_create_sink('x1', recovery_horizon => '-1 hour');
SELECT ash_replicant_create_sink('x1', recovery_horizon => '1 month -40 days');
SELECT ash_replicant_create_sink('x1', sink_kind => 'append_log',
    initial_state => 'go_forward', recovery_horizon => '1 day');
-- batching
SELECT ash_replicant_create_sink('x1', batch_max_transactions => 0);
SELECT ash_replicant_create_sink('x1', batch_max_transactions => NULL);
-- owner
SELECT ash_replicant_create_sink('x1', owner => 999999::oid::regrole);
SELECT count(*) AS sinks_after FROM ash_replicant.sinks;

-- drop ------------------------------------------------------------------------
SELECT ash_replicant_drop_sink('no_such_sink');
SELECT ash_replicant_drop_sink(NULL) IS NULL AS strict_null;
-- the pipeline row goes with the sink; checkpoints stay (keyed by source+slot)
SELECT ash_replicant_configure_pipeline('events_snap', NULL, publication => 'pub', snapshot => 'v1');
INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name, timeline_id)
  VALUES ('7000000000000000001', 'src', 'events_snap', 1);
SELECT ash_replicant_drop_sink('events_snap');
SELECT count(*) AS sinks, (SELECT count(*) FROM ash_replicant.pipelines WHERE sink_name = 'events_snap') AS pipelines,
       (SELECT count(*) FROM ash_replicant.checkpoints WHERE slot_name = 'events_snap') AS checkpoints
  FROM ash_replicant.sinks WHERE sink_name = 'events_snap';
DELETE FROM ash_replicant.checkpoints WHERE slot_name = 'events_snap';
-- a dropped sink's name and slot can be reused
SELECT ash_replicant_create_sink('events_snap', sink_kind => 'append_log', initial_state => 'snapshot');
SELECT ash_replicant_drop_sink('events_snap');

-- privileges ------------------------------------------------------------------
CREATE ROLE regress_ash_plain;
CREATE ROLE regress_ash_admin IN ROLE ash_replicant_admin;
CREATE ROLE regress_ash_monitor IN ROLE ash_replicant_monitor;
CREATE ROLE regress_ash_other;

-- a plain role may call no admin function and read no catalog
SET ROLE regress_ash_plain;
SELECT ash_replicant_create_sink('plain_sink');
SELECT ash_replicant_drop_sink('orders');
SELECT ash_replicant_add_message_route('orders', 'p', 'pg_class'::regclass, '1 day');
SELECT ash_replicant_add_message_route('orders', 'p', 'pg_catalog.textlen(text)'::regprocedure, '1 day');
SELECT ash_replicant_drop_message_route('orders', 'p');
SELECT ash_replicant_configure_pipeline('orders', NULL, publication => 'pub');
SELECT ash_replicant_start('orders');
SELECT ash_replicant_stop('orders');
SELECT ash_replicant_map_table('orders', 'pg_class'::regclass);
SELECT ash_replicant_unmap_table('orders', 'pg_class'::regclass);
SELECT * FROM ash_replicant_status();
SELECT * FROM ash_replicant.sinks;
SELECT * FROM ash_replicant.pipelines;
SELECT * FROM ash_replicant.resources;
SELECT * FROM ash_replicant.message_routes;
SELECT * FROM ash_replicant.checkpoints;
SELECT * FROM ash_replicant.message_claims;
RESET ROLE;

-- the monitor may call status, not the admin functions
SELECT has_function_privilege('regress_ash_monitor', 'ash_replicant_status(text)', 'EXECUTE') AS monitor_status,
       has_function_privilege('regress_ash_plain', 'ash_replicant_status(text)', 'EXECUTE') AS plain_status;
SET ROLE regress_ash_monitor;
SELECT count(*) > 0 AS monitor_sees_sinks FROM ash_replicant_status();
SELECT ash_replicant_create_sink('monitor_sink');
SELECT ash_replicant_drop_sink('orders');
SELECT ash_replicant_configure_pipeline('orders', NULL, publication => 'pub');
SELECT ash_replicant_start('orders');
SELECT ash_replicant_stop('orders');
SELECT ash_replicant_drop_message_route('orders', 'p');
SELECT * FROM ash_replicant.sinks;
RESET ROLE;

-- an admin member may configure; the sink is owned by the calling role
SET ROLE regress_ash_admin;
SELECT ash_replicant_create_sink('admin_sink');
SELECT sink_name, owner FROM ash_replicant.sinks WHERE sink_name = 'admin_sink';
-- ... but may not make a role it does not act for the owner
SELECT ash_replicant_create_sink('admin_sink2', owner => 'regress_ash_other');
-- ... nor lend it the server's own identity: a conninfo without a password
SELECT ash_replicant_configure_pipeline('admin_sink', 'host=db.invalid user=postgres',
    publication => 'pub', source_system_identifier => '7000000000000000001',
    source_database => 'src');
SELECT ash_replicant_configure_pipeline('admin_sink', 'host=db.invalid password=secret',
    publication => 'pub', source_system_identifier => '7000000000000000001',
    source_database => 'src');
SELECT ash_replicant_stop('admin_sink');
-- admins read every pipelines column but the conninfo
SELECT sink_name, decoder, publication, enabled, start_generation FROM ash_replicant.pipelines;
SELECT connection FROM ash_replicant.pipelines;
SELECT * FROM ash_replicant.pipelines;
SELECT ash_replicant_drop_sink('admin_sink');
RESET ROLE;
-- a superuser acts for every role
SELECT ash_replicant_create_sink('other_sink', owner => 'regress_ash_other');
SELECT ash_replicant_drop_sink('other_sink');

-- names the source or this server could not tell apart are refused: the
-- application name (case-blind, 63 bytes, non-ASCII bytes as '?') and the
-- replication origins of the snapshot helpers (<sink>_copier<n>)
SELECT ash_replicant_create_sink('twin');
SELECT ash_replicant_create_sink('TWIN', slot_name => 'twin_upper');
SELECT ash_replicant_create_sink('twin_copier1', slot_name => 'twin_c1');
SELECT ash_replicant_create_sink('twin_copier12', slot_name => 'twin_c12');
SELECT ash_replicant_create_sink(repeat('n', 49) || '_one', slot_name => 'long_one');
SELECT ash_replicant_create_sink(repeat('n', 49) || '_two', slot_name => 'long_two');
SELECT ash_replicant_create_sink(repeat('n', 48) || '_two', slot_name => 'long_two');
SELECT ash_replicant_create_sink('caf' || chr(233), slot_name => 'cafe_e');
SELECT ash_replicant_create_sink('caf' || chr(232), slot_name => 'cafe_e2');
SELECT sink_name FROM ash_replicant.sinks WHERE slot_name IN ('twin', 'twin_c12', 'long_one', 'long_two', 'cafe_e')
 ORDER BY 1;

-- cleanup ---------------------------------------------------------------------
SELECT ash_replicant_drop_sink(sink_name) FROM ash_replicant.sinks ORDER BY sink_name;
SELECT count(*) AS sinks_left FROM ash_replicant.sinks;
DROP VIEW regress_sinks;
DROP ROLE regress_ash_plain, regress_ash_admin, regress_ash_monitor,
    regress_ash_other, regress_ash_sink_owner;
