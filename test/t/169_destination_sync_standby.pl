# A destination with a synchronous standby (synchronous_standby_names): the
# worker tells the source only what the standby has flushed too, so a
# standby promoted after a failover holds every transaction the source may
# have forgotten (docs/operations.md, Moving a destination).  Before: the
# worker acknowledged once its commits were flushed locally; a promoted
# standby that lacked them halted checkpoint_behind_slot (a re-seed).
#
#  held      the standby stopped: rows are still applied and visible on the
#            destination, the slot's confirmed position stays where the
#            standby left off
#  released  the standby back: the slot reaches the end
#  failover  the standby cut off again, rows applied on the primary only,
#            the primary killed, the standby promoted: the pipeline there
#            streams the rows the old primary applied (the source kept them),
#            mirror = source
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(
	dst_conf => "wal_level = replica\nmax_wal_senders = 5\nwal_keep_size = '256MB'\n");
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, "CREATE TABLE t (id int PRIMARY KEY, v text)");
q_src("CREATE PUBLICATION pub_sy FOR TABLE t");
$dst->backup('bk');
my $stby = PostgreSQL::Test::Cluster->new('dstby');
$stby->init_from_backup($dst, 'bk', has_streaming => 1);
$stby->start;
q_dst("ALTER SYSTEM SET synchronous_standby_names = 'dstby'; SELECT pg_reload_conf()");
$dst->poll_query_until($DB, "SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'dstby'")
  or die 'the standby never became synchronous';

AshTest::setup_pipeline($src, $dst, sink => 'sy', publication => 'pub_sy', maps => [ ['t'] ]);
AshTest::wait_slot_consistent($src, $dst, 'sy');
q_src("INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 10) g");
AshTest::wait_caught_up($src, $dst, 'sy', name => 'streamed with the standby in sync');

# held
$stby->stop;
my ($commit, $end) = AshTest::commit_tracked($src, "INSERT INTO t SELECT g, 'r' || g FROM generate_series(11, 20) g");
AshTest::poll($dst, "SELECT count(*) FROM t", '20');
AshTest::wait_until(sub { 0 }, timeout => 3);
is(q_src("SELECT confirmed_flush_lsn < '$commit'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'sy'"), 't',
	'held: the slot does not pass what the standby has');
is(AshTest::status_row($dst, 'sy')->{state}, 'healthy', 'held: the pipeline is healthy meanwhile');

# released
$stby->start;
AshTest::wait_caught_up($src, $dst, 'sy', name => 'released: the slot reaches the end once the standby is back');

# failover
$stby->stop;
q_src("INSERT INTO t SELECT g, 'r' || g FROM generate_series(21, 30) g");
AshTest::poll($dst, "SELECT count(*) FROM t", '30');
$dst->stop('immediate');
$stby->append_conf('postgresql.auto.conf', "synchronous_standby_names = ''\n");
$stby->start;
$stby->promote;
$stby->poll_query_until($DB, "SELECT NOT pg_is_in_recovery()") or die 'not promoted';
AshTest::wait_caught_up($src, $stby, 'sy', name => 'failover: the promoted standby streams on');
AshTest::assert_mirror_equal($src, $stby, ['t'], name => 'failover: mirror equals source');
is(AshTest::status_row($stby, 'sy')->{state}, 'healthy', 'failover: healthy, no checkpoint_behind_slot');

done_testing();
