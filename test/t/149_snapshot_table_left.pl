# A table of an incremental snapshot attempt, still to be copied, is out of
# the publication (or gone from the source) when a session starts: its copy
# cannot go on, and before, every session ended at once as a source fault
# (source_sqlstate=none), retried every 2 s for ever, status
# catching_up/source_stream_failing, nothing applied for any table (found by
# an exploratory test).  Now the pipeline halts snapshot_state_invalid
# naming the table (docs/reasons.md#snapshot_state_invalid); added back to
# the publication, a restart finishes the attempt and the mirror is exact.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 1\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
for my $t (qw(a b))
{
	q_src("CREATE TABLE $t (id bigint PRIMARY KEY, v text)");
	q_dst("CREATE TABLE $t (id bigint PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea)");
	q_src("INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 200) g");
}
q_src("CREATE PUBLICATION pub FOR TABLE a, b");
# a is copied first (larger estimate); b's third chunk waits at a gate
q_src("INSERT INTO a SELECT g, 'v' || g FROM generate_series(201, 400) g; ANALYZE");
my $gate = AshTest::close_gate($dst, 'b', 55, 8001);
AshTest::setup_pipeline($src, $dst, sink => 's', publication => 'pub', marker => 0,
	maps => [ map { [ $_, snapshot_provenance => 'true' ] } qw(a b) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 10");
ok(AshTest::gate_waiting($dst, 8001), 'b: a chunk waits at the gate');
AshTest::stop_sink($dst, 's');
AshTest::open_gate($gate, 8001);
is(q_dst("SELECT state FROM ash_replicant.snapshot_tables WHERE source_table = 'b'"), 'pending',
	'b still to be copied after the stop');
q_src("ALTER PUBLICATION pub DROP TABLE b");
q_src("UPDATE a SET v = 'while b was out' WHERE id = 7");
AshTest::start_sink($dst, 's');
AshTest::wait_status($dst, 's', 'halted', 'snapshot_state_invalid', src => $src,
	name => 'out of the publication: halted snapshot_state_invalid');
like(AshTest::halt_line($dst, 's', 'snapshot_state_invalid'), qr/source table public\.b of the attempt is out of the publication/,
	'the halt names the table');
is(scalar(AshTest::log_lines_like($dst, qr/event=source\.fault sink=s step=snapshot source_sqlstate=none/)), 0,
	'no source fault retried');

AshTest::stop_sink($dst, 's');
q_src("ALTER PUBLICATION pub ADD TABLE b");
q_src("UPDATE b SET v = 'back' WHERE id = 150; DELETE FROM b WHERE id = 160");
AshTest::start_sink($dst, 's');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 's'", 't'),
	'back in the publication: the attempt completes');
my ($c) = AshTest::commit_tracked($src, "UPDATE a SET v = 'end' WHERE id = 8");
ok(AshTest::wait_lsn($src, $dst, 's', $c), 'caught up');
for my $t (qw(a b))
{
	my $q = "SELECT md5(string_agg(id || ':' || coalesce(v, ''), ',' ORDER BY id)) FROM $t";
	is(q_dst($q), q_src($q), "back: $t equal");
}
is(AshTest::status_row($dst, 's')->{state}, 'healthy', 'healthy');
done_testing();
