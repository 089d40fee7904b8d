# Limits a pipeline waits for, with a status reason instead of a silent wait
# (docs/operations.md#many-pipelines): max_replication_slots = 1 on both the
# destination (replication origins) and the source (slots), two pipelines.
#   - the second finds no replication state slot for its origin: catching_up /
#     destination_origin_limit, logged, nothing applied, the source untouched;
#   - the first sink dropped (its origin with it), the second gets its origin
#     but the source's only slot is still the first's: catching_up /
#     source_slot_limit;
#   - that slot dropped, it streams on its own.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(dst_conf => "max_replication_slots = 1\n",
	src_conf => "max_replication_slots = 1\n");

sub origin_count
{
	my ($name) = @_;
	return $dst->safe_psql($DB, "SELECT count(*) FROM pg_replication_origin WHERE roname = '$name'");
}

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
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.origin_unavailable sink=two sqlstate=53400/)),
	'the worker logs the limit it hit');
$src->safe_psql($DB, "INSERT INTO t_two SELECT g, 'v' FROM generate_series(1, 10) g");
is($dst->safe_psql($DB, 'SELECT count(*) FROM t_two'), '0', 'nothing is applied without the origin');
is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'two'"), '0',
	'nor is the source touched: no slot created');

AshTest::stop_sink($dst, 'one');
AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'ash_replicant one'");
$dst->safe_psql($DB, "SELECT ash_replicant_drop_sink('one')");
is(origin_count('ash_replicant_one'), '0', 'the first sink\'s origin is gone');
AshTest::wait_status($dst, 'two', 'catching_up', 'source_slot_limit',
	name => 'with its origin, the second finds every source slot taken, and status says so');
ok(scalar(AshTest::log_lines_like($dst, qr/event=source\.fault sink=two step=slot source_sqlstate=53400/)),
	'the source\'s refusal is logged');
is(origin_count('ash_replicant_two'), '1', 'the second holds its origin now');

$src->safe_psql($DB, "SELECT pg_drop_replication_slot('one')");
ok(AshTest::poll($dst,
		"SELECT reason IS DISTINCT FROM 'source_slot_limit' FROM ash_replicant_status('two')"),
	'the source slot freed, the reason is gone');
AshTest::wait_slot_consistent($src, $dst, 'two');
$src->safe_psql($DB, "INSERT INTO t_two SELECT g, 'w' FROM generate_series(11, 20) g");
AshTest::wait_caught_up($src, $dst, 'two', name => 'the second pipeline streams');
is($dst->safe_psql($DB, 'SELECT count(*) FROM t_two'), '10',
	'go-forward: what committed after its slot existed');

done_testing();
