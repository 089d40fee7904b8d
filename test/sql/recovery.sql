-- Recovery functions (reset, adopt, acknowledge timeline), their refusals and
-- idempotence, and who may call them; preflight and doctor on a source that
-- cannot be reached.  Checkpoint rows are inserted directly as superuser.
-- The regression database is not the one the launcher supervises, so no
-- worker ever runs here; "running" is the enabled flag.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

-- a sink bound to source 7301234567890123456/app, slot rc_slot; nothing
-- listens on port 1, so a probe fails at once
SELECT ash_replicant_create_sink('rc', slot_name => 'rc_slot');
SELECT ash_replicant_configure_pipeline('rc', 'host=127.0.0.1 port=1 connect_timeout=5',
    publication => 'pub_rc', source_system_identifier => '7301234567890123456',
    source_database => 'app');
-- another sink, same source, its own slot
SELECT ash_replicant_create_sink('rc_other', slot_name => 'rc_other_slot');
SELECT ash_replicant_configure_pipeline('rc_other', 'host=127.0.0.1 port=1',
    publication => 'pub_other', source_system_identifier => '7301234567890123456',
    source_database => 'app');
-- a sink without pipeline configuration
SELECT ash_replicant_create_sink('rc_bare');

CREATE VIEW regress_cp AS
  SELECT slot_name, source_system_id, source_database, timeline_id, commit_lsn,
         end_lsn, terminal_cause, terminal_class, terminal_at IS NOT NULL AS tombstoned
    FROM ash_replicant.checkpoints;

INSERT INTO ash_replicant.checkpoints
    (source_system_id, source_database, slot_name, timeline_id, commit_lsn, end_lsn,
     terminal_cause, terminal_class, terminal_at)
VALUES ('7301234567890123456', 'app', 'rc_slot', 1, '0/3000100', '0/3000180',
        'source_timeline_changed', 'misconfigured', now()),
       ('7301234567890123456', 'app', 'rc_other_slot', 1, '0/5000000', '0/5000080',
        NULL, NULL, NULL);

-- common refusals: they name no identity value and change nothing ------------
SELECT ash_replicant_reset_checkpoint('no_such_sink', '7301234567890123456', 'app');
SELECT ash_replicant_reset_checkpoint(NULL, '7301234567890123456', 'app');
SELECT ash_replicant_reset_checkpoint('rc', NULL, 'app');
SELECT ash_replicant_reset_checkpoint('rc', '7301234567890123456', 'app', NULL);
SELECT ash_replicant_reset_checkpoint('rc_bare', '7301234567890123456', 'app');
SELECT ash_replicant_reset_checkpoint('rc', '7309999999999999999', 'app');
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'other_db', '0/1');
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7309999999999999999', 'app', 2);
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', NULL);
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 0);
-- offline only: an enabled pipeline is refused
SELECT ash_replicant_start('rc');
SELECT ash_replicant_reset_checkpoint('rc', '7301234567890123456', 'app');
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/1');
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 2);
SELECT ash_replicant_stop('rc');
SELECT * FROM regress_cp ORDER BY slot_name, source_system_id;

-- acknowledge_checkpoint_timeline ----------------------------------------------
-- re-binds the timeline, clears a source_timeline_changed tombstone, keeps the watermark
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 2) AS changed;
SELECT * FROM regress_cp WHERE slot_name = 'rc_slot';
-- idempotent
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 2) AS changed;
-- any other tombstone stays for the operator to see
UPDATE ash_replicant.checkpoints SET terminal_cause = 'apply_failed', terminal_class = 'halted',
    terminal_at = now() WHERE slot_name = 'rc_slot';
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 3) AS changed;
SELECT * FROM regress_cp WHERE slot_name = 'rc_slot';

-- adopt_checkpoint -----------------------------------------------------------------
-- sets the watermark and the restart point just past it (end_lsn = commit_lsn + 1)
-- and clears the tombstone
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/4000000') AS changed;
SELECT * FROM regress_cp WHERE slot_name = 'rc_slot';
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/4000000') AS changed;
-- an unchanged watermark keeps the recorded restart point
UPDATE ash_replicant.checkpoints SET end_lsn = '0/4000088', terminal_cause = 'owner_lost',
    terminal_class = 'halted', terminal_at = now() WHERE slot_name = 'rc_slot';
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/4000000') AS changed;
SELECT * FROM regress_cp WHERE slot_name = 'rc_slot';
-- refused while another source identity holds the slot name
INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name, timeline_id)
VALUES ('7308888888888888888', 'elsewhere', 'rc_slot', 1);
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/4100000');

-- reset_checkpoint -------------------------------------------------------------------
-- deletes only the bound row: the foreign row and the other sink's row stay
SELECT ash_replicant_reset_checkpoint('rc', '7301234567890123456', 'app') AS changed;
SELECT * FROM regress_cp ORDER BY slot_name, source_system_id;
SELECT ash_replicant_reset_checkpoint('rc', '7301234567890123456', 'app') AS changed;
-- acknowledge needs a row
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 2);
-- the operator's path out of an identity conflict: point the pipeline at the
-- foreign identity, reset that row, point it back
SELECT ash_replicant_configure_pipeline('rc', 'host=127.0.0.1 port=1 connect_timeout=5',
    publication => 'pub_rc', source_system_identifier => '7308888888888888888',
    source_database => 'elsewhere');
SELECT ash_replicant_reset_checkpoint('rc', '7308888888888888888', 'elsewhere') AS changed;
SELECT ash_replicant_configure_pipeline('rc', 'host=127.0.0.1 port=1 connect_timeout=5',
    publication => 'pub_rc', source_system_identifier => '7301234567890123456',
    source_database => 'app');
SELECT count(*) AS rc_rows FROM ash_replicant.checkpoints WHERE slot_name = 'rc_slot';
-- adopting into a missing row reads the timeline from the source: unreachable here
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/4000000');
SELECT count(*) AS rc_rows FROM ash_replicant.checkpoints WHERE slot_name = 'rc_slot';

-- SCD2 sinks: a reset may re-deliver, which SCD2 history cannot absorb ----------------
CREATE TABLE regress_rc_hist (id int);
SELECT ash_replicant_create_sink('rc_hist', slot_name => 'rc_hist_slot');
SELECT ash_replicant_configure_pipeline('rc_hist', 'host=127.0.0.1 port=1',
    publication => 'pub_hist', source_system_identifier => '7301234567890123456',
    source_database => 'app');
INSERT INTO ash_replicant.resources (sink_name, target, source_schema, source_table,
    history_strategy, history_business_key)
VALUES ('rc_hist', 'regress_rc_hist', 'public', 'hist', 'scd2', ARRAY['id']);
INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name, timeline_id)
VALUES ('7301234567890123456', 'app', 'rc_hist_slot', 1);
SELECT ash_replicant_reset_checkpoint('rc_hist', '7301234567890123456', 'app');
SELECT count(*) AS hist_rows FROM ash_replicant.checkpoints WHERE slot_name = 'rc_hist_slot';
SELECT ash_replicant_reset_checkpoint('rc_hist', '7301234567890123456', 'app',
    accept_redelivery => true) AS changed;
INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name, timeline_id)
VALUES ('7301234567890123456', 'app', 'rc_hist_slot', 1);
-- a snapshot mode re-establishes the history instead: allowed
UPDATE ash_replicant.pipelines SET snapshot = 'v1' WHERE sink_name = 'rc_hist';
SELECT ash_replicant_reset_checkpoint('rc_hist', '7301234567890123456', 'app') AS changed;
SELECT count(*) AS hist_rows FROM ash_replicant.checkpoints WHERE slot_name = 'rc_hist_slot';

-- preflight and doctor --------------------------------------------------------------
-- an unreachable source fails source_reachable and skips every source check
SELECT * FROM ash_replicant_preflight('rc');
-- the doctor adds checkpoint, slot, timeline, watermark, contract, runtime
-- (the launcher supervises another database than this one)
INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name, timeline_id)
VALUES ('7301234567890123456', 'app', 'rc_slot', 1);
SELECT * FROM ash_replicant_doctor('rc');
-- a sink without configuration: nothing on the source can be judged
SELECT * FROM ash_replicant_preflight('rc_bare');
-- missing settings are named, never their values
SELECT ash_replicant_configure_pipeline('rc_bare', 'host=127.0.0.1 port=1', publication => 'pub_bare');
SELECT check_name, verdict, reason FROM ash_replicant_preflight('rc_bare')
 WHERE check_name IN ('configuration_complete', 'source_reachable');
-- encrypted columns need the column_encryption family: no keyring here
CREATE TABLE regress_rc_enc (id int PRIMARY KEY, pan bytea);
SELECT ash_replicant_create_sink('rc_enc');
SELECT ash_replicant_map_table('rc_enc', 'regress_rc_enc', sensitive => ARRAY['pan'],
    encrypted => ARRAY['pan']) AS mapped_id \gset
SELECT 'mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT * FROM ash_replicant_preflight('rc_enc') WHERE check_name = 'keyring_families';
SELECT ash_replicant_drop_sink('rc_enc');
DROP TABLE regress_rc_enc;
SELECT * FROM ash_replicant_doctor('no_such_sink');
SELECT * FROM ash_replicant_preflight(NULL);
-- neither writes anything: no transaction id is ever assigned
BEGIN;
SELECT count(*) AS preflight_rows FROM ash_replicant_preflight('rc');
SELECT count(*) AS doctor_rows FROM ash_replicant_doctor('rc');
SELECT pg_current_xact_id_if_assigned() IS NULL AS wrote_nothing;
-- and the caller's transaction is still writable afterwards
CREATE TEMP TABLE regress_still_writable (i int);
COMMIT;
DROP TABLE regress_still_writable;

-- privileges ----------------------------------------------------------------------
CREATE ROLE regress_rc_plain;
CREATE ROLE regress_rc_monitor IN ROLE ash_replicant_monitor;
CREATE ROLE regress_rc_admin IN ROLE ash_replicant_admin;
SET ROLE regress_rc_plain;
SELECT ash_replicant_reset_checkpoint('rc', '7301234567890123456', 'app');
SELECT count(*) FROM ash_replicant_preflight('rc');
RESET ROLE;
SET ROLE regress_rc_monitor;
SELECT ash_replicant_reset_checkpoint('rc', '7301234567890123456', 'app');
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/1');
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 2);
SELECT count(*) AS preflight_rows FROM ash_replicant_preflight('rc');
SELECT count(*) AS doctor_rows FROM ash_replicant_doctor('rc');
RESET ROLE;
-- an admin recovers only a sink whose owner's privileges it has
SELECT ash_replicant_alter_sink('rc', owner => 'regress_rc_plain');
SET ROLE regress_rc_admin;
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 2) AS changed;
RESET ROLE;
SELECT ash_replicant_alter_sink('rc', owner => 'regress_rc_admin');
SET ROLE regress_rc_admin;
SELECT ash_replicant_acknowledge_checkpoint_timeline('rc', '7301234567890123456', 'app', 2) AS changed;
SELECT ash_replicant_adopt_checkpoint('rc', '7301234567890123456', 'app', '0/6000000') AS changed;
SELECT ash_replicant_reset_checkpoint('rc', '7301234567890123456', 'app') AS changed;
SELECT count(*) AS doctor_rows FROM ash_replicant_doctor('rc');
RESET ROLE;
SELECT ash_replicant_alter_sink('rc', owner => current_user::text::regrole);

-- cleanup -----------------------------------------------------------------------------
DROP ROLE regress_rc_plain, regress_rc_monitor, regress_rc_admin;
DROP VIEW regress_cp;
DELETE FROM ash_replicant.checkpoints;
SELECT ash_replicant_drop_sink(s) FROM unnest(ARRAY['rc', 'rc_other', 'rc_bare', 'rc_hist']) s;
DROP TABLE regress_rc_hist;
SELECT count(*) AS sinks_left FROM ash_replicant.sinks;
