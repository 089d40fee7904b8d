# A stopped pipeline leaves no snapshot helper behind (docs/operations.md,
# "Recovery": offline recovery needs the pipeline's processes gone).
#
# A v1 snapshot copies two tables, the worker one and a helper copier the
# other; an operator session holds a lock on the helper's target, so the
# helper waits for it (status: destination_lock_wait).  ash_replicant_stop
# ends the worker by SIGTERM, past every error handler: the previous build
# left the helper waiting with its transaction open -- the offline recovery
# functions hung on its row lock, dropping the sink failed on its
# replication origin, and a start at once halted apply_failed (55006).
# Now the worker's exit ends its helpers: none is left once worker_pid is
# NULL, the checkpoint resets at once, and a new start copies both tables
# exactly.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $DB = $AshTest::DB;
my $sink = 'hs';
AshTest::both($src, $dst,
	'CREATE TABLE a (id integer PRIMARY KEY, v text NOT NULL); CREATE TABLE b (id integer PRIMARY KEY, v text NOT NULL)');
$src->safe_psql($DB, "INSERT INTO a SELECT g, 'a' FROM generate_series(1, 200000) g;"
	  . " INSERT INTO b SELECT g, 'b' FROM generate_series(1, 20000) g;"
	  . " ANALYZE a, b; CREATE PUBLICATION pub_hs FOR TABLE a, b");
# a's copy slowed down, so that the worker is still on it when b waits
$dst->safe_psql($DB, q{
CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.id % 1000 = 0 THEN PERFORM pg_sleep(0.05); END IF; RETURN NULL; END $$;
CREATE TRIGGER slow AFTER INSERT ON a FOR EACH ROW EXECUTE FUNCTION slow();
});
my $gate = $dst->background_psql($DB, on_error_stop => 1);
$gate->query_safe('BEGIN; LOCK TABLE b IN SHARE MODE');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_hs', maps => [ ['a'], ['b'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM pg_stat_activity"
		  . " WHERE backend_type = 'ash_replicant snapshot' AND wait_event_type = 'Lock'"),
	'a helper copier waits for the lock on its target');
AshTest::stop_sink($dst, $sink);
ok(AshTest::poll($dst, "SELECT worker_pid IS NULL FROM ash_replicant_status('$sink')"), 'the pipeline stopped');
ok(AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'",
		't', timeout => 10), 'no helper copier outlives the stop');
my ($sysid, $sdb) = AshTest::source_identity($src);
my ($rc, $out, $err) = $dst->psql($DB,
	"SET statement_timeout = '20s'; SELECT ash_replicant_reset_checkpoint('$sink', '$sysid', '$sdb')");
is($rc, 0, 'the offline reset runs at once') or diag $err;
$gate->query_safe('COMMIT');
$gate->quit;
$dst->safe_psql($DB, 'DROP TRIGGER slow ON a; TRUNCATE a, b');
AshTest::start_sink($dst, $sink);
ok(AshTest::wait_caught_up($src, $dst, $sink), 'started again: copied and caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'a', 'b' ], name => 'after the stop and the reset');
is(AshTest::status_row($dst, $sink)->{state}, 'healthy', 'healthy');
done_testing();
