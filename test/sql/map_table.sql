-- ash_replicant_map_table / ash_replicant_unmap_table: options, defaults,
-- replacement, and every registration rejection of a state-mirror mapping.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_map_owner NOLOGIN;
CREATE ROLE regress_map_weak NOLOGIN;
SELECT ash_replicant_create_sink('mt_mirror', owner => 'regress_map_owner');
SELECT ash_replicant_create_sink('mt_weak', owner => 'regress_map_weak');
SELECT ash_replicant_create_sink('mt_other', owner => 'regress_map_owner');
SELECT ash_replicant_create_sink('mt_log', sink_kind => 'append_log',
       initial_state => 'go_forward', owner => 'regress_map_owner');

CREATE SCHEMA mt;
GRANT USAGE ON SCHEMA mt TO regress_map_owner, regress_map_weak;
CREATE TABLE mt.orders (
    id bigint PRIMARY KEY,
    org_id integer NOT NULL,
    amount numeric,
    note text,
    pan bytea,
    cvv bytea,
    card_holder text,
    org_blob bytea
);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.orders TO regress_map_owner;
GRANT SELECT, INSERT, UPDATE ON mt.orders TO regress_map_weak;

-- version counter helper
CREATE FUNCTION mt.version(text) RETURNS bigint LANGUAGE sql
    AS $$ SELECT config_version FROM ash_replicant.sinks WHERE sink_name = $1 $$;

---------------------------------------------------------------------------
-- happy path: defaults
---------------------------------------------------------------------------
SELECT mt.version('mt_mirror') AS v0 \gset
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders') AS orders_id \gset
SELECT resource_id = :orders_id AS same_id, sink_name, target, source_schema, source_table,
       column_map, tenant_column, tenant_function, tenant_strategy, tenant_schema_format,
       sensitive, encrypted, skip, on_truncate, on_schema_change, upsert_identity,
       history_strategy, history_business_key, history_valid_from_lsn_column,
       append_log, append_columns, snapshot_provenance
  FROM ash_replicant.resources WHERE sink_name = 'mt_mirror';
SELECT mt.version('mt_mirror') - :v0 AS version_bumps;

-- re-mapping the same (sink, target) replaces the row and keeps the id
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', source_table => 'orders_v2',
       source_schema => 'shop', column_map => '{"total": "amount"}',
       on_truncate => 'mirror', on_schema_change => 'ignore',
       sensitive => '{pan}', skip => '{cvv}') = :orders_id AS same_id;
SELECT count(*) AS rows, min(source_schema) AS source_schema, min(source_table) AS source_table,
       min(column_map::text) AS column_map, min(on_truncate) AS on_truncate,
       min(on_schema_change) AS on_schema_change, min(sensitive::text) AS sensitive,
       min(skip::text) AS skip
  FROM ash_replicant.resources WHERE sink_name = 'mt_mirror';
SELECT mt.version('mt_mirror') - :v0 AS version_bumps;

-- another target for an already-mapped source table of the same sink
CREATE TABLE mt.orders_copy (LIKE mt.orders INCLUDING ALL);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.orders_copy TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders_copy', source_table => 'orders_v2',
       source_schema => 'shop');
-- not a target another sink's on_truncate mirror acts on (its TRUNCATE
-- would delete the other sink's rows): refused, nothing stored
SELECT ash_replicant_map_table('mt_other', 'mt.orders', source_table => 'orders_v2',
       source_schema => 'shop');
SELECT count(*) AS stored FROM ash_replicant.resources WHERE sink_name = 'mt_other';
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', source_table => 'orders_v2',
       source_schema => 'shop', column_map => '{"total": "amount"}',
       on_schema_change => 'ignore', sensitive => '{pan}', skip => '{cvv}') = :orders_id AS same_id;
-- otherwise the same source (and target) in another sink is fine
SELECT ash_replicant_map_table('mt_other', 'mt.orders', source_table => 'orders_v2',
       source_schema => 'shop') AS mapped_id \gset
-- and now the first sink may not take on_truncate mirror itself
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', source_table => 'orders_v2',
       source_schema => 'shop', on_truncate => 'mirror');
SELECT 'mapped_elsewhere' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant_unmap_table('mt_other', 'mt.orders');

---------------------------------------------------------------------------
-- required arguments, unknown sink, option grammar
---------------------------------------------------------------------------
SELECT ash_replicant_map_table(NULL, 'mt.orders');
SELECT ash_replicant_map_table('mt_mirror', NULL);
SELECT ash_replicant_map_table('no_such_sink', 'mt.orders');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', on_truncate => 'drop');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', on_schema_change => 'halt');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_strategy => 'row');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', history_strategy => 'scd3');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', source_table => '');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', source_schema => '');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders',
       source_table => repeat('x', 64));
-- NULL options mean their defaults
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', on_truncate => NULL,
       on_schema_change => NULL, history_strategy => NULL, sensitive => NULL,
       encrypted => NULL, skip => NULL, append_log => NULL,
       snapshot_provenance => NULL, tenant_schema_format => NULL) = :orders_id AS same_id;
SELECT on_truncate, on_schema_change, history_strategy, sensitive, skip, tenant_schema_format
  FROM ash_replicant.resources WHERE resource_id = :orders_id;

---------------------------------------------------------------------------
-- target must be a local ordinary or partitioned table
---------------------------------------------------------------------------
CREATE VIEW mt.orders_view AS SELECT * FROM mt.orders;
CREATE MATERIALIZED VIEW mt.orders_mv AS SELECT * FROM mt.orders;
CREATE SEQUENCE mt.seq;
CREATE FOREIGN DATA WRAPPER regress_map_fdw;
CREATE SERVER regress_map_srv FOREIGN DATA WRAPPER regress_map_fdw;
CREATE FOREIGN TABLE mt.orders_ft (id bigint) SERVER regress_map_srv;
CREATE TEMP TABLE orders_tmp (id bigint PRIMARY KEY);
CREATE TYPE mt.pair AS (a int, b int);
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders_view');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders_mv');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders_ft');
SELECT ash_replicant_map_table('mt_mirror', 'mt.seq');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders_pkey');
SELECT ash_replicant_map_table('mt_mirror', (SELECT typrelid FROM pg_type WHERE oid = 'mt.pair'::regtype)::regclass);
SELECT ash_replicant_map_table('mt_mirror', 'orders_tmp');
SELECT ash_replicant_map_table('mt_mirror', 'ash_replicant.sinks');
SELECT ash_replicant_map_table('mt_mirror', 'pg_catalog.pg_class');
SELECT ash_replicant_map_table('mt_mirror', 4294967000::oid::regclass);

-- partitioned targets are fine
CREATE TABLE mt.events (id bigint, day date, payload text, PRIMARY KEY (id, day))
    PARTITION BY RANGE (day);
CREATE TABLE mt.events_2024 PARTITION OF mt.events
    FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.events TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.events') AS mapped_id \gset
SELECT 'partitioned_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;

---------------------------------------------------------------------------
-- the sink owner must be able to write the target
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('mt_weak', 'mt.orders');
CREATE SCHEMA mt_hidden;
CREATE TABLE mt_hidden.t (id int PRIMARY KEY);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt_hidden.t TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt_hidden.t');
-- column-level grants on every column count as table-level
CREATE TABLE mt.colgrant (id int PRIMARY KEY, v text);
GRANT SELECT (id, v), INSERT (id, v), UPDATE (id, v), DELETE ON mt.colgrant TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.colgrant') AS mapped_id \gset
SELECT 'column_grants_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
REVOKE UPDATE (v) ON mt.colgrant FROM regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.colgrant');

---------------------------------------------------------------------------
-- sink kind
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', append_log => true);
SELECT ash_replicant_map_table('mt_log', 'mt.orders');
SELECT ash_replicant_map_table('mt_log', 'mt.orders', append_log => false);

---------------------------------------------------------------------------
-- column_map
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '["amount"]');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '"amount"');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"total": 1}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"total": null}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"total": {"a": 1}}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"total": ""}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"": "amount"}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"total": "no_such"}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders',
       column_map => '{"total": "amount", "sum": "amount"}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"total": "amount"}',
       skip => '{total}');
ALTER TABLE mt.orders ADD COLUMN amount_x2 numeric GENERATED ALWAYS AS (amount * 2) STORED;
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"double": "amount_x2"}');
ALTER TABLE mt.orders DROP COLUMN amount_x2;
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders',
       column_map => '{"total": "amount", "remark": "note"}') = :orders_id AS renamed_ok;

---------------------------------------------------------------------------
-- sensitive / encrypted / skip
---------------------------------------------------------------------------
-- encrypted by the extension into bytea, host-managed bytea, skipped
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{pan, cvv, card_holder}',
       encrypted => '{pan}', skip => '{card_holder}') = :orders_id AS sensitive_ok;
SELECT sensitive, encrypted, skip FROM ash_replicant.resources WHERE resource_id = :orders_id;
-- sensitive column renamed into a bytea target
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"card": "pan"}',
       sensitive => '{card}', encrypted => '{card}') = :orders_id AS renamed_sensitive_ok;
-- rejections
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{note}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{ghost}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', column_map => '{"secret": "note"}',
       sensitive => '{secret}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{note}',
       encrypted => '{note}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{ghost}',
       encrypted => '{ghost}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', encrypted => '{pan}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{pan}',
       encrypted => '{pan}', skip => '{pan}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{pan, NULL}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{pan, pan}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', encrypted => '{""}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', skip => '{cvv, NULL}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', skip => '{cvv, cvv}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', skip => '{{a,b},{c,d}}');
-- an encrypted (randomized) column can never be part of the conflict key
CREATE TABLE mt.cards (id bigint PRIMARY KEY, pan bytea NOT NULL UNIQUE);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.cards TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.cards', sensitive => '{pan}',
       encrypted => '{pan}', upsert_identity => 'cards_pan_key');
SELECT ash_replicant_map_table('mt_mirror', 'mt.cards', sensitive => '{pan}',
       encrypted => '{pan}') AS mapped_id \gset
SELECT 'cards_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;

---------------------------------------------------------------------------
-- upsert_identity and keyless targets
---------------------------------------------------------------------------
CREATE TABLE mt.keys (
    id bigint PRIMARY KEY,
    code text,
    region text,
    flag boolean,
    CONSTRAINT keys_code_region UNIQUE (code, region)
);
CREATE UNIQUE INDEX keys_code_idx ON mt.keys (code);
CREATE INDEX keys_region_idx ON mt.keys (region);
CREATE UNIQUE INDEX keys_partial_idx ON mt.keys (region) WHERE flag;
CREATE UNIQUE INDEX keys_expr_idx ON mt.keys (lower(code));
ALTER TABLE mt.keys ADD CONSTRAINT keys_region_deferred UNIQUE (region, flag)
    DEFERRABLE INITIALLY DEFERRED;
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.keys TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'keys_code_region')
       AS keys_id \gset
SELECT upsert_identity FROM ash_replicant.resources WHERE resource_id = :keys_id;
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'keys_code_idx') = :keys_id AS index_name_ok;
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'keys_pkey') = :keys_id AS pk_name_ok;
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'keys_region_idx');
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'keys_partial_idx');
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'keys_expr_idx');
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'keys_region_deferred');
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'no_such_index');
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => 'orders_pkey');
SELECT ash_replicant_map_table('mt_mirror', 'mt.keys', upsert_identity => '');
CREATE TABLE mt.keyless (a int, b text);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.keyless TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.keyless');
CREATE UNIQUE INDEX keyless_a_idx ON mt.keyless (a);
SELECT ash_replicant_map_table('mt_mirror', 'mt.keyless');
SELECT ash_replicant_map_table('mt_mirror', 'mt.keyless', upsert_identity => 'keyless_a_idx') AS mapped_id \gset
SELECT 'keyless_with_identity_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
CREATE TABLE mt.deferred_pk (id int PRIMARY KEY DEFERRABLE);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.deferred_pk TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.deferred_pk');

---------------------------------------------------------------------------
-- tenancy
---------------------------------------------------------------------------
CREATE FUNCTION mt.tenant_of(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT r ->> 'org_id' $$;
CREATE FUNCTION mt.tenant_volatile(r jsonb) RETURNS text LANGUAGE sql VOLATILE
    AS $$ SELECT r ->> 'org_id' $$;
CREATE FUNCTION mt.tenant_stable(r jsonb) RETURNS text LANGUAGE sql STABLE
    AS $$ SELECT r ->> 'org_id' $$;
CREATE FUNCTION mt.tenant_int(r jsonb) RETURNS integer LANGUAGE sql IMMUTABLE
    AS $$ SELECT (r ->> 'org_id')::int $$;
CREATE FUNCTION mt.tenant_json(r json) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT r ->> 'org_id' $$;
CREATE FUNCTION mt.tenant_two(r jsonb, extra text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT r ->> 'org_id' $$;
CREATE FUNCTION mt.tenant_set(r jsonb) RETURNS SETOF text LANGUAGE sql IMMUTABLE
    AS $$ SELECT r ->> 'org_id' $$;
CREATE FUNCTION mt.tenant_private(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT r ->> 'org_id' $$;
REVOKE EXECUTE ON FUNCTION mt.tenant_private(jsonb) FROM PUBLIC;

-- attribute strategy
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'attribute') = :orders_id AS attribute_ok;
SELECT tenant_column, tenant_function, tenant_strategy, tenant_schema_format
  FROM ash_replicant.resources WHERE resource_id = :orders_id;
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org',
       column_map => '{"org": "org_id"}', tenant_strategy => 'attribute') = :orders_id AS renamed_tenant_ok;
-- context strategy, by column and by function
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => 'tenant_%s') = :orders_id AS context_ok;
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_of(jsonb)',
       tenant_strategy => 'context') = :orders_id AS context_function_ok;
SELECT tenant_column, tenant_function, tenant_strategy, tenant_schema_format
  FROM ash_replicant.resources WHERE resource_id = :orders_id;

-- multitenancy_required
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_of(jsonb)');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_strategy => 'context');
-- both sources
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_function => 'mt.tenant_of(jsonb)', tenant_strategy => 'context');
-- tenant function shape
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_volatile(jsonb)',
       tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_stable(jsonb)',
       tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_int(jsonb)',
       tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_json(json)',
       tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_two(jsonb, text)',
       tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_set(jsonb)',
       tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_private(jsonb)',
       tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 4294967000::oid::regprocedure,
       tenant_strategy => 'context');
-- attribute strategy: tenant column shape
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_function => 'mt.tenant_of(jsonb)',
       tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'tenant',
       tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_blob',
       tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org',
       column_map => '{"org": "org_blob"}', tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'attribute', skip => '{org_id}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'attribute', sensitive => '{org_id}', skip => '{org_id}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_blob',
       tenant_strategy => 'context', sensitive => '{org_blob}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       column_map => '{"blob": "org_id"}', sensitive => '{blob}', skip => '{}',
       tenant_strategy => 'attribute');
-- context strategy: schema format
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => 'tenant_%I');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => 't_%s_%s');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => '100%%_%s');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => 'tenant_%1$s');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => 'tenants');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => 'tenant_%');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'context', tenant_schema_format => repeat('x', 70) || '%s');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_schema_format => 'tenant_%s');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', tenant_column => 'org_id',
       tenant_strategy => 'attribute', tenant_schema_format => 'tenant_%s');

---------------------------------------------------------------------------
-- on_truncate and mode-specific options on a plain state mirror
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', on_truncate => 'close');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', on_truncate => 'append');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', history_business_key => '{id}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', history_valid_from_lsn_column => 'vf');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', history_current_column => 'is_current');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', append_ordinal_column => 'seq');

---------------------------------------------------------------------------
-- snapshot provenance
---------------------------------------------------------------------------
CREATE TABLE mt.prov (
    id bigint PRIMARY KEY,
    org_id text,
    v text,
    replica_fingerprint bytea,
    replica_seen_attempt bytea
);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.prov TO regress_map_owner;
CREATE FUNCTION mt.scopes() RETURNS SETOF text LANGUAGE sql AS $$ SELECT 'a' $$;
CREATE FUNCTION mt.scopes_arg(x int) RETURNS SETOF text LANGUAGE sql AS $$ SELECT 'a' $$;
CREATE FUNCTION mt.scopes_one() RETURNS text LANGUAGE sql AS $$ SELECT 'a' $$;
CREATE FUNCTION mt.scopes_int() RETURNS SETOF integer LANGUAGE sql AS $$ SELECT 1 $$;
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true) AS prov_id \gset
SELECT snapshot_provenance FROM ash_replicant.resources WHERE resource_id = :prov_id;
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'attribute') = :prov_id AS prov_attribute_ok;
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'context',
       tenant_scope_function => 'mt.scopes()') = :prov_id AS prov_context_ok;
SELECT tenant_scope_function FROM ash_replicant.resources WHERE resource_id = :prov_id;
-- context tenancy needs a scope enumeration returning setof text
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'context');
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'context',
       tenant_scope_function => 'mt.scopes_one()');
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'context',
       tenant_scope_function => 'mt.scopes_int()');
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'context',
       tenant_scope_function => 'mt.scopes_arg(int)');
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'context',
       tenant_scope_function => 4294967000::oid::regprocedure);
-- a scope function without provenance + context tenancy is an unused option
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', tenant_scope_function => 'mt.scopes()');
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       tenant_column => 'org_id', tenant_strategy => 'attribute',
       tenant_scope_function => 'mt.scopes()');
-- provenance columns: never from the source, never sensitive
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       column_map => '{"fp": "replica_fingerprint"}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       sensitive => '{replica_seen_attempt}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true,
       sensitive => '{replica_seen_attempt}', skip => '{replica_seen_attempt}');
-- provenance columns: present, bytea, nullable
ALTER TABLE mt.prov ALTER COLUMN replica_seen_attempt SET NOT NULL;
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true);
ALTER TABLE mt.prov ALTER COLUMN replica_seen_attempt DROP NOT NULL;
ALTER TABLE mt.prov ALTER COLUMN replica_fingerprint TYPE text;
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true);
ALTER TABLE mt.prov DROP COLUMN replica_fingerprint;
SELECT ash_replicant_map_table('mt_mirror', 'mt.prov', snapshot_provenance => true);
SELECT snapshot_provenance, tenant_strategy FROM ash_replicant.resources WHERE resource_id = :prov_id;

---------------------------------------------------------------------------
-- keys compared under a nondeterministic collation: two keys the source
-- tells apart ('A', 'a') would be one target row
---------------------------------------------------------------------------
CREATE COLLATION mt.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE mt.ci_key (email text COLLATE mt.ci PRIMARY KEY, note text);
CREATE TABLE mt.ci_index (email text NOT NULL, note text);
CREATE UNIQUE INDEX ci_index_email ON mt.ci_index (email COLLATE mt.ci);
CREATE TABLE mt.ci_tenant (id bigint PRIMARY KEY, org text COLLATE mt.ci NOT NULL, note text);
CREATE TABLE mt.ci_ok (email text COLLATE "C" PRIMARY KEY, org text NOT NULL, note text COLLATE mt.ci);
GRANT SELECT, INSERT, UPDATE, DELETE ON mt.ci_key, mt.ci_index, mt.ci_tenant, mt.ci_ok TO regress_map_owner;
SELECT ash_replicant_map_table('mt_mirror', 'mt.ci_key');
SELECT ash_replicant_map_table('mt_mirror', 'mt.ci_index', upsert_identity => 'ci_index_email');
SELECT ash_replicant_map_table('mt_mirror', 'mt.ci_tenant', tenant_column => 'org',
       tenant_strategy => 'attribute');
-- a nondeterministic collation on a column that is no key: accepted
SELECT ash_replicant_map_table('mt_mirror', 'mt.ci_ok', tenant_column => 'org',
       tenant_strategy => 'attribute') > 0 AS ci_ok_mapped;
SELECT ash_replicant_unmap_table('mt_mirror', 'mt.ci_ok');

---------------------------------------------------------------------------
-- a rejected call changes nothing
---------------------------------------------------------------------------
SELECT count(*) AS mappings, mt.version('mt_mirror') AS version
  FROM ash_replicant.resources WHERE sink_name = 'mt_mirror' \gset before_
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders', sensitive => '{note}');
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders_view');
SELECT count(*) = :before_mappings AS same_mappings, mt.version('mt_mirror') = :before_version AS same_version
  FROM ash_replicant.resources WHERE sink_name = 'mt_mirror';

---------------------------------------------------------------------------
-- unmap
---------------------------------------------------------------------------
SELECT ash_replicant_unmap_table('mt_mirror', 'mt.orders');
SELECT count(*) AS orders_rows FROM ash_replicant.resources
 WHERE sink_name = 'mt_mirror' AND target = 'mt.orders'::regclass;
SELECT mt.version('mt_mirror') = :before_version + 1 AS unmap_bumped;
SELECT ash_replicant_unmap_table('mt_mirror', 'mt.orders');
SELECT ash_replicant_unmap_table('no_such_sink', 'mt.orders');
SELECT ash_replicant_unmap_table(NULL, 'mt.orders');
SELECT ash_replicant_unmap_table('mt_mirror', NULL);
-- a mapping whose target was dropped is removed by its OID
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders_copy') AS mapped_id \gset
SELECT 'copy_mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT 'mt.orders_copy'::regclass::oid AS copy_oid \gset
DROP TABLE mt.orders_copy;
SELECT ash_replicant_unmap_table('mt_mirror', :copy_oid::oid::regclass);
SELECT count(*) AS copy_rows FROM ash_replicant.resources WHERE target::oid = :copy_oid;
-- after unmapping, the source can be mapped to another target
SELECT ash_replicant_map_table('mt_mirror', 'mt.orders') AS mapped_id \gset
SELECT 'remapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;

---------------------------------------------------------------------------
-- cleanup
---------------------------------------------------------------------------
SELECT ash_replicant_drop_sink('mt_mirror');
SELECT ash_replicant_drop_sink('mt_weak');
SELECT ash_replicant_drop_sink('mt_other');
SELECT ash_replicant_drop_sink('mt_log');
SELECT count(*) AS leftover FROM ash_replicant.resources WHERE sink_name LIKE 'mt\_%';
DROP SCHEMA mt, mt_hidden CASCADE;
DROP TABLE orders_tmp;
DROP SERVER regress_map_srv;
DROP FOREIGN DATA WRAPPER regress_map_fdw;
DROP ROLE regress_map_owner;
DROP ROLE regress_map_weak;
