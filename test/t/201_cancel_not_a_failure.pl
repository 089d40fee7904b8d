# pg_cancel_backend of a pipeline worker (docs/operations.md, back-off): a
# cancel asks the worker to give up what it is doing, not to stop.  Before,
# each counted as a failed apply towards max_command_retries, and the count
# was reset only by the next committed batch: cancels of an idle worker
# added up, and the fourth halted apply_failed (57014) for a transaction
# applied long before.
#
#   idle     six cancels of a caught-up worker, 2 s apart: never halted,
#            healthy, the next change streams
#   blocked  a transaction waiting on a target another session locked,
#            canceled six times (more than max_command_retries): not
#            halted; the lock released, it is applied once (write audit),
#            mirror = source
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub worker_pid { return q_dst("SELECT coalesce(worker_pid, 0) FROM ash_replicant_status('k')"); }
sub state_of
{
	return q_dst("SELECT state || '/' || coalesce(reason, '') FROM ash_replicant_status('k')");
}

AshTest::both($src, $dst, 'CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL)');
q_dst(AshTest::write_audit_sql('t', 'bigint'));
q_src('CREATE PUBLICATION pub FOR TABLE t');
AshTest::setup_pipeline($src, $dst, sink => 'k', publication => 'pub', maps => [ ['t'] ]);
AshTest::wait_status($dst, 'k', 'healthy', undef, src => $src);
q_src("INSERT INTO t SELECT g, 'x' FROM generate_series(1, 10) g");
AshTest::wait_caught_up($src, $dst, 'k');

# idle
my $halted = 0;
for my $k (1 .. 6)
{
	my $pid = worker_pid() or last;
	q_dst("SELECT pg_cancel_backend($pid)");
	sleep 2;
	$halted ||= state_of() =~ /^halted/;
}
ok(!$halted, 'idle: six cancels never halt the pipeline (before: apply_failed at the fourth)');
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.session_end sink=k cause=canceled/)),
	'idle: each cancel ends the session, logged');
AshTest::wait_status($dst, 'k', 'healthy', undef, src => $src, name => 'idle: healthy after the cancels');
q_src("UPDATE t SET v = 'y' WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 'k'), 'idle: the next change streams');

# blocked
my $locker = $dst->background_psql($DB);
$locker->query_safe('BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE');
q_src("INSERT INTO t VALUES (11, 'blocked')");
ok(AshTest::poll($dst, "SELECT count(*) > 0 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
		  . " WHERE c.relname = 't' AND NOT l.granted"), 'blocked: the worker waits on the locked target');
for my $k (1 .. 6)
{
	my $pid = worker_pid() or last;
	q_dst("SELECT pg_cancel_backend($pid)");
	AshTest::poll($dst, "SELECT count(*) > 0 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
		  . " WHERE c.relname = 't' AND NOT l.granted");
	$halted ||= state_of() =~ /^halted/;
}
ok(!$halted, 'blocked: six cancels of a waiting apply never halt it (before: apply_failed)');
$locker->query_safe('COMMIT');
$locker->quit;
ok(AshTest::wait_caught_up($src, $dst, 'k'), 'blocked: the lock released, the transaction applied');
is(q_dst("SELECT count(*) FROM t_audit WHERE id = 11"), '1', 'blocked: applied once');
AshTest::assert_mirror_equal($src, $dst, ['t']);
AshTest::wait_status($dst, 'k', 'healthy', undef, src => $src, name => 'healthy at the end');
done_testing();
