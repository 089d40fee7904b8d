# A v1 snapshot's session fails inside one pipeline worker (the source
# connections lost mid-copy) while one of its helper copiers is slow to
# exit.  The failed session terminates its helpers (SIGTERM); the worker's
# next session, after its reconnect back-off, starts helpers under the same
# copier numbers.  The helper still exiting holds its replication origin
# ("ash_replicant_<sink>_copier<n>") and its claim on a table of the
# attempt: the new helper of its number could not set its origin up (55006)
# and the table still claimed kept the attempt from completing, each
# counted as an apply failure until the pipeline halted apply_failed.  The
# next session now waits until the earlier session's helpers are gone
# (event=snapshot.helpers_exiting), then copies: no halt, and the mirror
# equals the source exactly.
# A helper slow to exit is simulated by stopping it (SIGSTOP) while it
# waits for a lock on its target, as in test 191.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.snapshot_workers = 3\nash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
my $sink = 'sr';
my @tables = qw(s1 s2 s3);
for my $t (@tables)
{
	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, v text)");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 30000) g");
}
$src->safe_psql($DB, "CREATE PUBLICATION p_sr FOR TABLE " . join(', ', @tables));
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'p_sr', maps => [ map { [$_] } @tables ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'", start => 0);

# every copier (the worker's own too) waits for its target's lock
my $locker = $dst->background_psql($DB, on_error_stop => 1);
$locker->query_safe("BEGIN; LOCK TABLE " . join(', ', @tables) . " IN SHARE MODE");
AshTest::start_sink($dst, $sink);
my $waiting = "FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted";
my $helpers_waiting = "$waiting AND a.backend_type = 'ash_replicant snapshot'";
ok(AshTest::poll($dst, "SELECT count(*) = 2 $helpers_waiting", 't'), 'two helper copiers wait for their targets');
ok(AshTest::poll($dst, "SELECT count(*) = 1 $waiting AND a.backend_type = 'ash_replicant pipeline'", 't'),
	'the worker waits for its own');
our $frozen = $dst->safe_psql($DB, "SELECT min(a.pid) $helpers_waiting");
END { kill 'CONT', $frozen if $frozen; }
kill 'STOP', $frozen;
my $log_at = -s $dst->logfile;

# the session fails: every source connection of the pipeline is lost
my $killed = $src->safe_psql($DB,
	"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
	  . " WHERE pid <> pg_backend_pid() AND (application_name LIKE 'ash\\_replicant%' OR backend_type = 'walsender')");
cmp_ok($killed, '>=', 3, 'the source connections of the session are terminated');
$locker->query_safe('COMMIT');
$locker->quit;

my $new_log = sub { substr(slurp_file($dst->logfile), $log_at) };
ok(AshTest::wait_until(sub { $new_log->() =~ /event=source\.fault sink=$sink step=snapshot/ }, timeout => 60),
	'the session failed on the lost source');
# longer than several reconnect back-offs (200ms .. 2s): the next sessions
# meet the helper still there
ok(!AshTest::wait_until(sub { $new_log->() =~ /event=pipeline\.halt sink=$sink / }, timeout => 8),
	'no halt while the helper of the failed session exits');
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_stat_activity WHERE pid = $frozen"), '1',
	'the helper of the failed session is still there');
my $st = AshTest::status_row($dst, $sink) // {};
isnt($st->{state} // '', 'halted', 'the pipeline is not halted') or diag explain $st;
my $l = $new_log->();
unlike($l, qr/event=apply\.error sink=$sink sqlstate=55006/, '... nor counted the exiting helper as an apply failure');
like($l, qr/event=snapshot\.helpers_exiting sink=$sink helpers=1/, 'the next session waits for it');

# the wait gives way to the worker's stop; the run started again waits at its
# start for the held origin (test 191)
AshTest::stop_sink($dst, $sink);
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'", '0',
		timeout => 30), 'the waiting worker stops at once');
AshTest::start_sink($dst, $sink);
ok(AshTest::wait_until(sub { $new_log->() =~ /event=pipeline\.origin_unavailable sink=$sink sqlstate=55006/ },
		timeout => 60), 'started again, it waits for the held origin');

kill 'CONT', $frozen;
my $helper = $frozen;
$frozen = undef;
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE pid = $helper", '0'), 'let go, the helper exits');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = '$sink'",
		't', timeout => 120), 'the next session completes the copy');
ok(AshTest::wait_caught_up($src, $dst, $sink), 'and catches up');
AshTest::assert_mirror_equal($src, $dst, \@tables, name => 'after the failed session');
is((AshTest::status_row($dst, $sink) // {})->{state}, 'healthy', 'healthy');
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'ash\\_replicant\\_sr\\_copier%'"),
	'0', 'no helper origin left once the snapshot is complete');
unlike($new_log->(), qr/event=pipeline\.halt sink=$sink /, 'no halt logged');

# --- the same with an incremental snapshot's helper (a guard: its session ---
# --- already waits for the helpers of the one before) ---------------------
my $prov = 'replica_fingerprint bytea, replica_seen_attempt bytea';
AshTest::create_brake($dst, 200);
for my $t (qw(ia ib))
{
	$src->safe_psql($DB, "CREATE TABLE $t (id bigint PRIMARY KEY, v text);"
		  . " INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 4000) g;"
		  . " CREATE VIEW ${t}_v AS SELECT id, v FROM $t");
	$dst->safe_psql($DB, "CREATE TABLE $t (id bigint PRIMARY KEY, v text, $prov);"
		  . " CREATE TRIGGER brake_$t AFTER INSERT ON $t FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();"
		  . " CREATE VIEW ${t}_v AS SELECT id, v FROM $t");
}
$src->safe_psql($DB, "ANALYZE; CREATE PUBLICATION p_si FOR TABLE ia, ib");
AshTest::setup_pipeline($src, $dst, sink => 'si', publication => 'p_si', marker => 0,
	maps => [ map { [ $_, snapshot_provenance => 'true' ] } qw(ia ib) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");
my $incr_helper = "FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'"
  . " AND application_name = 'ash_replicant snapshot si'";
ok(AshTest::poll($dst, "SELECT count(*) = 1 $incr_helper", 't'), 'si: an incremental helper copies');
$frozen = $dst->safe_psql($DB, "SELECT pid $incr_helper");
kill 'STOP', $frozen;
$log_at = -s $dst->logfile;
$src->safe_psql($DB, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
	  . " WHERE pid <> pg_backend_pid() AND (application_name LIKE 'ash\\_replicant%' OR backend_type = 'walsender')");
ok(AshTest::wait_until(sub { $new_log->() =~ /event=source\.fault sink=si / }, timeout => 60),
	'si: the session failed on the lost source');
ok(!AshTest::wait_until(sub { $new_log->() =~ /event=pipeline\.halt sink=si / }, timeout => 8),
	'si: no halt while the helper of the failed session exits');
unlike($new_log->(), qr/event=apply\.error sink=si sqlstate=55006/, 'si: ... nor an apply failure counted');
kill 'CONT', $frozen;
$helper = $frozen;
$frozen = undef;
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE pid = $helper", '0'), 'si: let go, the helper exits');
$dst->safe_psql($DB, 'UPDATE brake SET ms = 0');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'si'",
		't', timeout => 120), 'si: the next session completes the attempt');
my ($c) = AshTest::commit_tracked($src, "UPDATE ia SET v = 'last' WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, 'si', $c), 'si: and streams');
AshTest::assert_mirror_equal($src, $dst, [qw(ia_v ib_v)], order_by => 'id', name => 'si: after the failed session');
is((AshTest::status_row($dst, 'si') // {})->{state}, 'healthy', 'si: healthy');
done_testing();
