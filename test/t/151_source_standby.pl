# The pipeline's connection pointed at a hot standby of its source (a
# conninfo edited by mistake, or a failover path switched ahead of the
# promotion).  PostgreSQL 15 decodes on a primary only.  Before, a standby
# without the slot halted source_slot_missing, whose way out is a re-seed,
# and one with a copy of the slot was refused START_REPLICATION (0A000)
# every 2 s for ever, status catching_up with no reason (found by an
# exploratory test).  Now the start halts misconfigured/source_not_logical
# (docs/reasons.md#source_not_logical), doctor's source_wal_level fails the
# same, nothing is applied and no slot created; pointed back at the
# primary, the pipeline resumes exactly.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $sink = 'sb';
my ($src, $dst) = AshTest::start_pair();
my ($sysid, $sdb) = AshTest::source_identity($src);
AshTest::both($src, $dst, 'CREATE TABLE t (id integer PRIMARY KEY, v text)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_t FOR TABLE t');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_t', maps => [ ['t'] ]);
ok(AshTest::wait_caught_up($src, $dst, $sink), 'streaming');
$src->safe_psql($DB, q{INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 10) g});
ok(AshTest::wait_caught_up($src, $dst, $sink), 'caught up');

$src->backup('bk');
my $stby = PostgreSQL::Test::Cluster->new('stby');
$stby->init_from_backup($src, 'bk', has_streaming => 1);
$stby->start;

sub point_at
{
	my ($node) = @_;
	$dst->safe_psql($DB, "SELECT ash_replicant_configure_pipeline(sink_name => '$sink', connection => "
		  . AshTest::lit(AshTest::conninfo($node)) . ", publication => 'pub_t', source_system_identifier => "
		  . AshTest::lit($sysid) . ", source_database => " . AshTest::lit($sdb)
		  . ", census => '{\"interval_ms\": 1000}'::jsonb)");
}

AshTest::stop_settled($src, $dst, $sink);
$src->safe_psql($DB, q{INSERT INTO t VALUES (11, 'while pointed at the standby')});
$src->wait_for_catchup($stby);
my $cp = AshTest::checkpoint_facts($dst, $sink);
point_at($stby);
is(AshTest::preflight_verdict($dst, $sink, 'source_wal_level'), 'fail/source_not_logical', 'preflight: source_not_logical');
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'misconfigured', 'source_not_logical', src => $stby,
	name => 'pointed at a standby: misconfigured/source_not_logical');
like(AshTest::halt_line($dst, 'sb', 'source_not_logical'), qr/a standby in recovery/,
	'the halt says the source is a standby');
is(AshTest::checkpoint_facts($dst, $sink), $cp, 'checkpoint unchanged');
is($dst->safe_psql($DB, 'SELECT count(*) FROM t WHERE id = 11'), '0', 'nothing applied');
AshTest::stop_sink($dst, $sink);

point_at($src);
AshTest::start_sink($dst, $sink);
ok(AshTest::wait_caught_up($src, $dst, $sink), 'pointed back at the primary: caught up');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'back on the primary');
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'healthy');
$stby->stop;
done_testing();
