# A destination without a free replication state slot for a pipeline's origin
# (docs/operations.md#many-pipelines): max_replication_slots = 1 on the
# destination, two pipelines.  The second waits -- catching_up with reason
# destination_origin_limit, logged, nothing applied -- instead of waiting
# silently, and streams on its own once the first sink (and its origin) is
# dropped.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(dst_conf => "max_replication_slots = 1\n");

for my $s (qw(one two))
{
	AshTest::both($src, $dst, "CREATE TABLE t_$s (id bigint PRIMARY KEY, v text NOT NULL)");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$s FOR TABLE t_$s");
}
AshTest::setup_pipeline($src, $dst, sink => 'one', publication => 'pub_one', maps => [ ['t_one'] ]);
AshTest::wait_caught_up($src, $dst, 'one', name => 'the first pipeline holds the only origin slot');

AshTest::setup_pipeline($src, $dst, sink => 'two', publication => 'pub_two', maps => [ ['t_two'] ]);
AshTest::wait_status($dst, 'two', 'catching_up', 'destination_origin_limit',
	name => 'the second waits for an origin slot, and status says so');
ok(AshTest::log_lines_like($dst, qr/event=pipeline\.origin_unavailable sink=two sqlstate=53400/),
	'the worker logs the limit it hit');
$src->safe_psql($DB, "INSERT INTO t_two SELECT g, 'v' FROM generate_series(1, 10) g");
is($dst->safe_psql($DB, 'SELECT count(*) FROM t_two'), '0', 'nothing is applied without the origin');
is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'two'"), '0',
	'nor is the source touched: no slot created');

AshTest::stop_sink($dst, 'one');
AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'ash_replicant one'");
$dst->safe_psql($DB, "SELECT ash_replicant_drop_sink('one')");
ok(AshTest::poll($dst,
		"SELECT reason IS DISTINCT FROM 'destination_origin_limit' FROM ash_replicant_status('two')"),
	'the origin slot freed, the reason is gone');
is(AshTest::status_row($dst, 'two')->{reason}, undef, 'no reason left');
AshTest::wait_slot_consistent($src, $dst, 'two');
$src->safe_psql($DB, "INSERT INTO t_two SELECT g, 'w' FROM generate_series(11, 20) g");
AshTest::wait_caught_up($src, $dst, 'two', name => 'the second pipeline streams');
is($dst->safe_psql($DB, 'SELECT count(*) FROM t_two'), '10',
	'go-forward: what committed after its slot existed');

done_testing();
