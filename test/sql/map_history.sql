-- SCD2 history mappings (docs/history-and-events.md): the valid version-table shape and every
-- history_invalid deviation.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_hist_owner NOLOGIN;
SELECT ash_replicant_create_sink('mh_sink', owner => 'regress_hist_owner');
CREATE SCHEMA mh;
GRANT USAGE ON SCHEMA mh TO regress_hist_owner;
ALTER DEFAULT PRIVILEGES IN SCHEMA mh
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO regress_hist_owner;

-- the valid shape: surrogate key, lsn window, timestamp window, current flag,
-- version identity (business key + valid_from), one open version per key
CREATE TABLE mh.orders (
    version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id bigint NOT NULL,
    amount numeric,
    pan bytea,
    valid_from_lsn bigint NOT NULL,
    valid_to_lsn bigint,
    valid_from_ts timestamptz,
    valid_to_ts timestamptz,
    is_current boolean NOT NULL DEFAULT true,
    CONSTRAINT orders_version UNIQUE (order_id, valid_from_lsn)
);
CREATE UNIQUE INDEX orders_open ON mh.orders (order_id) WHERE valid_to_lsn IS NULL;

---------------------------------------------------------------------------
-- happy paths
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}') AS orders_id \gset
SELECT history_strategy, history_business_key, history_valid_from_lsn_column,
       history_valid_to_lsn_column, history_valid_from_ts_column,
       history_valid_to_ts_column, history_current_column, upsert_identity, on_truncate
  FROM ash_replicant.resources WHERE resource_id = :orders_id;
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}',
       history_valid_from_ts_column => 'valid_from_ts',
       history_valid_to_ts_column => 'valid_to_ts',
       history_current_column => 'is_current',
       upsert_identity => 'orders_version', on_truncate => 'close',
       sensitive => '{pan}') = :orders_id AS full_shape_ok;
SELECT history_business_key, history_valid_from_ts_column, history_valid_to_ts_column,
       history_current_column, upsert_identity, on_truncate
  FROM ash_replicant.resources WHERE resource_id = :orders_id;
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', on_truncate => 'mirror') = :orders_id AS mirror_truncate_ok;
-- back to SCD1 on the same target: the history columns are cleared
CREATE TABLE mh.plain (id bigint PRIMARY KEY, v text);
SELECT ash_replicant_map_table('mh_sink', 'mh.plain') AS plain_id \gset
SELECT history_strategy, history_business_key, history_valid_from_lsn_column,
       history_valid_to_lsn_column FROM ash_replicant.resources WHERE resource_id = :plain_id;

-- composite business key, renamed from the source, renamed window columns
CREATE TABLE mh.stock (
    sid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    region text NOT NULL,
    sku text NOT NULL,
    qty integer,
    vf bigint NOT NULL,
    vt bigint,
    UNIQUE (sku, region, vf)
);
CREATE UNIQUE INDEX stock_open ON mh.stock (sku, region) WHERE vt IS NULL;
SELECT ash_replicant_map_table('mh_sink', 'mh.stock', history_strategy => 'scd2',
       column_map => '{"item": "sku"}', history_business_key => '{region, item}',
       history_valid_from_lsn_column => 'vf', history_valid_to_lsn_column => 'vt') AS mapped_id \gset
SELECT 'composite_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
-- attribute tenancy and snapshot provenance combine with SCD2
ALTER TABLE mh.stock ADD COLUMN tenant text, ADD COLUMN replica_fingerprint bytea,
    ADD COLUMN replica_seen_attempt bytea;
SELECT ash_replicant_map_table('mh_sink', 'mh.stock', history_strategy => 'scd2',
       column_map => '{"item": "sku"}', history_business_key => '{region, item}',
       history_valid_from_lsn_column => 'vf', history_valid_to_lsn_column => 'vt',
       tenant_column => 'tenant', tenant_strategy => 'attribute',
       snapshot_provenance => true) AS mapped_id \gset
SELECT 'tenant_provenance_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;

---------------------------------------------------------------------------
-- option-level rejections
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id, NULL}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id, order_id}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_from_lsn_column => '');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_to_lsn_column => 'valid_from_lsn');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_to_ts_column => 'valid_to_lsn');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', skip => '{order_id}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{pan}', sensitive => '{pan}', encrypted => '{pan}');
-- window and current columns are written by the extension, never from the source
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', column_map => '{"closed_lsn": "valid_to_lsn"}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_current_column => 'is_current',
       column_map => '{"active": "is_current"}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_from_ts_column => 'valid_from_ts',
       column_map => '{"created_at": "valid_from_ts"}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id, valid_from_lsn}');
-- on_truncate append is append-log only
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_id}', on_truncate => 'append');

---------------------------------------------------------------------------
-- target-shape rejections (each on a copy of the valid shape)
---------------------------------------------------------------------------
-- business key column missing on the target
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_no}');
SELECT ash_replicant_map_table('mh_sink', 'mh.orders', history_strategy => 'scd2',
       history_business_key => '{order_no}', column_map => '{"order_no": "order_number"}');

-- primary key not a surrogate: equal to / overlapping the business key; absent
CREATE TABLE mh.pk_bk (LIKE mh.orders INCLUDING ALL);
ALTER TABLE mh.pk_bk DROP CONSTRAINT pk_bk_pkey, ADD PRIMARY KEY (order_id);
SELECT ash_replicant_map_table('mh_sink', 'mh.pk_bk', history_strategy => 'scd2',
       history_business_key => '{order_id}');
ALTER TABLE mh.pk_bk DROP CONSTRAINT pk_bk_pkey, ADD PRIMARY KEY (order_id, valid_from_lsn);
SELECT ash_replicant_map_table('mh_sink', 'mh.pk_bk', history_strategy => 'scd2',
       history_business_key => '{order_id}');
ALTER TABLE mh.pk_bk DROP CONSTRAINT pk_bk_pkey;
SELECT ash_replicant_map_table('mh_sink', 'mh.pk_bk', history_strategy => 'scd2',
       history_business_key => '{order_id}');

-- lsn window columns: present, bigint, valid_to nullable
CREATE TABLE mh.win (LIKE mh.orders INCLUDING ALL);
SELECT ash_replicant_map_table('mh_sink', 'mh.win', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_from_lsn_column => 'opened_lsn');
SELECT ash_replicant_map_table('mh_sink', 'mh.win', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_to_lsn_column => 'closed_lsn');
ALTER TABLE mh.win ALTER COLUMN valid_to_lsn SET NOT NULL;
SELECT ash_replicant_map_table('mh_sink', 'mh.win', history_strategy => 'scd2',
       history_business_key => '{order_id}');
ALTER TABLE mh.win ALTER COLUMN valid_to_lsn DROP NOT NULL;
ALTER TABLE mh.win ALTER COLUMN valid_to_lsn TYPE integer;
SELECT ash_replicant_map_table('mh_sink', 'mh.win', history_strategy => 'scd2',
       history_business_key => '{order_id}');
ALTER TABLE mh.win ALTER COLUMN valid_to_lsn TYPE bigint;
ALTER TABLE mh.win ALTER COLUMN valid_from_lsn TYPE numeric;
SELECT ash_replicant_map_table('mh_sink', 'mh.win', history_strategy => 'scd2',
       history_business_key => '{order_id}');
ALTER TABLE mh.win ALTER COLUMN valid_from_lsn TYPE bigint;
SELECT ash_replicant_map_table('mh_sink', 'mh.win', history_strategy => 'scd2',
       history_business_key => '{order_id}') AS mapped_id \gset
SELECT 'win_restored_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
-- a generated window column cannot be written
CREATE TABLE mh.gen (LIKE mh.orders INCLUDING ALL);
ALTER TABLE mh.gen ADD COLUMN closed_gen bigint GENERATED ALWAYS AS (valid_from_lsn + 1) STORED;
SELECT ash_replicant_map_table('mh_sink', 'mh.gen', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_to_lsn_column => 'closed_gen');

-- timestamp window columns: timestamptz, valid_to nullable; current is boolean
CREATE TABLE mh.ts (LIKE mh.orders INCLUDING ALL);
ALTER TABLE mh.ts ALTER COLUMN valid_from_ts TYPE timestamp, ALTER COLUMN valid_to_ts SET NOT NULL;
SELECT ash_replicant_map_table('mh_sink', 'mh.ts', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_from_ts_column => 'valid_from_ts');
SELECT ash_replicant_map_table('mh_sink', 'mh.ts', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_to_ts_column => 'valid_to_ts');
SELECT ash_replicant_map_table('mh_sink', 'mh.ts', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_to_ts_column => 'closed_at');
ALTER TABLE mh.ts ALTER COLUMN valid_to_ts DROP NOT NULL, ALTER COLUMN valid_to_ts TYPE date;
SELECT ash_replicant_map_table('mh_sink', 'mh.ts', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_valid_to_ts_column => 'valid_to_ts');
ALTER TABLE mh.ts ALTER COLUMN is_current TYPE text;
SELECT ash_replicant_map_table('mh_sink', 'mh.ts', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_current_column => 'is_current');
SELECT ash_replicant_map_table('mh_sink', 'mh.ts', history_strategy => 'scd2',
       history_business_key => '{order_id}', history_current_column => 'current_flag');

-- version identity: exactly business key + valid_from
CREATE TABLE mh.ident (LIKE mh.orders INCLUDING ALL);
SELECT indexname FROM pg_indexes WHERE schemaname = 'mh' AND tablename = 'ident' ORDER BY 1;
SELECT ash_replicant_map_table('mh_sink', 'mh.ident', history_strategy => 'scd2',
       history_business_key => '{order_id}', upsert_identity => 'ident_pkey');
SELECT ash_replicant_map_table('mh_sink', 'mh.ident', history_strategy => 'scd2',
       history_business_key => '{order_id}', upsert_identity => 'ident_order_id_idx');
SELECT ash_replicant_map_table('mh_sink', 'mh.ident', history_strategy => 'scd2',
       history_business_key => '{order_id}', upsert_identity => 'no_such_identity');
ALTER TABLE mh.ident DROP CONSTRAINT ident_order_id_valid_from_lsn_key;
SELECT ash_replicant_map_table('mh_sink', 'mh.ident', history_strategy => 'scd2',
       history_business_key => '{order_id}');
CREATE UNIQUE INDEX ident_too_wide ON mh.ident (order_id, valid_from_lsn, amount);
SELECT ash_replicant_map_table('mh_sink', 'mh.ident', history_strategy => 'scd2',
       history_business_key => '{order_id}');
SELECT ash_replicant_map_table('mh_sink', 'mh.ident', history_strategy => 'scd2',
       history_business_key => '{order_id}', upsert_identity => 'ident_too_wide');
CREATE UNIQUE INDEX ident_reordered ON mh.ident (valid_from_lsn, order_id);
SELECT ash_replicant_map_table('mh_sink', 'mh.ident', history_strategy => 'scd2',
       history_business_key => '{order_id}') AS mapped_id \gset
SELECT 'column_order_irrelevant' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;

-- one open version per business key: a partial unique index WHERE valid_to IS NULL
CREATE TABLE mh.open (LIKE mh.orders INCLUDING ALL);
DROP INDEX mh.open_order_id_idx;
SELECT ash_replicant_map_table('mh_sink', 'mh.open', history_strategy => 'scd2',
       history_business_key => '{order_id}');
CREATE UNIQUE INDEX open_not_null ON mh.open (order_id) WHERE valid_to_lsn IS NOT NULL;
CREATE UNIQUE INDEX open_other_col ON mh.open (order_id) WHERE valid_from_ts IS NULL;
CREATE UNIQUE INDEX open_wider ON mh.open (order_id, amount) WHERE valid_to_lsn IS NULL;
CREATE UNIQUE INDEX open_extra_pred ON mh.open (order_id) WHERE valid_to_lsn IS NULL AND amount > 0;
CREATE INDEX open_not_unique ON mh.open (order_id) WHERE valid_to_lsn IS NULL;
SELECT ash_replicant_map_table('mh_sink', 'mh.open', history_strategy => 'scd2',
       history_business_key => '{order_id}');
CREATE UNIQUE INDEX open_ok ON mh.open (order_id) WHERE (valid_to_lsn IS NULL);
SELECT ash_replicant_map_table('mh_sink', 'mh.open', history_strategy => 'scd2',
       history_business_key => '{order_id}') AS mapped_id \gset
SELECT 'open_index_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
-- a partial index cannot be the version identity
SELECT ash_replicant_map_table('mh_sink', 'mh.open', history_strategy => 'scd2',
       history_business_key => '{order_id}', upsert_identity => 'open_ok');

-- the stored mapping was never touched by the rejected calls
SELECT history_business_key, history_current_column, upsert_identity, on_truncate
  FROM ash_replicant.resources WHERE resource_id = :orders_id;

---------------------------------------------------------------------------
-- a business key compared under a nondeterministic collation: two keys the
-- source tells apart would share one history
---------------------------------------------------------------------------
CREATE COLLATION mh.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE mh.ci_hist (
    version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code text COLLATE mh.ci NOT NULL,
    amount numeric,
    valid_from_lsn bigint NOT NULL,
    valid_to_lsn bigint,
    UNIQUE (code, valid_from_lsn)
);
CREATE UNIQUE INDEX ci_hist_open ON mh.ci_hist (code) WHERE valid_to_lsn IS NULL;
SELECT ash_replicant_map_table('mh_sink', 'mh.ci_hist', history_strategy => 'scd2',
       history_business_key => '{code}');

---------------------------------------------------------------------------
-- cleanup
---------------------------------------------------------------------------
SELECT ash_replicant_drop_sink('mh_sink');
DROP SCHEMA mh CASCADE;
DROP OWNED BY regress_hist_owner;
DROP ROLE regress_hist_owner;
