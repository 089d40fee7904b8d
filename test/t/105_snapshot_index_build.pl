# snapshot => 'v1' into an empty target builds the target's indexes once its
# rows are in (src/apply_bulk.c), where the pipeline owner owns the table;
# otherwise the rows go into every index one by one as before.
#
#   a  an owned target with a primary key, a secondary, an expression, a
#      partial and a GIN index: every index has a new relfilenode after the
#      copy (it was built, not filled row by row), amcheck finds every heap
#      row in each btree index, index-only reads agree with a sequential
#      scan, the mirror equals the source; then streamed inserts, updates
#      (key changes too) and deletes go through the built indexes
#   b  a target owned by another role that has the sink owner's privileges
#      (so written as the sink owner): its indexes keep their relfilenodes
#      (filled row by row), the mirror equals the source
#   c  a build that fails: the target has a unique index, besides its
#      key, on a column the source does not keep unique, and two source rows
#      share a value carrying a planted sentinel (a target key the source
#      does not keep unique did this before activation refused it,
#      source_key_not_unique).  Owned (the build raises the unique
#      violation) and not owned (the row's insertion does): the pipeline
#      halts apply_failed with SQLSTATE 23505, nothing of the table is
#      committed, and the sentinel is in no server log and no output
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "log_min_messages = info\nlog_error_verbosity = verbose\n");
$dst->safe_psql($DB, 'CREATE EXTENSION amcheck');
my $V1 = "go_forward_only => false, snapshot => 'v1'";

my $cols = 'id bigint PRIMARY KEY, k text NOT NULL, v integer, doc jsonb';
AshTest::both($src, $dst, "CREATE TABLE owned ($cols)");
AshTest::both($src, $dst, "CREATE TABLE foreign_owned ($cols)");
$dst->safe_psql($DB, q{
CREATE INDEX owned_v ON owned (v);
CREATE INDEX owned_lower_k ON owned (lower(k));
CREATE INDEX owned_even ON owned (k) WHERE v % 2 = 0;
CREATE INDEX owned_doc ON owned USING gin (doc);
CREATE INDEX foreign_owned_v ON foreign_owned (v);
-- a role with the sink owner's privileges, so the worker writes its table
-- as the sink owner, who does not own it (a table of a role without them
-- is written as that role, its owner: built after the rows, test 211)
CREATE ROLE other_owner NOLOGIN SUPERUSER;
ALTER TABLE foreign_owned OWNER TO other_owner;
});
for my $t (qw(owned foreign_owned))
{
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, 'Key-' || g, CASE WHEN g % 7 = 0 THEN NULL ELSE g % 1000 END,"
		  . " jsonb_build_object('g', g, 'tag', 't' || (g % 13)) FROM generate_series(1, 30000) g");
}
$src->safe_psql($DB, 'CREATE PUBLICATION pub FOR TABLE owned, foreign_owned');

# relfilenode of every index of a destination table, by index name
sub filenodes
{
	my ($table) = @_;
	return $dst->safe_psql($DB, "SELECT string_agg(c.relname || '=' || c.relfilenode, ',' ORDER BY c.relname)"
		  . " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = '$table'::regclass");
}

# every btree index of a table checked against its heap (amcheck)
sub btrees_intact
{
	my ($table, $label) = @_;
	my $idx = $dst->safe_psql($DB, "SELECT string_agg(c.relname, ' ' ORDER BY c.relname) FROM pg_index i"
		  . " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
		  . " WHERE i.indrelid = '$table'::regclass AND a.amname = 'btree'");
	for my $i (split / /, $idx)
	{
		my ($rc, $out, $err) = $dst->psql($DB, "SELECT bt_index_parent_check('$i'::regclass, heapallindexed => true)");
		is($rc, 0, "$label: amcheck finds every row of $table in $i") or diag $err;
	}
}

# what reads through each index return, against a sequential scan
sub index_reads_agree
{
	my ($table, $label) = @_;
	my $q = "SELECT count(*) FILTER (WHERE v = 5) || '/' || count(*) FILTER (WHERE lower(k) = 'key-77') || '/'"
	  . " || count(*) FILTER (WHERE v % 2 = 0 AND k = 'Key-4') || '/' || count(*) FILTER (WHERE doc @> '{\"tag\": \"t3\"}')"
	  . " FROM $table";
	my $seq = $dst->safe_psql($DB, "SET enable_indexscan = off; SET enable_bitmapscan = off; $q");
	my $by_index = $dst->safe_psql($DB, "SET enable_seqscan = off; SELECT"
		  . " (SELECT count(*) FROM $table WHERE v = 5) || '/' || (SELECT count(*) FROM $table WHERE lower(k) = 'key-77')"
		  . " || '/' || (SELECT count(*) FROM $table WHERE v % 2 = 0 AND k = 'Key-4')"
		  . " || '/' || (SELECT count(*) FROM $table WHERE doc @> '{\"tag\": \"t3\"}')");
	is($by_index, $seq, "$label: reads through the indexes agree with a sequential scan ($seq)");
}

my $owned_before = filenodes('owned');
my $foreign_before = filenodes('foreign_owned');
AshTest::setup_pipeline($src, $dst, sink => 'ib', publication => 'pub', maps => [ ['owned'], ['foreign_owned'] ],
	pipeline_extra => $V1);
AshTest::wait_caught_up($src, $dst, 'ib', name => 'a/b: the snapshot completed and the pipeline streams');

# a: built after the rows
my %before = map { split /=/ } split /,/, $owned_before;
my %after = map { split /=/ } split /,/, filenodes('owned');
is(scalar(keys %after), 5, 'a: the owned target has its five indexes');
is(scalar(grep { $before{$_} ne $after{$_} } keys %after), 5,
	'a: every index of the owned target was built after its rows (new relfilenodes)');
btrees_intact('owned', 'a');
index_reads_agree('owned', 'a');
AshTest::assert_mirror_equal($src, $dst, ['owned'], name => 'a: copied');
is($dst->safe_psql($DB, q{SELECT count(*) FROM pg_index i WHERE i.indrelid = 'owned'::regclass
	AND i.indisvalid AND i.indisready AND i.indislive}), '5', 'a: every index valid, ready and live');

# b: filled row by row
is(filenodes('foreign_owned'), $foreign_before, 'b: the indexes of a target another role owns were filled row by row');
btrees_intact('foreign_owned', 'b');
AshTest::assert_mirror_equal($src, $dst, ['foreign_owned'], name => 'b: copied');

# a: streaming through the built indexes
$src->safe_psql($DB, q{
INSERT INTO owned SELECT g, 'Key-' || g, g % 1000, '{"tag": "t3"}' FROM generate_series(30001, 30500) g;
UPDATE owned SET v = 5, k = 'KEY-77' WHERE id % 101 = 0;
UPDATE owned SET id = id + 100000 WHERE id % 211 = 0;
DELETE FROM owned WHERE id % 97 = 0;
});
AshTest::wait_caught_up($src, $dst, 'ib', name => 'a: streamed changes applied');
AshTest::assert_mirror_equal($src, $dst, ['owned'], name => 'a: after streaming');
btrees_intact('owned', 'a after streaming');
index_reads_agree('owned', 'a after streaming');

# c: the build's unique violation, and the row's, both value-free
my $sentinel = 'SENTINEL-105-' . join('', map { sprintf '%02x', int(rand(256)) } 1 .. 10);
for my $case ([ 'c1', 'dup_owned', 0 ], [ 'c2', 'dup_foreign', 1 ])
{
	my ($sink, $t, $foreign) = @$case;
	$src->safe_psql($DB, "CREATE TABLE $t (id integer PRIMARY KEY, k text NOT NULL, v integer)");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, 'row-' || g, g FROM generate_series(1, 5000) g");
	$src->safe_psql($DB, "INSERT INTO $t VALUES (5001, '$sentinel-a', 1), (5002, '$sentinel-a', 2)");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$sink FOR TABLE $t");
	$dst->safe_psql($DB, "CREATE TABLE $t (id integer PRIMARY KEY, k text NOT NULL UNIQUE, v integer)");
	$dst->safe_psql($DB, "ALTER TABLE $t OWNER TO other_owner") if $foreign;
	my $nodes = filenodes($t);
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink", maps => [ [$t] ],
		pipeline_extra => $V1);
	AshTest::wait_status($dst, $sink, 'halted', 'apply_failed', src => $src,
		name => "$sink: a unique violation " . ($foreign ? 'at a row' : 'at the build') . ' halts apply_failed');
	is($dst->safe_psql($DB, "SELECT halt_sqlstate FROM ash_replicant.pipelines WHERE sink_name = '$sink'"), '23505',
		"$sink: SQLSTATE 23505 recorded");
	is($dst->safe_psql($DB, "SELECT count(*) FROM $t"), '0', "$sink: nothing of the table committed");
	is($dst->safe_psql($DB, "SELECT state || ' ' || rows_copied FROM ash_replicant.stat_snapshot_tables"
		  . " WHERE sink_name = '$sink' AND source_table = '$t'"), 'pending 0', "$sink: the table is still pending");
	is(filenodes($t), $nodes, "$sink: the failed build left the target's index as it was");
	ok(scalar(AshTest::log_lines_like($dst, qr/event=apply\.error sink=\Q$sink\E sqlstate=23505 step=snapshot\b/)) >= 1,
		"$sink: the failure is logged value-free with its SQLSTATE");
}
my @hits = AshTenancy::grep_all_logs([ $sentinel, lc($sentinel), uc($sentinel) ], $src, $dst);
is(scalar(@hits), 0, 'c: the planted key is in no server log of either node')
  or diag join("\n", @hits[ 0 .. ($#hits < 9 ? $#hits : 9) ]);
my $text = AshTenancy::destination_text($dst);
is(scalar(grep { index($text, $_) >= 0 } ($sentinel, uc($sentinel))), 0,
	'c: the planted key is in no status, statistics or catalog output');

done_testing();
