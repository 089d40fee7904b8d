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
#   - updated_at still follows the watermark to the second;
#   - the contract is stored compressed, so that at wal_level = logical,
#     where each advance logs the new row whole, an advance logs less than
#     the row would take with its contract plain.
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
my $contract_len = $dst->safe_psql($DB, 'SELECT octet_length(contract::text) FROM ash_replicant.checkpoints');
cmp_ok($contract_len, '>', 500, "the checkpoint row carries a contract of more than 500 bytes ($contract_len)");

# One-row source transactions $from..$to, 20 ms apart: each applied in a
# batch of its own.
sub one_row_transactions
{
	my ($from, $to) = @_;
	$src->safe_psql($DB, qq{
DO \$\$
BEGIN
	FOR i IN $from..$to LOOP
		INSERT INTO items VALUES (i, 'v' || i);
		COMMIT;
		PERFORM pg_sleep(0.02);
	END LOOP;
END \$\$;
});
	return;
}

my $lsn0 = $dst->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
my $batches0 = $dst->safe_psql($DB, "SELECT batches FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'");
my $t0 = time;
one_row_transactions(1, 60);
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

# The contract is stored compressed (the first advance after it was written
# compresses it): a row half its plain size, which matters where the WAL
# holds each new version whole.
my ($method, $stored) = split /\|/, $dst->safe_psql($DB,
	'SELECT pg_column_compression(contract), pg_column_size(contract) FROM ash_replicant.checkpoints');
ok(defined $method && $method ne '', "the contract is stored compressed ($method)");
cmp_ok($stored, '<', 0.75 * $contract_len, "in $stored of its $contract_len bytes");

# wal_level = logical: each checkpoint advance logs the new row whole, the
# contract as stored -- compressed.
$dst->append_conf('postgresql.conf', "wal_level = logical\n");
$dst->restart;
is($dst->safe_psql($DB, 'SHOW wal_level'), 'logical', 'the destination now logs at wal_level logical');
($lcommit) = AshTest::commit_tracked($src, "INSERT INTO items VALUES (63, 'v63')");
ok(AshTest::wait_lsn($src, $dst, $sink, $lcommit), 'the pipeline resumes after the restart');
$lsn0 = $dst->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
one_row_transactions(64, 83);
($lcommit) = AshTest::commit_tracked($src, "INSERT INTO items VALUES (84, 'v84')");
ok(AshTest::wait_lsn($src, $dst, $sink, $lcommit), 'the logical-level commits are applied');
$lsn1 = $dst->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
$node = $dst->safe_psql($DB, "SELECT pg_relation_filenode('ash_replicant.checkpoints'::regclass)");
my ($ln, $lmax, $lavg) = split /\|/, $dst->safe_psql($DB, qq{
SELECT count(*), max(record_length), round(avg(record_length))
  FROM pg_get_wal_records_info('$lsn0', '$lsn1')
 WHERE resource_manager = 'Heap' AND record_type ~ 'UPDATE' AND block_ref ~ '/$node fork '});
cmp_ok($ln, '>=', 10, "checkpoint advances at wal_level logical ($ln)");
# the row as it would be with the contract plain (a varlena header more)
my $plain_row = $dst->safe_psql($DB, 'SELECT pg_column_size(c.*) - pg_column_size(contract)'
	. ' + octet_length(contract::text) + 5 FROM ash_replicant.checkpoints c');
cmp_ok($lmax, '<', $plain_row,
	"each logs less than the row would take with its contract plain, $plain_row bytes"
	  . " ($lavg bytes on average, at most $lmax)");
AshTest::assert_mirror_equal($src, $dst, ['items'], order_by => 'id', name => 'mirror equals source');

done_testing();
