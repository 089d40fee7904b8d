# Upgrading from 0.4.0 (docs/operations.md "Upgrading from 0.4.0"):
#   - a 0.4.0 install whose slot-keyed checkpoint holds a real watermark of a
#     slot that streamed (and whose last transaction the source has not yet
#     been told about, so the slot would deliver it again): the current
#     library supervises nothing on it, logs one line saying an update is
#     needed, status answers extension_version_mismatch, doctor refuses;
#   - 0.4.1's dry run reports the binding state and counts only; the update
#     refuses (catalogs unchanged, reason code named, no value) without
#     ash_replicant.pipelines_stopped and with a missing, foreign, ambiguous
#     or shared binding, and while a pipeline runs;
#   - bound, the update keeps the watermark under the bound identity, and the
#     pipeline resumes exactly there: nothing lost, nothing applied twice;
#   - the rollback to 0.4.0 (from the highest version that has a path to it)
#     refuses while a pipeline runs, without the setting, on state 0.4.0
#     cannot represent (snapshot state, an append-log sink, an SCD2 mapping,
#     an unledgered checkpoint) and on a tampered ledger; then restores the
#     0.4.0 rows exactly.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $DB = $AshTest::DB;
my $default = $dst->safe_psql($DB,
	"SELECT default_version FROM pg_available_extensions WHERE name = 'ash_replicant'");
my ($sysid, $sdb) = AshTest::source_identity($src);

# Versions as "1.2.0": compare numerically, part by part.
sub vcmp
{
	my @a = split /\./, $_[0];
	my @b = split /\./, $_[1];
	for my $i (0 .. 2)
	{
		my $c = ($a[$i] // 0) <=> ($b[$i] // 0);
		return $c if $c;
	}
	return 0;
}
my $tli = AshTest::source_timeline($src);

# ---------------------------------------------------------------------------
# A slot that really streamed: on the current version, then as 0.4.0 left it.
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, "CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL)");
$dst->safe_psql($DB, AshTest::write_audit_sql('acct', 'int'));
$src->safe_psql($DB, "CREATE PUBLICATION pub_up FOR TABLE acct");
AshTest::setup_pipeline($src, $dst, sink => 'up', slot => 'up_slot', publication => 'pub_up',
	maps => [ ['acct'] ]);
AshTest::wait_slot_consistent($src, $dst, 'up');
$src->safe_psql($DB, "INSERT INTO acct SELECT g, 0 FROM generate_series(1, 200) g");
AshTest::wait_caught_up($src, $dst, 'up');
AshTest::stop_sink($dst, 'up');
AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'");
AshTest::poll($src, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'up_slot'");

# 0.4.0 applied one more transaction and recorded its watermark, but the
# source was never told: the slot would deliver it again
my ($c2, $e2) = AshTest::commit_tracked($src, "UPDATE acct SET bal = bal + 1000 WHERE id <= 10");
$dst->safe_psql($DB, "UPDATE acct SET bal = bal + 1000 WHERE id <= 10");
is($src->safe_psql($DB, "SELECT confirmed_flush_lsn < '$c2' FROM pg_replication_slots WHERE slot_name = 'up_slot'"),
	't', 'the slot would deliver the watermark\'s transaction again');

my $keep = $dst->safe_psql($DB, q{
SELECT json_build_object(
  'sinks', (SELECT json_agg(s) FROM ash_replicant.sinks s),
  'pipelines', (SELECT json_agg(p) FROM ash_replicant.pipelines p),
  'resources', (SELECT json_agg(r) FROM ash_replicant.resources r))});
my $created = '2025-01-02 03:04:05.678901+00';
my $updated = '2025-06-07 08:09:10.111213+00';
my $legacy_row = "('up_slot', $tli, '$c2', '$e2', '$created', '$updated')";

my $log_offset = -s $dst->logfile;
# the pipeline ran under 0.4.0: enabled, as a server restarted on the new
# library finds it
$dst->safe_psql($DB, qq{
BEGIN;
DROP EXTENSION ash_replicant;
CREATE EXTENSION ash_replicant VERSION '0.4.0';
INSERT INTO ash_replicant.sinks SELECT * FROM json_populate_recordset(NULL::ash_replicant.sinks, '$keep'::json->'sinks');
INSERT INTO ash_replicant.pipelines SELECT * FROM json_populate_recordset(NULL::ash_replicant.pipelines, '$keep'::json->'pipelines');
INSERT INTO ash_replicant.resources OVERRIDING SYSTEM VALUE
  SELECT * FROM json_populate_recordset(NULL::ash_replicant.resources, '$keep'::json->'resources');
UPDATE ash_replicant.pipelines SET enabled = true, start_generation = start_generation + 1;
INSERT INTO ash_replicant.checkpoints VALUES $legacy_row;
COMMIT;
});
my $legacy_checkpoints = $dst->safe_psql($DB, "SELECT json_agg(c) FROM ash_replicant.checkpoints c");

# ---------------------------------------------------------------------------
# The current library on 0.4.0 catalogs.
# ---------------------------------------------------------------------------
my $said = eval {
	local $PostgreSQL::Test::Utils::timeout_default = 30;
	$dst->wait_for_log(qr/event=launcher\.update_required reason=extension_version_mismatch/, $log_offset);
};
ok($said, 'the launcher says an update is needed');
is($dst->safe_psql($DB, "SELECT state || '/' || reason FROM ash_replicant_status('up')"),
	'misconfigured/extension_version_mismatch', 'status answers extension_version_mismatch');
my ($rc, $out, $err) = $dst->psql($DB, "SELECT * FROM ash_replicant_doctor('up')");
like($err, qr/doctor rejected: extension_version_mismatch/, 'doctor refuses with extension_version_mismatch');

my @secrets = ($c2, $e2, $sysid, 'up_slot');
sub value_free
{
	my ($text, $name) = @_;
	my @leaked = grep { index($text, $_) >= 0 } @secrets;
	ok(!@leaked, "$name names no slot, LSN or identity") or diag "leaked: @leaked";
	return;
}

# Everything the extension holds in a database: version, member objects and
# every catalog row.
sub catalog_state
{
	my ($db) = @_;
	my @parts = ($dst->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'ash_replicant'"));
	push @parts, $dst->safe_psql($db,
		"SELECT string_agg(pg_describe_object(classid, objid, objsubid), E'\\n' ORDER BY 1) FROM pg_depend"
		  . " WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'"
		  . " AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ash_replicant')");
	for my $t (split /\n/, $dst->safe_psql($db,
		"SELECT c.oid::regclass FROM pg_class c WHERE c.relnamespace = 'ash_replicant'::regnamespace"
		  . " AND c.relkind = 'r' ORDER BY 1"))
	{
		push @parts, "$t: " . $dst->safe_psql($db, "SELECT coalesce(json_agg(t ORDER BY t::text), '[]') FROM $t t");
	}
	return join("\n", @parts);
}

# $sql must fail with "<stage> rejected: <code>", name no value, and leave
# the catalogs of $db as they were.
sub refused
{
	my ($db, $sql, $code, $name) = @_;
	my $before = catalog_state($db);
	my ($rc, $out, $err) = $dst->psql($db, $sql);
	ok($rc != 0 && $err =~ /rejected: \Q$code\E\b/, "$name: refused with $code")
	  or diag "rc=$rc: $err";
	value_free($err, "$name: the refusal");
	is(catalog_state($db), $before, "$name: the catalogs are unchanged");
	return;
}

# ---------------------------------------------------------------------------
# Bindings and the dry run (0.4.1), and every refusal of the update.
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, "ALTER EXTENSION ash_replicant UPDATE TO '0.4.1'");
my $dry = "SELECT string_agg(concat_ws('|', legacy_checkpoint, coalesce(sink_name, '-'), state, sinks, bindings), ';'"
  . " ORDER BY legacy_checkpoint) FROM ash_replicant_upgrade_dry_run()";
is($dst->safe_psql($DB, $dry), '1|up|missing|1|0', 'dry run: the legacy checkpoint is not bound');
value_free($dst->safe_psql($DB, "SELECT json_agg(d) FROM ash_replicant_upgrade_dry_run() d"), 'the dry run');

my $update = "SET ash_replicant.pipelines_stopped = on; ALTER EXTENSION ash_replicant UPDATE";
refused($DB, "ALTER EXTENSION ash_replicant UPDATE", 'pipelines_stopped_required', 'update without the setting');
refused($DB, $update, 'legacy_binding_missing', 'update without a binding');

# a legacy checkpoint no sink names has no binding either
$dst->safe_psql($DB, "INSERT INTO ash_replicant.checkpoints VALUES ('gone_slot', $tli, '0/10', '0/20', now(), now())");
is($dst->safe_psql($DB, $dry), '1|-|missing|0|0;2|up|missing|1|0', 'dry run: a checkpoint no sink names is missing');
refused($DB, $update, 'legacy_binding_missing', 'update with an orphaned checkpoint');
$dst->safe_psql($DB, "DELETE FROM ash_replicant.checkpoints WHERE slot_name = 'gone_slot'");

refused($DB, "SELECT ash_replicant_bind_legacy_checkpoint('nosuch', '$sysid', '$sdb')",
	'legacy_binding_invalid', 'binding an unknown sink');
refused($DB, "SELECT ash_replicant_bind_legacy_checkpoint('up', 'x$sysid', '$sdb')",
	'legacy_binding_invalid', 'binding a malformed system identifier');

# a binding contradicting the pipeline's configured source
my $wrong = $sysid;
substr($wrong, -1) = (substr($sysid, -1) + 1) % 10;
$dst->safe_psql($DB, "SELECT ash_replicant_bind_legacy_checkpoint('up', '$wrong', '$sdb')");
is($dst->safe_psql($DB, $dry), '1|up|foreign|1|1', 'dry run: a binding to another source is foreign');
refused($DB, $update, 'legacy_binding_foreign', 'update with a foreign binding');

# two bindings for one sink
$dst->safe_psql($DB, "SELECT ash_replicant_bind_legacy_checkpoint('up', '$sysid', '$sdb')");
is($dst->safe_psql($DB, $dry), '1|up|ambiguous|1|2', 'dry run: two bindings are ambiguous');
refused($DB, $update, 'legacy_binding_ambiguous', 'update with an ambiguous binding');
is($dst->safe_psql($DB, "SELECT ash_replicant_unbind_legacy_checkpoint('up')"), '2', 'unbind removes both');
$dst->safe_psql($DB, "SELECT ash_replicant_bind_legacy_checkpoint('up', '$sysid', '$sdb')");
is($dst->safe_psql($DB, $dry), '1|up|bound|1|1', 'dry run: bound');

# 0.4.0 let two sinks name one slot: whose watermark is it?
$dst->safe_psql($DB, "INSERT INTO ash_replicant.sinks (sink_name, slot_name, owner) VALUES ('twin', 'up_slot', 'postgres')");
is($dst->safe_psql($DB, $dry), '1|-|shared|2|1', 'dry run: a slot two sinks name is shared');
refused($DB, $update, 'legacy_binding_shared', 'update with a shared slot');
$dst->safe_psql($DB, "DELETE FROM ash_replicant.sinks WHERE sink_name = 'twin'");

# all along: one line from the launcher, no worker, the slot untouched
my @lines = AshTest::log_lines_like($dst, qr/event=launcher\.update_required/);
is(scalar(@lines), 1, 'the launcher said it once');
value_free(join("\n", @lines), 'the launcher\'s line');
# a worker started since then would still run, or its exit be logged
my @workers = grep { /event=pipeline\.started|background worker "ash_replicant pipeline"/ }
  split /\n/, substr(slurp_file($dst->logfile), $log_offset);
is(scalar(@workers) . ' ' . $dst->safe_psql($DB,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'"),
	'0 0', 'no pipeline worker ran on 0.4 catalogs, though the pipeline is enabled')
  or diag join("\n", @workers);
is($src->safe_psql($DB, "SELECT active FROM pg_replication_slots WHERE slot_name = 'up_slot'"), 'f',
	'the slot was not used');
is($dst->safe_psql($DB, "SELECT json_agg(c) FROM ash_replicant.checkpoints c"), $legacy_checkpoints,
	'the legacy checkpoint is as 0.4.0 left it');

# ---------------------------------------------------------------------------
# The update.
# ---------------------------------------------------------------------------
# changes while the pipeline waits for the update
$src->safe_psql($DB, "UPDATE acct SET bal = bal + 1 WHERE id > 190; INSERT INTO acct VALUES (201, 7)");
$dst->safe_psql($DB, "UPDATE ash_replicant.pipelines SET enabled = false");
$dst->safe_psql($DB, $update);
is($dst->safe_psql($DB, "SELECT extversion FROM pg_extension WHERE extname = 'ash_replicant'"), $default,
	"0.4.1 updates to $default");
is($dst->safe_psql($DB, "SELECT concat_ws('|', source_system_id, source_database, slot_name, timeline_id,"
	  . " commit_lsn, end_lsn, created_at = '$created', updated_at = '$updated') FROM ash_replicant.checkpoints"),
	"$sysid|$sdb|up_slot|$tli|$c2|$e2|t|t", 'the checkpoint keeps its watermark under the bound identity');
is($dst->safe_psql($DB, "SELECT string_agg(legacy_row->>'commit_lsn', ',') FROM ash_replicant.upgrade_ledger"),
	$c2, 'the ledger holds the legacy row');

# two more 0.4.0 installs: one empty, one to roll back (below)
$dst->safe_psql($DB, "CREATE DATABASE legacy2");
$dst->safe_psql('legacy2', "CREATE EXTENSION ash_replicant VERSION '0.4.0'");
my ($rb_from) = sort { vcmp($b, $a) } grep { $_ ne '0.4.0' && $_ ne '0.4.1' } split /\n/, $dst->safe_psql($DB,
	"SELECT source FROM pg_extension_update_paths('ash_replicant') WHERE target = '0.4.0' AND path IS NOT NULL");
ok(defined $rb_from, 'a version with a rollback path to 0.4.0: ' . ($rb_from // 'none'));
$rb_from //= '1.0.0';
$dst->safe_psql($DB, "CREATE DATABASE rb");
$dst->safe_psql('rb', qq{
CREATE EXTENSION ash_replicant VERSION '0.4.0';
CREATE TABLE hist (id int PRIMARY KEY);
INSERT INTO ash_replicant.sinks (sink_name, slot_name, owner) VALUES ('up', 'up_slot', 'postgres'),
  ('other', 'other_slot', 'postgres');
INSERT INTO ash_replicant.pipelines (sink_name, source_system_identifier, source_database)
  VALUES ('up', '$sysid', '$sdb');
INSERT INTO ash_replicant.checkpoints VALUES $legacy_row,
  ('other_slot', $tli, '0/1234', '0/1300', '$created', '$updated');
});
my $rb_legacy = $dst->safe_psql('rb', "SELECT json_agg(c ORDER BY slot_name) FROM ash_replicant.checkpoints c");
$dst->safe_psql('rb', qq{
ALTER EXTENSION ash_replicant UPDATE TO '0.4.1';
SELECT ash_replicant_bind_legacy_checkpoint('up', '$sysid', '$sdb');
SELECT ash_replicant_bind_legacy_checkpoint('other', '$sysid', 'elsewhere');
SET ash_replicant.pipelines_stopped = on;
ALTER EXTENSION ash_replicant UPDATE TO '$rb_from';
});
is($dst->safe_psql('rb', "SELECT count(*) FROM ash_replicant.upgrade_ledger"), '2', "rb: updated to $rb_from");

# ---------------------------------------------------------------------------
# The pipeline resumes from the legacy watermark.
# ---------------------------------------------------------------------------
AshTest::start_sink($dst, 'up');
ok(AshTest::wait_caught_up($src, $dst, 'up'), 'resumes after the update');
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'nothing lost');
is($dst->safe_psql($DB, "SELECT count(*) FROM acct_audit WHERE op = 'UPDATE' AND id <= 10"), '10',
	'nothing applied twice: the watermark\'s transaction was applied once');
is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.checkpoints"), '1', 'one checkpoint, the converted one');

# with a pipeline running, neither an update nor a rollback
refused('legacy2', "SET ash_replicant.pipelines_stopped = on; ALTER EXTENSION ash_replicant UPDATE",
	'pipeline_running', 'update while a pipeline runs');
my $rollback = "SET ash_replicant.pipelines_stopped = on; ALTER EXTENSION ash_replicant UPDATE TO '0.4.0'";
refused('rb', $rollback, 'pipeline_running', 'rollback while a pipeline runs');

AshTest::stop_sink($dst, 'up');
AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'");
$dst->safe_psql('legacy2', "SET ash_replicant.pipelines_stopped = on; ALTER EXTENSION ash_replicant UPDATE");
is($dst->safe_psql('legacy2', "SELECT extversion FROM pg_extension WHERE extname = 'ash_replicant'"),
	$default, 'the same update runs once the pipeline is stopped');

# ---------------------------------------------------------------------------
# The rollback.
# ---------------------------------------------------------------------------
refused('rb', "ALTER EXTENSION ash_replicant UPDATE TO '0.4.0'", 'pipelines_stopped_required',
	'rollback without the setting');

if (vcmp($rb_from, '1.1.0') >= 0)
{
	$dst->safe_psql('rb', "INSERT INTO ash_replicant.snapshot_tables (source_system_id, source_database,"
		  . " slot_name, source_schema, source_table, state) VALUES ('$sysid', '$sdb', 'up_slot', 'public', 'acct', 'pending')");
	refused('rb', $rollback, 'rollback_state_unrepresentable', 'rollback with a snapshot table');
	$dst->safe_psql('rb', "DELETE FROM ash_replicant.snapshot_tables");
	$dst->safe_psql('rb', "UPDATE ash_replicant.checkpoints SET snapshot_phase = 'complete' WHERE slot_name = 'up_slot'");
	refused('rb', $rollback, 'rollback_state_unrepresentable', 'rollback with a snapshot phase');
	$dst->safe_psql('rb', "UPDATE ash_replicant.checkpoints SET snapshot_phase = NULL");
}

$dst->safe_psql('rb', "INSERT INTO ash_replicant.sinks (sink_name, slot_name, sink_kind, owner)"
	  . " VALUES ('al', 'al_slot', 'append_log', 'postgres')");
refused('rb', $rollback, 'rollback_state_unrepresentable', 'rollback with an append-log sink');
$dst->safe_psql('rb', "DELETE FROM ash_replicant.sinks WHERE sink_name = 'al'");

$dst->safe_psql('rb', "INSERT INTO ash_replicant.resources (sink_name, target, source_schema, source_table,"
	  . " history_strategy) VALUES ('up', 'hist', 'public', 'hist', 'scd2')");
refused('rb', $rollback, 'rollback_state_unrepresentable', 'rollback with an SCD2 mapping');
$dst->safe_psql('rb', "DELETE FROM ash_replicant.resources");

$dst->safe_psql('rb', "INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name,"
	  . " timeline_id) VALUES ('$wrong', '$sdb', 'up_slot', $tli)");
refused('rb', $rollback, 'rollback_state_unrepresentable', 'rollback with a checkpoint of another source');
$dst->safe_psql('rb', "DELETE FROM ash_replicant.checkpoints WHERE source_system_id = '$wrong'");

my $ledger = $dst->safe_psql('rb', "SELECT json_agg(l) FROM ash_replicant.upgrade_ledger l");
my $restore_ledger = "DELETE FROM ash_replicant.upgrade_ledger; INSERT INTO ash_replicant.upgrade_ledger"
  . " SELECT * FROM json_populate_recordset(NULL::ash_replicant.upgrade_ledger, '$ledger')";
$dst->safe_psql('rb', "UPDATE ash_replicant.upgrade_ledger SET legacy_row = jsonb_set(legacy_row, '{commit_lsn}', '\"0/1\"')"
	  . " WHERE slot_name = 'up_slot'");
refused('rb', $rollback, 'rollback_ledger_mismatch', 'rollback with an edited ledger row');
$dst->safe_psql('rb', $restore_ledger);
$dst->safe_psql('rb', "DELETE FROM ash_replicant.upgrade_ledger WHERE slot_name = 'other_slot'");
refused('rb', $rollback, 'rollback_ledger_mismatch', 'rollback with a ledger row removed');
$dst->safe_psql('rb', $restore_ledger);

$dst->safe_psql('rb', $rollback);
is($dst->safe_psql('rb', "SELECT extversion FROM pg_extension WHERE extname = 'ash_replicant'"), '0.4.0',
	"rolled back from $rb_from to 0.4.0");
is($dst->safe_psql('rb', "SELECT json_agg(c ORDER BY slot_name) FROM ash_replicant.checkpoints c"), $rb_legacy,
	'the rollback restores the 0.4.0 rows exactly');

# Rolled back after streaming (once the default version has a path down to
# 0.4.0), the 0.4.0 row keeps what was applied since the update.
my $down = $dst->safe_psql($DB, "SELECT path FROM pg_extension_update_paths('ash_replicant')"
	  . " WHERE source = '$default' AND target = '0.4.0'");
if ($down ne '')
{
	my $now = $dst->safe_psql($DB, "SELECT concat_ws('|', timeline_id, commit_lsn, end_lsn, updated_at)"
		  . " FROM ash_replicant.checkpoints");
	isnt((split /\|/, $now)[1], $c2, 'the watermark moved since the update');
	$dst->safe_psql($DB, $rollback);
	is($dst->safe_psql($DB, "SELECT concat_ws('|', timeline_id, commit_lsn, end_lsn, updated_at)"
		  . " || ' ' || (created_at = '$created') FROM ash_replicant.checkpoints WHERE slot_name = 'up_slot'"),
		"$now true", "rolled back along $down after streaming: the 0.4.0 row holds the current watermark");
}
else
{
	note "no update path from $default to 0.4.0 yet: the rollback after streaming is not exercised";
}

done_testing();
