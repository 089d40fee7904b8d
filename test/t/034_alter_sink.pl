# Changing a sink without rebuilding it (README.md "Sinks", docs/sql-api-sinks.md
# "ash_replicant_alter_sink"):
#
#  - a table added to the publication halts the pipeline misconfigured
#    (source_table_unmapped); ash_replicant_alter_sink(ignored_sources => ...)
#    fixes it in place: doctor's coverage passes at once, the pipeline is
#    started again by the call itself and goes healthy, mappings, pipeline
#    configuration and checkpoint kept (the watermark continues: every row
#    committed meanwhile arrives, none twice);
#  - altering a running pipeline's batch size restarts its worker on the new
#    setting, the stream continuing exactly;
#  - a pipeline halted for a data fault (apply_failed) stays halted: that is
#    the operator's decision, not a configuration change's;
#  - refusals (bad ignore, a horizon on an append log, a horizon both set and
#    reset, an unknown sink, a role without rights) change nothing.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $sink = 'alt';

AshTest::both($src, $dst, q{
CREATE TABLE a (id integer PRIMARY KEY, v text);
CREATE TABLE b (id integer PRIMARY KEY, v text);
});
$src->safe_psql($DB, 'CREATE PUBLICATION pub_alt FOR TABLE a');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_alt', maps => [ ['a'] ],
	census => '{"interval_ms": 500}');
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams')
  or BAIL_OUT('pipeline never streamed');
$src->safe_psql($DB, q{INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 100) g});
AshTest::wait_caught_up($src, $dst, $sink);

my $sink_row = sub {
	return $dst->safe_psql($DB,
		"SELECT slot_name, sink_kind, ignored_sources, batch_max_transactions, config_version"
		  . " FROM ash_replicant.sinks WHERE sink_name = '$sink'");
};
my $maps_sql = "SELECT count(*) FROM ash_replicant.resources WHERE sink_name = '$sink'";
my $maps0 = $dst->safe_psql($DB, $maps_sql);

# ---------------------------------------------------------------------------
# coverage fixed in place
# ---------------------------------------------------------------------------
$src->safe_psql($DB, 'ALTER PUBLICATION pub_alt ADD TABLE b');
$src->safe_psql($DB, q{INSERT INTO b VALUES (1, 'b1'); INSERT INTO a VALUES (101, 'a101')});
AshTest::wait_status($dst, $sink, 'misconfigured', 'source_table_unmapped', src => $src,
	name => 'a table added to the publication halts misconfigured');
my $coverage = "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('$sink')"
  . " WHERE check_name = 'coverage'";
is($dst->safe_psql($DB, $coverage), 'fail/source_table_unmapped', 'doctor: coverage fails');
my $wm0 = AshTest::checkpoint_lsn($dst, $sink);
my $gen0 = $dst->safe_psql($DB, "SELECT start_generation FROM ash_replicant.pipelines WHERE sink_name = '$sink'");

$dst->safe_psql($DB, "SELECT ash_replicant_alter_sink('$sink', ignored_sources => '{public.b}')");
is($dst->safe_psql($DB, "SELECT ignored_sources FROM ash_replicant.sinks WHERE sink_name = '$sink'"),
	'{public.b}', 'the ignore is stored in canonical form');
is($dst->safe_psql($DB, $coverage), 'pass/', 'doctor re-judges coverage at once');
is($dst->safe_psql($DB, "SELECT start_generation FROM ash_replicant.pipelines WHERE sink_name = '$sink'"),
	$gen0 + 1, 'a pipeline halted misconfigured is started again by the change');
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'healthy after the fix');
AshTest::wait_caught_up($src, $dst, $sink);
is($dst->safe_psql($DB, $maps_sql), $maps0, 'mappings kept');
ok($dst->safe_psql($DB, "SELECT '" . AshTest::checkpoint_lsn($dst, $sink) . "'::pg_lsn >= '$wm0'::pg_lsn"),
	'the checkpoint is kept and moves on from its watermark');
AshTest::assert_mirror_equal($src, $dst, ['a'], name => 'rows committed while misconfigured arrived');
is($dst->safe_psql($DB, 'SELECT count(*) FROM b'), '0', 'the ignored table is not mirrored');

# ---------------------------------------------------------------------------
# a running pipeline restarts on the new setting, the stream exact
# ---------------------------------------------------------------------------
my $pid0 = AshTest::status_row($dst, $sink)->{worker_pid};
my $wl = AshTest::start_workload($src, join('', map {
	"INSERT INTO a SELECT g, 'w' || g FROM generate_series(" . (1000 + $_ * 50) . ', ' . (1049 + $_ * 50) . ") g;\n"
	  . "UPDATE a SET v = v || '+' WHERE id % 7 = $_ % 7;\nSELECT pg_sleep(0.02);\n" } 0 .. 99));
$dst->safe_psql($DB, "SELECT ash_replicant_alter_sink('$sink', batch_max_transactions => 7)");
is($dst->safe_psql($DB, "SELECT batch_max_transactions FROM ash_replicant.sinks WHERE sink_name = '$sink'"),
	'7', 'batch size changed');
ok(AshTest::poll($dst, "SELECT coalesce(worker_pid <> $pid0, false) FROM ash_replicant_status('$sink')"),
	'the running worker restarts on the change');
ok(AshTest::finish_workload($wl), 'the workload ran');
AshTest::wait_caught_up($src, $dst, $sink);
AshTest::assert_mirror_equal($src, $dst, ['a'], name => 'the stream continued exactly across the restart');
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'healthy on the new setting');

# ---------------------------------------------------------------------------
# a halt for a data fault stays halted
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, 'ALTER TABLE a ADD CONSTRAINT a_short CHECK (id <> 9000000)');
$src->safe_psql($DB, q{INSERT INTO a VALUES (9000000, 'x')});
AshTest::wait_status($dst, $sink, 'halted', 'apply_failed', src => $src, name => 'a data fault halts');
my $gen1 = $dst->safe_psql($DB, "SELECT start_generation FROM ash_replicant.pipelines WHERE sink_name = '$sink'");
$dst->safe_psql($DB, "SELECT ash_replicant_alter_sink('$sink', batch_max_transactions => 8)");
is($dst->safe_psql($DB, "SELECT start_generation FROM ash_replicant.pipelines WHERE sink_name = '$sink'"),
	$gen1, 'a pipeline halted for a data fault is not started by a configuration change');
is(AshTest::status_row($dst, $sink)->{state}, 'halted', 'it stays halted');
$dst->safe_psql($DB, 'ALTER TABLE a DROP CONSTRAINT a_short');
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'resumed by the operator');
AshTest::assert_mirror_equal($src, $dst, ['a'], name => 'converged after the operator resumed');

# ---------------------------------------------------------------------------
# refusals change nothing
# ---------------------------------------------------------------------------
my $before = $sink_row->();
my @refusals = (
	[ "SELECT ash_replicant_alter_sink('$sink', ignored_sources => '{\"not a name\"}')", 'ignore_invalid' ],
	[ "SELECT ash_replicant_alter_sink('$sink', batch_max_transactions => 0)", 'config_invalid' ],
	[ "SELECT ash_replicant_alter_sink('$sink', recovery_horizon => '-1 day')", 'recovery_horizon_invalid' ],
	[ "SELECT ash_replicant_alter_sink('$sink', recovery_horizon => '1 day', reset_recovery_horizon => true)",
		'recovery_horizon_invalid' ],
	[ "SELECT ash_replicant_alter_sink('$sink', ignored_message_prefixes => '{\"\"}')", 'config_invalid' ],
	[ "SELECT ash_replicant_alter_sink('$sink', owner => 'no_such_role_xyz')", 'does not exist' ],
	[ "SELECT ash_replicant_alter_sink('nosuchsink', batch_max_transactions => 5)", 'does not exist' ],
);
for my $r (@refusals)
{
	my ($rc, $out, $err) = $dst->psql($DB, $r->[0]);
	isnt($rc, 0, "refused: $r->[1]");
	like($err, qr/\Q$r->[1]\E/, "refusal names $r->[1]") or diag $err;
}
is($sink_row->(), $before, 'refusals changed nothing');

# an append-log sink takes no recovery horizon
$dst->safe_psql($DB, q{
CREATE TABLE alog (event_id bigserial PRIMARY KEY);
SELECT ash_replicant_create_sink('alog_sink', sink_kind => 'append_log', initial_state => 'go_forward');
});
my ($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_alter_sink('alog_sink', recovery_horizon => '1 day')");
like($err, qr/recovery_horizon_invalid/, 'an append log takes no recovery horizon');

# a role with the admin grant but not the rights of the new owner
$dst->safe_psql($DB, q{
CREATE ROLE alt_admin LOGIN IN ROLE ash_replicant_admin;
CREATE ROLE alt_other;
});
($rc, $out, $err) = $dst->psql($DB,
	"SET ROLE alt_admin; SELECT ash_replicant_alter_sink('$sink', owner => 'alt_other')");
like($err, qr/config_invalid.*privileges of role/, 'an owner the caller has no rights of is refused');
is($sink_row->(), $before, 'still nothing changed');

done_testing();
