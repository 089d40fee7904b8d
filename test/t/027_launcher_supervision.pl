# The launcher keeps supervising through what happens to it (src/launcher.c):
#
# - a lock held on its catalogs past its lock_timeout makes its read fail:
#   the running pipelines are left alone, and stream once it is gone (a failed read used to be taken for
#   "no pipeline enabled", and every worker was asked to stop), and the
#   failure is logged with its SQLSTATE, once;
# - a fast shutdown completes while a prepared transaction holds that lock
#   (the launcher used to wait on it for ever, and the shutdown with it);
# - a launcher terminated with pg_terminate_backend is started again by the
#   postmaster (it used to exit 0, and supervise nothing until the next server
#   start); the new one adopts the running worker: no second worker, a stop
#   reaches it, and its disappearance is recorded as owner_lost.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(dst_conf => "max_prepared_transactions = 2\n");

AshTest::both($src, $dst, 'CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub FOR TABLE t');
AshTest::setup_pipeline($src, $dst, sink => 'sl', publication => 'pub', maps => [ ['t'] ]);
AshTest::wait_status($dst, 'sl', 'healthy', undef, src => $src, name => 'healthy');
$src->safe_psql($DB, "INSERT INTO t SELECT g, 'v' FROM generate_series(1, 100) g");
AshTest::wait_caught_up($src, $dst, 'sl', name => 'streaming');

sub pid_of
{
	my ($type) = @_;
	return $dst->safe_psql($DB,
		"SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE backend_type = '$type'");
}

sub read_failures
{
	return scalar AshTest::grep_logs_for('could not read the pipelines (sqlstate 55P03)', $dst);
}

# wait up to 30 s for at least $n logged read failures
sub wait_read_failures
{
	my ($n) = @_;
	my $deadline = time + 30;
	sleep 1 while read_failures() < $n && time < $deadline;
	return read_failures() >= $n;
}

my $next_id = 100;

# Rows committed at the source reach the target (read directly: the status
# function reads the catalogs a test may hold locked).
sub rows_arrive
{
	my ($name) = @_;
	my $from = $next_id + 1;
	$next_id += 10;
	$src->safe_psql($DB, "INSERT INTO t SELECT g, 'w' FROM generate_series($from, $next_id) g");
	ok(AshTest::poll($dst, "SELECT count(*) = $next_id FROM t"), $name);
	return;
}

# --- a lock held past the launcher's lock_timeout --------------------------
my $worker = pid_of('ash_replicant pipeline');
my $holder = $dst->background_psql($DB, on_error_stop => 1);
$holder->query_safe('BEGIN; LOCK TABLE ash_replicant.pipelines IN ACCESS EXCLUSIVE MODE');
ok(wait_read_failures(1), 'the launcher gives up a read blocked by a lock and logs its SQLSTATE');
sleep 3;	# several more failed reads (the worker, which writes these catalogs, waits too)
is(pid_of('ash_replicant pipeline'), $worker, 'the failed reads left the running worker alone');
is(read_failures(), 1, 'a read failing the same way is logged once, not per try');
$holder->query_safe('COMMIT');
$holder->quit;
AshTest::wait_status($dst, 'sl', 'healthy', undef, src => $src, name => 'healthy once the lock is gone');
rows_arrive('rows arrive once the lock is gone');

# --- a prepared transaction holding the lock at a fast shutdown ------------
$dst->safe_psql($DB, "BEGIN; LOCK TABLE ash_replicant.pipelines IN ACCESS EXCLUSIVE MODE;"
	  . " PREPARE TRANSACTION 'held'");
ok(wait_read_failures(2), 'the launcher is blocked by the prepared transaction');
{
	local $ENV{PGCTLTIMEOUT} = 30;
	my $stopped = $dst->stop('fast', fail_ok => 1);
	ok($stopped, 'a fast shutdown completes while a prepared transaction holds the catalog');
	$dst->stop('immediate') unless $stopped;
}
$dst->start;
$dst->safe_psql($DB, "ROLLBACK PREPARED 'held'");
AshTest::wait_status($dst, 'sl', 'healthy', undef, src => $src, name => 'healthy after the rollback');
rows_arrive('the pipeline streams after the restart');
is(scalar AshTest::grep_logs_for('reason=owner_lost', $dst), 0, 'no owner_lost logged for the shutdown');

# --- a launcher terminated comes back and adopts the running worker --------
my $launcher = pid_of('ash_replicant launcher');
$worker = pid_of('ash_replicant pipeline');
$dst->safe_psql($DB, "SELECT pg_terminate_backend($launcher)");
ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM pg_stat_activity"
		  . " WHERE backend_type = 'ash_replicant launcher' AND pid <> $launcher"),
	'a terminated launcher is started again');
sleep 2;	# a few reconciliations of the new launcher
is(pid_of('ash_replicant pipeline'), $worker, 'the new launcher adopted the worker, started no second one');
rows_arrive('rows arrive under the new launcher');

AshTest::stop_settled($src, $dst, 'sl');
is(pid_of('ash_replicant pipeline'), '', 'a stop reaches the adopted worker');
AshTest::start_sink($dst, 'sl');
AshTest::wait_status($dst, 'sl', 'healthy', undef, src => $src, name => 'healthy after a start');

# an adopted worker that vanishes is owner_lost, as one the launcher started
$launcher = pid_of('ash_replicant launcher');
$dst->safe_psql($DB, "SELECT pg_terminate_backend($launcher)");
ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM pg_stat_activity"
		  . " WHERE backend_type = 'ash_replicant launcher' AND pid <> $launcher"),
	'the launcher is started again a second time');
sleep 2;
$worker = pid_of('ash_replicant pipeline');
$dst->safe_psql($DB, "SELECT pg_terminate_backend($worker)");
AshTest::wait_status($dst, 'sl', 'halted', 'owner_lost', src => $src,
	name => 'an adopted worker terminated is owner_lost');
AshTest::start_sink($dst, 'sl');
AshTest::wait_status($dst, 'sl', 'healthy', undef, src => $src, name => 'healthy after the restart');
rows_arrive('streams again');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'mirror equals source');

done_testing();
