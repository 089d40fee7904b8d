-- Installation, idempotence, roles, default-deny catalogs, removal.
\set VERBOSITY terse
CREATE EXTENSION ash_replicant;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
SELECT extname, extversion, extrelocatable FROM pg_extension WHERE extname = 'ash_replicant';
SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname LIKE 'ash\_replicant\_%' ORDER BY 1;
-- catalogs: default-deny, RLS on checkpoints with no policy
SELECT c.relname, c.relrowsecurity,
       has_table_privilege('public', c.oid, 'SELECT') AS public_select
  FROM pg_class c WHERE c.relnamespace = 'ash_replicant'::regnamespace AND c.relkind = 'r'
 ORDER BY 1;
SELECT count(*) AS checkpoint_policies FROM pg_policy WHERE polrelid = 'ash_replicant.checkpoints'::regclass;
-- admins cannot read the conninfo column
SELECT has_column_privilege('ash_replicant_admin', 'ash_replicant.pipelines', 'connection', 'SELECT') AS admin_reads_conninfo,
       has_column_privilege('ash_replicant_admin', 'ash_replicant.pipelines', 'decoder', 'SELECT') AS admin_reads_decoder;
-- every API function is SECURITY DEFINER with a pinned search_path and has a comment
SELECT p.proname, p.prosecdef, p.proconfig, obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_exec
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ash_replicant')
 ORDER BY p.proname, p.oid::regprocedure::text;
-- a fresh install has no pipelines and status says so
SELECT * FROM ash_replicant_status();
SELECT count(*) FROM ash_replicant.stat_pipelines;
-- removal and re-creation
DROP EXTENSION ash_replicant;
SELECT count(*) FROM pg_namespace WHERE nspname = 'ash_replicant';
CREATE EXTENSION ash_replicant;
DROP EXTENSION ash_replicant;
