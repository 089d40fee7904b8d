-- Privilege matrix of every extension function, default-deny catalogs,
-- conninfo secrecy, and identifiers that try to break out of SQL.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;

CREATE ROLE regress_sec_plain;
CREATE ROLE regress_sec_monitor IN ROLE ash_replicant_monitor;
CREATE ROLE regress_sec_admin IN ROLE ash_replicant_admin;
CREATE ROLE regress_sec_decrypt IN ROLE ash_replicant_decrypt;

-- every function: who may execute it
SELECT p.oid::regprocedure AS function,
       has_function_privilege('regress_sec_plain', p.oid, 'EXECUTE') AS plain,
       has_function_privilege('regress_sec_monitor', p.oid, 'EXECUTE') AS monitor,
       has_function_privilege('regress_sec_admin', p.oid, 'EXECUTE') AS admin,
       has_function_privilege('regress_sec_decrypt', p.oid, 'EXECUTE') AS decrypt,
       p.prosecdef AS secdef,
       p.proconfig IS NOT NULL AND 'search_path=pg_catalog, pg_temp' = ANY (p.proconfig) AS pinned
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ash_replicant')
 ORDER BY p.oid::regprocedure::text COLLATE "C";

-- every catalog and the view: nobody but the owner writes; reads as granted
SELECT c.oid::regclass AS relation,
       has_table_privilege('regress_sec_plain', c.oid, 'SELECT') AS plain_select,
       has_table_privilege('regress_sec_monitor', c.oid, 'SELECT') AS monitor_select,
       has_table_privilege('regress_sec_admin', c.oid, 'INSERT')
         OR has_table_privilege('regress_sec_admin', c.oid, 'UPDATE')
         OR has_table_privilege('regress_sec_admin', c.oid, 'DELETE') AS admin_writes
  FROM pg_class c
 WHERE c.relnamespace = 'ash_replicant'::regnamespace AND c.relkind IN ('r', 'v')
 ORDER BY c.oid::regclass::text COLLATE "C";

-- the conninfo column: no role but the owner reads it
SELECT r AS role, has_column_privilege(r, 'ash_replicant.pipelines', 'connection', 'SELECT') AS reads_conninfo
  FROM unnest(ARRAY['regress_sec_plain', 'regress_sec_monitor', 'regress_sec_admin', 'regress_sec_decrypt']) r
 ORDER BY 1;

-- names built to break out of quoting are data, never SQL
SELECT ash_replicant_create_sink('x''); DROP TABLE pg_class; --', slot_name => 'inj_slot_1');
SELECT ash_replicant_create_sink(E'x"\\; DROP SCHEMA ash_replicant CASCADE; --', slot_name => 'inj_slot_2');
SELECT ash_replicant_create_sink('inj', slot_name => 'a''; DROP TABLE x; --');
SELECT sink_name, slot_name FROM ash_replicant.sinks ORDER BY 1;
CREATE SCHEMA "evil""; DROP SCHEMA ash_replicant CASCADE; --";
CREATE TABLE "evil""; DROP SCHEMA ash_replicant CASCADE; --"."t""; DELETE FROM x; --" (
    "id""; --" int PRIMARY KEY, "v); DROP TABLE y; --" text, "ünïcødé" text);
SELECT ash_replicant_map_table('x''); DROP TABLE pg_class; --',
       '"evil""; DROP SCHEMA ash_replicant CASCADE; --"."t""; DELETE FROM x; --"'::regclass,
       column_map => '{"v); DROP TABLE y; --": "v); DROP TABLE y; --"}') AS mapped_id \gset
SELECT 'mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT source_schema, source_table FROM ash_replicant.resources;
SELECT ash_replicant_add_message_route('x''); DROP TABLE pg_class; --', E'pre''fix;\\', 'pg_class'::regclass, '1 day');
SELECT count(*) AS schema_still_there FROM pg_namespace WHERE nspname = 'ash_replicant';

-- a search_path trap does not reach SECURITY DEFINER functions
CREATE SCHEMA regress_trap;
CREATE FUNCTION regress_trap.quote_ident(text) RETURNS text LANGUAGE sql AS $$ SELECT 'trapped' $$;
CREATE FUNCTION regress_trap.lower(text) RETURNS text LANGUAGE sql AS $$ SELECT 'trapped' $$;
SET search_path = regress_trap, public;
SELECT public.ash_replicant_create_sink('Trap Sink', slot_name => 'trap_slot');
SELECT sink_name, slot_name FROM ash_replicant.sinks WHERE slot_name = 'trap_slot';
RESET search_path;

-- roles exercise what they were granted
SET ROLE regress_sec_plain;
SELECT * FROM ash_replicant_status();
SELECT count(*) FROM ash_replicant.sinks;
SELECT ash_replicant_decrypt('\x01'::bytea, 'pg_class', 'relname');
RESET ROLE;
SET ROLE regress_sec_monitor;
SELECT count(*) > 0 AS monitor_sees_status FROM ash_replicant_status();
SELECT ash_replicant_create_sink('monitor_may_not', slot_name => 'mon_slot');
SELECT connection FROM ash_replicant.pipelines;
RESET ROLE;
SET ROLE regress_sec_admin;
SELECT connection FROM ash_replicant.pipelines;
SELECT ash_replicant_decrypt('\x01'::bytea, 'pg_class', 'relname');
RESET ROLE;

-- cleanup
SELECT ash_replicant_drop_sink(s) FROM unnest(ARRAY['x''); DROP TABLE pg_class; --',
       E'x"\\; DROP SCHEMA ash_replicant CASCADE; --', 'Trap Sink']) s;
DROP SCHEMA "evil""; DROP SCHEMA ash_replicant CASCADE; --" CASCADE;
DROP SCHEMA regress_trap CASCADE;
DROP ROLE regress_sec_plain, regress_sec_monitor, regress_sec_admin, regress_sec_decrypt;
