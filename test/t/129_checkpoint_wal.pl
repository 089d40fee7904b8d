# What a batch's checkpoint advance writes to the destination's WAL
# (docs/operations.md#apply-speed, "WAL per batch"):
#   - the checkpoint row is over a kilobyte (the contract), and a HOT update
#     logs the new version's bytes from the first changed column to the last
#     one; commit_lsn and end_lsn sit side by side, updated_at a kilobyte
#     further on.  Each batch moves the watermark; updated_at is refreshed
#     only when it is a second or more old, so a trickle of one-row
#     transactions logs a few dozen bytes per checkpoint advance instead of a
#     kilobyte (on wal_level = replica; a logical destination logs every new
#     version whole);
#   - the row's page is pruned before the next version would not fit: every
#     advance is a HOT update and the table stays one page;
#   - updated_at still follows the watermark to the second.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(dst_conf => "wal_level = replica\ncheckpoint_timeout = '1h'\n");
my $sink = 'cw';

is($dst->safe_psql($DB, 'SHOW wal_level'), 'replica', 'the destination logs at wal_level replica');
$src->safe_psql($DB, q{
CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL);
CREATE PUBLICATION pub_cw FOR TABLE items;
});
$dst->safe_psql($DB, q{
CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL);
CREATE EXTENSION pg_walinspect;
});
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_cw', maps => [ ['items'] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams') or BAIL_OUT('no stream');
cmp_ok($dst->safe_psql($DB, 'SELECT pg_column_size(contract) FROM ash_replicant.checkpoints'), '>', 500,
	'the checkpoint row carries a contract of more than 500 bytes');

# One-row source transactions, each applied in a batch of its own.
my $lsn0 = $dst->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
my $batches0 = $dst->safe_psql($DB, "SELECT batches FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'");
my $t0 = time;
$src->safe_psql($DB, q{
DO $$
BEGIN
	FOR i IN 1..60 LOOP
		INSERT INTO items VALUES (i, 'v' || i);
		COMMIT;
		PERFORM pg_sleep(0.02);
	END LOOP;
END $$;
});
my ($lcommit) = AshTest::commit_tracked($src, "INSERT INTO items VALUES (61, 'v61')");
ok(AshTest::wait_lsn($src, $dst, $sink, $lcommit), 'watermark reaches the last source commit');
# every batch was applied in these (whole) seconds, and one more
my $seconds = time - $t0 + 1;
my $lsn1 = $dst->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
my $batches = $dst->safe_psql($DB,
	"SELECT batches - $batches0 FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'");
cmp_ok($batches, '>=', 30, "most of the 61 transactions were batches of their own ($batches)");

my $node = $dst->safe_psql($DB,
	"SELECT pg_relation_filenode('ash_replicant.checkpoints'::regclass)");
my ($n, $small, $large, $avg) = split /\|/, $dst->safe_psql($DB, qq{
SELECT count(*), count(*) FILTER (WHERE record_length < 200), count(*) FILTER (WHERE record_length >= 500),
       round(avg(record_length) FILTER (WHERE record_length < 200))
  FROM pg_get_wal_records_info('$lsn0', '$lsn1')
 WHERE resource_manager = 'Heap' AND record_type IN ('UPDATE', 'HOT_UPDATE')
   AND block_ref ~ '/$node fork '});
cmp_ok($n, '>=', $batches, "a checkpoint update per batch ($n for $batches)");
cmp_ok($large, '<=', $seconds + 1,
	"a kilobyte-sized checkpoint update at most once a second ($large in ${seconds} s)");
cmp_ok($small, '>=', $n - $seconds - 1, "the others log under 200 bytes ($small of $n, $avg bytes on average)");
my $cold = $dst->safe_psql($DB, qq{
SELECT count(*) FROM pg_get_wal_records_info('$lsn0', '$lsn1')
 WHERE resource_manager = 'Heap' AND record_type ~ '^UPDATE' AND block_ref ~ '/$node fork '});
is($cold, 0, 'every checkpoint update is a HOT update: its page is pruned before it fills');
is($dst->safe_psql($DB, "SELECT pg_relation_size('ash_replicant.checkpoints')"), 8192,
	'the checkpoints table is still one page');
my $per = $dst->safe_psql($DB, "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / $batches)");
cmp_ok($per, '<', 1000, "all the WAL of a one-row batch: $per bytes");

# updated_at: refreshed by the first batch a second or more after it.
my $u1 = $dst->safe_psql($DB, 'SELECT updated_at FROM ash_replicant.checkpoints');
sleep 2;
($lcommit) = AshTest::commit_tracked($src, "INSERT INTO items VALUES (62, 'v62')");
ok(AshTest::wait_lsn($src, $dst, $sink, $lcommit), 'the next commit is applied');
is($dst->safe_psql($DB, "SELECT updated_at > '$u1'::timestamptz + interval '1 second'"
		. " AND updated_at <= pg_catalog.now() FROM ash_replicant.checkpoints"),
	't', 'updated_at moved with the watermark');
AshTest::assert_mirror_equal($src, $dst, ['items'], order_by => 'id', name => 'mirror equals source');

done_testing();
