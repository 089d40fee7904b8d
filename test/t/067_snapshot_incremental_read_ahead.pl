# snapshot => 'incremental' reads the next chunk ahead, while the current
# one is written (docs/snapshots.md#incremental).  A chunk read ahead is
# used only if its snapshot still shows every transaction the stream
# delivered before its commit.  Here the stream delivers, between the
# read-ahead and the commit, an update of a key in the range read ahead:
#
#   - chunk 1 (keys 1..10) is held at a destination gate (a trigger waiting
#     for an advisory lock the test holds) once the read of chunk 2 (keys
#     11..20) has run on the source;
#   - the source then updates key 15 and deletes key 17; the walsender has
#     sent both before the gate opens, so the stream delivers them right
#     after chunk 1 commits, before chunk 2 is written;
#   - the read-ahead's snapshot does not show them: chunk 2 is read again
#     (event=snapshot.table_copied ... rereads=1) and the mirror holds
#     the update and not the deleted row.  Writing the chunk read ahead
#     would keep key 15's old value and bring key 17 back.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $sink = 'ra';
my $DB   = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(23));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_src(q{
CREATE TABLE t (id bigint PRIMARY KEY, val text NOT NULL, n bigint NOT NULL DEFAULT 0);
CREATE VIEW t_v AS SELECT id, val, n FROM t;
INSERT INTO t SELECT g, 'v' || g, 0 FROM generate_series(1, 100) g;
ANALYZE t;
CREATE PUBLICATION pub_ra FOR TABLE t;
});
q_dst(q{
CREATE TABLE t (id bigint PRIMARY KEY, val text NOT NULL, n bigint NOT NULL DEFAULT 0,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE VIEW t_v AS SELECT id, val, n FROM t;
});
# a gate the test closes to hold chunk 1 (key 5) before its commit
my $gate = AshTest::close_gate($dst, 't', 5, 4242);

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_ra', marker => 0,
	maps => [ [ 't', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 10, max_pending_chunks => 4");

ok(AshTest::gate_waiting($dst, 4242), 'chunk 1 waits at the gate, uncommitted');
is(q_dst("SELECT count(*) FROM t"), '0', 'nothing of chunk 1 is visible yet');
# the read of chunk 2 went out before chunk 1 was written: the snapshot
# connection has run it and is idle
ok(AshTest::poll($src,
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'ash_replicant snapshot'"
	  . " AND state = 'idle' AND query LIKE 'SELECT pg_catalog.txid_current_snapshot()%UNION ALL%WHERE%'"),
	'the read of chunk 2 has run on the source');

AshTest::change_read_ahead($src, $dst, $sink, 't', $gate, 4242, '', 'the');
AshTest::assert_mirror_equal($src, $dst, ['t_v'], order_by => 'id', name => 'after a read-ahead read again');

my @copied = AshTest::log_lines_like($dst, qr/event=snapshot\.table_copied sink=\Q$sink\E table=public\.t /);
is(scalar(@copied), 1, 'one table_copied line');
like($copied[0] // '', qr/ rows=99 chunks=10 rereads=1$/,
	'chunk 2 was read again once: the read-ahead missed a delivered transaction');
is(q_dst("SELECT count(*) FROM ash_replicant.snapshot_tables WHERE state = 'copied' AND chunk_cursor IS NULL"),
	'1', 'the table is copied, its cursor cleared');

# A window's row goes once the stream passed it: on a quiet source the
# worker's chunks delete the closed ones as the copy goes (every 32 chunks
# that find one), so of a copy of 200 chunks, at most those since the last
# deletion are left -- not one a chunk.
q_src(q{
CREATE TABLE q (id bigint PRIMARY KEY, val text NOT NULL);
INSERT INTO q SELECT g, 'q' || g FROM generate_series(1, 2000) g;
CREATE PUBLICATION pub_q FOR TABLE q;
});
q_dst("CREATE TABLE q (id bigint PRIMARY KEY, val text NOT NULL, replica_fingerprint bytea, replica_seen_attempt bytea)");
AshTest::setup_pipeline($src, $dst, sink => 'qp', publication => 'pub_q', marker => 0,
	maps => [ [ 'q', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 10, max_pending_chunks => 4");
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines WHERE sink_name = 'qp'"),
	'qp: the quiet copy completes');
my ($qchunks, $qwin) = split /\|/, q_dst("SELECT (SELECT sum(chunks_copied) FROM ash_replicant.snapshot_tables"
	  . " WHERE slot_name = 'qp'), (SELECT count(*) FROM ash_replicant.snapshot_windows WHERE slot_name = 'qp')");
note "qp: $qwin windows left of $qchunks chunks";
ok($qchunks >= 200 && $qwin <= 40, "qp: closed windows are deleted during the copy ($qwin left of $qchunks chunks)");

done_testing();
