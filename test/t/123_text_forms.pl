# Values written as text (a target column of a string type; an encrypted
# column's plaintext is the same text) read the same whether the row was
# copied or streamed, whatever either server's session settings
# (docs/operations.md, "Values as text").  A streamed value's text is the
# source's (its walsender's TimeZone and bytea_output were the source
# server's); a copied value arrives in binary and is rendered by the worker
# (under the destination's DateStyle, IntervalStyle, extra_float_digits,
# TimeZone and bytea_output).  On the previous build, with a destination in
# 'SQL, DMY' and a source in Asia/Kolkata, a copied date became '10/03/2024'
# and a streamed timestamptz '2024-03-10 13:00:00+05:30'; with
# extra_float_digits = 0 a copied double lost its last digits.  Both ends
# now render as the source connection is set up: DateStyle ISO,
# IntervalStyle postgres, extra_float_digits 3, TimeZone UTC, bytea_output
# hex, lc_monetary C.  Section 2: a source role's statement_timeout and
# idle_in_transaction_session_timeout do not end a snapshot's sessions.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(
	src_conf => "timezone = 'Asia/Kolkata'\nbytea_output = 'escape'\n",
	dst_conf => "timezone = 'America/New_York'\ndatestyle = 'SQL, DMY'\n"
	  . "intervalstyle = 'sql_standard'\nextra_float_digits = 0\nbytea_output = 'escape'\n");

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

my @cols = qw(d ts f8 f4 iv b tt ttz fa tsa m);
q_src(q{
CREATE TABLE t (id integer PRIMARY KEY, d date, ts timestamptz, f8 double precision, f4 real,
	iv interval, b bytea, tt timestamp, ttz timetz, fa double precision[], tsa timestamptz[], m money);
CREATE FUNCTION row_of(g integer) RETURNS t LANGUAGE sql AS $$
	SELECT g, date '2024-03-10' + g, timestamptz '2024-03-10 07:30:00.25+00' + g * interval '1 hour',
		pi() + g, 1.1::real + g, interval '-1 day +02:03:04.5' * g, decode('00ff0a5c', 'hex') || int4send(g),
		timestamp '2024-03-10 02:30:00' + g * interval '1 minute', timetz '10:00:00+05:30',
		ARRAY[1.0 / 3, g], ARRAY[timestamptz '2024-01-01 00:00:00+00'], 1234.5 * g
$$;
INSERT INTO t SELECT (row_of(g)).* FROM generate_series(1, 3) g;
CREATE PUBLICATION pub_t FOR TABLE t;
});
q_dst('CREATE TABLE t (id integer PRIMARY KEY, ' . join(', ', map { "$_ text" } @cols) . ')');

# the source's text under the settings both ends now use
my $pinned = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres';"
  . " SET extra_float_digits = 3; SET bytea_output = 'hex';";
my $rows = 'SELECT string_agg(concat_ws(\'|\', id, ' . join(', ', map { "$_\::text" } @cols)
  . '), E\'\n\' ORDER BY id) FROM t';

AshTest::setup_pipeline($src, $dst, sink => 't', publication => 'pub_t',
	maps => [ ['t'] ], pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_caught_up($src, $dst, 't', name => 't copies and streams')
  or BAIL_OUT('sink t never streamed');
is(q_dst($rows), q_src($pinned . $rows), 'copied rows: the source\'s text under the pinned settings');

q_src(q{INSERT INTO t SELECT (row_of(g)).* FROM generate_series(4, 6) g;
	UPDATE t SET f8 = f8 * 3, tt = tt + interval '1 hour' WHERE id = 2});
AshTest::wait_caught_up($src, $dst, 't', name => 't applies changes');
is(q_dst($rows), q_src($pinned . $rows), 'copied and streamed rows: the same text');
is(q_dst(q{SELECT verdict || '/' || coalesce(reason, '-') FROM ash_replicant_verify('t') WHERE source_table = 't'}), 'match/-',
	'verify: every value matches the source\'s text');
is(q_dst('SELECT d || \' \' || ts || \' \' || f8 FROM t WHERE id = 1'),
	'2024-03-11 2024-03-10 08:30:00.25+00 4.141592653589793',
	'a copied date, timestamptz and double as ISO, UTC and shortest-exact');
is(q_dst('SELECT d || \' \' || ts || \' \' || f8 FROM t WHERE id = 4'),
	'2024-03-14 2024-03-10 11:30:00.25+00 7.141592653589793',
	'a streamed one alike');

# ---------------------------------------------------------------------------
# Source session timeouts.  The source role the pipeline connects as has a
# statement_timeout and an idle_in_transaction_session_timeout of one second
# (as many production roles do).  A snapshot's COPY runs for as long as the
# destination takes to write it, and the walsender that exported its
# snapshot stays idle in its transaction meanwhile: every source session
# the worker opens sets these aside, as pg_dump does.  The previous build
# lost the walsender to the idle timeout during each copy (event
# source.fault step=snapshot), and cancelled any COPY that ran past its own
# 60 s statement_timeout, at every attempt: a table that large was never
# copied.
# ---------------------------------------------------------------------------
q_src(q{
CREATE ROLE copier LOGIN REPLICATION;
GRANT pg_read_all_settings TO copier;
ALTER ROLE copier SET statement_timeout = '1s';
ALTER ROLE copier SET idle_in_transaction_session_timeout = '1s';
CREATE TABLE big (id integer PRIMARY KEY, v text);
INSERT INTO big SELECT g, repeat('v', 60) FROM generate_series(1, 200000) g;
GRANT SELECT ON big TO copier;
CREATE PUBLICATION pub_big FOR TABLE big;
});
# the destination writes slowly: 2.5 s at the first row (the COPY stays
# open on the source), 2.5 s more at the copy's commit (the walsender and
# the reading session wait, idle, in their transactions)
q_dst(q{
CREATE TABLE big (id integer PRIMARY KEY, v text);
CREATE FUNCTION big_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.id = 1 THEN PERFORM pg_sleep(2.5); END IF; RETURN NEW; END $$;
CREATE TRIGGER big_slow BEFORE INSERT ON big FOR EACH ROW EXECUTE FUNCTION big_slow();
CREATE CONSTRAINT TRIGGER big_slow_commit AFTER INSERT ON big DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION big_slow();
});
AshTest::setup_pipeline($src, $dst, sink => 'big', publication => 'pub_big', maps => [ ['big'] ],
	connection => AshTest::conninfo($src) =~ s/user=\S+/user=copier/r, source_role => 'copier',
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_caught_up($src, $dst, 'big', name => 'a copy outlasting the role\'s timeouts completes');
AshTest::assert_mirror_equal($src, $dst, ['big']);
is(join("\n", AshTest::log_lines_like($dst, qr/event=source\.fault sink=big /)), '',
	'... without a source fault: no session of the worker was ended');

done_testing();
