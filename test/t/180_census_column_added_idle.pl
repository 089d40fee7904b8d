# A source column added to a table that then sees no change
# (docs/reasons.md#source_column_added).  The stream judges an added column
# only when a description of the table arrives, with its next change; for an
# idle table that was never: the source's rows held the column's default,
# the mirror's NULL, and status said healthy census after census.  The
# census now compares the source's columns with the table's record, as the
# stream would -- or, for a table no change of which was applied yet, with
# the columns the publication record held when the session started.
#
#   1  a table with a record whose target is empty, and one without a
#      record whose target is empty: a column added at both ends is no
#      halt (no row predates it).
#   2  the idle table with rows (the documented order: the target's column
#      first): halted source_column_added by the census, naming the table
#      and the column, the mirror unchanged; the rows made to agree and
#      acknowledged, the pipeline goes on healthy, and the table's next
#      change takes the addition.
#   3  an idle table with rows and no record yet (no change of it applied
#      since the pipeline started): halted the same, its record written
#      with the columns it had at the session's start (at the halt, or
#      kept by an earlier census), so that a restart halts again (before
#      the record: a restart's publication record held the column and took
#      it); made to agree and acknowledged, healthy, the next change takes
#      the addition.
#   4  the census judges only once the stream has passed the position it
#      read the catalog at: a column added to a table with rows and the
#      table truncated next, both behind a large transaction the walsender
#      takes seconds to decode when the pipeline starts (its first census
#      runs at once), is no halt: the stream applies the TRUNCATE before
#      any census may judge, and the target is empty then.
#   5  a column added at the source that the target does not map: the
#      census halts source_column_unmapped, as before.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_idle_added_9d1c';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub record
{
	my ($table) = @_;
	return q_dst("SELECT array_to_string(columns, ',') FROM ash_replicant.source_columns"
		  . " WHERE slot_name = 's' AND source_table = '$table'");
}

AshTest::both($src, $dst, q{
CREATE TABLE a (id int PRIMARY KEY, v text);
CREATE TABLE b (id int PRIMARY KEY, v text);
CREATE TABLE e (id int PRIMARY KEY, v text);
CREATE TABLE n (id int PRIMARY KEY, v text);
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE z (id int PRIMARY KEY, v text);
INSERT INTO n SELECT g, 'n' || g FROM generate_series(1, 3) g;
});
q_src('CREATE PUBLICATION pub FOR TABLE a, b, e, n, t, z');
AshTest::setup_pipeline($src, $dst, sink => 's', publication => 'pub',
	maps => [ ['a'], ['b'], ['e'], ['n'], [ 't', on_truncate => 'mirror' ], ['z'] ]);
q_dst("SELECT ash_replicant_wait_for_slot('s', '60s')");
q_src("INSERT INTO a SELECT g, 'r' || g FROM generate_series(1, 3) g;"
	  . " INSERT INTO t SELECT g, 't' || g FROM generate_series(1, 3) g;"
	  . " INSERT INTO e VALUES (1, 'gone'); DELETE FROM e");
ok(AshTest::wait_caught_up($src, $dst, 's'), 'streaming');
AshTest::assert_mirror_equal($src, $dst, ['a', 'e', 'n'], name => 'before the ALTERs');
is(record('a'), 'id,v', 'a has a record of its columns');
is(record('e'), 'id,v', 'e has a record of its columns, and an empty target');
# no change of n or z applied: no record yet, or the one the census keeps
# once the stream has passed its catalog read (test 194)
like(record('n'), qr/^(id,v)?$/, 'n has no record but its session baseline');
like(record('z'), qr/^(id,v)?$/, 'z has no record but its session baseline, and an empty target');

# 1: no row predates the column (e, z)
q_dst('ALTER TABLE e ADD COLUMN c text; ALTER TABLE z ADD COLUMN c text');
q_src("ALTER TABLE e ADD COLUMN c text DEFAULT 'd1'; ALTER TABLE z ADD COLUMN c text DEFAULT 'd2'");
q_src("INSERT INTO b VALUES (1, 'x')");
AshTest::wait_caught_up($src, $dst, 's', quiet => 1);
ok(AshTest::census_runs($dst, 's', 3), '1: several census runs after a column added to empty targets');
AshTest::wait_status($dst, 's', 'healthy', undef,
	name => '1: no halt for an empty target, with a record or without');

# 2: the idle table with rows
my $mirror = AshTest::table_hash($dst, 'a');
q_dst('ALTER TABLE a ADD COLUMN c text');
q_src("ALTER TABLE a ADD COLUMN c text DEFAULT '$SENTINEL'");
my $mirror_altered = AshTest::table_hash($dst, 'a');
for my $i (2 .. 4)
{
	q_src("INSERT INTO b VALUES ($i, 'x')");
	AshTest::wait_caught_up($src, $dst, 's', quiet => 1);
}
AshTest::wait_status($dst, 's', 'halted', 'source_column_added', src => $src, timeout => 30,
	name => '2: the census halts source_column_added for a column added to an idle table');
ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=s reason=source_column_added .*public\.a: source columns c were added while its target held rows/)),
	'2: the halt names the table and the column');
is(scalar(AshTest::grep_logs_for($SENTINEL, $src, $dst)), 0, '2: the default is in no server log');
is(AshTest::table_hash($dst, 'a'), $mirror_altered, '2: the mirror of a is unchanged');
is(q_dst('SELECT count(*) FROM a WHERE c IS NULL'), '3', '2: its rows still lack the value');
is(record('a'), 'id,v', '2: the record of a is unchanged');

# the operator makes the rows agree and acknowledges (documented order)
AshTest::stop_settled($src, $dst, 's');
q_dst("UPDATE a SET c = '$SENTINEL'");
my ($sysid, $dbname) = AshTest::source_identity($src);
is(q_dst("SELECT ash_replicant_acknowledge_column_added('s', " . AshTest::lit($sysid) . ', '
		  . AshTest::lit($dbname) . ", 'public', 'a')"), 't', '2: acknowledged');
AshTest::start_sink($dst, 's');
q_src("INSERT INTO b VALUES (5, 'x')");
AshTest::wait_caught_up($src, $dst, 's', quiet => 1);
ok(AshTest::census_runs($dst, 's', 3), '2: several census runs after the acknowledgement');
AshTest::wait_status($dst, 's', 'healthy', undef, name => '2: healthy after the acknowledgement');
AshTest::assert_mirror_equal($src, $dst, ['a', 'b', 'e'], name => '2: acknowledged, idle');
q_src("UPDATE a SET v = 'changed' WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 's'), '2: the next change of a streams');
AshTest::assert_mirror_equal($src, $dst, ['a'], name => '2: after the next change');
is(record('a'), 'id,v,c', '2: the description took the addition');
ok(AshTest::census_runs($dst, 's', 2), '2: census runs after the next change');
AshTest::wait_status($dst, 's', 'healthy', undef, name => '2: still healthy');

# 3: an idle table with rows and no record yet
q_dst('ALTER TABLE n ADD COLUMN c text');
q_src("ALTER TABLE n ADD COLUMN c text DEFAULT '$SENTINEL'");
q_src("INSERT INTO b VALUES (6, 'x')");
AshTest::wait_status($dst, 's', 'halted', 'source_column_added', src => $src, timeout => 30,
	name => '3: the census halts source_column_added for a table with no record yet');
ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=s reason=source_column_added .*public\.n: source columns c were added while its target held rows/)),
	'3: the halt names the table and the column');
is(record('n'), 'id,v', '3: its record holds the columns the session started with');
is(q_dst('SELECT count(*) FROM n WHERE c IS NULL'), '3', '3: its rows still lack the value');
AshTest::stop_settled($src, $dst, 's');
AshTest::start_sink($dst, 's');
AshTest::wait_status($dst, 's', 'halted', 'source_column_added', src => $src, timeout => 30,
	name => '3: a restart halts again (the record stays; not taken with the new start)');
AshTest::stop_settled($src, $dst, 's');
q_dst("UPDATE n SET c = '$SENTINEL'");
is(q_dst("SELECT ash_replicant_acknowledge_column_added('s', " . AshTest::lit($sysid) . ', '
		  . AshTest::lit($dbname) . ", 'public', 'n')"), 't', '3: acknowledged');
AshTest::start_sink($dst, 's');
q_src("INSERT INTO b VALUES (7, 'x')");
AshTest::wait_caught_up($src, $dst, 's', quiet => 1);
ok(AshTest::census_runs($dst, 's', 2), '3: census runs after the acknowledgement');
AshTest::wait_status($dst, 's', 'healthy', undef, name => '3: healthy after the acknowledgement');
q_src("UPDATE n SET v = 'changed' WHERE id = 2");
ok(AshTest::wait_caught_up($src, $dst, 's'), '3: the next change of n streams');
AshTest::assert_mirror_equal($src, $dst, ['n'], name => '3: after the next change');
is(record('n'), 'id,v,c', '3: the description took the addition');
is(scalar(AshTest::grep_logs_for($SENTINEL, $src, $dst)), 0, '3: the default is in no server log');

# 4: the addition and a TRUNCATE still to stream, behind a large transaction
AshTest::stop_settled($src, $dst, 's');
is(record('t'), 'id,v', '4: t has a record of its columns');
q_src('CREATE TABLE unpublished (id int); INSERT INTO unpublished SELECT generate_series(1, 2000000)');
q_dst('ALTER TABLE t ADD COLUMN c text');
q_src("ALTER TABLE t ADD COLUMN c text DEFAULT '$SENTINEL'; TRUNCATE t");
q_src("INSERT INTO b VALUES (9999, 'x')");
AshTest::start_sink($dst, 's');
ok(AshTest::wait_caught_up($src, $dst, 's'), '4: caught up after the held-back addition');
ok(AshTest::census_runs($dst, 's', 2), '4: census runs after the TRUNCATE streamed');
AshTest::wait_status($dst, 's', 'healthy', undef,
	name => '4: no halt: the census did not judge before the stream passed its catalog read');
ok(!AshTest::log_lines_like($dst, qr/reason=source_column_added .*public\.t:/),
	'4: no source_column_added for t was ever logged');
AshTest::assert_mirror_equal($src, $dst, ['t', 'b'], name => '4: truncated at both ends');
q_src("INSERT INTO t (id, v) VALUES (1, 'after')");
ok(AshTest::wait_caught_up($src, $dst, 's'), '4: the next change of t streams into the empty target');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => '4: the column taken');
AshTest::wait_status($dst, 's', 'healthy', undef, name => '4: still healthy');

# 5: a column the target does not map: the census's existing business
q_src('ALTER TABLE b ADD COLUMN x integer DEFAULT 1');
AshTest::wait_status($dst, 's', 'misconfigured', 'source_column_unmapped', src => $src, timeout => 30,
	name => '5: a source column the target lacks halts source_column_unmapped, as before');

done_testing();
