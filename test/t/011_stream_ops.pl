# Streaming mirror core: operations (README.md#how-apply-works).
#
#  main   primary-key changing updates (relocation); an out-of-line TOAST value
#         kept when an update leaves it unchanged ('u'), also across a key
#         change; go-forward rows the mirror never had: update with a full image
#         inserts, delete of a missing row changes nothing but is counted
#         (stat_pipelines.missing_row_deletes) and logged as an event, value-free;
#         on_truncate => 'mirror'; batch_max_transactions 1000 (default) exact
#  one    batch_max_transactions => 1 exact
#  trh    on_truncate default 'halt': halted with a reason, truncate not applied,
#         mirror and checkpoint unchanged
#  tmiss  update of a missing row whose TOAST value is unchanged: the full
#         image is unknown, halts unchanged_value_unavailable
#  unm    a published table that is not mapped: misconfigured/source_table_unmapped,
#         nothing applied
#  ign    the same table listed in ignored_sources: streams, its changes and its
#         TRUNCATE are ignored
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();

my $big_sql = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 3200) i)";    # 102400 chars

AshTest::both($src, $dst, q{
CREATE TABLE ops (id integer PRIMARY KEY, v text, big text, n integer NOT NULL DEFAULT 0);
CREATE TABLE gf (id integer PRIMARY KEY, v text);
CREATE TABLE gf_toast (id integer PRIMARY KEY, v text, big text);
CREATE TABLE trm (id integer PRIMARY KEY, v text);
CREATE TABLE trh (id integer PRIMARY KEY, v text);
CREATE TABLE b1000 (id integer PRIMARY KEY, v integer);
CREATE TABLE b1 (id integer PRIMARY KEY, v integer);
CREATE TABLE um_mapped (id integer PRIMARY KEY, v text);
});
$dst->safe_psql('postgres', 'CREATE TABLE unm_target (id integer PRIMARY KEY, v text)');
$src->safe_psql('postgres', q{
CREATE TABLE um_unmapped (id integer PRIMARY KEY, v text);
-- out of line and uncompressed, so an update of another column sends 'u'
ALTER TABLE ops ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE gf_toast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE PUBLICATION pub_main FOR TABLE ops, gf, trm, b1000;
CREATE PUBLICATION pub_one FOR TABLE b1;
CREATE PUBLICATION pub_trh FOR TABLE trh;
CREATE PUBLICATION pub_tmiss FOR TABLE gf_toast;
CREATE PUBLICATION pub_unm FOR TABLE um_mapped, um_unmapped;
CREATE PUBLICATION pub_ign FOR TABLE um_mapped, um_unmapped;
});
# rows that exist at the source before any slot: a go-forward mirror never sees them
$src->safe_psql('postgres', qq{
INSERT INTO gf SELECT g, 'old ' || g FROM generate_series(7340001, 7340010) g;
INSERT INTO gf_toast VALUES (7350001, 'old', $big_sql);
});

AshTest::setup_pipeline($src, $dst, sink => 'main', publication => 'pub_main',
	maps => [ ['ops'], ['gf'], [ 'trm', on_truncate => 'mirror' ], ['b1000'] ]);
AshTest::setup_pipeline($src, $dst, sink => 'one', publication => 'pub_one',
	batch_max_transactions => 1, maps => [ ['b1'] ]);
AshTest::setup_pipeline($src, $dst, sink => 'trh', publication => 'pub_trh', maps => [ ['trh'] ]);
AshTest::setup_pipeline($src, $dst, sink => 'tmiss', publication => 'pub_tmiss', maps => [ ['gf_toast'] ]);
AshTest::setup_pipeline($src, $dst, sink => 'unm', publication => 'pub_unm',
	maps => [ [ 'unm_target', source_table => 'um_mapped' ] ]);
AshTest::setup_pipeline($src, $dst, sink => 'ign', publication => 'pub_ign',
	ignored_sources => ['public.um_unmapped'], maps => [ ['um_mapped'] ]);

for my $s (qw(main one trh tmiss ign))
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s streams");
}

########################################################################
# unm: a published, unmapped table
########################################################################
$src->safe_psql('postgres', q{
BEGIN;
INSERT INTO um_mapped VALUES (1, 'a');
INSERT INTO um_unmapped VALUES (1, 'a');
COMMIT;
});
AshTest::wait_status($dst, 'unm', 'misconfigured', 'source_table_unmapped', src => $src);
is($dst->safe_psql('postgres', 'SELECT count(*) FROM unm_target'), '0',
	'unm: nothing applied');
# README.md#how-apply-works: coverage preflight (step 2) comes before binding (3) and slot (4)
is($src->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'unm'"),
	'0', 'unm: no slot created for an uncovered table set');
is($dst->safe_psql('postgres', "SELECT count(*) FROM ash_replicant.checkpoints WHERE slot_name = 'unm'"),
	'0', 'unm: no checkpoint bound for an uncovered table set');

########################################################################
# ign: the same table ignored — its rows and its TRUNCATE have no effect
########################################################################
$src->safe_psql('postgres', q{
BEGIN;
INSERT INTO um_mapped VALUES (2, 'b');
INSERT INTO um_unmapped VALUES (2, 'b');
COMMIT;
TRUNCATE um_unmapped;
INSERT INTO um_mapped VALUES (3, 'c');
});
AshTest::wait_caught_up($src, $dst, 'ign');
AshTest::assert_mirror_equal($src, $dst, ['um_mapped'], name => 'ign');
is(((AshTest::status_row($dst, 'ign') // {})->{state} // '') =~ /^(healthy|catching_up)$/ ? 'running' : 'not running',
	'running', 'ign: not halted by the ignored table or its truncate');

########################################################################
# main: key changes and TOAST
########################################################################
$src->safe_psql('postgres', q{INSERT INTO ops SELECT g, 'v' || g, NULL, 0 FROM generate_series(1, 6) g});
$src->safe_psql('postgres', qq{INSERT INTO ops VALUES (100, 'toast', $big_sql, 0)});
is($src->safe_psql('postgres',
	"SELECT pg_column_size(big) >= 100000 AND pg_column_compression(big) IS NULL FROM ops WHERE id = 100"),
	't', 'source stores the big value out of line, uncompressed');
AshTest::wait_caught_up($src, $dst, 'main');
my $big_md5 = $src->safe_psql('postgres', 'SELECT md5(big) FROM ops WHERE id = 100');
is($dst->safe_psql('postgres', 'SELECT md5(big) FROM ops WHERE id = 100'), $big_md5, 'big value arrived');

# unchanged TOAST: only v and n change
$src->safe_psql('postgres', q{UPDATE ops SET n = n + 1, v = 'toast2' WHERE id = 100});
# key changes: single, several in one statement, key + value, and to negative
$src->safe_psql('postgres', q{
BEGIN;
UPDATE ops SET id = id + 1000 WHERE id IN (1, 2);
UPDATE ops SET id = 3000 WHERE id = 3;
COMMIT;
UPDATE ops SET id = 7000, v = 'moved' WHERE id = 1001;
UPDATE ops SET id = -id WHERE id IN (4, 5, 6);
DELETE FROM ops WHERE id = 3000;
INSERT INTO ops VALUES (3, 'reused key', NULL, 0);
});
AshTest::wait_caught_up($src, $dst, 'main');
AshTest::assert_mirror_equal($src, $dst, ['ops'], name => 'key changes and unchanged TOAST');
is($dst->safe_psql('postgres', "SELECT md5(big) || ' ' || v || ' ' || n FROM ops WHERE id = 100"),
	"$big_md5 toast2 1", 'unchanged TOAST value kept, other columns updated');
is($dst->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM ops'),
	'-6,-5,-4,3,100,1002,7000', 'keys relocated, old keys gone');

########################################################################
# main: rows the mirror never had (go-forward)
########################################################################
$src->safe_psql('postgres', q{
UPDATE gf SET v = 'updated ' || id WHERE id IN (7340001, 7340002);
DELETE FROM gf WHERE id = 7340003;
BEGIN;
DELETE FROM gf WHERE id IN (7340004, 7340005);
COMMIT;
});
AshTest::wait_caught_up($src, $dst, 'main');
AshTest::assert_mirror_equal($src, $dst, ['gf'], where => 'id IN (7340001, 7340002)',
	name => 'update of a missing row with a full image inserts it');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM gf'), '2',
	'deletes of missing rows changed nothing; nothing else invented');
my $st = AshTest::stat_row($dst, 'main') // {};
is($st->{missing_row_deletes}, 3, 'stat_pipelines counts the 3 missing-row deletes');
my @events = AshTest::log_lines_like($dst, qr/ash_replicant.*event=\S*missing/i);
ok(scalar(@events) >= 1, 'missing-row delete logged as an event')
  or diag 'ash_replicant lines: ' . join("\n", AshTest::log_lines_like($dst, qr/ash_replicant.*event=/));
is(scalar(grep { /734000[345]/ } @events), 0, 'the event carries no key value');

########################################################################
# main: on_truncate => 'mirror'
########################################################################
$src->safe_psql('postgres', q{INSERT INTO trm SELECT g, 'r' || g FROM generate_series(1, 20) g});
AshTest::wait_caught_up($src, $dst, 'main');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM trm'), '20', 'trm rows mirrored');
$src->safe_psql('postgres', 'TRUNCATE trm');
AshTest::wait_caught_up($src, $dst, 'main');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM trm'), '0', 'truncate mirrored');
$src->safe_psql('postgres', q{
BEGIN;
INSERT INTO trm SELECT g, 'a' || g FROM generate_series(1, 5) g;
TRUNCATE trm;
INSERT INTO trm SELECT g, 'b' || g FROM generate_series(100, 102) g;
COMMIT;
});
AshTest::wait_caught_up($src, $dst, 'main');
AshTest::assert_mirror_equal($src, $dst, ['trm'], name => 'insert/truncate/insert in one transaction');

########################################################################
# batching: 1000 (main) and 1 (one), many small transactions back to back
########################################################################
for my $t (qw(b1000 b1))
{
	my $script = '';
	for my $i (1 .. 300)
	{
		$script .= "INSERT INTO $t VALUES ($i, $i);\n";
		$script .= "UPDATE $t SET v = v * 2 WHERE id = " . ($i - 1) . ";\n" if $i > 1;
		$script .= "DELETE FROM $t WHERE id = " . ($i - 5) . ";\n" if $i % 7 == 0 && $i > 5;
	}
	$src->safe_psql('postgres', $script);
}
AshTest::wait_caught_up($src, $dst, 'main');
AshTest::wait_caught_up($src, $dst, 'one');
AshTest::assert_mirror_equal($src, $dst, [ 'b1000', 'b1' ], name => 'batched apply exact');
my $sm = AshTest::stat_row($dst, 'main') // {};
my $so = AshTest::stat_row($dst, 'one') // {};
note "main: batches=" . ($sm->{batches} // 'NULL') . " applied_transactions=" . ($sm->{applied_transactions} // 'NULL');
note "one: batches=" . ($so->{batches} // 'NULL') . " applied_transactions=" . ($so->{applied_transactions} // 'NULL');
cmp_ok($so->{applied_transactions} // 0, '>=', 599, 'one: every source transaction applied');
ok(defined $so->{batches} && $so->{batches} == ($so->{applied_transactions} // -1),
	'one: one destination transaction per source transaction');
cmp_ok($sm->{batches} // 0, '<=', $sm->{applied_transactions} // -1, 'main: batches <= applied transactions');
cmp_ok($sm->{batches} // 0, '>', 0, 'main: batches counted');

########################################################################
# trh: on_truncate default 'halt'
########################################################################
$src->safe_psql('postgres', q{INSERT INTO trh SELECT g, 'h' || g FROM generate_series(1, 10) g});
AshTest::wait_caught_up($src, $dst, 'trh');
my $h0 = AshTest::table_hash($dst, 'trh');
my $c0 = AshTest::checkpoint_lsn($dst, 'trh');
$src->safe_psql('postgres', q{TRUNCATE trh; INSERT INTO trh VALUES (11, 'after')});
my ($state, $reason) = AshTest::wait_status($dst, 'trh', 'halted', undef, src => $src,
	name => 'trh: truncate with on_truncate halt halts');
like($reason, qr/^[a-z][a-z0-9_]*$/, "trh: value-free reason code ($reason)");
is(AshTest::table_hash($dst, 'trh'), $h0, 'trh: truncate not applied, mirror unchanged');
is(AshTest::checkpoint_lsn($dst, 'trh'), $c0, 'trh: checkpoint unchanged');

########################################################################
# tmiss: update of a row the mirror never had, TOAST value unchanged
########################################################################
my $c1 = AshTest::checkpoint_lsn($dst, 'tmiss');
$src->safe_psql('postgres', q{UPDATE gf_toast SET v = 'new' WHERE id = 7350001});
AshTest::wait_status($dst, 'tmiss', 'halted', 'unchanged_value_unavailable', src => $src);
is($dst->safe_psql('postgres', 'SELECT count(*) FROM gf_toast'), '0', 'tmiss: no row invented');
is(AshTest::checkpoint_lsn($dst, 'tmiss'), $c1, 'tmiss: checkpoint unchanged');

# the other pipelines were not disturbed by the halts
AshTest::wait_caught_up($src, $dst, 'one', name => 'one still streams after other sinks halted');

########################################################################
# main: a key change of a row with an unchanged TOAST value (relocation must
# take the value from the mirror row) — last for main, it may halt
########################################################################
$src->safe_psql('postgres', q{UPDATE ops SET id = 101 WHERE id = 100});
AshTest::wait_caught_up($src, $dst, 'main');
is($dst->safe_psql('postgres', "SELECT md5(big) FROM ops WHERE id = 101"), $big_md5,
	'unchanged TOAST value kept across a key change');
AshTest::assert_mirror_equal($src, $dst, ['ops'], name => 'after TOAST key change');
AshTest::wait_status($dst, 'main', 'healthy', undef, src => $src);

done_testing();
