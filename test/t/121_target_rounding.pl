# Target columns that change values without an error (docs/operations.md,
# "Target columns that round"): a numeric of a smaller scale, a timestamp,
# time or interval of a lower precision (a time into an interval of fewer
# fields or digits too), a floating-point target for integers or numerics,
# a char(n) that pads, an oid for an integer (-1 became 4294967295) -- the
# write succeeds and the
# mirror holds another value than the source (1.2345 became 1.23,
# '10:00:00.5' became '10:00:01'), healthy, with only a doctor warning that
# claimed such values would halt.  They are refused as types that do not
# read into the target: preflight/doctor check columns, activation, the
# census and a Relation message (a source column retyped while streaming)
# all say source_type_invalid, naming each column with both types.
#
#   1  each such column refused at start (nothing copied), preflight names
#      them all; the target widened, the same pipeline copies and streams:
#      mirror = source.
#   2  narrower targets that fail instead of rounding stay a warning
#      (target_column_narrower): varchar(n) shorter than the source, a
#      numeric with fewer integer digits; wider ones pass.
#   3  a source column retyped to a larger scale while streaming: the next
#      change halts source_type_invalid, nothing of its transaction
#      committed; the target widened, a plain start applies it exactly.
#   4  a target column narrowed to a smaller scale while streaming: the
#      next change halts source_type_invalid before its write (the previous
#      build wrote it rounded, the census halting census_drift only
#      afterwards); widened again, a plain start applies it exactly.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_src(q{
CREATE TABLE r (id integer PRIMARY KEY, n numeric(10,4), u numeric, ts timestamp,
	tz timestamptz(6), t time, iv interval, f numeric, big bigint, c text, na numeric(8,3)[],
	ti time, tm time(0), o integer);
INSERT INTO r VALUES (1, 1.2345, 2.71828, '2026-01-01 10:00:00.123456',
	'2026-01-01 10:00:00.654321+00', '10:00:00.5', '1 day 00:00:00.25',
	0.12345678901234567890, 9007199254740993, 'ab', '{1.125,2.5}', '10:00:00.5', '10:00:30', -1);
CREATE TABLE ok (id integer PRIMARY KEY, s text, d numeric(12,2), w numeric(6,2), v varchar(10));
INSERT INTO ok VALUES (1, 'short', 12.5, 1.25, 'abc');
CREATE PUBLICATION pub_r FOR TABLE r;
CREATE PUBLICATION pub_ok FOR TABLE ok;
});
q_dst(q{
CREATE TABLE r (id integer PRIMARY KEY, n numeric(10,2), u numeric(12,2), ts timestamp(0),
	tz timestamptz(3), t time(0), iv interval second(0), f double precision, big double precision,
	c char(4), na numeric(8,2)[], ti interval second(0), tm interval hour to minute, o oid);
CREATE TABLE ok (id integer PRIMARY KEY, s varchar(8), d numeric(4,2), w numeric(8,2), v varchar(20));
});

my $v1 = "go_forward_only => false, snapshot => 'v1'";

# ---------------------------------------------------------------------------
# 1: refused before anything is copied
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'r', publication => 'pub_r',
	maps => [ ['r'] ], pipeline_extra => $v1);
AshTest::wait_status($dst, 'r', 'misconfigured', 'source_type_invalid',
	name => 'columns whose target rounds or pads: start halts source_type_invalid');
is(q_dst('SELECT count(*) FROM r'), '0', '... nothing copied');
my $pf = q_dst("SELECT verdict || '/' || reason || '/' || detail FROM ash_replicant_doctor('r') WHERE check_name = 'columns'");
like($pf, qr{^fail/source_type_invalid/table public\.r columns whose target type would round or pad their values: }, 'doctor: columns fails source_type_invalid');
for my $c ('n (numeric(10,4) -> numeric(10,2))', 'u (numeric -> numeric(12,2))',
	'ts (timestamp without time zone -> timestamp(0) without time zone)',
	'tz (timestamp(6) with time zone -> timestamp(3) with time zone)',
	't (time without time zone -> time(0) without time zone)',
	'iv (interval -> interval second(0))', 'f (numeric -> double precision)',
	'big (bigint -> double precision)', 'c (text -> character(4))',
	'na (numeric(8,3)[] -> numeric(8,2)[])', 'ti (time without time zone -> interval second(0))',
	'tm (time(0) without time zone -> interval hour to minute)', 'o (integer -> oid)')
{
	like($pf, qr/\Q$c\E/, "... names $c");
}

q_dst(q{
ALTER TABLE r ALTER COLUMN n TYPE numeric(10,4), ALTER COLUMN u TYPE numeric,
	ALTER COLUMN ts TYPE timestamp, ALTER COLUMN tz TYPE timestamptz,
	ALTER COLUMN t TYPE time, ALTER COLUMN iv TYPE interval, ALTER COLUMN f TYPE numeric,
	ALTER COLUMN big TYPE numeric, ALTER COLUMN c TYPE text, ALTER COLUMN na TYPE numeric[],
	ALTER COLUMN ti TYPE interval, ALTER COLUMN tm TYPE interval second, ALTER COLUMN o TYPE bigint;
});
is(q_dst("SELECT verdict FROM ash_replicant_doctor('r') WHERE check_name = 'columns'"), 'pass',
	'the target widened: doctor passes');
AshTest::start_sink($dst, 'r');
AshTest::wait_caught_up($src, $dst, 'r', name => 'r copies and streams')
  or BAIL_OUT('sink r never streamed');
q_src(q{INSERT INTO r VALUES (2, 9.8765, 1.000001, '2026-02-02 02:02:02.999999',
	'2026-02-02 02:02:02.000001+00', '23:59:59.999999', '00:00:00.000001', 1e-20, 9007199254740995, 'x ', '{0.001}',
	'23:59:59.999999', '00:00:59', -2147483648)});
AshTest::wait_caught_up($src, $dst, 'r', name => 'r applies a change');
AshTest::assert_mirror_equal($src, $dst, ['r']);

# ---------------------------------------------------------------------------
# 2: narrower targets that fail instead: a warning
# ---------------------------------------------------------------------------
# the census far off: sections 3 and 4 are judged at delivery
AshTest::setup_pipeline($src, $dst, sink => 'ok', publication => 'pub_ok',
	maps => [ ['ok'] ], pipeline_extra => $v1, census => '{"interval_ms": 600000}');
AshTest::wait_caught_up($src, $dst, 'ok', name => 'narrower targets that fail instead of rounding: copies and streams')
  or BAIL_OUT('sink ok never streamed');
like(q_dst("SELECT verdict || '/' || reason || '/' || detail FROM ash_replicant_doctor('ok') WHERE check_name = 'columns'"),
	qr{^warn/target_column_narrower/table public\.ok columns: s \(text -> character varying\(8\)\), d \(numeric\(12,2\) -> numeric\(4,2\)\)$},
	'doctor warns target_column_narrower for a shorter varchar and fewer integer digits only');
AshTest::assert_mirror_equal($src, $dst, ['ok']);

# ---------------------------------------------------------------------------
# 3: a source column retyped while streaming
# ---------------------------------------------------------------------------
my $facts = AshTest::checkpoint_facts($dst, 'ok');
q_src(q{
ALTER TABLE ok ALTER COLUMN w TYPE numeric(6,4);
INSERT INTO ok VALUES (2, 'next', 1.5, 1.2345, 'def');
});
AshTest::wait_status($dst, 'ok', 'misconfigured', 'source_type_invalid',
	name => 'a source column retyped to a larger scale: halts source_type_invalid');
AshTest::halt_left_nothing($dst, 'ok', 'SELECT count(*) FROM ok WHERE id = 2', '0', $facts);
q_dst('ALTER TABLE ok ALTER COLUMN w TYPE numeric');
AshTest::start_sink($dst, 'ok');
AshTest::wait_caught_up($src, $dst, 'ok', name => 'ok applies it with the target widened');
# the source's ALTER rewrote row 1 as 1.2500 (no change a decoder sends)
AshTest::assert_mirror_equal($src, $dst, ['(SELECT id, s, d, trim_scale(w) AS w, v FROM ok)'],
	order_by => 'id');
is(q_dst('SELECT w FROM ok WHERE id = 2'), '1.2345', 'the value exact');

# ---------------------------------------------------------------------------
# 4: a target column narrowed while streaming
# ---------------------------------------------------------------------------
q_dst('ALTER TABLE ok ALTER COLUMN w TYPE numeric(8,2)');
$facts = AshTest::checkpoint_facts($dst, 'ok');
q_src(q{INSERT INTO ok VALUES (3, 'third', 2.5, 5.4321, 'ghi')});
my ($st) = AshTest::wait_status($dst, 'ok', 'misconfigured', 'source_type_invalid',
	name => 'a target column narrowed to a smaller scale: the next change halts source_type_invalid');
AshTest::halt_left_nothing($dst, 'ok', 'SELECT count(*) FROM ok WHERE id = 3', '0', $facts);
q_dst('ALTER TABLE ok ALTER COLUMN w TYPE numeric');
AshTest::start_sink($dst, 'ok');
AshTest::wait_caught_up($src, $dst, 'ok', name => 'ok applies it with the target widened again');
is(q_dst('SELECT w FROM ok WHERE id = 3'), '5.4321', 'the value exact');

done_testing();
