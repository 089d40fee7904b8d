# Target columns that take a value without an error and keep another one
# (docs/operations.md, "Target columns that round"), beyond rounding:
#
#   1  a timestamp (or date) source column into a timestamptz target is read
#      in the destination's TimeZone.  Under a zone with daylight saving
#      time, a local time inside the spring-forward gap becomes the hour
#      after it ('2024-03-10 02:30' read as 03:30 in America/New_York), and
#      every value moves when the destination's TimeZone setting does.  The
#      previous build copied and streamed such values, healthy; refused now
#      like time into timetz: source_type_invalid at start, doctor names the
#      columns; the target retyped to timestamp/date, the pipeline copies
#      and streams exactly.
#   2  the same source column retyped from timestamptz to timestamp while
#      streaming: the next change halts source_type_invalid, nothing of its
#      transaction committed (retyping the target to follow is a contract
#      change: docs/operations.md, "Target DDL while streaming").
#   3  a varchar(n) target shorter than the source keeps a value whose
#      excess is all spaces cut to n characters (PostgreSQL's varchar rule):
#      'ab    ' into varchar(3) became 'ab ' on the previous build, healthy.  Now such a
#      value fails as any longer value does (apply_failed, 22001), in the
#      copy (binary) and streamed (text), its value in no log; widened, a
#      plain start writes it exactly.  An element of a varchar(n)[] the
#      same (the previous build cut each element's spaces, healthy).
#   4  a real into a double precision target holds the real's own value, as
#      the cast gives it (1.1::real::float8 is 1.10000002384185791015625):
#      the previous build read it through text, and held 1.1 for a copied
#      row and 1.10000002 for a streamed one -- for a key, an update of a
#      copied row missed it; a domain over double precision the same, its
#      check run.
#   5  a composite type of the same name whose fields are in another order:
#      its text, read by position, put the street into the city (the
#      previous build copied it so, healthy); refused at start
#      (source_type_invalid, doctor names the column and its array); the
#      target type's fields renamed into the source's order, it copies and
#      streams exactly, a composite into a text column unjudged.
#   6  OID alias types (regclass, regtype[]) into text targets: a streamed
#      value is the object's name at the source, a copied one the bare OID
#      (the previous build: the two in one mirror, healthy); refused at
#      start (source_type_invalid), doctor names both columns.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(dst_conf => "timezone = 'America/New_York'\n");

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_src(q{
CREATE TABLE z (id integer PRIMARY KEY, a timestamp, d date, k timestamptz);
INSERT INTO z VALUES (1, '2024-03-10 02:30:00', '2024-03-10', '2024-03-10 07:30:00+00'),
	(2, '2024-03-10 03:30:00', '2024-03-11', '2024-03-10 08:30:00+00');
CREATE TABLE s (id integer PRIMARY KEY, v text, w varchar(30));
INSERT INTO s VALUES (1, 'abc', 'ab');
CREATE TABLE c (id integer PRIMARY KEY, w varchar(30));
INSERT INTO c VALUES (1, 'ok'), (2, 'cpy_spaces_sentinel      ');
CREATE TABLE ca (id integer PRIMARY KEY, w varchar(30)[]);
INSERT INTO ca VALUES (1, '{ok}'), (2, '{x,"arr_spaces_sentinel      "}');
CREATE TABLE f (id integer PRIMARY KEY, r real, rd real);
INSERT INTO f VALUES (1, 1.1, 1.1), (2, 3.4028235e38, 'Infinity'), (3, 'NaN', -0.1), (4, NULL, 16777217);
CREATE TYPE addr AS (street text, city text);
CREATE TABLE p (id integer PRIMARY KEY, a addr, aa addr[], at addr);
INSERT INTO p VALUES (1, ROW('Main', 'Springfield'), ARRAY[ROW('Elm', 'Shelbyville')::addr], ROW('x', 'y'));
CREATE PUBLICATION pub_p FOR TABLE p;
CREATE PUBLICATION pub_z FOR TABLE z;
CREATE TABLE fk (k real PRIMARY KEY, v integer);
INSERT INTO fk VALUES (1.1, 1), (2.2, 1);
CREATE PUBLICATION pub_f FOR TABLE f, fk;
CREATE PUBLICATION pub_s FOR TABLE s;
CREATE PUBLICATION pub_c FOR TABLE c;
CREATE PUBLICATION pub_ca FOR TABLE ca;
});
q_dst(q{
CREATE TABLE z (id integer PRIMARY KEY, a timestamptz, d timestamptz, k timestamptz);
CREATE TABLE s (id integer PRIMARY KEY, v varchar(20), w varchar(20));
CREATE TABLE c (id integer PRIMARY KEY, w varchar(20));
CREATE TABLE ca (id integer PRIMARY KEY, w varchar(20)[]);
CREATE DOMAIN dbl AS double precision CHECK (VALUE <> 42);
CREATE TABLE f (id integer PRIMARY KEY, r double precision, rd dbl);
CREATE TABLE fk (k double precision PRIMARY KEY, v integer);
CREATE TYPE addr AS (city text, street text);
CREATE TABLE p (id integer PRIMARY KEY, a addr, aa addr[], at text);
});

my $v1 = "go_forward_only => false, snapshot => 'v1'";

# ---------------------------------------------------------------------------
# 1: timestamp and date into timestamptz refused before anything is copied
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'z', publication => 'pub_z',
	maps => [ ['z'] ], pipeline_extra => $v1, census => '{"interval_ms": 600000}');
AshTest::wait_status($dst, 'z', 'misconfigured', 'source_type_invalid',
	name => 'timestamp and date into timestamptz: start halts source_type_invalid');
is(q_dst('SELECT count(*) FROM z'), '0', '... nothing copied');
my $pf = q_dst("SELECT verdict || '/' || reason || '/' || detail FROM ash_replicant_doctor('z') WHERE check_name = 'columns'");
like($pf, qr{^fail/source_type_invalid/table public\.z columns whose target type would read their values in the destination's time zone: },
	'doctor: columns fails source_type_invalid');
like($pf, qr/\Qa (timestamp without time zone -> timestamp with time zone)\E/, '... names a');
like($pf, qr/\Qd (date -> timestamp with time zone)\E/, '... names d');
unlike($pf, qr/\bk \(/, '... not k (timestamptz into timestamptz)');

q_dst('ALTER TABLE z ALTER COLUMN a TYPE timestamp, ALTER COLUMN d TYPE date');
is(q_dst("SELECT verdict FROM ash_replicant_doctor('z') WHERE check_name = 'columns'"), 'pass',
	'the target retyped as the source: doctor passes');
AshTest::start_sink($dst, 'z');
AshTest::wait_caught_up($src, $dst, 'z', name => 'z copies and streams')
  or BAIL_OUT('sink z never streamed');
q_src(q{INSERT INTO z VALUES (3, '2024-03-10 02:45:00', '2024-03-10', '2024-03-10 07:45:00+00')});
AshTest::wait_caught_up($src, $dst, 'z', name => 'z applies a change');
AshTest::assert_mirror_equal($src, $dst, ['z']);
is(q_dst('SELECT a FROM z WHERE id = 1'), '2024-03-10 02:30:00', 'the gap time kept as the source has it');

# ---------------------------------------------------------------------------
# 2: a source column retyped to timestamp while streaming
# ---------------------------------------------------------------------------
my $facts = AshTest::checkpoint_facts($dst, 'z');
q_src(q{
ALTER TABLE z ALTER COLUMN k TYPE timestamp USING k AT TIME ZONE 'UTC';
INSERT INTO z VALUES (4, '2024-03-10 02:50:00', '2024-03-10', '2024-03-10 02:50:00');
});
AshTest::wait_status($dst, 'z', 'misconfigured', 'source_type_invalid',
	name => 'a source column retyped from timestamptz to timestamp: halts source_type_invalid');
AshTest::halt_left_nothing($dst, 'z', 'SELECT count(*) FROM z WHERE id = 4', '0', $facts);

# ---------------------------------------------------------------------------
# 3: a varchar(n) target and a value whose excess is spaces
# ---------------------------------------------------------------------------
# streamed (text): the narrower target is a warning; a longer value halts
AshTest::setup_pipeline($src, $dst, sink => 's', publication => 'pub_s',
	maps => [ ['s'] ], pipeline_extra => $v1, census => '{"interval_ms": 600000}');
AshTest::wait_caught_up($src, $dst, 's', name => 's copies and streams')
  or BAIL_OUT('sink s never streamed');
$facts = AshTest::checkpoint_facts($dst, 's');
q_src(q{INSERT INTO s VALUES (2, 'str_spaces_sentinel    ', 'ok')});
AshTest::wait_status($dst, 's', 'halted', 'apply_failed',
	name => 'a streamed value whose excess is spaces: halts apply_failed');
is(AshTest::status_row($dst, 's')->{halt_condition}, 'string_data_right_truncation',
	'... string_data_right_truncation');
AshTest::halt_left_nothing($dst, 's', 'SELECT count(*) FROM s WHERE id > 1', '0', $facts);
q_dst('ALTER TABLE s ALTER COLUMN v TYPE varchar(30)');
AshTest::start_sink($dst, 's');
AshTest::wait_caught_up($src, $dst, 's', name => 's applies it with the target widened');
is(q_dst('SELECT length(v) FROM s WHERE id = 2'), '23', 'the spaces kept');
AshTest::assert_mirror_equal($src, $dst, ['s']);

# streamed, a varchar(30) source into varchar(20): the same
$facts = AshTest::checkpoint_facts($dst, 's');
q_src(q{UPDATE s SET w = 'upd_spaces_sentinel      ' WHERE id = 1});
AshTest::wait_status($dst, 's', 'halted', 'apply_failed',
	name => 'varchar(30) into varchar(20), the excess spaces: halts apply_failed');
is(AshTest::checkpoint_facts($dst, 's'), $facts, '... the checkpoint unchanged');
q_dst('ALTER TABLE s ALTER COLUMN w TYPE varchar(30)');
AshTest::start_sink($dst, 's');
AshTest::wait_caught_up($src, $dst, 's', name => 's applies it with w widened');
AshTest::assert_mirror_equal($src, $dst, ['s']);

# copied (binary, the same type): the copy halts, nothing of the table copied
AshTest::setup_pipeline($src, $dst, sink => 'c', publication => 'pub_c',
	maps => [ ['c'] ], pipeline_extra => $v1, census => '{"interval_ms": 600000}');
AshTest::wait_status($dst, 'c', 'halted', 'apply_failed',
	name => 'a copied value whose excess is spaces: halts apply_failed');
is(q_dst('SELECT count(*) FROM c'), '0', '... nothing of the table copied');
q_dst('ALTER TABLE c ALTER COLUMN w TYPE varchar(30)');
AshTest::start_sink($dst, 'c');
AshTest::wait_caught_up($src, $dst, 'c', name => 'c copies with the target widened');
AshTest::assert_mirror_equal($src, $dst, ['c']);

# an array of varchar(n): its elements the same (the previous build cut
# the spaces of each, copied and streamed, healthy, verify saying match)
AshTest::setup_pipeline($src, $dst, sink => 'ca', publication => 'pub_ca',
	maps => [ ['ca'] ], pipeline_extra => $v1, census => '{"interval_ms": 600000}');
AshTest::wait_status($dst, 'ca', 'halted', 'apply_failed',
	name => 'a copied array element whose excess is spaces: halts apply_failed');
is(AshTest::status_row($dst, 'ca')->{halt_condition}, 'string_data_right_truncation',
	'... string_data_right_truncation');
is(q_dst('SELECT count(*) FROM ca'), '0', '... nothing of the table copied');
like(q_dst("SELECT verdict || '/' || reason FROM ash_replicant_doctor('ca') WHERE check_name = 'columns'"),
	qr{^warn/target_column_narrower}, '... doctor warns target_column_narrower');
q_dst('ALTER TABLE ca ALTER COLUMN w TYPE varchar(30)[]');
AshTest::start_sink($dst, 'ca');
AshTest::wait_caught_up($src, $dst, 'ca', name => 'ca copies with the target widened');
AshTest::assert_mirror_equal($src, $dst, ['ca']);

# ---------------------------------------------------------------------------
# 4: a real into double precision, copied and streamed
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'f', publication => 'pub_f',
	maps => [ ['f'], ['fk'] ], pipeline_extra => $v1);
AshTest::wait_caught_up($src, $dst, 'f', name => 'f copies and streams')
  or BAIL_OUT('sink f never streamed');
q_src(q{INSERT INTO f VALUES (5, 1.1, 1.1), (6, 0.3, 1e-45), (7, -3.4028235e38, '-Infinity');
	UPDATE fk SET v = 2});
AshTest::wait_caught_up($src, $dst, 'f', name => 'f applies a change');
my $widened = q{SET extra_float_digits = 3; SELECT string_agg(format('%s %s %s', id, r, rd), ', ' ORDER BY id) FROM };
is(q_dst($widened . 'f'), q_src($widened . '(SELECT id, r::float8 AS r, rd::float8 AS rd FROM f) f'),
	'every real held as its own value, copied and streamed');
is(q_dst(q{SELECT r FROM f WHERE id = 1}), '1.100000023841858',
	'1.1::real as the cast widens it');
is(q_dst('SELECT string_agg(v::text, \',\' ORDER BY k) FROM fk'), '2,2',
	'a real key copied, then updated by the stream: the same row');
is(q_dst(q{SELECT string_agg(source_table || ':' || verdict, ',' ORDER BY source_table) FROM ash_replicant_verify('f') WHERE source_table NOT LIKE 'ash_marker%'}),
	'f:match,fk:match', 'verify: keys and values match (the source\'s reals cast to double precision)');
q_src(q{INSERT INTO f VALUES (8, 1, 42)});
AshTest::wait_status($dst, 'f', 'halted', 'apply_failed',
	name => 'the domain\'s check runs on a widened value');

# ---------------------------------------------------------------------------
# 5: a composite type whose fields are in another order
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'p', publication => 'pub_p',
	maps => [ ['p'] ], pipeline_extra => $v1);
AshTest::wait_status($dst, 'p', 'misconfigured', 'source_type_invalid',
	name => 'a composite type of other fields: start halts source_type_invalid');
is(q_dst('SELECT count(*) FROM p'), '0', '... nothing copied');
is(q_dst("SELECT detail FROM ash_replicant_doctor('p') WHERE check_name = 'columns'"),
	'table public.p columns whose composite type has other fields at the destination: a (addr), aa (_addr)',
	'doctor names the column and its array, not the text column');
q_dst(q{ALTER TYPE addr RENAME ATTRIBUTE city TO tmp;
ALTER TYPE addr RENAME ATTRIBUTE street TO city;
ALTER TYPE addr RENAME ATTRIBUTE tmp TO street});
AshTest::start_sink($dst, 'p');
AshTest::wait_caught_up($src, $dst, 'p', name => 'the fields in the source\'s order: copies and streams')
  or BAIL_OUT('sink p never streamed');
q_src(q{INSERT INTO p VALUES (2, ROW('Oak', 'Capital City'), NULL, NULL)});
AshTest::wait_caught_up($src, $dst, 'p', name => 'p applies a change');
is(q_dst(q{SELECT string_agg((a).street || '/' || (a).city, ',' ORDER BY id) FROM p}),
	'Main/Springfield,Oak/Capital City', 'each street a street, each city a city');
AshTest::assert_mirror_equal($src, $dst, ['p']);

# ---------------------------------------------------------------------------
# 6: OID alias types
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE o (id integer PRIMARY KEY, rc regclass, rt regtype[], v text);
INSERT INTO o VALUES (1, 'o', '{integer}', 'x');
CREATE PUBLICATION pub_o FOR TABLE o;
});
q_dst(q{CREATE TABLE o (id integer PRIMARY KEY, rc text, rt text, v text)});
AshTest::setup_pipeline($src, $dst, sink => 'o', publication => 'pub_o',
	maps => [ ['o'] ], pipeline_extra => $v1);
AshTest::wait_status($dst, 'o', 'misconfigured', 'source_type_invalid',
	name => 'OID alias types (a copy gave bare OIDs, the stream names): start halts source_type_invalid');
is(q_dst('SELECT count(*) FROM o'), '0', '... nothing copied');
like(q_dst("SELECT detail FROM ash_replicant_doctor('o') WHERE check_name = 'columns'"),
	qr/rc \(regclass -> text\).*rt \(regtype\[\] -> text\)/, 'doctor names both columns');

# the source logs every statement (log_statement = all): the destination's
is(scalar(AshTest::grep_logs_for('spaces_sentinel', $dst)), 0, 'no failing value in the destination log');

done_testing();
