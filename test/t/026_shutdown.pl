# A server shutdown is not a lost owner (docs/reasons.md#owner_lost): the
# postmaster terminates its background workers all at once, and the launcher,
# terminated with the pipeline worker, must not take the worker's exit for a
# worker that vanished.  The race is forced: the launcher is held in its
# catalog read (a session holds the pipelines catalog locked) when the fast
# shutdown comes, so it reaches its reconcile only after the worker is gone.
# It used to log `event=pipeline.halt reason=owner_lost` then.
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
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'mirror equals source');

done_testing();
