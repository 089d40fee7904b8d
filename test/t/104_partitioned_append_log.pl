# Partitioned targets (docs/scale-out.md, "Partitioned targets"): an append
# log whose old partitions are dropped while it streams, and a state mirror
# whose rows move between partitions.
#
# The log is partitioned by RANGE (commit_lsn): the partition key is one of
# the five identity axes, so the unique index on the axes (which the
# append's ON CONFLICT needs) is allowed on the partitioned table.
#   - events land in the partition of their commit position;
#   - a change whose position no partition covers is refused by the
#     destination on every attempt: halted apply_failed, SQLSTATE 23514,
#     nothing of it committed, the checkpoint unchanged, its value in no log;
#   - once the partition exists, a restart applies it once;
#   - dropping the oldest partition while the pipeline streams changes
#     nothing for it: it stays healthy, its census passes, later events land,
#     no event twice;
#   - a state mirror partitioned by its key: a v1 snapshot of existing rows,
#     then inserts, updates, key changes that move a row to another
#     partition, deletes: equal to the source.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $sink = 'plog';
my $marker = AshTest::marker_table($sink);
my $sentinel = 'PLOG_SENTINEL_7c1e0f';

my $structural = AshTest::append_log_columns();
my $axes = AshTest::append_log_axes();

$src->safe_psql('postgres', qq{
CREATE TABLE ev (id integer PRIMARY KEY, val text);
ALTER TABLE ev REPLICA IDENTITY FULL;
CREATE TABLE $marker (id bigint PRIMARY KEY, note text);
ALTER TABLE $marker REPLICA IDENTITY FULL;
CREATE TABLE pad (x text);
CREATE PUBLICATION pub_plog FOR TABLE ev, $marker;
});

# Everything up to the split (2 MB of WAL ahead) lands in the first partition.
my $split = $src->safe_psql('postgres',
	"SELECT ((pg_current_wal_lsn() - '0/0'::pg_lsn) + 2 * 1024 * 1024)::bigint");
$dst->safe_psql('postgres', qq{
CREATE TABLE ev_log ($structural, id integer, val text) PARTITION BY RANGE (commit_lsn);
CREATE UNIQUE INDEX ev_log_axes ON ev_log ($axes);
CREATE TABLE ev_log_old PARTITION OF ev_log FOR VALUES FROM (MINVALUE) TO ($split);
CREATE TABLE $marker ($structural, id bigint, note text, UNIQUE ($axes));
});

AshTest::setup_append_log($src, $dst, $sink, 'pub_plog',
	"'ev_log'::regclass, source_table => 'ev', append_log => true");
AshTest::wait_caught_up($src, $dst, $sink, name => 'the partitioned append log streams')
  or BAIL_OUT('pipeline never streamed');

# ---------------------------------------------------------------------------
# Before the split: 100 inserts, 50 updates, 10 deletes.
# ---------------------------------------------------------------------------
$src->safe_psql('postgres', q{
INSERT INTO ev SELECT g, 'v' || g FROM generate_series(1, 100) g;
UPDATE ev SET val = val || '+' WHERE id <= 50;
DELETE FROM ev WHERE id > 90;
});
AshTest::wait_caught_up($src, $dst, $sink, name => 'the first changes are applied');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM ONLY ev_log_old}), '160',
	'every event below the split is in the first partition');
is($dst->safe_psql('postgres',
		q{SELECT string_agg(operation || '=' || n, ',' ORDER BY operation) FROM
		  (SELECT operation, count(*) n FROM ev_log GROUP BY 1) x}),
	'delete=10,insert=100,update=50', 'one event per change');

# ---------------------------------------------------------------------------
# Past the split, no partition yet: the destination refuses the event.
# ---------------------------------------------------------------------------
$src->safe_psql('postgres', "INSERT INTO pad SELECT repeat(md5(g::text), 32) FROM generate_series(1, 3000) g");
ok($src->safe_psql('postgres', "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn) > $split") eq 't',
	'the source wrote past the split');
my $facts = AshTest::checkpoint_facts($dst, $sink);
$src->safe_psql('postgres', "INSERT INTO ev VALUES (1000, '$sentinel')");
AshTest::wait_status($dst, $sink, 'halted', 'apply_failed', src => $src, timeout => 120,
	name => 'an event no partition covers halts apply_failed');
my $st = AshTest::status_row($dst, $sink) // {};
is($st->{halt_sqlstate} // '', '23514', 'the halt names the check violation');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM ev_log'), '160', 'nothing of it was committed');
is(AshTest::checkpoint_facts($dst, $sink), $facts, 'the checkpoint did not move');
is(join("\n", AshTest::grep_logs_for($sentinel, $src, $dst)), '', 'its value is in no server log');

# ---------------------------------------------------------------------------
# The partition is created: a restart applies the change once.
# ---------------------------------------------------------------------------
$dst->safe_psql('postgres', "CREATE TABLE ev_log_new PARTITION OF ev_log FOR VALUES FROM ($split) TO (MAXVALUE)");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'the restart applies the refused change');
is($dst->safe_psql('postgres', "SELECT count(*) FROM ONLY ev_log_new WHERE id = 1000 AND val = '$sentinel'"),
	'1', 'the refused change is in the new partition, once');

# ---------------------------------------------------------------------------
# The oldest partition dropped while the pipeline streams.
# ---------------------------------------------------------------------------
my $census0 = $dst->safe_psql('postgres',
	"SELECT coalesce(last_census_at, '-infinity') FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'");
$src->safe_psql('postgres', 'INSERT INTO ev SELECT g, $$w$$ || g FROM generate_series(2001, 2050) g');
$dst->safe_psql('postgres', 'DROP TABLE ev_log_old');
$src->safe_psql('postgres', q{
UPDATE ev SET val = val || '!' WHERE id BETWEEN 2001 AND 2050;
DELETE FROM ev WHERE id BETWEEN 2041 AND 2050;
});
AshTest::wait_caught_up($src, $dst, $sink, name => 'changes after the drop are applied');
ok(AshTest::poll($dst,
		"SELECT last_census_at > '$census0' AND last_census_verdict = 'pass'"
		  . " FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'", 't', timeout => 60),
	'a census after the drop passes');
AshTest::wait_status($dst, $sink, 'healthy', undef, name => 'the pipeline stays healthy');
is($dst->safe_psql('postgres',
		q{SELECT string_agg(operation || '=' || n, ',' ORDER BY operation) FROM
		  (SELECT operation, count(*) n FROM ev_log WHERE id BETWEEN 2001 AND 2050 GROUP BY 1) x}),
	'delete=10,insert=50,update=50', 'every change after the drop has its event');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM ev_log WHERE id <= 100'), '0',
	'the dropped partition took only its own events');
is($dst->safe_psql('postgres',
		"SELECT count(*) - count(DISTINCT ($axes)) FROM ev_log"), '0', 'no event twice');

# ---------------------------------------------------------------------------
# A state mirror partitioned by its key: rows move between partitions.
# ---------------------------------------------------------------------------
# (the source's table is a plain one: a partitioned source publishes its
# leaves, each mapped on its own)
$dst->safe_psql('postgres', 'CREATE TABLE pt (id integer PRIMARY KEY, v text) PARTITION BY RANGE (id);'
	  . ' CREATE TABLE pt_low PARTITION OF pt FOR VALUES FROM (MINVALUE) TO (1000);'
	  . ' CREATE TABLE pt_high PARTITION OF pt FOR VALUES FROM (1000) TO (MAXVALUE)');
$src->safe_psql('postgres', q{
CREATE TABLE pt (id integer PRIMARY KEY, v text);
INSERT INTO pt SELECT g, 'seed ' || g FROM generate_series(1, 1500, 3) g;
CREATE PUBLICATION pub_pt FOR TABLE pt;
});
AshTest::setup_pipeline($src, $dst, sink => 'pmir', publication => 'pub_pt', maps => [ ['pt'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_caught_up($src, $dst, 'pmir', name => 'the partitioned mirror copied and streams');
AshTest::assert_mirror_equal($src, $dst, ['pt'], name => 'the snapshot filled both partitions');
$src->safe_psql('postgres', q{
INSERT INTO pt SELECT g, 'new ' || g FROM generate_series(2, 1500, 3) g;
UPDATE pt SET v = v || '+' WHERE id % 5 = 0;
UPDATE pt SET id = id + 3000 WHERE id BETWEEN 100 AND 199;
UPDATE pt SET id = id - 1200 WHERE id BETWEEN 1300 AND 1399;
DELETE FROM pt WHERE id % 7 = 0;
});
AshTest::wait_caught_up($src, $dst, 'pmir', name => 'the changes are applied');
AshTest::wait_status($dst, 'pmir', 'healthy', undef, name => 'the partitioned mirror is healthy');
AshTest::assert_mirror_equal($src, $dst, ['pt'], name => 'rows moved between partitions');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM ONLY pt_high WHERE id < 1000'), '0',
	'every row is in the partition of its key');

done_testing();
