# One source transaction whose rows together carry more than 1 GB: an
# UPDATE of 400 rows to 3 MB text each (each far below PostgreSQL's 1 GB
# field limit, as native logical replication applies it).  Before, the
# worker gathered the run's 400 values of a column into one array parameter
# and every attempt failed 54000 (an array over 1 GB): halted apply_failed,
# for good -- a valid transaction only a skip could pass (found by an
# exploratory test).  A gathered run now also ends at 64 MB of values.
# The mirror equals the source, the worker's peak memory stays far below
# the transaction's size.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $R = 400;
my $reps = int(3 * 1024 * 1024 / 32);
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
AshTest::both($src, $dst, 'CREATE TABLE bt (id int PRIMARY KEY, t text)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub FOR TABLE bt');
AshTest::setup_pipeline($src, $dst, sink => 's', publication => 'pub', maps => [ ['bt'] ]);
$src->safe_psql($DB, "INSERT INTO bt SELECT g, 'small' FROM generate_series(1, $R) g");
ok(AshTest::wait_caught_up($src, $dst, 's'), 'small rows caught up');
my $pid = $dst->safe_psql($DB, "SELECT worker_pid FROM ash_replicant_status('s')");

$src->safe_psql($DB, "UPDATE bt SET t = id::text || repeat(md5(id::text), $reps)");
ok(AshTest::wait_caught_up($src, $dst, 's', name => 'the large transaction applied'), 'caught up');
my $q = "SELECT count(*) || '/' || sum(length(t)) || '/' || md5(string_agg(md5(t), '' ORDER BY id)) FROM bt";
is($dst->safe_psql($DB, $q), $src->safe_psql($DB, $q), 'mirror equals source (count, lengths, content)');
is(AshTest::status_row($dst, 's')->{state}, 'healthy', 'healthy');
is($dst->safe_psql($DB, "SELECT worker_pid FROM ash_replicant_status('s')"), $pid, 'the same worker applied it');
my $hwm = -1;
if (open(my $f, '<', "/proc/$pid/status"))
{
	while (<$f>) { $hwm = $1 if /^VmHWM:\s+(\d+)/ }
}
note "worker peak resident memory: $hwm kB for 1.2 GB of values";
cmp_ok($hwm, '<', 1024 * 1024, "the worker's peak stays below 1 GB");
done_testing();
