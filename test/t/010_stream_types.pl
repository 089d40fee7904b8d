# Streaming mirror core: every common column type streams through pgoutput
# and lands exactly (README.md#how-apply-works, README.md#status-statistics-and-events).
#
# A source table with integer, numeric (NaN, ±Infinity, huge precision), float,
# text (unicode, quotes, backslashes, newlines, empty), varchar(n), bytea, bool,
# date, timestamp(tz) (ISO text in every form, in a source TimeZone whose
# offsets had minutes and seconds), interval, uuid, jsonb, int[]/text[] (NULL elements,
# multi-dimensional, empty), a domain over int with a CHECK and an enum —
# identical at the destination — gets inserts, updates (to and from NULL) and
# deletes; the mirror's content hash equals the source's, the status reaches
# healthy (census every second) and stat_pipelines counts the applied work.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $sink = 'types';

my $ddl = q{
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'it''s "complicated"');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE alltypes (
	id          integer PRIMARY KEY,
	c_int2      int2,
	c_int4      int4,
	c_int8      int8,
	c_num       numeric,
	c_num_p     numeric(40, 20),
	c_float4    float4,
	c_float8    float8,
	c_text      text,
	c_vc        varchar(12),
	c_char      char(3),
	c_bytea     bytea,
	c_bool      boolean,
	c_date      date,
	c_ts        timestamp,
	c_tstz      timestamptz,
	c_interval  interval,
	c_uuid      uuid,
	c_jsonb     jsonb,
	c_ints      integer[],
	c_texts     text[],
	c_dom       posint,
	c_enum      mood,
	c_notnull   text NOT NULL DEFAULT 'nn'
);
};
AshTest::both($src, $dst, $ddl);
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_types FOR TABLE alltypes');
# the walsender writes timestamptz in the source's TimeZone: one whose
# offsets had minutes and seconds (+00:19:32 before 1937, +00:20 to 1940),
# so the text the destination reads has every offset form
$src->safe_psql('postgres', q{ALTER SYSTEM SET TimeZone = 'Europe/Amsterdam'});
$src->reload;

AshTest::setup_pipeline($src, $dst,
	sink        => $sink,
	publication => 'pub_types',
	maps        => [ ['alltypes'] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams (first marker applied)')
  or BAIL_OUT('pipeline never streamed; nothing else can pass');

my $changes = 0;    # row changes made at the source below
my $xacts   = 0;    # source transactions below

# 1. inserts: typical values, edge values, and a row of NULLs
$src->safe_psql('postgres', q{
INSERT INTO alltypes VALUES
 (1, 32767, 2147483647, 9223372036854775807,
  123456789012345678901234567890.123456789012345678901234567890,
  12345678901234567890.12345678901234567890,
  1.5, 0.1,
  E'h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e \U0001F389 it''s "quoted"\nsecond line\ttab \\\\ backslash',
  'caf\u00e9 12chars'::varchar(12), 'ab',
  '\x00ff10275c'::bytea, true, '2024-02-29', '2024-02-29 23:59:59.999999',
  '2024-02-29 23:59:59.123456+05:30', '1 year 2 mons 3 days 04:05:06.789',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{"a": [1, 2, {"b": null}], "s": "it''s \u00e9 \"q\"", "n": 1.0e-30}',
  '{1,NULL,3}', '{"a b","c,d","e\"f",NULL,"NULL",""}',
  42, 'happy', 'x'),
 (2, -32768, -2147483648, -9223372036854775808,
  'NaN', -0.00000000000000000001,
  '-Infinity', 'NaN',
  '', 'x', 'x', '\x'::bytea, false, '0001-01-01 BC', '294276-12-31 23:59:59',
  '-infinity', '-178000000 years',
  '00000000-0000-0000-0000-000000000000',
  '[]', '{{1,2},{3,4}}', '{}', 1, 'it''s "complicated"', ''),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'all nulls'),
 (4, 0, 0, 0, 'Infinity', 0, 3.4e38, 1.7976931348623157e308, repeat('ab', 3000),
  NULL, NULL, decode(repeat('00ff', 500), 'hex'), NULL, 'infinity', NULL,
  'infinity', '0', NULL, 'null', '{}', '{NULL}', 2147483647, 'sad', 'y');
});
$changes += 4; $xacts++;

# huge precision: 10^900 + 0.5 and a value with 1000 fractional digits
$src->safe_psql('postgres', q{
INSERT INTO alltypes (id, c_num, c_num_p, c_text)
VALUES (5, (10::numeric ^ 900) + 0.5, 99999999999999999999.99999999999999999999, 'huge'),
       (6, round(1::numeric / 7, 1000), -99999999999999999999.99999999999999999999, 'frac');
});
$changes += 2; $xacts++;

# 2. updates: to NULL, from NULL, every type touched, several rows per xact
$src->safe_psql('postgres', q{
BEGIN;
UPDATE alltypes SET c_text = NULL, c_jsonb = NULL, c_enum = NULL, c_dom = NULL, c_ints = NULL WHERE id = 1;
UPDATE alltypes SET c_int2 = 7, c_num = 'NaN'::numeric, c_text = E'line1\r\nline2 \u00fc', c_vc = 'short',
       c_bytea = '\xdeadbeef', c_bool = true, c_date = '2000-01-01', c_tstz = '2000-01-01 00:00:00+00',
       c_uuid = gen_random_uuid(), c_jsonb = '{"k": "v"}', c_ints = '{5}', c_texts = '{"x"}',
       c_dom = 9, c_enum = 'ok', c_float8 = -0.0
 WHERE id = 3;
UPDATE alltypes SET c_int8 = c_int8 / 2, c_interval = c_interval / 2 WHERE id IN (1, 2);
COMMIT;
});
$changes += 4; $xacts++;

# 3. deletes, and a delete + re-insert of the same key in one transaction
$src->safe_psql('postgres', q{DELETE FROM alltypes WHERE id = 6});
$changes += 1; $xacts++;
$src->safe_psql('postgres', q{
BEGIN;
DELETE FROM alltypes WHERE id = 4;
INSERT INTO alltypes (id, c_text, c_enum, c_dom) VALUES (4, 'reborn', 'sad', 3);
COMMIT;
});
$changes += 2; $xacts++;

# 4. a multi-row transaction of generated rows
$src->safe_psql('postgres', q{
INSERT INTO alltypes (id, c_int4, c_num, c_text, c_bytea, c_tstz, c_jsonb, c_ints, c_texts, c_dom, c_enum)
SELECT g, g * 3, g / 7.0, 'row ' || g || E'\n' || md5(g::text), sha256(g::text::bytea),
       '2020-01-01'::timestamptz + g * interval '1 hour', jsonb_build_object('g', g, 'h', md5(g::text)),
       ARRAY[g, -g, NULL], ARRAY['t' || g, NULL], g, (ARRAY['sad','ok','happy']::mood[])[1 + g % 3]
FROM generate_series(100, 299) g;
});
$changes += 200; $xacts++;

# 4b. timestamps in the forms the destination reads without the general
# date parser (ISO text: fractions of 0-6 digits, offsets +HH, +HH:MM,
# +HH:MM:SS, a leap day, years of fewer digits) and in those it leaves to
# the input function (BC, five-digit years, infinity); and 500 random ones
# of years 1 to 9999 (every offset the zone had)
$src->safe_psql('postgres', q{
INSERT INTO alltypes (id, c_ts, c_tstz, c_text) VALUES
 (400, '2024-02-29 12:00:00', '2024-02-29 12:00:00+00', 'leap day, summer offset'),
 (401, '1900-06-30 23:59:59.5', '1900-06-30 23:59:59.5+00', 'offset with seconds'),
 (402, '1938-01-01 00:00:00.000001', '1938-01-01 00:00:00.000001+00', 'offset with minutes'),
 (403, '0099-12-31 00:00:00.123456', '0099-12-31 00:00:00.123456+00', 'two-digit year'),
 (404, '0001-01-01 00:00:00', '0001-01-01 00:00:00+00', 'first year AD'),
 (405, '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', 'last four-digit year'),
 (406, '10000-01-01 00:00:00', '10000-01-01 00:00:00+00', 'five-digit year'),
 (407, '0044-03-15 12:00:00 BC', '0044-03-15 12:00:00+00 BC', 'BC'),
 (408, 'infinity', '-infinity', 'infinity'),
 (409, '2021-03-28 01:59:59.99', '2021-03-28 00:59:59.99+00', 'before the spring change'),
 (410, '2021-10-31 02:30:00.1', '2021-10-31 00:30:00.1+00', 'autumn change');
SELECT setseed(0.25);
INSERT INTO alltypes (id, c_ts, c_tstz, c_text)
SELECT g, t, t, 'random' FROM (
	SELECT g, '0001-01-01'::timestamp + (random() * 315500000000)::bigint * interval '1 second'
	       + (random() * 1000000)::integer * interval '1 microsecond' AS t
	FROM generate_series(500, 999) g) r;
});
$changes += 511; $xacts += 2;
is($src->safe_psql('postgres', q{SELECT string_agg(c_tstz::text, ' | ' ORDER BY id) FROM alltypes WHERE id IN (401, 402, 403)}),
	'1900-07-01 00:19:31.5+00:19:32 | 1938-01-01 00:20:00.000001+00:20 | 0099-12-31 00:19:32.123456+00:19:32',
	'the source writes offsets with minutes and seconds (the forms the destination reads)');

AshTest::wait_caught_up($src, $dst, $sink);
AshTest::assert_mirror_equal($src, $dst, ['alltypes']);

# Type-level spot checks (a hash alone would not say which type went wrong).
for my $c (qw(c_num c_float8 c_text c_bytea c_ts c_tstz c_jsonb c_ints c_texts c_dom c_enum))
{
	my $sql = "SET extra_float_digits = 3; SET TimeZone = 'UTC'; SELECT md5(string_agg(coalesce(${c}::text, '<NULL>'), '|' ORDER BY id)) FROM alltypes";
	is($dst->safe_psql('postgres', $sql), $src->safe_psql('postgres', $sql), "column $c equal");
}
is($dst->safe_psql('postgres', "SELECT c_num = (10::numeric ^ 900) + 0.5 FROM alltypes WHERE id = 5"),
	't', 'huge numeric kept exactly');
is($dst->safe_psql('postgres', "SELECT count(*) FROM alltypes WHERE c_num = 'NaN'"),
	$src->safe_psql('postgres', "SELECT count(*) FROM alltypes WHERE c_num = 'NaN'"), 'numeric NaN kept');
is($dst->safe_psql('postgres', "SELECT num_nulls(c_int4, c_int8, c_num_p, c_float4, c_char, c_ts, c_interval) FROM alltypes WHERE id = 3"),
	'7', 'NULLs kept in every untouched nullable column');

# 5. healthy: live worker, census passed (interval 1 s)
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src);

# 6. stat_pipelines shows the applied work
my $st = AshTest::stat_row($dst, $sink) // {};
note explain $st;
ok(defined $st->{sink_name}, 'stat_pipelines has a row for the sink');
cmp_ok($st->{applied_transactions} // 0, '>=', $xacts, "applied_transactions >= $xacts");
cmp_ok($st->{applied_changes} // 0, '>=', $changes, "applied_changes >= $changes");
cmp_ok($st->{received_transactions} // 0, '>=', $st->{applied_transactions} // 0,
	'received_transactions >= applied_transactions');
is($st->{missing_row_deletes} // -1, 0, 'no missing-row deletes on an exact mirror');
ok(defined $st->{applied_lsn}, 'applied_lsn is shown');
my $cp = AshTest::checkpoint_row($dst, $sink) // {};
ok(defined $st->{applied_lsn} && grep({ defined $_ && $_ eq $st->{applied_lsn} } $cp->{commit_lsn}, $cp->{end_lsn}),
	'applied_lsn is the durable watermark (checkpoint commit or end LSN)')
  or diag "applied_lsn=" . ($st->{applied_lsn} // 'NULL') . " checkpoint=" . ($cp->{commit_lsn} // 'NULL') . "/" . ($cp->{end_lsn} // 'NULL');
is($st->{reason}, undef, 'no halt reason');

# 7. nothing unexpected in the destination log
my @errors = AshTest::log_lines_like($dst, qr/\b(ERROR|FATAL|PANIC):/);
is(scalar(@errors), 0, 'no ERROR/FATAL in the destination log') or diag join("\n", @errors[0 .. ($#errors < 9 ? $#errors : 9)]);

done_testing();
