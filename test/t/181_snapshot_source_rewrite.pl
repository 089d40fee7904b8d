# A source table rewritten while a snapshot has not copied it yet
# (docs/snapshots.md).  PostgreSQL's table rewrites are not MVCC-safe: the
# rows move into a new file under the rewriting transaction's id, which a
# snapshot taken before does not see.  A v1 COPY of such a table read it
# empty and the pipeline went on healthy; an incremental chunk that waited
# behind the rewrite on a source whose default isolation is repeatable read
# read it empty too, and ended the table's copy early.
#
#   v1   one copier; tables b, c pending while a is copied (slowed): b
#        rewritten (ALTER COLUMN v TYPE text USING v || ''), c VACUUM FULLed
#        (keeps its rows' ids): the session that meets b ends
#        (event=snapshot.table_rewritten), the next copies it; every table
#        equal, healthy
#   wait v1, d widened (integer -> bigint) by an ALTER held open while its
#        copy waits for the lock (source_lock_wait), then committed: copied
#        again by the next session, equal
#   inc  incremental, the source database's default isolation repeatable
#        read: a widening held open while a chunk waits, committed: the
#        copy completes with every row, healthy
#   gone v1, a pending table dropped at the source: halts
#        snapshot_state_invalid naming it (before: retried for ever)
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.snapshot_workers = 1\nash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(21));
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

# a destination trigger that slows a copy down: brake.ms per row or statement
AshTest::create_brake($dst, 0);

sub equal
{
	my ($label, $cols, @tables) = @_;
	for my $t (@tables)
	{
		my $q = "SELECT md5(string_agg(concat_ws(':', $cols), ',' ORDER BY id)) || ' ' || count(*) FROM $t";
		is(q_dst($q), q_src($q), "$label: $t equal to the source");
	}
}

sub copying
{
	my ($table) = @_;
	return AshTest::poll($dst, "SELECT count(*) > 0 FROM ash_replicant.stat_snapshot_tables"
		  . " WHERE source_table = '$table' AND state = 'copying'");
}

# v1
q_src(q{
CREATE TABLE a (id bigint PRIMARY KEY, v text);
INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 6000) g;
CREATE TABLE b (id bigint PRIMARY KEY, v text);
INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 3000) g;
CREATE TABLE c (id bigint PRIMARY KEY, v text);
INSERT INTO c SELECT g, 'c' || g FROM generate_series(1, 2000) g;
ANALYZE;
CREATE PUBLICATION pub1 FOR TABLE a, b, c;
});
q_dst('CREATE TABLE a (id bigint PRIMARY KEY, v text); CREATE TABLE b (id bigint PRIMARY KEY, v text);'
	  . ' CREATE TABLE c (id bigint PRIMARY KEY, v text);'
	  . ' CREATE TRIGGER brake_a AFTER INSERT ON a FOR EACH ROW EXECUTE FUNCTION brake_fn();'
	  . ' UPDATE brake SET ms = 1');
AshTest::setup_pipeline($src, $dst, sink => 's1', publication => 'pub1',
	maps => [ ['a'], ['b'], ['c'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(copying('a'), 'v1: a is being copied (the largest first), b and c pending');
q_src("ALTER TABLE b ALTER COLUMN v TYPE text USING v || ''");
q_src('VACUUM FULL c');
q_dst('UPDATE brake SET ms = 0');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 's1'",
		't', timeout => 180), 'v1: the attempt completes');
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'v1: caught up');
AshTest::wait_status($dst, 's1', 'healthy', undef, name => 'v1: healthy');
equal('v1', 'id, v', qw(a b c));
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.table_rewritten sink=s1 table=public\.b\b/)),
	'v1: the session that met b rewritten ended, logged');
ok(!AshTest::log_lines_like($dst, qr/event=snapshot\.table_rewritten sink=s1 table=public\.c\b/),
	'v1: VACUUM FULL (rows keep their ids) is no rewrite to the snapshot');
q_src("UPDATE b SET v = 'after' WHERE id = 7; DELETE FROM b WHERE id = 9");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'v1: streams on');
equal('v1, streamed on', 'id, v', 'b');
AshTest::stop_sink($dst, 's1');

# wait
q_src(q{
CREATE TABLE h (id bigint PRIMARY KEY, v text);
INSERT INTO h SELECT g, 'h' || g FROM generate_series(1, 3000) g;
CREATE TABLE d (id bigint PRIMARY KEY, v text, n integer);
INSERT INTO d SELECT g, 'd' || g, g FROM generate_series(1, 1000) g;
ANALYZE;
CREATE PUBLICATION pub4 FOR TABLE h, d;
});
q_dst('CREATE TABLE h (id bigint PRIMARY KEY, v text); CREATE TABLE d (id bigint PRIMARY KEY, v text, n bigint);'
	  . ' CREATE TRIGGER brake_h AFTER INSERT ON h FOR EACH ROW EXECUTE FUNCTION brake_fn();'
	  . ' UPDATE brake SET ms = 1');
AshTest::setup_pipeline($src, $dst, sink => 's4', publication => 'pub4',
	maps => [ ['h'], ['d'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(copying('h'), 'wait: h is being copied, d pending');
my $alter = $src->background_psql($DB, on_error_stop => 1);
$alter->query_safe('BEGIN');
$alter->query_safe('ALTER TABLE d ALTER COLUMN n TYPE bigint');
q_dst('UPDATE brake SET ms = 0');
ok(AshTest::poll($dst, "SELECT reason = 'source_lock_wait' FROM ash_replicant_status('s4')"),
	'wait: the copy of d waits for the open ALTER (source_lock_wait)');
$alter->query_safe('COMMIT');
$alter->quit;
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 's4'",
		't', timeout => 180), 'wait: the attempt completes');
ok(AshTest::wait_caught_up($src, $dst, 's4'), 'wait: caught up');
AshTest::wait_status($dst, 's4', 'healthy', undef, name => 'wait: healthy');
equal('wait', 'id, v', 'h');
equal('wait', 'id, v, n', 'd');
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.table_rewritten sink=s4 table=public\.d\b/)),
	'wait: d, rewritten while its copy waited, ended the session, logged');
AshTest::stop_sink($dst, 's4');

# inc: a source whose sessions default to repeatable read
q_src("ALTER DATABASE $DB SET default_transaction_isolation = 'repeatable read'");
q_src(q{
CREATE TABLE e (id bigint PRIMARY KEY, v text, n integer);
INSERT INTO e SELECT g, 'e' || g, g FROM generate_series(1, 5000) g;
ANALYZE;
CREATE PUBLICATION pub2 FOR TABLE e;
});
q_dst('CREATE TABLE e (id bigint PRIMARY KEY, v text, n bigint, replica_fingerprint bytea, replica_seen_attempt bytea);'
	  . ' CREATE TRIGGER brake_e AFTER INSERT ON e FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();'
	  . ' UPDATE brake SET ms = 60');
AshTest::setup_pipeline($src, $dst, sink => 's2', publication => 'pub2', marker => 0,
	maps => [ [ 'e', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");
ok(AshTest::poll($dst, "SELECT rows_copied > 1500 FROM ash_replicant.snapshot_tables WHERE slot_name = 's2'"),
	'inc: copying in chunks');
$alter = $src->background_psql($DB, on_error_stop => 1);
$alter->query_safe('BEGIN');
$alter->query_safe('ALTER TABLE e ALTER COLUMN n TYPE bigint');
ok(AshTest::poll($dst, "SELECT reason = 'source_lock_wait' FROM ash_replicant_status('s2')"),
	'inc: a chunk waits for the open ALTER (source_lock_wait)');
$alter->query_safe('COMMIT');
$alter->quit;
q_dst('UPDATE brake SET ms = 0');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 's2'",
		't', timeout => 120), 'inc: the attempt completes');
my ($commit) = AshTest::commit_tracked($src, "UPDATE e SET v = 'touch' WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, 's2', $commit), 'inc: caught up');
AshTest::wait_status($dst, 's2', 'healthy', undef, name => 'inc: healthy');
is(q_dst("SELECT rows_copied FROM ash_replicant.snapshot_tables WHERE slot_name = 's2'"), '5000',
	'inc: every row copied (before: the chunk behind the ALTER read none, the copy ended there)');
equal('inc', 'id, v, n', 'e');
AshTest::stop_sink($dst, 's2');
q_src("ALTER DATABASE $DB RESET default_transaction_isolation");

# gone: a pending table dropped at the source
q_src(q{
CREATE TABLE f (id bigint PRIMARY KEY, v text);
INSERT INTO f SELECT g, 'f' || g FROM generate_series(1, 6000) g;
CREATE TABLE g (id bigint PRIMARY KEY, v text);
INSERT INTO g SELECT g, 'g' || g FROM generate_series(1, 1000) g;
ANALYZE;
CREATE PUBLICATION pub3 FOR TABLE f, g;
});
q_dst('CREATE TABLE f (id bigint PRIMARY KEY, v text); CREATE TABLE g (id bigint PRIMARY KEY, v text);'
	  . ' CREATE TRIGGER brake_f AFTER INSERT ON f FOR EACH ROW EXECUTE FUNCTION brake_fn();'
	  . ' UPDATE brake SET ms = 1');
AshTest::setup_pipeline($src, $dst, sink => 's3', publication => 'pub3',
	maps => [ ['f'], ['g'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(copying('f'), 'gone: f is being copied, g pending');
q_src('DROP TABLE g');
q_dst('UPDATE brake SET ms = 0');
AshTest::wait_status($dst, 's3', 'halted', 'snapshot_state_invalid', src => $src, timeout => 120,
	name => 'gone: halts snapshot_state_invalid (before: source faults for ever)');
like(AshTest::halt_line($dst, 's3', 'snapshot_state_invalid'),
	qr/source table public\.g of the attempt is out of the publication \(or the source\)/,
	'gone: the halt names the table');

done_testing();
