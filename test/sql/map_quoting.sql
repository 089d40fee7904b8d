-- Identifier quoting: schemas, tables, columns, indexes, functions, roles and
-- sinks whose names need quotes (spaces, capitals, keywords, embedded quotes,
-- semicolons) map, validate and are reported correctly.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE "regress q""owner; --" NOLOGIN;
CREATE ROLE "Regress Weak" NOLOGIN;
SELECT ash_replicant_create_sink('q sink "EU"; --', slot_name => 'q_sink_eu',
       owner => '"regress q""owner; --"');
SELECT ash_replicant_create_sink('Q Weak', slot_name => 'q_weak', owner => '"Regress Weak"');
SELECT ash_replicant_create_sink('q log', slot_name => 'q_log', sink_kind => 'append_log',
       initial_state => 'snapshot', owner => '"regress q""owner; --"');

CREATE SCHEMA "Sales Dept";
GRANT USAGE ON SCHEMA "Sales Dept" TO "regress q""owner; --", "Regress Weak";
ALTER DEFAULT PRIVILEGES IN SCHEMA "Sales Dept"
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "regress q""owner; --";
CREATE TABLE "Sales Dept"."Order Lines" (
    "Line ID" bigint,
    "Unit Price" numeric,
    "select" text,
    "Select" text,
    "Qty" integer,
    "Card ""PAN""" bytea,
    "semi;colon" text,
    "Tenant Org" text NOT NULL,
    "from" bytea,
    CONSTRAINT "Order Lines ""pk""" PRIMARY KEY ("Line ID"),
    CONSTRAINT "uniq; drop" UNIQUE ("Tenant Org", "Qty")
);
GRANT SELECT, INSERT, UPDATE ON "Sales Dept"."Order Lines" TO "Regress Weak";

---------------------------------------------------------------------------
-- defaults take the raw (unquoted) schema and table names
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"') AS lines_id \gset
SELECT sink_name, target, source_schema, source_table
  FROM ash_replicant.resources WHERE resource_id = :lines_id;

-- every option with names that need quoting
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       column_map => '{"unit_price": "Unit Price", "SELECT": "select", "pan; card": "Card \"PAN\""}',
       sensitive => '{"pan; card", from}', encrypted => '{"pan; card"}', skip => '{"semi;colon"}',
       tenant_column => 'Tenant Org', tenant_strategy => 'attribute',
       upsert_identity => 'uniq; drop') = :lines_id AS quoted_options_ok;
SELECT column_map, sensitive, encrypted, skip, tenant_column, upsert_identity
  FROM ash_replicant.resources WHERE resource_id = :lines_id;
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       upsert_identity => 'Order Lines "pk"') = :lines_id AS quoted_pk_name_ok;
-- a source table with an awkward name
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       source_schema => 'Legacy "Shop"', source_table => 'lines; DROP TABLE x') = :lines_id AS quoted_source_ok;
SELECT source_schema, source_table FROM ash_replicant.resources WHERE resource_id = :lines_id;

---------------------------------------------------------------------------
-- rejections name the objects, always double-quoted
---------------------------------------------------------------------------
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       sensitive => '{"semi;colon"}');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       sensitive => '{"Card \"PAN\""}', encrypted => '{"Card \"PAN\""}', skip => '{"Card \"PAN\""}');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       sensitive => '{"Select"}', encrypted => '{"Select"}');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       column_map => '{"unit price": "Unit  Price"}');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       column_map => '{"a\"b": "select", "c;d": "select"}');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       upsert_identity => 'no; such "idx"');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       tenant_column => 'from', tenant_strategy => 'attribute');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       skip => '{"x\"y", "x\"y"}');
SELECT ash_replicant_map_table('Q Weak', '"Sales Dept"."Order Lines"');
SELECT ash_replicant_map_table('q sink "EU" --', '"Sales Dept"."Order Lines"');
CREATE VIEW "Sales Dept"."Lines ""View""" AS SELECT * FROM "Sales Dept"."Order Lines";
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Lines ""View"""');
CREATE TABLE "Sales Dept"."Other; Lines" (LIKE "Sales Dept"."Order Lines" INCLUDING ALL);
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Other; Lines"',
       source_schema => 'Legacy "Shop"', source_table => 'lines; DROP TABLE x');

---------------------------------------------------------------------------
-- tenancy: functions in quoted schemas, schema formats with odd characters
---------------------------------------------------------------------------
CREATE FUNCTION "Sales Dept"."tenant of"(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT r ->> 'Tenant Org' $$;
CREATE FUNCTION "Sales Dept"."Tenant ""Volatile"""(r jsonb) RETURNS text LANGUAGE sql
    AS $$ SELECT r ->> 'Tenant Org' $$;
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       tenant_function => '"Sales Dept"."tenant of"(jsonb)', tenant_strategy => 'context',
       tenant_schema_format => 'Tenant "%s"; --') = :lines_id AS quoted_context_ok;
SELECT tenant_function, tenant_strategy, tenant_schema_format
  FROM ash_replicant.resources WHERE resource_id = :lines_id;
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Order Lines"',
       tenant_function => '"Sales Dept"."Tenant ""Volatile"""(jsonb)', tenant_strategy => 'context');

---------------------------------------------------------------------------
-- SCD2 with quoted window columns and business key
---------------------------------------------------------------------------
CREATE TABLE "Sales Dept"."Line History" (
    "Version #" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    "Order Ref" text NOT NULL,
    "Line No" integer NOT NULL,
    "Valid From" bigint NOT NULL,
    "Valid To" bigint,
    "Closed At" timestamptz,
    "is current?" boolean,
    UNIQUE ("Order Ref", "Line No", "Valid From")
);
CREATE UNIQUE INDEX "one open; version" ON "Sales Dept"."Line History" ("Order Ref", "Line No")
    WHERE "Valid To" IS NULL;
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Line History"',
       history_strategy => 'scd2', history_business_key => '{order_ref, "Line No"}',
       column_map => '{"order_ref": "Order Ref"}',
       history_valid_from_lsn_column => 'Valid From', history_valid_to_lsn_column => 'Valid To',
       history_valid_to_ts_column => 'Closed At',
       history_current_column => 'is current?') AS mapped_id \gset
SELECT 'quoted_scd2_ok' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
DROP INDEX "Sales Dept"."one open; version";
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Line History"',
       history_strategy => 'scd2', history_business_key => '{order_ref, "Line No"}',
       column_map => '{"order_ref": "Order Ref"}',
       history_valid_from_lsn_column => 'Valid From', history_valid_to_lsn_column => 'Valid To');
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Line History"',
       history_strategy => 'scd2', history_business_key => '{order_ref, "Line No"}',
       column_map => '{"order_ref": "Order Ref"}',
       history_valid_from_lsn_column => 'Valid From', history_valid_to_lsn_column => 'Valid "To"');

---------------------------------------------------------------------------
-- append log with quoted structural columns
---------------------------------------------------------------------------
CREATE TABLE "Sales Dept"."Event Log" (
    "System ID" text NOT NULL,
    "Database" text NOT NULL,
    "Slot" text NOT NULL,
    "Commit LSN" bigint NOT NULL,
    "order" integer NOT NULL,
    "Op;eration" text NOT NULL,
    "Origin ""src""" text NOT NULL,
    "Attempt" bytea,
    "Prefix" text,
    "Content" bytea,
    payload text,
    CONSTRAINT "five; axes" UNIQUE ("System ID", "Database", "Slot", "Commit LSN", "order")
);
SELECT ash_replicant_map_table('q log', '"Sales Dept"."Event Log"', append_log => true,
       append_source_system_id_column => 'System ID', append_source_database_column => 'Database',
       append_slot_name_column => 'Slot', append_commit_lsn_column => 'Commit LSN',
       append_ordinal_column => 'order', append_operation_column => 'Op;eration',
       append_origin_column => 'Origin "src"', append_snapshot_attempt_column => 'Attempt',
       append_message_prefix_column => 'Prefix', append_message_content_column => 'Content',
       upsert_identity => 'five; axes') AS log_id \gset
SELECT append_columns, upsert_identity FROM ash_replicant.resources WHERE resource_id = :log_id;
ALTER TABLE "Sales Dept"."Event Log" ALTER COLUMN "Origin ""src""" DROP NOT NULL;
SELECT ash_replicant_map_table('q log', '"Sales Dept"."Event Log"', append_log => true,
       append_source_system_id_column => 'System ID', append_source_database_column => 'Database',
       append_slot_name_column => 'Slot', append_commit_lsn_column => 'Commit LSN',
       append_ordinal_column => 'order', append_operation_column => 'Op;eration',
       append_origin_column => 'Origin "src"', append_snapshot_attempt_column => 'Attempt',
       append_message_prefix_column => 'Prefix', append_message_content_column => 'Content');
CREATE FUNCTION "Sales Dept"."touch; it"() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN RETURN NEW; END $$;
ALTER TABLE "Sales Dept"."Event Log" ALTER COLUMN "Origin ""src""" SET NOT NULL;
CREATE TRIGGER "Before ""Row""" BEFORE INSERT ON "Sales Dept"."Event Log"
    FOR EACH ROW EXECUTE FUNCTION "Sales Dept"."touch; it"();
SELECT ash_replicant_map_table('q log', '"Sales Dept"."Event Log"', append_log => true,
       append_source_system_id_column => 'System ID', append_source_database_column => 'Database',
       append_slot_name_column => 'Slot', append_commit_lsn_column => 'Commit LSN',
       append_ordinal_column => 'order', append_operation_column => 'Op;eration',
       append_origin_column => 'Origin "src"', append_snapshot_attempt_column => 'Attempt',
       append_message_prefix_column => 'Prefix', append_message_content_column => 'Content');

---------------------------------------------------------------------------
-- unmap with quoted names
---------------------------------------------------------------------------
SELECT ash_replicant_unmap_table('q sink "EU"; --', '"Sales Dept"."Order Lines"');
SELECT ash_replicant_unmap_table('q sink "EU"; --', '"Sales Dept"."Order Lines"');
SELECT ash_replicant_unmap_table('q sink "EU" --', '"Sales Dept"."Order Lines"');
SELECT target FROM ash_replicant.resources WHERE sink_name = 'q sink "EU"; --' ORDER BY 1;
-- the source is free again for another target
SELECT ash_replicant_map_table('q sink "EU"; --', '"Sales Dept"."Other; Lines"',
       source_schema => 'Legacy "Shop"', source_table => 'lines; DROP TABLE x') AS mapped_id \gset
SELECT 'remapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
-- the catalogs and tables are intact
SELECT count(*) AS sinks FROM ash_replicant.sinks WHERE sink_name IN ('q sink "EU"; --', 'Q Weak', 'q log');
SELECT count(*) AS tables FROM pg_tables WHERE schemaname = 'Sales Dept';

---------------------------------------------------------------------------
-- cleanup
---------------------------------------------------------------------------
SELECT ash_replicant_drop_sink('q sink "EU"; --');
SELECT ash_replicant_drop_sink('Q Weak');
SELECT ash_replicant_drop_sink('q log');
DROP SCHEMA "Sales Dept" CASCADE;
DROP OWNED BY "regress q""owner; --", "Regress Weak";
DROP ROLE "regress q""owner; --";
DROP ROLE "Regress Weak";
