# A pipeline started again (ash_replicant_stop, then ash_replicant_start at
# once) while a v1 snapshot's helper copier of its previous run still
# exits, holding its replication origin ("ash_replicant_<sink>_copier<n>")
# and its claim on a table of the attempt.  The new run's helper of the same
# number failed to set up that origin (55006), and the worker counted it,
# and the table still claimed at the attempt's end, as apply failures: the
# pipeline halted apply_failed within seconds.  The new worker now waits
# until no process of the previous run holds one of the sink's origins
# (event=pipeline.origin_unavailable sqlstate=55006, retried with back-off),
# then copies: no halt, and the mirror equals the source exactly.  The same
# with an incremental snapshot's helper (its origin held, frozen between two
# chunks).
# A helper slow to exit is simulated by stopping it (SIGSTOP) while it
# waits for a lock on its target, as in test 187.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.snapshot_workers = 4\nash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
my $sink = 'rs';
my @tables = qw(c1 c2 c3 c4);
for my $t (@tables)
{
	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, v text)");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 50000) g");
}
$src->safe_psql($DB, "CREATE PUBLICATION p_rs FOR TABLE " . join(', ', @tables));
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'p_rs', maps => [ map { [$_] } @tables ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'", start => 0);

my $locker = $dst->background_psql($DB, on_error_stop => 1);
$locker->query_safe("BEGIN; LOCK TABLE " . join(', ', @tables) . " IN SHARE MODE");
AshTest::start_sink($dst, $sink);
my $helpers_waiting = "FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
  . " WHERE NOT l.granted AND a.backend_type = 'ash_replicant snapshot'";
ok(AshTest::poll($dst, "SELECT count(*) = 3 $helpers_waiting", 't'), 'three helper copiers wait for their targets');
our $frozen = $dst->safe_psql($DB, "SELECT min(a.pid) $helpers_waiting");
END { kill 'CONT', $frozen if $frozen; }
kill 'STOP', $frozen;
my $log_at = -s $dst->logfile;
AshTest::stop_sink($dst, $sink);
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'", '0'),
	'the pipeline worker has exited');
# the targets free again: only the frozen helper is in the way
$locker->query_safe('COMMIT');
$locker->quit;
AshTest::start_sink($dst, $sink);
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_stat_activity WHERE pid = $frozen"), '1',
	'started again while the helper of the previous run has not exited');

# the new run meets the held origin: it must wait, not fail
my $new_log = sub { substr(slurp_file($dst->logfile), $log_at) };
ok(AshTest::wait_until(sub {
			my $l = $new_log->();
			my @waits = ($l =~ /event=pipeline\.origin_unavailable sink=$sink sqlstate=55006/g);
			@waits >= 2 || $l =~ /event=pipeline\.halt sink=$sink /;
		}, timeout => 60),
	'the new run waited for the held origin (or halted)');
my $st = AshTest::status_row($dst, $sink) // {};
isnt($st->{state} // '', 'halted', 'the new run did not halt while the helper exits')
  or diag explain $st;
my $l = $new_log->();
unlike($l, qr/event=apply\.error sink=$sink sqlstate=55006/, '... nor counted the held origin as an apply failure');
unlike($l, qr/event=pipeline\.halt sink=$sink /, '... no halt logged');

kill 'CONT', $frozen;
my $helper = $frozen;
$frozen = undef;
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE pid = $helper", '0'), 'let go, the helper exits');
ok(AshTest::wait_caught_up($src, $dst, $sink), 'the new run copies and catches up');
AshTest::assert_mirror_equal($src, $dst, \@tables, name => 'after the restart');
is((AshTest::status_row($dst, $sink) // {})->{state}, 'healthy', 'healthy');
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'ash\\_replicant\\_rs\\_copier%'"),
	'0', 'no helper origin left once the snapshot is complete');

# --- the same with an incremental snapshot's helper ------------------------------------
my $prov = 'replica_fingerprint bytea, replica_seen_attempt bytea';
AshTest::create_brake($dst, 200);
for my $t (qw(ia ib))
{
	$src->safe_psql($DB, "CREATE TABLE $t (id bigint PRIMARY KEY, v text);"
		  . " INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 6000) g;"
		  . " CREATE VIEW ${t}_v AS SELECT id, v FROM $t");
	$dst->safe_psql($DB, "CREATE TABLE $t (id bigint PRIMARY KEY, v text, $prov);"
		  . " CREATE TRIGGER brake_$t AFTER INSERT ON $t FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();"
		  . " CREATE VIEW ${t}_v AS SELECT id, v FROM $t");
}
$src->safe_psql($DB, "ANALYZE; CREATE PUBLICATION p_ri FOR TABLE ia, ib");
AshTest::setup_pipeline($src, $dst, sink => 'ri', publication => 'p_ri', marker => 0,
	maps => [ map { [ $_, snapshot_provenance => 'true' ] } qw(ia ib) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");
my $incr_helper = "FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'"
  . " AND application_name = 'ash_replicant snapshot ri'";
ok(AshTest::poll($dst, "SELECT count(*) = 1 $incr_helper", 't'), 'ri: an incremental helper copies');
$frozen = $dst->safe_psql($DB, "SELECT pid $incr_helper");
kill 'STOP', $frozen;
$log_at = -s $dst->logfile;
AshTest::stop_sink($dst, 'ri');
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'"
	  . " AND application_name = 'ash_replicant ri'", '0'), 'ri: the pipeline worker has exited');
AshTest::start_sink($dst, 'ri');
ok(AshTest::wait_until(sub {
			my $l = $new_log->();
			my @waits = ($l =~ /event=pipeline\.origin_unavailable sink=ri sqlstate=55006/g);
			@waits >= 2 || $l =~ /event=pipeline\.halt sink=ri /;
		}, timeout => 60),
	'ri: the new run waited for the held origin (or halted)');
$st = AshTest::status_row($dst, 'ri') // {};
isnt($st->{state} // '', 'halted', 'ri: the new run did not halt while the helper exits') or diag explain $st;
$l = $new_log->();
unlike($l, qr/event=apply\.error sink=ri sqlstate=55006/, 'ri: ... nor counted the held origin as an apply failure');
kill 'CONT', $frozen;
$helper = $frozen;
$frozen = undef;
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE pid = $helper", '0'), 'ri: let go, the helper exits');
$dst->safe_psql($DB, 'UPDATE brake SET ms = 0');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'ri'",
		't', timeout => 120), 'ri: the new run completes the attempt');
my ($c) = AshTest::commit_tracked($src, "UPDATE ia SET v = 'last' WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, 'ri', $c), 'ri: and streams');
AshTest::assert_mirror_equal($src, $dst, [qw(ia_v ib_v)], order_by => 'id', name => 'ri: after the restart');
is((AshTest::status_row($dst, 'ri') // {})->{state}, 'healthy', 'ri: healthy');
done_testing();
