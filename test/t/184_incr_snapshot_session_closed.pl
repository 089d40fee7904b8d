# An incremental pipeline keeps its chunk reads' source session ("ash_replicant
# snapshot") only while it has tables to copy.
#
#  copying    while the tables are copied: the session is there
#  complete   once the attempt is complete: none left at the source, the
#             stream goes on (before: one idle session for as long as the
#             worker ran)
#  restart    a restart over the completed attempt: none once it streams
#             (before: one idle session for every session of the worker)
#  later      a table mapped later is copied at the next start, then the
#             session goes again; every table equals its source
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 2\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
my $prov = 'replica_fingerprint bytea, replica_seen_attempt bytea';
my $sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ash_replicant snapshot'";

AshTest::create_brake($dst, 60);
for my $t (qw(ta tb tc))
{
	q_src("CREATE TABLE $t (id bigint PRIMARY KEY, v text);"
		. "INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 3000) g");
	q_dst("CREATE TABLE $t (id bigint PRIMARY KEY, v text, $prov);"
		. "CREATE TRIGGER brake_$t AFTER INSERT ON $t FOR EACH STATEMENT EXECUTE FUNCTION brake_fn()");
}
q_src("ANALYZE; CREATE PUBLICATION pub_s FOR TABLE ta, tb");
AshTest::setup_pipeline($src, $dst, sink => 's', publication => 'pub_s', marker => 0,
	maps => [ map { [ $_, snapshot_provenance => 'true' ] } qw(ta tb) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");

# copying
ok(AshTest::poll($dst, "SELECT sum(rows_copied) > 500 FROM ash_replicant.snapshot_tables WHERE slot_name = 's'"),
	'copying: under way');
ok(q_src($sessions) >= 1, 'copying: the chunk reads have their session');

# complete
q_dst("UPDATE brake SET ms = 0");
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 's'",
		't', timeout => 120), 'complete: the attempt is complete');
my ($c) = AshTest::commit_tracked($src, "UPDATE ta SET v = 'one' WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, 's', $c), 'complete: the stream goes on');
ok(AshTest::poll($src, "SELECT ($sessions) = 0", "t", timeout => 20), 'complete: no snapshot session left at the source');

# restart
AshTest::stop_settled($src, $dst, 's');
AshTest::start_sink($dst, 's');
($c) = AshTest::commit_tracked($src, "UPDATE ta SET v = 'two' WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, 's', $c), 'restart: streaming');
ok(AshTest::poll($src, "SELECT ($sessions) = 0", "t", timeout => 20), 'restart: no snapshot session left at the source');

# later
AshTest::stop_settled($src, $dst, 's');
q_src("ALTER PUBLICATION pub_s ADD TABLE tc");
q_dst("SELECT ash_replicant_map_table(sink_name => 's', target => 'tc'::regclass, snapshot_provenance => true)");
AshTest::start_sink($dst, 's');
ok(AshTest::poll($dst, "SELECT state = 'copied' FROM ash_replicant.snapshot_tables WHERE slot_name = 's' AND source_table = 'tc'",
		't', timeout => 120), 'later: the table mapped later is copied');
($c) = AshTest::commit_tracked($src, "UPDATE tc SET v = 'three' WHERE id = 2");
ok(AshTest::wait_lsn($src, $dst, 's', $c), 'later: streaming');
ok(AshTest::poll($src, "SELECT ($sessions) = 0", "t", timeout => 20), 'later: no snapshot session left at the source');
for my $t (qw(ta tb tc))
{
	my $q = "SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) || ' ' || count(*) FROM $t";
	is(q_dst($q), q_src($q), "$t equals the source");
}
AshTest::wait_status($dst, 's', 'healthy');
AshTest::stop_sink($dst, 's');
done_testing();
