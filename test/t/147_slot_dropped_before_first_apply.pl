# A go-forward pipeline (snapshot => 'off') whose slot exists but which has
# applied no transaction yet (watermark 0/0) owes the mirror every commit
# since the slot was created (ash_replicant_wait_for_slot).  Its slot
# dropped at the source, a new one would skip what was committed in
# between: the pipeline halts source_slot_missing
# (docs/reasons.md#source_slot_missing), creates no slot, applies nothing.
# Before, it created a new slot and streamed on healthy, the commit lost
# (found by an exploratory test).
#
#  stopped   dropped while the pipeline is stopped, a row committed, started
#  running   the source restarts while the worker streams; the slot is
#            dropped before the worker is back, a row committed
#  reset     the runbook's way out: reset_checkpoint, start: a new slot,
#            streaming again
# (A pipeline with a snapshot configured and none recorded creates its slot
# afresh and copies under it: the snapshot tests cover it.)
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
my ($sysid, $sdb) = AshTest::source_identity($src);
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub slots
{
	my ($sink) = @_;
	return q_src("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$sink'");
}

sub no_watermark
{
	my ($sink) = @_;
	return q_dst("SELECT coalesce(commit_lsn, '0/0') = '0/0' AND acknowledged_lsn IS NOT NULL FROM ash_replicant.checkpoints"
		  . " WHERE slot_name = '$sink'");
}

AshTest::both($src, $dst, 'CREATE TABLE t (id integer PRIMARY KEY, v text); CREATE TABLE u (id integer PRIMARY KEY, v text)');
q_src('CREATE PUBLICATION pub_t FOR TABLE t; CREATE PUBLICATION pub_u FOR TABLE u');

# stopped
AshTest::setup_pipeline($src, $dst, sink => 'gs', publication => 'pub_t', maps => [ ['t'] ], marker => 0);
AshTest::wait_slot_consistent($src, $dst, 'gs');
AshTest::wait_status($dst, 'gs', 'healthy', undef, src => $src, name => 'stopped: healthy');
is(no_watermark('gs'), 't', 'stopped: no watermark, the slot acknowledged');
AshTest::stop_sink($dst, 'gs');
AshTest::poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'gs' AND active");
q_src("SELECT pg_drop_replication_slot('gs')");
q_src("INSERT INTO t VALUES (1, 'committed while the slot was gone')");
AshTest::start_sink($dst, 'gs');
AshTest::wait_status($dst, 'gs', 'halted', 'source_slot_missing', src => $src,
	name => 'stopped: halted source_slot_missing');
is(slots('gs'), '0', 'stopped: no slot created');
like(AshTest::halt_line($dst, 'gs', 'source_slot_missing'), qr/the checkpoint acknowledged what the slot sent/,
	'stopped: the halt says why');

# reset: the re-seed of a go-forward mirror
AshTest::stop_sink($dst, 'gs');
q_dst("SELECT ash_replicant_reset_checkpoint('gs', " . AshTest::lit($sysid) . ", " . AshTest::lit($sdb) . ")");
AshTest::start_sink($dst, 'gs');
AshTest::wait_slot_consistent($src, $dst, 'gs');
AshTest::wait_status($dst, 'gs', 'healthy', undef, src => $src, name => 'reset: healthy');
q_src("INSERT INTO t VALUES (2, 'after the reset')");
AshTest::poll($dst, "SELECT count(*) FROM t WHERE id = 2", '1');
is(q_dst('SELECT count(*) FROM t'), '1', 'reset: streams from the new slot');
AshTest::stop_sink($dst, 'gs');

# running
AshTest::setup_pipeline($src, $dst, sink => 'gr', publication => 'pub_u', maps => [ ['u'] ], marker => 0);
AshTest::wait_slot_consistent($src, $dst, 'gr');
AshTest::wait_status($dst, 'gr', 'healthy', undef, src => $src, name => 'running: healthy');
is(no_watermark('gr'), 't', 'running: no watermark, the slot acknowledged');
$src->stop('fast');
$src->start;
# the worker may be back already: end its session until the drop wins
ok(AshTest::wait_until(sub {
	my ($rc) = $src->psql($DB, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
		  . " WHERE slot_name = 'gr' AND active; SELECT pg_drop_replication_slot('gr')");
	return $rc == 0;
}), 'running: the slot dropped after the source restarted');
q_src("INSERT INTO u VALUES (1, 'committed while the slot was gone')");
AshTest::wait_status($dst, 'gr', 'halted', 'source_slot_missing', src => $src,
	name => 'running: halted source_slot_missing');
is(slots('gr'), '0', 'running: no slot created');
is(q_dst('SELECT count(*) FROM u'), '0', 'running: nothing applied');

done_testing();
