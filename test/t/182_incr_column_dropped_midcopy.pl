# Incremental snapshot: a mapped source column dropped while its table is
# half copied, before any change of the table is streamed.  The chunk read
# of the session that sees the drop fails (its statement names the column)
# and the next session describes the table afresh, without the column: its
# chunks are judged against the table's record of the columns its target is
# fed (ash_replicant.source_columns, written by the earlier chunks), as a
# streamed description is judged against the one before
# (docs/reasons.md#source_column_missing).
#
#  halt      on_schema_change default (halt_destructive): halts
#            source_column_missing, no chunk committed after the drop (every
#            copied row has its value of the column), the attempt still
#            copying (before: the copy completed healthy, the column holding
#            values for the first rows and NULL for the rest)
#  again     a restart halts again (the record still names the column)
#  ignore    mapped again with on_schema_change => 'ignore' (the documented
#            recovery): the copy completes, mirror = source, healthy
#  stream    the drop followed at once by updates of the table: whichever
#            of the stream (in the session that knew the column, or the
#            next, which leaves the column in the record of a table still
#            copied) and the next chunk sees it first, the same halt
#            before another chunk commits
#  stopped   the drop and an update of a copied key while the pipeline is
#            stopped mid-copy: the next session halts before a chunk
#            commits (before: copied on, healthy), whether its stream
#            applies the update (leaving the column in the record of the
#            table still copied) or its first chunk comes first
#  no values in any log line
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
my $prov = 'replica_fingerprint bytea, replica_seen_attempt bytea';

# each chunk statement waits: the drop lands while the table is half copied
AshTest::create_brake($dst, 60);

q_src("CREATE TABLE tdd (id bigint PRIMARY KEY, v text, w text);"
	. "INSERT INTO tdd SELECT g, 'v' || g, 'w' || g FROM generate_series(1, 5000) g;"
	. "ANALYZE tdd; CREATE PUBLICATION pub_tdd FOR TABLE tdd");
q_dst("CREATE TABLE tdd (id bigint PRIMARY KEY, v text, w text, $prov);"
	. "CREATE TRIGGER brake_tdd AFTER INSERT ON tdd FOR EACH STATEMENT EXECUTE FUNCTION brake_fn()");
AshTest::setup_pipeline($src, $dst, sink => 's_tdd', publication => 'pub_tdd', marker => 0,
	maps => [ [ 'tdd', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");
ok(AshTest::poll($dst, "SELECT rows_copied > 1500 FROM ash_replicant.snapshot_tables WHERE slot_name = 's_tdd'"),
	'halt: the table half copied');

q_src("ALTER TABLE tdd DROP COLUMN w");
q_dst("UPDATE brake SET ms = 0");

# halt
AshTest::wait_status($dst, 's_tdd', 'misconfigured', 'source_column_missing', src => $src,
	name => 'halt: a mapped column dropped mid-copy halts source_column_missing');
like(AshTest::halt_line($dst, 's_tdd', 'source_column_missing'), qr/table=public\.tdd/,
	'halt: the halt names the table');
my $copied = q_dst("SELECT rows_copied FROM ash_replicant.snapshot_tables WHERE slot_name = 's_tdd'");
is(q_dst("SELECT count(*) FILTER (WHERE w IS NULL) || '/' || (count(*) = $copied)::text FROM tdd"), '0/true',
	'halt: every copied row has its value of the dropped column (no chunk committed after the drop)');
is(q_dst("SELECT snapshot_phase FROM ash_replicant.checkpoints WHERE slot_name = 's_tdd'"), 'copying',
	'halt: the attempt is still copying');
my $facts = AshTest::checkpoint_facts($dst, 's_tdd');

# again
AshTest::stop_settled($src, $dst, 's_tdd');
AshTest::start_sink($dst, 's_tdd');
AshTest::wait_status($dst, 's_tdd', 'misconfigured', 'source_column_missing', src => $src,
	no_early_exit => 1, name => 'again: a restart halts again');
AshTest::halt_left_nothing($dst, 's_tdd',
	"SELECT rows_copied FROM ash_replicant.snapshot_tables WHERE slot_name = 's_tdd'", $copied, $facts);

# ignore
AshTest::stop_settled($src, $dst, 's_tdd');
q_dst("SELECT ash_replicant_map_table(sink_name => 's_tdd', target => 'tdd'::regclass,"
	. " snapshot_provenance => true, on_schema_change => 'ignore')");
AshTest::start_sink($dst, 's_tdd');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 's_tdd'",
		't', timeout => 120), 'ignore: the copy completes');
my ($c) = AshTest::commit_tracked($src, "UPDATE tdd SET v = 'touch' WHERE id = 4000");
ok(AshTest::wait_lsn($src, $dst, 's_tdd', $c), 'ignore: caught up');
my $cmp = "SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) || ' ' || count(*) FROM tdd";
is(q_dst($cmp), q_src($cmp), 'ignore: mirror = source');
AshTest::wait_status($dst, 's_tdd', 'healthy', undef, name => 'ignore: healthy');

AshTest::stop_settled($src, $dst, 's_tdd');

# stream: the drop, then at once an update of a copied key and of one not
# copied yet, so that the stream of the session after the failed chunk read
# may describe the table without the column before any chunk does: it
# leaves the column in the record, and the next chunk halts
q_src("CREATE TABLE tds (id bigint PRIMARY KEY, v text, w text);"
	. "INSERT INTO tds SELECT g, 'v' || g, 'w' || g FROM generate_series(1, 5000) g;"
	. "ANALYZE tds; CREATE PUBLICATION pub_tds FOR TABLE tds");
q_dst("CREATE TABLE tds (id bigint PRIMARY KEY, v text, w text, $prov);"
	. "CREATE TRIGGER brake_tds AFTER INSERT ON tds FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();"
	. "UPDATE brake SET ms = 60");
AshTest::setup_pipeline($src, $dst, sink => 's_tds', publication => 'pub_tds', marker => 0,
	maps => [ [ 'tds', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");
ok(AshTest::poll($dst, "SELECT rows_copied > 1500 FROM ash_replicant.snapshot_tables WHERE slot_name = 's_tds'"),
	'stream: the table half copied');
q_src("ALTER TABLE tds DROP COLUMN w");
q_src("UPDATE tds SET v = 'after drop' WHERE id IN (7, 4700)");
q_dst("UPDATE brake SET ms = 0");
AshTest::wait_status($dst, 's_tds', 'misconfigured', 'source_column_missing', src => $src,
	name => 'stream: a streamed change after the drop: halts source_column_missing all the same');
is(q_dst("SELECT snapshot_phase FROM ash_replicant.checkpoints WHERE slot_name = 's_tds'"), 'copying',
	'stream: the attempt is still copying');
is(q_dst("SELECT count(*) FROM tds WHERE w IS NULL AND id <> 7"), '0',
	'stream: no chunk committed after the drop');
AshTest::stop_sink($dst, 's_tds');

# stopped: the drop and an update of a copied key while the pipeline is
# stopped mid-copy; the next session's stream may apply the update (its
# description without the column) before the session's first chunk: it
# leaves the column in the record, and the chunk halts
q_src("CREATE TABLE tsp (id bigint PRIMARY KEY, v text, w text);"
	. "INSERT INTO tsp SELECT g, 'v' || g, 'w' || g FROM generate_series(1, 5000) g;"
	. "ANALYZE tsp; CREATE PUBLICATION pub_tsp FOR TABLE tsp");
q_dst("CREATE TABLE tsp (id bigint PRIMARY KEY, v text, w text, $prov);"
	. "CREATE TRIGGER brake_tsp AFTER INSERT ON tsp FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();"
	. "UPDATE brake SET ms = 60");
AshTest::setup_pipeline($src, $dst, sink => 's_tsp', publication => 'pub_tsp', marker => 0,
	maps => [ [ 'tsp', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");
ok(AshTest::poll($dst, "SELECT rows_copied > 1500 FROM ash_replicant.snapshot_tables WHERE slot_name = 's_tsp'"),
	'stopped: the table half copied');
AshTest::stop_settled($src, $dst, 's_tsp');
$copied = q_dst("SELECT rows_copied FROM ash_replicant.snapshot_tables WHERE slot_name = 's_tsp'");
q_src("ALTER TABLE tsp DROP COLUMN w");
q_src("UPDATE tsp SET v = 'after drop' WHERE id = 7");
q_dst("UPDATE brake SET ms = 0");
AshTest::start_sink($dst, 's_tsp');
AshTest::wait_status($dst, 's_tsp', 'misconfigured', 'source_column_missing', src => $src,
	name => 'stopped: the next session halts source_column_missing');
is(q_dst("SELECT rows_copied FROM ash_replicant.snapshot_tables WHERE slot_name = 's_tsp'"), $copied,
	'stopped: no chunk committed after the drop');
is(q_dst("SELECT count(*) FROM tsp WHERE w IS NULL"), '0', 'stopped: every copied row has its value of the column');
note 'stopped: the update was ' . (q_dst("SELECT v FROM tsp WHERE id = 7") eq 'after drop' ? '' : 'not ')
  . 'streamed before the halt';
AshTest::stop_sink($dst, 's_tsp');

is(scalar(AshTest::log_lines_like($dst, qr/\b[vw][0-9]{2,}\b/)), 0, 'no value in any log line');
done_testing();
