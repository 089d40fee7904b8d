# An incremental snapshot's helper judges its own chunk's snapshot against
# what the stream delivered (docs/snapshots.md, "Tables in parallel"): the
# pipeline worker hands it the noted transactions when it asks for the
# chunk.  Here the helper's read-ahead misses a delivered transaction:
#
#   - the worker copies t1 and its helper t2, 10 rows a chunk (the worker's
#     first chunk is held at a gate until the helper is there); t2's chunk 1
#     (keys 1..10) is held at a destination gate once the helper has read
#     ahead chunk 2 (keys 11..20) on the source, and the worker's chunk of
#     t1's key 15 at another;
#   - the source then updates t2's key 15 and deletes its key 17; the
#     walsender has sent both before the gates open; the worker's gate
#     opens first: it finds them on the stream and, before it applies them,
#     revokes the helper's grant and waits for its chunk; then the helper's
#     gate opens: it commits chunk 1 and stops; the stream delivers the
#     update and the delete and notes them (above t2's cursor, they are
#     left to the chunk), and the helper is asked for chunk 2 before the
#     worker's own check forgets them;
#   - the helper's read-ahead of chunk 2 does not show them: it reads the
#     chunk again (rereads=1 on t2's table_copied line) and the mirror holds
#     the update and not the deleted row.  A helper writing its read-ahead
#     would keep key 15's old value and bring key 17 back.
#
# Then more transactions are left to the chunks at once than a helper is
# handed (1,024), in the same way: the helper is not asked, the worker's own
# chunk shows them, and the helper's next chunk is read afresh (a read-ahead
# is used only while nothing noted since was forgotten).  A helper asked
# anyway would write its stale read-ahead.
#
# Then the helper copies a table whose keys are longer than its report to
# the worker holds (512 bytes of key text): the worker reads where each of
# the helper's chunks ended from the table's catalog row, and the helper
# ends its request after each such chunk.
#
# Last, a helper that halts (its chunk meets a row of another tenant) halts
# the pipeline with the helper's reason and context.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $sink = 'hc';
my $DB   = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 2\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(29));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

# the tables (and views without the provenance columns) on either side
my $prov = ', replica_fingerprint bytea, replica_seen_attempt bytea';
sub tables
{
	my ($extra, @names) = @_;
	return join('', map { "CREATE TABLE $_ (id bigint PRIMARY KEY, val text NOT NULL,"
		  . " n bigint NOT NULL DEFAULT 0$extra); CREATE VIEW ${_}_v AS SELECT id, val, n FROM $_;\n" } @names);
}
# two tables of na and nb rows on the source, published by $publish; empty
# on the destination
sub load_pair
{
	my ($a, $na, $b, $nb, $publish) = @_;
	q_src(tables('', $a, $b)
		  . "INSERT INTO $a SELECT g, '$a' || g, 0 FROM generate_series(1, $na) g;"
		  . " INSERT INTO $b SELECT g, '$b' || g, 0 FROM generate_series(1, $nb) g;"
		  . " ANALYZE $a, $b; $publish");
	q_dst(tables($prov, $a, $b));
	return;
}
load_pair('t1', 600, 't2', 100, 'CREATE PUBLICATION pub_hc FOR TABLE t1, t2');

# gates the test closes to hold t1's chunk 1 (the worker's) and t2's chunk 1
# (key 5) before their commits, and the worker's chunk of t1's key 15 (its
# next: held before its copy loop could end a slice and wait for the helper
# held at its own gate)
my $wgate = AshTest::close_gate($dst, 't1', 5, 4342);
my $gate = AshTest::close_gate($dst, 't2', 5, 4343);
my $wmid = AshTest::close_gate($dst, 't1', 15, 4344);

# The worker's first chunk waits until its helper is there, idle: the
# worker's next step asks it for its table's chunk 1.  (Connected to the
# source first: its wait for the connection looks idle too, and a worker
# that finds no helper ready copies the helper's table itself.)
sub helper_round
{
	my ($wg, $wlock) = @_;
	ok(AshTest::gate_waiting($dst, $wlock), "the worker's chunk waits at its gate");
	ok(AshTest::poll($src,
		"SELECT count(*) >= 2 FROM pg_stat_activity WHERE application_name = 'ash_replicant snapshot'"
		  . " AND state = 'idle'"), "the worker's and its helper's chunk connections are open");
	ok(AshTest::poll($dst,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'"
		  . " AND wait_event = 'Extension'"), 'its helper is idle');
	AshTest::open_gate($wg, $wlock);
	return;
}

# The worker's chunk at its gate (lock) goes on once the stream holds what
# the source sent: the worker waits for its helper's chunk (held at its own
# gate) before it applies it, the helper's grant revoked.  Its other waits
# on the way there carry the same wait event, and one was seen by the poll
# once (CI): the helper's gate then opened before the revocation, and the
# helper wrote its read-ahead before the worker took the transactions (no
# reread, still exact).  The wait for the helper lasts until its gate
# opens; the others end within milliseconds once the stream holds data: the
# state is asked again after a second.
sub worker_joins
{
	my ($wg, $wlock) = @_;
	my $waits = "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'"
	  . " AND wait_event = 'Extension'";
	AshTest::open_gate($wg, $wlock);
	ok(AshTest::poll($dst, $waits), "the worker waits");
	sleep 1;
	ok(AshTest::poll($dst, $waits), "the worker waits for its helper's chunk");
	return;
}

# The sink stopped, its worker gone.
sub stop_pipeline
{
	my ($name) = @_;
	AshTest::stop_sink($dst, $sink);
	ok(AshTest::poll($dst,
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type LIKE 'ash_replicant pipeline%'"),
		$name);
	return;
}

# The helper's chunk 1 of table waits at its gate; it read chunk 2 ahead.
sub helper_held
{
	my ($table, $lock) = @_;
	ok(AshTest::gate_waiting($dst, $lock), "${table}'s chunk 1 waits at the gate, uncommitted");
	is(AshTest::gate_holders($dst, $lock), 'ash_replicant snapshot', 'the writer held at the gate is the helper');
	ok(AshTest::poll($src,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'ash_replicant snapshot'"
		  . " AND state = 'idle' AND query LIKE 'SELECT pg_catalog.txid_current_snapshot()%UNION ALL%$table%WHERE%'"),
		"the helper's read of ${table}'s chunk 2 has run on the source");
	return;
}

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_hc', marker => 0,
	maps => [ [ 't1', snapshot_provenance => 'true' ], [ 't2', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 10, max_pending_chunks => 4");
helper_round($wgate, 4342);

helper_held('t2', 4343);
is(q_dst("SELECT count(*) FROM t2"), '0', "nothing of t2's chunk 1 is visible yet");
ok(AshTest::gate_waiting($dst, 4344), "the worker's chunk of t1's key 15 waits at its gate");

AshTest::change_read_ahead($src, $dst, $sink, 't2', $gate, 4343, "t2's ", "the helper's",
	sub { worker_joins($wmid, 4344); });
AshTest::assert_mirror_equal($src, $dst, [ 't1_v', 't2_v' ], order_by => 'id',
	name => "after the helper's read-ahead read again");

my @copied = AshTest::log_lines_like($dst, qr/event=snapshot\.table_copied sink=\Q$sink\E table=public\.t2 /);
is(scalar(@copied), 1, "one table_copied line for t2");
like($copied[0] // '', qr/ copier=1 rows=99 chunks=10 rereads=1$/,
	"the helper read t2's chunk 2 again once: its read-ahead missed a delivered transaction")
  or diag(join("\n", AshTest::log_lines_like($dst, qr/event=snapshot\.table_copied sink=\Q$sink\E /)));

# More transactions left to the chunks than a helper is handed (1,024):
# t3 and t4 mapped later, copied in chunks by the worker and the helper;
# 1,100 source transactions on t4's second chunk delivered after the
# helper's chunk 1 (held at a gate) read ahead.
stop_pipeline('the pipeline stopped');
load_pair('t3', 600, 't4', 200, 'ALTER PUBLICATION pub_hc ADD TABLE t3, t4');
my $wgate2 = AshTest::close_gate($dst, 't3', 5, 4444);
my $gate2 = AshTest::close_gate($dst, 't4', 5, 4445);
my $wmid2 = AshTest::close_gate($dst, 't3', 15, 4446);
q_dst("SELECT ash_replicant_map_table(sink_name => '$sink', target => '$_'::regclass,"
	  . " snapshot_provenance => true)") for ('t3', 't4');
AshTest::start_sink($dst, $sink);
helper_round($wgate2, 4444);
helper_held('t4', 4445);
q_src(join('', map { "UPDATE t4 SET n = n + 1 WHERE id = " . (11 + $_ % 10) . ";\n" } 1 .. 1100));
my $lsn = q_src("SELECT pg_current_wal_lsn()");
ok(AshTest::wait_sent($src, $lsn), 'the walsender has sent the 1,100 transactions');
ok(AshTest::gate_waiting($dst, 4446), "the worker's chunk of t3's key 15 waits at its gate");
worker_joins($wmid2, 4446);
AshTest::open_gate($gate2, 4445);
ok(AshTest::poll($dst, "SELECT count(*) = 4 FROM ash_replicant.snapshot_tables WHERE state = 'copied'"),
	'the tables mapped later are copied');
my ($commit) = AshTest::commit_tracked($src, "UPDATE t3 SET n = n + 1 WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, $sink, $commit), 'watermark reaches the last source commit');
is(q_dst("SELECT sum(n) FROM t4 WHERE id BETWEEN 11 AND 20"), '1100',
	"every one of the 1,100 transactions is in t4's mirror once");
AshTest::assert_mirror_equal($src, $dst, [ 't1_v', 't2_v', 't3_v', 't4_v' ], order_by => 'id',
	name => 'after more transactions than a helper is handed');
is(q_dst("SELECT state FROM ash_replicant_status('$sink')"), 'healthy', 'the pipeline is healthy');

# Keys of 608 bytes: t8 (the helper's, 20 rows), t7 the worker's (1,200).
stop_pipeline('the pipeline stopped before the long keys');
q_src(tables('', 't7') . "INSERT INTO t7 SELECT g, 't7' || g, 0 FROM generate_series(1, 1200) g;"
	  . " CREATE TABLE t8 (k text COLLATE \"C\" PRIMARY KEY, val text NOT NULL, n bigint NOT NULL DEFAULT 0);"
	  . " CREATE VIEW t8_v AS SELECT k, val, n FROM t8;"
	  . " INSERT INTO t8 SELECT repeat(md5(g::text), 19), 't8' || g, 0 FROM generate_series(1, 20) g;"
	  . " ANALYZE t7, t8; ALTER PUBLICATION pub_hc ADD TABLE t7, t8");
q_dst(tables($prov, 't7')
	  . "CREATE TABLE t8 (k text COLLATE \"C\" PRIMARY KEY, val text NOT NULL, n bigint NOT NULL DEFAULT 0$prov);"
	  . " CREATE VIEW t8_v AS SELECT k, val, n FROM t8;");
q_dst("SELECT ash_replicant_map_table(sink_name => '$sink', target => '$_'::regclass,"
	  . " snapshot_provenance => true)") for ('t7', 't8');
my $wgate4 = AshTest::close_gate($dst, 't7', 5, 4747);
AshTest::start_sink($dst, $sink);
helper_round($wgate4, 4747);
ok(AshTest::poll($dst, "SELECT count(*) = 6 FROM ash_replicant.snapshot_tables WHERE state = 'copied'"),
	'the tables with long keys are copied');
my ($lcommit) = AshTest::commit_tracked($src,
	"UPDATE t8 SET n = n + 1 WHERE k = repeat(md5('7'), 19); UPDATE t7 SET n = n + 1 WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, $sink, $lcommit), 'watermark reaches the last source commit');
@copied = AshTest::log_lines_like($dst, qr/event=snapshot\.table_copied sink=\Q$sink\E table=public\.t8 /);
like($copied[-1] // '', qr/ copier=1 rows=20 chunks=3 rereads=0$/,
	"t8's chunks written by the helper, each ended where the catalog says");
AshTest::assert_mirror_equal($src, $dst, ['t7_v'], order_by => 'id', name => 'beside keys too long');
AshTest::assert_mirror_equal($src, $dst, ['t8_v'], order_by => 'k COLLATE "C"',
	name => 'keys too long for shared memory');

# A helper's halt is the pipeline's, under its own reason: t5 (the worker's)
# and t6 (the helper's, attribute tenancy) mapped later, t6's target keeping
# key 3 out with a BEFORE ROW trigger.  The helper's chunk 1 halts
# destination_write_suppressed; the worker raises it as its own.  (Before,
# key 3 under another tenant than the source's halted tenant_conflict; a
# provenance copy now replaces such a stale row: test 140.)  (The reason was read
# from the helper's shared state after the worker had cleared it: the
# pipeline halted tombstone_unknown.)  A gate in t5's last chunk holds the
# worker, should it get there, until the helper has failed: a worker done
# with its own table takes the helper's (its request revoked), and t5's 30
# chunks once took it less time than the helper's first chunk.
stop_pipeline('the pipeline stopped again');
q_src(tables('', 't5') . "INSERT INTO t5 SELECT g, 't5' || g, 0 FROM generate_series(1, 300) g;"
	  . " CREATE TABLE t6 (id bigint PRIMARY KEY, val text NOT NULL, tenant text NOT NULL);"
	  . " ALTER TABLE t6 REPLICA IDENTITY FULL;"
	  . " INSERT INTO t6 SELECT g, 't6' || g, 'a' FROM generate_series(1, 100) g;"
	  . " ANALYZE t5, t6; ALTER PUBLICATION pub_hc ADD TABLE t5, t6");
q_dst(tables($prov, 't5')
	  . "CREATE TABLE t6 (id bigint PRIMARY KEY, val text NOT NULL, tenant text NOT NULL$prov);"
	  . " CREATE FUNCTION keep_out_3() RETURNS trigger LANGUAGE plpgsql AS"
	  . " \$\$ BEGIN IF NEW.id = 3 THEN RETURN NULL; END IF; RETURN NEW; END \$\$;"
	  . " CREATE TRIGGER keep_out_3 BEFORE INSERT OR UPDATE ON t6 FOR EACH ROW EXECUTE FUNCTION keep_out_3()");
my $wgate3 = AshTest::close_gate($dst, 't5', 5, 4546);
my $wgate3_last = AshTest::close_gate($dst, 't5', 300, 4547);
q_dst("SELECT ash_replicant_map_table(sink_name => '$sink', target => 't5'::regclass,"
	  . " snapshot_provenance => true)");
q_dst("SELECT ash_replicant_map_table(sink_name => '$sink', target => 't6'::regclass,"
	  . " snapshot_provenance => true, tenant_column => 'tenant', tenant_strategy => 'attribute')");
AshTest::start_sink($dst, $sink);
helper_round($wgate3, 4546);
ok(AshTest::wait_until(sub {
	scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.copier_failed sink=\Q$sink\E copier=1 /)) >= 1 }),
	'the helper failed meanwhile');
AshTest::open_gate($wgate3_last, 4547);
AshTest::wait_status($dst, $sink, 'halted', 'destination_write_suppressed',
	name => "the helper's halt is the pipeline's, with its reason");
is(AshTest::checkpoint_row($dst, $sink)->{terminal_cause}, 'destination_write_suppressed',
	'the tombstone records the reason');
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.copier_failed sink=\Q$sink\E copier=1 /)) >= 1,
	'it was the helper that failed');
ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=\Q$sink\E reason=destination_write_suppressed class=halted context="[^"]*\(an insert or update of a row of public\.t6/)) >= 1,
	'the halt line names the reason once, with the helper\'s context');
is(q_dst("SELECT count(*) FROM t6"), '0', "nothing of t6's chunk is written");

done_testing();
