# The pipeline's own walsender stalls at the source (SIGSTOP for 35 s, as a
# hung process or a frozen network path would): the worker's receive
# timeout ends its session, and every new session finds the slot still
# active -- for its earlier session, whose client is gone.  Before, eleven
# such refusals halted misconfigured/source_slot_in_use ("another consumer
# keeps the replication slot active"), for good (found by an exploratory
# test).  Now a holder with the pipeline's application name that has not
# heard from its client for receive_timeout is not counted
# (event=slot.stale_session): once the walsender runs again and ends (its
# client is gone) the pipeline resumes by itself, the mirror exact.
# Another consumer of the slot still halts source_slot_in_use (test 016).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $DB = $AshTest::DB;
my $sink = 'st';
my ($src, $dst) = AshTest::start_pair();
AshTest::both($src, $dst, 'CREATE TABLE t (id integer PRIMARY KEY, v text)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_t FOR TABLE t');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_t', maps => [ ['t'] ]);
ok(AshTest::wait_caught_up($src, $dst, $sink), 'streaming');
$src->safe_psql($DB, q{INSERT INTO t SELECT g, 'a' || g FROM generate_series(1, 10) g});
ok(AshTest::wait_caught_up($src, $dst, $sink), 'caught up');

my $ws = $src->safe_psql($DB, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$sink'");
ok($ws =~ /^\d+$/ && kill('STOP', $ws), 'the walsender stopped');
my $t0 = time;
$src->safe_psql($DB, q{INSERT INTO t SELECT g, 'b' || g FROM generate_series(11, 20) g});
ok(AshTest::wait_until(sub {
	scalar(AshTest::log_lines_like($dst, qr/event=slot\.stale_session sink=st/)) >= 3 }),
	'the stale session is found again and again');
sleep(1) while time - $t0 < 35;
isnt(AshTest::status_row($dst, $sink)->{state}, 'misconfigured', 'not halted while the walsender stalls');
kill('CONT', $ws);
AshTest::poll($src, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $ws", 't');
$src->safe_psql($DB, q{INSERT INTO t SELECT g, 'c' || g FROM generate_series(21, 30) g});
ok(AshTest::wait_caught_up($src, $dst, $sink), 'resumed by itself');
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'healthy');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'after the stall');
done_testing();
