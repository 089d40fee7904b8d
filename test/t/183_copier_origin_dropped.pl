# A snapshot's helper copier that does not end on its own still leaves no
# replication origin behind (docs/operations.md, "Replication origins": a
# helper drops its origin when it ends).  Each case copies four tables with
# three copiers (the worker and two helpers), faults the copy while the
# helpers copy, lets the snapshot complete with the worker alone (so that no
# later helper of the same number takes an origin left over and drops it),
# and counts the copier origins (ash_replicant_<sink>_copier<n>) left at the
# destination.
#
#  v1 source    the source ends every snapshot session: the worker fails its
#               session and stops its helpers with SIGTERM (before: the
#               stopped helper's origin was left)
#  v1 term      a helper terminated (pg_terminate_backend: SIGTERM, a FATAL
#               exit that skips its error handling) (before: left)
#  v1 kill      a helper killed with SIGKILL: the destination restarts
#               (crash recovery); no process of the helper runs again to drop
#               it, the worker drops it once the attempt is complete and says
#               so (event=snapshot.copier_origins_dropped; only in this case)
#               (before: left)
#  incr term    an incremental helper terminated likewise (before: left)
# Every case: the copy completes, each table equals its source.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nrestart_after_crash = on\nash_replicant.snapshot_workers = 3\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
my $prov = 'replica_fingerprint bytea, replica_seen_attempt bytea';

# slows each copy down so that the helpers are copying when the fault comes
AshTest::create_brake($dst, 0);

my $helpers = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'";

sub run_case
{
	my ($sink, $mode, $fault) = @_;
	my @t = map { "${sink}_$_" } qw(a b c d);
	for my $t (@t)
	{
		q_src("CREATE TABLE $t (id bigint PRIMARY KEY, v text);"
			. "INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 6000) g");
		q_dst("CREATE TABLE $t (id bigint PRIMARY KEY, v text, $prov);"
			. "CREATE TRIGGER brake_$t AFTER INSERT ON $t FOR EACH "
			. ($mode eq 'v1' ? 'ROW' : 'STATEMENT') . " EXECUTE FUNCTION brake_fn()");
	}
	q_src("ANALYZE; CREATE PUBLICATION pub_$sink FOR TABLE " . join(', ', @t));
	q_dst("UPDATE brake SET ms = " . ($mode eq 'v1' ? 1 : 60));
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink", marker => 0,
		maps => [ map { [ $_, snapshot_provenance => 'true' ] } @t ],
		pipeline_extra => "go_forward_only => false, snapshot => '$mode'"
		  . ($mode eq 'incremental' ? ", chunk_rows => 100" : ''));
	ok(AshTest::poll($dst, "SELECT count(*) >= 2 FROM pg_replication_origin WHERE roname LIKE 'ash\\_replicant\\_${sink}\\_copier%'"),
		"$sink: helpers copying with origins of their own");
	usleep(300_000);

	# the sessions after the fault copy alone: no later helper of the same
	# number takes over (and then drops) an origin the fault left
	workers(1) if $mode eq 'v1';
	if ($fault eq 'source')
	{
		q_src("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
			. " WHERE application_name = 'ash_replicant snapshot'");
	}
	elsif ($fault eq 'term')
	{
		q_dst("SELECT pg_terminate_backend(pid) FROM ($helpers LIMIT 1) h");
	}
	else
	{
		my $pid = q_dst("$helpers LIMIT 1");
		ok($pid, "$sink: a helper to kill");
		kill 'KILL', $pid;
		# the postmaster restarts every process (crash recovery)
		ok(AshTest::poll($dst, "SELECT true"), "$sink: destination back after the helper's SIGKILL");
	}
	# incremental: only now (lowered before, its worker would stop them)
	workers(1) if $mode ne 'v1';
	q_dst("UPDATE brake SET ms = 0");
	ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = '$sink'",
			't', timeout => 180), "$sink: the snapshot completes");
	ok(AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'"),
		"$sink: no helper left");
	sleep 1;
	is(q_dst("SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'ash\\_replicant\\_${sink}\\_copier%'"),
		'0', "$sink: no copier origin left");
	# a helper stopped by a signal drops its own; only a killed one's is the worker's
	is(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.copier_origins_dropped sink=$sink /)),
		$fault eq 'kill' ? 1 : 0, "$sink: " . ($fault eq 'kill' ? 'the worker dropped the killed helper\'s'
			: 'the stopped helpers dropped their own'));
	for my $t (@t)
	{
		my $q = "SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) || ' ' || count(*) FROM $t";
		is(q_dst($q), q_src($q), "$sink: $t equals the source");
	}
	AshTest::stop_sink($dst, $sink);
	workers(3);
	return;
}

sub workers
{
	my ($n) = @_;
	q_dst("ALTER SYSTEM SET ash_replicant.snapshot_workers = $n");
	q_dst("SELECT pg_reload_conf()");
	return;
}

run_case('sv', 'v1', 'source');
run_case('st', 'v1', 'term');
run_case('sk', 'v1', 'kill');
run_case('si', 'incremental', 'term');

done_testing();
