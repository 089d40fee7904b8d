# A server shutdown is not a lost owner (docs/reasons.md#owner_lost): the
# postmaster terminates its background workers all at once, and the launcher,
# terminated with the pipeline worker, must not take the worker's exit for a
# worker that vanished.  The race is forced: the launcher is held in its
# catalog read (a session holds the pipelines catalog locked) when the fast
# shutdown comes, so it reaches its reconcile only after the worker is gone.
# It used to log `event=pipeline.halt reason=owner_lost` then.
#
# The launcher's own SIGTERM may come after the worker's exit (the postmaster
# signals its children one after the other and can be preempted between
# two), so the launcher also reads the status line of postmaster.pid, which
# says "stopping" before any child is signalled.  That check is tested
# directly at the end: with the line set to "stopping", a worker terminated
# is not owner_lost (and is started again); with it set back, it is.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();

AshTest::both($src, $dst, 'CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub FOR TABLE t');
AshTest::setup_pipeline($src, $dst, sink => 'sd', publication => 'pub', maps => [ ['t'] ]);
$src->safe_psql($DB, "INSERT INTO t SELECT g, 'v' FROM generate_series(1, 100) g");
AshTest::wait_caught_up($src, $dst, 'sd', name => 'streaming before the shutdown');

for my $round (1 .. 2)
{
	my $holder = $dst->background_psql($DB, on_error_stop => 1);
	$holder->query_safe('BEGIN; LOCK TABLE ash_replicant.pipelines IN ACCESS EXCLUSIVE MODE');
	ok(AshTest::poll($dst, q{SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.backend_type = 'ash_replicant launcher' AND NOT l.granted}),
		"round $round: the launcher waits in its catalog read");
	$dst->stop('fast');
	eval { $holder->quit };
	$dst->start;
	is(scalar AshTest::grep_logs_for('reason=owner_lost', $dst), 0,
		"round $round: no owner_lost logged for the shutdown");
	AshTest::wait_status($dst, 'sd', 'healthy', undef, src => $src,
		name => "round $round: healthy after the restart");
	$src->safe_psql($DB, "UPDATE t SET v = v || '$round'");
	AshTest::wait_caught_up($src, $dst, 'sd', name => "round $round: streams after the restart");
}

# The status line of postmaster.pid, set in place (the same length; the
# postmaster rechecks only the PID line while it runs).
sub set_pm_status
{
	my ($status) = @_;
	my $path = $dst->data_dir . '/postmaster.pid';
	my @lines = split /\n/, PostgreSQL::Test::Utils::slurp_file($path);
	$lines[7] = $status;
	open(my $fh, '>', $path) or die "cannot write $path: $!";
	print $fh join("\n", @lines), "\n";
	close($fh);
	return;
}

sub worker_pid
{
	return $dst->safe_psql($DB, "SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity"
		  . " WHERE backend_type = 'ash_replicant pipeline'");
}

my $worker = worker_pid();
set_pm_status('stopping');
$dst->safe_psql($DB, "SELECT pg_terminate_backend($worker)");
ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM pg_stat_activity"
		  . " WHERE backend_type = 'ash_replicant pipeline' AND pid <> $worker"),
	'while postmaster.pid says stopping, a terminated worker is started again');
set_pm_status('ready   ');
is(scalar AshTest::grep_logs_for('reason=owner_lost', $dst), 0,
	'and not recorded owner_lost');
AshTest::wait_status($dst, 'sd', 'healthy', undef, src => $src, name => 'healthy with the new worker');
$worker = worker_pid();
$dst->safe_psql($DB, "SELECT pg_terminate_backend($worker)");
AshTest::wait_status($dst, 'sd', 'halted', 'owner_lost', src => $src,
	name => 'with postmaster.pid ready again, a terminated worker is owner_lost');
AshTest::start_sink($dst, 'sd');
AshTest::wait_status($dst, 'sd', 'healthy', undef, src => $src, name => 'healthy after a start');
$src->safe_psql($DB, "UPDATE t SET v = v || 'x'");
AshTest::wait_caught_up($src, $dst, 'sd', name => 'streams after the owner_lost restart');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'mirror equals source');

done_testing();
