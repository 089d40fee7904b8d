# A destination started in binary-upgrade mode (postgres -b, as pg_upgrade
# starts the old and the new cluster): no launcher and no pipeline worker
# runs, nothing is applied or acknowledged (before: the launcher started
# every enabled pipeline there, which applied and acknowledged with
# transaction ids pg_upgrade had already read, and its database connection
# kept pg_upgrade from recreating the database).  Started normally again,
# the pipeline streams what the source wrote meanwhile.
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

AshTest::both($src, $dst, "CREATE TABLE t (id int PRIMARY KEY, v text)");
q_src("CREATE PUBLICATION pub_b FOR TABLE t");
AshTest::setup_pipeline($src, $dst, sink => 'b', publication => 'pub_b', maps => [ ['t'] ]);
AshTest::wait_slot_consistent($src, $dst, 'b');
q_src("INSERT INTO t VALUES (1, 'one')");
AshTest::wait_caught_up($src, $dst, 'b', name => 'streamed');

$dst->stop;
my $slot_before = q_src("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'b'");
q_src("INSERT INTO t VALUES (2, 'while in binary-upgrade mode')");

# pg_upgrade's way: postgres -b (binary upgrade), as the cluster's owner
my $log_offset = -s $dst->logfile;
command_ok([ 'pg_ctl', '-D', $dst->data_dir, '-l', $dst->logfile, '-w', '-o', '-b', 'start' ],
	'the destination starts in binary-upgrade mode');
# a launcher would start within its first round; give it three seconds
AshTest::wait_until(sub { 0 }, timeout => 3);
is(q_dst("SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'ash_replicant%'"), '0',
	'no launcher or pipeline backend runs');
is(q_dst("SELECT count(*) FROM t"), '1', 'nothing applied');
is(q_src("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'b'"), $slot_before,
	'nothing acknowledged');
unlike(slurp_file($dst->logfile, $log_offset), qr/ash_replicant (launcher started|event=pipeline\.started)/,
	'the log says no launcher or pipeline started');
command_ok([ 'pg_ctl', '-D', $dst->data_dir, '-w', '-m', 'fast', 'stop' ], 'stopped');

$dst->start;
AshTest::wait_caught_up($src, $dst, 'b', name => 'started normally: streams again');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'mirror equals source');

done_testing();
