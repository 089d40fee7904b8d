# snapshot => 'incremental' walks each table by its primary key, the
# cursor being the largest key of the chunk just copied
# (docs/snapshots.md#incremental).  For an integer key (smallint, integer,
# bigint, or several such columns) the rows of a chunk come in no
# particular order and the worker finds that key itself, from the binary
# values; any other key comes in key order, its text written by the source.
# The read above a cursor is prepared once per table on the chunk
# connection.  Here, with chunks of 7 rows and at most one window open (the
# walsender's position closes each before the next chunk):
#
#   - bigint, integer and (smallint, integer) keys with negative values and
#     the extremes of each type, a text key in "C" order, an integer[] key
#     (empty, a NULL element, two dimensions) and an int4range key, are
#     copied in one session, one table after the other (a container key's
#     input function reads the catalog: a chunk's bounds are parsed after
#     its transaction committed, once in a transaction of their own);
#   - each table's copy took rows div 7 + 1 chunks (the last one short):
#     a cursor below the chunk's largest key would copy a key twice (a
#     fresh target takes no second insert: the copy halts), one above it
#     would skip keys or chunks;
#   - every mirror equals its source;
#   - a target empty at its table's first chunk holds only rows the attempt
#     wrote, so it is not scanned for unseen rows (retired: rows=0
#     scan=skipped); kt's target starts with a row the source lacks, is
#     scanned after the five others were skipped, and the row is retired.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $sink = 'keys';
my $DB   = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(29));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

my $ddl = q{
CREATE TABLE k8 (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE k4 (id integer PRIMARY KEY, v text NOT NULL);
CREATE TABLE k2 (a smallint, b integer, v text NOT NULL, PRIMARY KEY (a, b));
CREATE TABLE kt (k text COLLATE "C" PRIMARY KEY, v text NOT NULL);
CREATE TABLE ka (k integer[] PRIMARY KEY, v text NOT NULL);
CREATE TABLE kr (k int4range PRIMARY KEY, v text NOT NULL);
CREATE VIEW ka_v AS SELECT k, v FROM ka;
CREATE VIEW kr_v AS SELECT k, v FROM kr;
CREATE VIEW k8_v AS SELECT id, v FROM k8;
CREATE VIEW k4_v AS SELECT id, v FROM k4;
CREATE VIEW k2_v AS SELECT a, b, v FROM k2;
CREATE VIEW kt_v AS SELECT k, v FROM kt;
};
q_src($ddl . q{
-- inserted out of key order, so heap order is not key order
INSERT INTO k8 SELECT g * 37 % 101 - 50, 'v' || g FROM generate_series(1, 101) g;
INSERT INTO k8 VALUES (-9223372036854775808, 'min'), (9223372036854775807, 'max'),
	(-4294967296, 'below int4'), (4294967296, 'above int4');
INSERT INTO k4 SELECT g * 13 % 61 - 30, 'v' || g FROM generate_series(1, 61) g;
INSERT INTO k4 VALUES (-2147483648, 'min'), (2147483647, 'max'), (-65536, 'x'), (65536, 'y');
INSERT INTO k2 SELECT a, b, a || '/' || b FROM generate_series(-3, 3) a, generate_series(4, -4, -1) b;
INSERT INTO k2 VALUES (-32768, 0, 'min'), (32767, 0, 'max'), (0, -2147483648, 'b min'),
	(0, 2147483647, 'b max'), (-1, 70000, 'x'), (1, -70000, 'y');
INSERT INTO kt SELECT md5(g::text), 'v' || g FROM generate_series(1, 40) g;
INSERT INTO kt VALUES ('', 'empty'), ('A', 'upper'), ('a', 'lower'), ('-1', 'minus'), ('é', 'accent');
INSERT INTO ka SELECT ARRAY[g % 5, g], 'v' || g FROM generate_series(1, 20) g;
INSERT INTO ka VALUES ('{}', 'empty'), ('{-1,NULL}', 'null element'), ('{{1,2},{3,4}}', 'two dimensions');
INSERT INTO kr SELECT int4range(g, g + g % 3 + 1), 'v' || g FROM generate_series(1, 20) g;
INSERT INTO kr VALUES ('empty', 'empty'), ('(,5)', 'unbounded');
ANALYZE;
CREATE PUBLICATION pub_keys FOR TABLE k8, k4, k2, kt, ka, kr;
});
q_dst(q{
CREATE TABLE k8 (id bigint PRIMARY KEY, v text NOT NULL, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE k4 (id integer PRIMARY KEY, v text NOT NULL, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE k2 (a smallint, b integer, v text NOT NULL, replica_fingerprint bytea, replica_seen_attempt bytea,
	PRIMARY KEY (a, b));
CREATE TABLE kt (k text COLLATE "C" PRIMARY KEY, v text NOT NULL, replica_fingerprint bytea,
	replica_seen_attempt bytea);
CREATE VIEW k8_v AS SELECT id, v FROM k8;
CREATE VIEW k4_v AS SELECT id, v FROM k4;
CREATE VIEW k2_v AS SELECT a, b, v FROM k2;
CREATE VIEW kt_v AS SELECT k, v FROM kt;
CREATE TABLE ka (k integer[] PRIMARY KEY, v text NOT NULL, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE kr (k int4range PRIMARY KEY, v text NOT NULL, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE VIEW ka_v AS SELECT k, v FROM ka;
CREATE VIEW kr_v AS SELECT k, v FROM kr;
INSERT INTO kt (k, v) VALUES ('~ destination only', 'stale');
});
my %rows = (k8 => 105, k4 => 65, k2 => 69, kt => 45, ka => 23, kr => 22);
for my $t (sort keys %rows)
{
	is(q_src("SELECT count(*) FROM $t"), $rows{$t}, "$t: $rows{$t} rows at the source");
}

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_keys', marker => 0,
	maps => [ map { [ $_, snapshot_provenance => 'true' ] } qw(k8 k4 k2 kt ka kr) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 7, max_pending_chunks => 1");

ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints"),
	'the incremental attempt completes');
my ($commit) = AshTest::commit_tracked($src, "UPDATE k8 SET v = 'streamed' WHERE id = 9223372036854775807");
ok(AshTest::wait_lsn($src, $dst, $sink, $commit), 'watermark reaches the last source commit');

for my $t (sort keys %rows)
{
	my $chunks = int($rows{$t} / 7) + 1;
	my @copied = AshTest::log_lines_like($dst, qr/event=snapshot\.table_copied sink=\Q$sink\E table=public\.$t /);
	is(scalar(@copied), 1, "$t: one table_copied line");
	like($copied[0] // '', qr/ rows=$rows{$t} chunks=$chunks rereads=0$/,
		"$t: $rows{$t} rows in $chunks chunks, each above the last one's largest key");
}
for my $t (sort keys %rows)
{
	my @retired = AshTest::log_lines_like($dst, qr/event=snapshot\.retired sink=\Q$sink\E table=public\.$t /);
	is(scalar(@retired), 1, "$t: one retired line");
	if ($t eq 'kt')
	{
		like($retired[0] // '', qr/ rows=1$/, 'kt: its target was scanned, the row the source lacks retired');
	}
	else
	{
		like($retired[0] // '', qr/ rows=0 scan=skipped$/, "$t: empty at its first chunk, not scanned");
	}
}
AshTest::assert_mirror_equal($src, $dst, ['k8_v'], order_by => 'id', name => 'bigint key');
AshTest::assert_mirror_equal($src, $dst, ['k4_v'], order_by => 'id', name => 'integer key');
AshTest::assert_mirror_equal($src, $dst, ['k2_v'], order_by => 'a, b', name => 'two-column key');
AshTest::assert_mirror_equal($src, $dst, ['kt_v'], order_by => 'k COLLATE "C"', name => 'text key');
AshTest::assert_mirror_equal($src, $dst, ['ka_v'], order_by => 'k', name => 'array key');
AshTest::assert_mirror_equal($src, $dst, ['kr_v'], order_by => 'k', name => 'range key');
is(scalar(AshTest::log_lines_like($dst, qr/terminated by signal/)), 0, 'no server process crashed');
is(q_dst("SELECT v FROM k8 WHERE id = 9223372036854775807"), 'streamed', 'the stream applies after the copy');
is(q_dst("SELECT count(*) FROM ash_replicant.snapshot_tables WHERE state = 'copied' AND chunk_cursor IS NULL"),
	'6', 'every table is copied, its cursor cleared');

done_testing();
