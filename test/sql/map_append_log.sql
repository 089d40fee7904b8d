-- Append-log mappings (docs/history-and-events.md): structural columns, the five-axis
-- identity, rules/triggers, and every append_log_invalid /
-- append_frontier_unavailable rejection.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_append_owner NOLOGIN;
SELECT ash_replicant_create_sink('ma_go', sink_kind => 'append_log',
       initial_state => 'go_forward', owner => 'regress_append_owner');
SELECT ash_replicant_create_sink('ma_snap', sink_kind => 'append_log',
       initial_state => 'snapshot', owner => 'regress_append_owner');
SELECT ash_replicant_create_sink('ma_mirror', owner => 'regress_append_owner');
CREATE SCHEMA ma;
GRANT USAGE ON SCHEMA ma TO regress_append_owner;
-- an append log only needs INSERT and SELECT
ALTER DEFAULT PRIVILEGES IN SCHEMA ma GRANT SELECT, INSERT ON TABLES TO regress_append_owner;

-- the valid shape with default structural names
CREATE TABLE ma.events (
    event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source_system_id text NOT NULL,
    source_database text NOT NULL,
    slot_name text NOT NULL,
    commit_lsn bigint NOT NULL,
    ordinal integer NOT NULL,
    operation text NOT NULL,
    origin text NOT NULL,
    snapshot_attempt bytea,
    message_prefix text,
    message_content bytea,
    order_id bigint,
    amount numeric,
    pan bytea,
    org_id text
);
CREATE UNIQUE INDEX events_identity ON ma.events
    (source_system_id, source_database, slot_name, commit_lsn, ordinal);

---------------------------------------------------------------------------
-- happy paths
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true) AS events_id \gset
SELECT append_log, append_columns, on_truncate, history_strategy, snapshot_provenance
  FROM ash_replicant.resources WHERE resource_id = :events_id;
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       on_truncate => 'append', sensitive => '{pan, card}', encrypted => '{card}',
       column_map => '{"card": "pan", "raw_pan": "amount"}', skip => '{pan}',
       upsert_identity => 'events_identity') = :events_id AS payload_rules_ok;
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       tenant_column => 'org_id', tenant_strategy => 'attribute') = :events_id AS attribute_tenant_ok;
-- context tenancy needs a snapshot-seeded sink (no origin frontier otherwise)
SELECT ash_replicant_map_table('ma_snap', 'ma.events', append_log => true,
       tenant_column => 'org_id', tenant_strategy => 'context') AS mapped_id \gset
SELECT 'context_on_snapshot_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       tenant_column => 'org_id', tenant_strategy => 'context');
CREATE FUNCTION ma.tenant_of(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT r ->> 'org_id' $$;
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       tenant_function => 'ma.tenant_of(jsonb)', tenant_strategy => 'context');

-- every structural column renamed
CREATE TABLE ma.audit (
    src_sys text NOT NULL,
    src_db text NOT NULL,
    slot text NOT NULL,
    lsn bigint NOT NULL,
    seq integer NOT NULL,
    op text NOT NULL,
    via text NOT NULL,
    attempt bytea,
    msg_prefix text,
    msg_body bytea,
    payload text,
    UNIQUE (lsn, seq, slot, src_db, src_sys)
);
SELECT ash_replicant_map_table('ma_go', 'ma.audit', append_log => true,
       append_source_system_id_column => 'src_sys', append_source_database_column => 'src_db',
       append_slot_name_column => 'slot', append_commit_lsn_column => 'lsn',
       append_ordinal_column => 'seq', append_operation_column => 'op',
       append_origin_column => 'via', append_snapshot_attempt_column => 'attempt',
       append_message_prefix_column => 'msg_prefix',
       append_message_content_column => 'msg_body') AS audit_id \gset
SELECT append_columns FROM ash_replicant.resources WHERE resource_id = :audit_id;
-- a rename to a column that does not exist
SELECT ash_replicant_map_table('ma_go', 'ma.audit', append_log => true,
       append_source_system_id_column => 'src_sys', append_source_database_column => 'src_db',
       append_slot_name_column => 'slot', append_commit_lsn_column => 'lsn',
       append_ordinal_column => 'seq', append_operation_column => 'op',
       append_origin_column => 'origin');
-- two axes on one column, an empty name
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       append_slot_name_column => 'source_database');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       append_origin_column => '');

---------------------------------------------------------------------------
-- options an append log refuses
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('ma_mirror', 'ma.events', append_log => true);
SELECT ash_replicant_map_table('ma_go', 'ma.events');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       history_strategy => 'scd2', history_business_key => '{order_id}');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       snapshot_provenance => true);
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true, on_truncate => 'mirror');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true, on_truncate => 'close');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true, on_truncate => 'append',
       tenant_column => 'org_id', tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('ma_snap', 'ma.events', append_log => true, on_truncate => 'append',
       tenant_function => 'ma.tenant_of(jsonb)', tenant_strategy => 'context');
-- structural columns are never sensitive and never fed from the source
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       sensitive => '{snapshot_attempt}');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       column_map => '{"kind": "operation"}', sensitive => '{kind}', skip => '{}');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       column_map => '{"lsn": "commit_lsn"}');
SELECT ash_replicant_map_table('ma_go', 'ma.events', append_log => true,
       tenant_column => 'slot_name', tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('ma_go', 'ma.audit', append_log => true,
       append_source_system_id_column => 'src_sys', append_source_database_column => 'src_db',
       append_slot_name_column => 'slot', append_commit_lsn_column => 'lsn',
       append_ordinal_column => 'seq', append_operation_column => 'op',
       append_origin_column => 'via', append_snapshot_attempt_column => 'attempt',
       append_message_prefix_column => 'msg_prefix',
       append_message_content_column => 'msg_body', column_map => '{"body": "msg_body"}');

---------------------------------------------------------------------------
-- structural column shape (each on a copy of the valid shape)
---------------------------------------------------------------------------
CREATE TABLE ma.shape (LIKE ma.events INCLUDING ALL);
ALTER TABLE ma.shape DROP COLUMN message_content;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ADD COLUMN message_content text;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN message_content TYPE bytea USING NULL;
ALTER TABLE ma.shape ALTER COLUMN ordinal TYPE bigint;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN ordinal TYPE integer;
ALTER TABLE ma.shape ALTER COLUMN commit_lsn TYPE numeric;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN commit_lsn TYPE bigint;
ALTER TABLE ma.shape ALTER COLUMN operation TYPE varchar(16);
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN operation TYPE text;
ALTER TABLE ma.shape ALTER COLUMN origin DROP NOT NULL;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN origin SET NOT NULL;
ALTER TABLE ma.shape ALTER COLUMN source_system_id DROP NOT NULL;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN source_system_id SET NOT NULL;
ALTER TABLE ma.shape ALTER COLUMN snapshot_attempt SET NOT NULL;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN snapshot_attempt DROP NOT NULL;
ALTER TABLE ma.shape ALTER COLUMN snapshot_attempt TYPE text;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true);
ALTER TABLE ma.shape ALTER COLUMN snapshot_attempt TYPE bytea USING NULL;
SELECT ash_replicant_map_table('ma_go', 'ma.shape', append_log => true) AS mapped_id \gset
SELECT 'shape_restored_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;

---------------------------------------------------------------------------
-- the identity: a unique index on EXACTLY the five axes
---------------------------------------------------------------------------
CREATE TABLE ma.ident (LIKE ma.events INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE ma.ident ADD PRIMARY KEY (event_id);
SELECT ash_replicant_map_table('ma_go', 'ma.ident', append_log => true);
CREATE UNIQUE INDEX ident_four ON ma.ident (source_system_id, source_database, slot_name, commit_lsn);
CREATE UNIQUE INDEX ident_six ON ma.ident
    (source_system_id, source_database, slot_name, commit_lsn, ordinal, operation);
CREATE UNIQUE INDEX ident_partial ON ma.ident
    (source_system_id, source_database, slot_name, commit_lsn, ordinal) WHERE origin = 'stream';
CREATE INDEX ident_not_unique ON ma.ident
    (source_system_id, source_database, slot_name, commit_lsn, ordinal);
SELECT ash_replicant_map_table('ma_go', 'ma.ident', append_log => true);
SELECT ash_replicant_map_table('ma_go', 'ma.ident', append_log => true,
       upsert_identity => 'ident_six');
SELECT ash_replicant_map_table('ma_go', 'ma.ident', append_log => true,
       upsert_identity => 'ident_pkey');
SELECT ash_replicant_map_table('ma_go', 'ma.ident', append_log => true,
       upsert_identity => 'ident_partial');
ALTER TABLE ma.ident ADD CONSTRAINT ident_axes
    UNIQUE (ordinal, commit_lsn, slot_name, source_database, source_system_id);
SELECT ash_replicant_map_table('ma_go', 'ma.ident', append_log => true) AS mapped_id \gset
SELECT 'any_column_order_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant_map_table('ma_go', 'ma.ident', append_log => true,
       upsert_identity => 'ident_axes') AS mapped_id \gset
SELECT 'named_identity_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;

---------------------------------------------------------------------------
-- no ON INSERT rules, no BEFORE ROW triggers
---------------------------------------------------------------------------
CREATE TABLE ma.guarded (LIKE ma.events INCLUDING ALL);
CREATE TABLE ma.shadow (LIKE ma.events);
CREATE RULE guarded_copy AS ON INSERT TO ma.guarded DO ALSO
    INSERT INTO ma.shadow SELECT NEW.*;
SELECT ash_replicant_map_table('ma_go', 'ma.guarded', append_log => true);
DROP RULE guarded_copy ON ma.guarded;
CREATE RULE guarded_update AS ON UPDATE TO ma.guarded DO INSTEAD NOTHING;
SELECT ash_replicant_map_table('ma_go', 'ma.guarded', append_log => true) AS mapped_id \gset
SELECT 'update_rule_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
CREATE FUNCTION ma.touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER guarded_after AFTER INSERT ON ma.guarded FOR EACH ROW EXECUTE FUNCTION ma.touch();
CREATE TRIGGER guarded_stmt BEFORE INSERT ON ma.guarded FOR EACH STATEMENT EXECUTE FUNCTION ma.touch();
SELECT ash_replicant_map_table('ma_go', 'ma.guarded', append_log => true) AS mapped_id \gset
SELECT 'after_and_statement_triggers_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
CREATE TRIGGER guarded_before BEFORE INSERT ON ma.guarded FOR EACH ROW EXECUTE FUNCTION ma.touch();
SELECT ash_replicant_map_table('ma_go', 'ma.guarded', append_log => true);
DROP TRIGGER guarded_before ON ma.guarded;
CREATE TRIGGER guarded_before_upd BEFORE UPDATE ON ma.guarded FOR EACH ROW EXECUTE FUNCTION ma.touch();
ALTER TABLE ma.guarded DISABLE TRIGGER guarded_before_upd;
SELECT ash_replicant_map_table('ma_go', 'ma.guarded', append_log => true);

-- partitioned append log: partitions are checked too
CREATE TABLE ma.plog (LIKE ma.events INCLUDING DEFAULTS) PARTITION BY RANGE (commit_lsn);
CREATE UNIQUE INDEX plog_identity ON ma.plog
    (source_system_id, source_database, slot_name, commit_lsn, ordinal);
CREATE TABLE ma.plog_low PARTITION OF ma.plog FOR VALUES FROM (0) TO (1000000);
CREATE TABLE ma.plog_high PARTITION OF ma.plog FOR VALUES FROM (1000000) TO (MAXVALUE);
SELECT ash_replicant_map_table('ma_go', 'ma.plog', append_log => true) AS mapped_id \gset
SELECT 'partitioned_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
CREATE TRIGGER plog_high_before BEFORE INSERT ON ma.plog_high FOR EACH ROW EXECUTE FUNCTION ma.touch();
SELECT ash_replicant_map_table('ma_go', 'ma.plog', append_log => true);

---------------------------------------------------------------------------
-- privileges: INSERT and SELECT are required
---------------------------------------------------------------------------
CREATE TABLE ma.locked (LIKE ma.events INCLUDING ALL);
REVOKE INSERT ON ma.locked FROM regress_append_owner;
SELECT ash_replicant_map_table('ma_go', 'ma.locked', append_log => true);

-- the stored mappings were never touched by the rejected calls
SELECT target, append_columns IS NOT NULL AS has_axes, on_truncate, tenant_strategy
  FROM ash_replicant.resources WHERE sink_name = 'ma_go' ORDER BY resource_id;

---------------------------------------------------------------------------
-- cleanup
---------------------------------------------------------------------------
SELECT ash_replicant_drop_sink('ma_go');
SELECT ash_replicant_drop_sink('ma_snap');
SELECT ash_replicant_drop_sink('ma_mirror');
DROP SCHEMA ma CASCADE;
DROP OWNED BY regress_append_owner;
DROP ROLE regress_append_owner;
