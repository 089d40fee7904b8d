# The offline recovery functions while a v1 snapshot's helper copier of the
# stopped pipeline still exits: its pipeline worker gone (status and
# stat_pipelines say worker_pid NULL, the point the documented workflow
# waits for), the helper not yet.  recovery_prepare checked only the
# worker's slot and the slot's binding lock: reset_checkpoint then waited
# on the helper's lock on its snapshot_tables row for as long as the helper
# lived (here until statement_timeout), and the acknowledge and adopt
# functions changed the checkpoint under a live process of the pipeline.
# Each now refuses with pipeline_running, nothing changed, and succeeds once
# the helper is gone; a start after the reset copies every table exactly.
# A helper slow to exit is simulated by stopping it (SIGSTOP) while it
# waits for a lock on its target, as in test 187.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.snapshot_workers = 4\n");
my $sink = 'rh';
my @tables = qw(c1 c2 c3 c4);
for my $t (@tables)
{
	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, v text)");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 50000) g");
}
$src->safe_psql($DB, "CREATE PUBLICATION p_rh FOR TABLE " . join(', ', @tables));
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'p_rh', maps => [ map { [$_] } @tables ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'", start => 0);

# the targets locked at the destination against writes: each copier waits
# for its table, its claim (the table's snapshot_tables row) held
my $locker = $dst->background_psql($DB, on_error_stop => 1);
$locker->query_safe("BEGIN; LOCK TABLE " . join(', ', @tables) . " IN SHARE MODE");
AshTest::start_sink($dst, $sink);
my $helpers_waiting = "FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
  . " WHERE NOT l.granted AND a.backend_type = 'ash_replicant snapshot'";
ok(AshTest::poll($dst, "SELECT count(*) > 0 $helpers_waiting", 't'), 'a helper copier waits for its target');
our $frozen = $dst->safe_psql($DB, "SELECT min(a.pid) $helpers_waiting");
END { kill 'CONT', $frozen if $frozen; }
kill 'STOP', $frozen;
AshTest::stop_sink($dst, $sink);
ok(AshTest::poll($dst, "SELECT worker_pid IS NULL FROM ash_replicant_status('$sink')", 't'),
	'status says the worker is gone');
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'", '0'),
	'the pipeline worker has exited');
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_stat_activity WHERE pid = $frozen"), '1',
	'the helper copier has not');

my ($sysid, $sdb) = AshTest::source_identity($src);
my $tli = AshTest::source_timeline($src);
my $id = "'$sink', '$sysid', '$sdb'";
my $facts = AshTest::checkpoint_facts($dst, $sink);
ok($facts ne '', 'the pipeline has a checkpoint row');
my @calls = (
	[ 'acknowledge_checkpoint_timeline', "ash_replicant_acknowledge_checkpoint_timeline($id, $tli)" ],
	[ 'acknowledge_publication_gap',     "ash_replicant_acknowledge_publication_gap($id)" ],
	[ 'adopt_checkpoint',                "ash_replicant_adopt_checkpoint($id, '0/1')" ],
	[ 'reset_checkpoint',                "ash_replicant_reset_checkpoint($id)" ]);
for my $c (@calls)
{
	my ($name, $sql) = @$c;
	# bounded: a call waiting on the helper's locks ends here
	my ($rc, $out, $err) = $dst->psql($DB, "SET statement_timeout = '5s'; SELECT $sql");
	isnt($rc, 0, "$name refused while a helper copier of the pipeline is alive") or note "returned $out";
	like($err, qr/ERROR:  ash_replicant: recovery rejected: pipeline_running \(sink "$sink": /,
		"... with pipeline_running in the documented format") or diag $err;
	unlike($err, qr/statement timeout|lock timeout/, '... at once, not after waiting on its locks');
}
is(AshTest::checkpoint_facts($dst, $sink), $facts, 'the refusals changed nothing of the checkpoint');
is($dst->safe_psql($DB, AshTest::checkpoint_sql($sink, 'count(*)')), '1', '... nor removed it');

# let go: the helper, told to stop by its worker's exit, leaves
kill 'CONT', $frozen;
my $helper = $frozen;
$frozen = undef;
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE pid = $helper", '0'), 'let go, the helper exits');
$locker->query_safe('COMMIT');
$locker->quit;
my $counts = join(',', map { $dst->safe_psql($DB, "SELECT count(*) FROM $_") } @tables);
is($counts, '0,0,0,0', 'no copy of the stopped run committed');
my ($rc, $out, $err) = $dst->psql($DB, "SET statement_timeout = '20s'; SELECT ash_replicant_reset_checkpoint($id)");
is($rc, 0, 'the helper gone, the reset runs') or diag $err;
is($out, 't', '... and resets the checkpoint');

AshTest::start_sink($dst, $sink);
ok(AshTest::wait_caught_up($src, $dst, $sink), 'started again: copied and caught up');
AshTest::assert_mirror_equal($src, $dst, \@tables, name => 'after the reset');
is(AshTest::status_row($dst, $sink)->{state}, 'healthy', 'healthy');
done_testing();
