# A mapped source column replaced under its name (docs/reasons.md#publication_gap):
# ALTER TABLE ... DROP COLUMN a, ADD COLUMN a gives every row that exists a
# value of the new column (its default, or NULL) that no change carries, and
# the description the decoder sends next names the same columns as before.
# The table's record of how the publication holds it carries each column's
# number by name ("col:" tokens): a name that stands for another number is
# a replaced column.
#   - a column the mapping skips, replaced while streaming: no halt, the
#     record follows it;
#   - a mapped column replaced while streaming (no change of the table in
#     between): the census halts publication_gap, checkpoint and mirror as
#     they were, preflight and doctor fail check "publication" naming the
#     table; acknowledging accepts the loss and streaming goes on;
#   - two mapped columns swapping names while stopped: the start halts;
#   - a column renamed and another added under its old name while stopped:
#     the start halts;
#   - with a v1 snapshot configured, a mapped column replaced while
#     streaming: the table is copied again, mirror = source by content hash;
#   - wal2json, which has no membership, records each table by its OID and
#     columns: a column replaced halts (with v1: copied again), and so does
#     a table dropped and created again under its name;
#   - no value in any log.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "output_plugin_libraries = 'pgoutput, wal2json'\n");
my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_COLREPL_5d20e7';

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub census_ran
{
	my ($sink) = @_;
	my $at = q_dst("SELECT coalesce(last_census_at, '-infinity') FROM ash_replicant.stat_pipelines"
		  . " WHERE sink_name = '$sink'");
	return AshTest::poll($dst, "SELECT last_census_at > '$at' AND last_census_verdict = 'pass'"
		  . " FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'");
}

sub publication_check
{
	my ($fn, $sink) = @_;
	return q_dst("SELECT verdict || '/' || coalesce(reason, '') || '/' || coalesce(detail, '')"
		  . " FROM ash_replicant_${fn}('$sink') WHERE check_name = 'publication'");
}

sub record_of
{
	my ($sink, $table) = @_;
	return q_dst("SELECT published FROM ash_replicant.publication_members"
		  . " WHERE slot_name = '$sink' AND source_table = '$table'");
}

my ($sysid, $dbname) = AshTest::source_identity($src);
my $identity = AshTest::lit($sysid) . ", " . AshTest::lit($dbname);

##############################################################################
# A pipeline without a snapshot
##############################################################################

q_src("CREATE TABLE t (id integer PRIMARY KEY, a text, b text, s text);"
	  . " CREATE TABLE other (id integer PRIMARY KEY, v text)");
q_dst("CREATE TABLE t (id integer PRIMARY KEY, a text, b text); CREATE TABLE other (id integer PRIMARY KEY, v text)");
q_src("CREATE PUBLICATION pub FOR TABLE t, other");
AshTest::setup_pipeline($src, $dst, sink => 's1', publication => 'pub',
	maps => [ [ 't', skip => ['s'] ], ['other'] ]);
q_dst("SELECT ash_replicant_wait_for_slot('s1', '60s')");
q_src("INSERT INTO t SELECT g, 'a' || g, 'b' || g, 's' || g FROM generate_series(1, 50) g;"
	  . " INSERT INTO other SELECT g, 'o' || g FROM generate_series(1, 10) g");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'caught up');
AshTest::wait_status($dst, 's1', 'healthy');
like(record_of('s1', 't'), qr/(^|,)col:61:2,col:62:3,col:6964:1,col:73:4,def:/,
	'the record carries each column by name (UTF-8 in hex) and number');

# a skipped column replaced: not written, not judged
q_src("BEGIN; ALTER TABLE t DROP COLUMN s; ALTER TABLE t ADD COLUMN s text DEFAULT 'new s'; COMMIT");
ok(census_ran('s1') && census_ran('s1'), 'two census runs passed after a skipped column was replaced');
AshTest::wait_status($dst, 's1', 'healthy', undef, name => 'a skipped column replaced: still healthy');
like(record_of('s1', 't'), qr/(^|,)col:73:5,/, 'the record follows the skipped column');
q_src("UPDATE t SET b = 'b after s' WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'streams on');
is(q_dst("SELECT b FROM t WHERE id = 1"), 'b after s', 'a change after it is applied');

# a mapped column replaced, no change of the table in between: every row now
# holds the new column's default at the source, which no change carries
my $mirror = AshTest::table_hash($dst, 't');
q_src("BEGIN; ALTER TABLE t DROP COLUMN a; ALTER TABLE t ADD COLUMN a text DEFAULT '$SENTINEL'; COMMIT");
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap',
	name => 'a mapped column replaced while streaming: the census halts publication_gap');
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=s1 reason=publication_gap .*public\.t\b/)),
	'the halt names the table');
is(AshTest::table_hash($dst, 't'), $mirror, 'the halt left the mirror as it was');
AshTest::stop_settled($src, $dst, 's1');
is(publication_check('preflight', 's1'), 'fail/publication_gap/public.t', 'preflight names the table');
is(publication_check('doctor', 's1'), 'fail/publication_gap/public.t', 'doctor names the table');
my $facts = AshTest::checkpoint_facts($dst, 's1');
AshTest::start_sink($dst, 's1');
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap', name => 'a restart alone halts again');
is(AshTest::checkpoint_facts($dst, 's1'), $facts, 'the checkpoint did not move');

# acknowledged: the loss accepted, streaming goes on
AshTest::stop_settled($src, $dst, 's1');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s1', $identity, 'public', 't')"), 't',
	'the replaced column acknowledged');
AshTest::start_sink($dst, 's1');
q_src("UPDATE t SET a = 'a again' WHERE id = 2; INSERT INTO other VALUES (11, 'o11')");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'acknowledged: caught up');
AshTest::wait_status($dst, 's1', 'healthy');
is(q_dst("SELECT a FROM t WHERE id = 2"), 'a again', 'a change of the new column is applied');
is(q_dst("SELECT a FROM t WHERE id = 3"), 'a3', 'the rows no change touched keep the old values (the accepted loss)');
like(record_of('s1', 't'), qr/(^|,)col:61:6,/, 'the record names the new column');

# two mapped columns swapping names while stopped
AshTest::stop_settled($src, $dst, 's1');
$facts = AshTest::checkpoint_facts($dst, 's1');
$mirror = AshTest::table_hash($dst, 't');
q_src("BEGIN; ALTER TABLE t RENAME COLUMN a TO tmp; ALTER TABLE t RENAME COLUMN b TO a;"
	  . " ALTER TABLE t RENAME COLUMN tmp TO b; COMMIT");
q_src("UPDATE t SET a = '$SENTINEL' WHERE id = 4");
is(publication_check('preflight', 's1'), 'fail/publication_gap/public.t', 'swapped names: preflight fails');
AshTest::start_sink($dst, 's1');
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap', name => 'swapped names: the start halts');
is(AshTest::checkpoint_facts($dst, 's1'), $facts, 'nothing applied: the checkpoint');
is(AshTest::table_hash($dst, 't'), $mirror, 'nothing applied: the mirror');

# a column renamed and another added under its name while stopped
AshTest::stop_settled($src, $dst, 's1');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s1', $identity)"), 't', 'acknowledged');
AshTest::start_sink($dst, 's1');
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'caught up after the swap was acknowledged');
AshTest::stop_settled($src, $dst, 's1');
q_src("BEGIN; ALTER TABLE t RENAME COLUMN b TO b_old; ALTER TABLE t ADD COLUMN b text;"
	  . " ALTER TABLE t DROP COLUMN b_old; COMMIT");
AshTest::start_sink($dst, 's1');
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap',
	name => 'a column added under a renamed one\'s name: the start halts');
AshTest::stop_sink($dst, 's1');

##############################################################################
# With a v1 snapshot configured the table is copied again
##############################################################################

AshTest::both($src, $dst, "CREATE TABLE u (id integer PRIMARY KEY, a text, n integer)");
q_src("CREATE PUBLICATION pub2 FOR TABLE u");
q_src("INSERT INTO u SELECT g, 'u' || g, g FROM generate_series(1, 200) g");
AshTest::setup_pipeline($src, $dst, sink => 's2', publication => 'pub2', maps => [ ['u'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::wait_caught_up($src, $dst, 's2'), 'v1: copied and caught up');
AshTest::assert_mirror_equal($src, $dst, ['u'], name => 'v1: copied');
like(q_dst("SELECT published FROM ash_replicant.snapshot_tables WHERE slot_name = 's2' AND source_table = 'u'"),
	qr/(^|,)col:61:2,/, 'the snapshot records the columns too');
q_src("BEGIN; ALTER TABLE u DROP COLUMN n; ALTER TABLE u ADD COLUMN n integer DEFAULT 7; COMMIT");
ok(AshTest::wait_until(sub {
			scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.publication_gap sink=s2 table=public\.u/)) >= 1;
		}),
	'a mapped column replaced while streaming: the table is to be copied again');
q_src("UPDATE u SET a = 'after' WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 's2'), 'copied again and caught up');
AshTest::wait_status($dst, 's2', 'healthy');
AshTest::assert_mirror_equal($src, $dst, ['u'], name => 'v1: copied again after the column was replaced');
is(q_dst("SELECT count(*) FROM u WHERE n = 7"), '200', 'every row holds the new column\'s value');

##############################################################################
# wal2json: no membership, but each table is held by its OID and columns
##############################################################################

AshTest::both($src, $dst, "CREATE TABLE w (id integer PRIMARY KEY, a text, b text)");
AshTest::setup_pipeline($src, $dst, sink => 's3', decoder => 'wal2json', tables => ['public.w'],
	maps => [ ['w'] ]);
q_dst("SELECT ash_replicant_wait_for_slot('s3', '60s')");
q_src("INSERT INTO w SELECT g, 'w' || g, 'x' || g FROM generate_series(1, 30) g");
ok(AshTest::wait_caught_up($src, $dst, 's3'), 'wal2json: caught up');
AshTest::wait_status($dst, 's3', 'healthy');
like(record_of('s3', 'w'), qr/^col:61:2,col:62:3,col:6964:1,def:row:\d+:\d+,def:tbl:\d+,typ:61:25\.-1,typ:62:25\.-1,typ:6964:23\.-1$/,
	'wal2json: the start records the table by its OID, columns and their types');
$mirror = AshTest::table_hash($dst, 'w');
q_src("BEGIN; ALTER TABLE w DROP COLUMN b; ALTER TABLE w ADD COLUMN b text DEFAULT '$SENTINEL'; COMMIT");
AshTest::wait_status($dst, 's3', 'halted', 'publication_gap',
	name => 'wal2json: a mapped column replaced while streaming: the census halts publication_gap');
is(AshTest::table_hash($dst, 'w'), $mirror, 'wal2json: the mirror as it was');
AshTest::stop_settled($src, $dst, 's3');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s3', $identity)"), 't', 'wal2json: acknowledged');
AshTest::start_sink($dst, 's3');
q_src("UPDATE w SET b = 'b again' WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 's3'), 'wal2json: acknowledged, caught up');
is(q_dst("SELECT b FROM w WHERE id = 1"), 'b again', 'wal2json: streams on');
AshTest::stop_settled($src, $dst, 's3');
$facts = AshTest::checkpoint_facts($dst, 's3');
q_src("BEGIN; DROP TABLE w; CREATE TABLE w (id integer PRIMARY KEY, a text, b text);"
	  . " INSERT INTO w VALUES (100, '$SENTINEL', 'new'); COMMIT");
AshTest::start_sink($dst, 's3');
AshTest::wait_status($dst, 's3', 'halted', 'publication_gap',
	name => 'wal2json: a table dropped and created again while stopped: the start halts publication_gap');
is(AshTest::checkpoint_facts($dst, 's3'), $facts, 'wal2json: nothing applied');
AshTest::stop_sink($dst, 's3');

# wal2json with a v1 snapshot: copied again
AshTest::both($src, $dst, "CREATE TABLE wv (id integer PRIMARY KEY, a text, n integer)");
q_src("INSERT INTO wv SELECT g, 'v' || g, g FROM generate_series(1, 100) g");
AshTest::setup_pipeline($src, $dst, sink => 's4', decoder => 'wal2json', tables => ['public.wv'],
	maps => [ ['wv'] ], pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::wait_caught_up($src, $dst, 's4'), 'wal2json v1: copied and caught up');
q_src("BEGIN; ALTER TABLE wv DROP COLUMN n; ALTER TABLE wv ADD COLUMN n integer DEFAULT 8; COMMIT");
ok(AshTest::wait_until(sub {
			scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.publication_gap sink=s4 table=public\.wv/)) >= 1;
		}),
	'wal2json v1: a mapped column replaced: the table is to be copied again');
q_src("UPDATE wv SET a = 'after' WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 's4'), 'wal2json v1: copied again and caught up');
AshTest::assert_mirror_equal($src, $dst, ['wv'], name => 'wal2json v1: copied again after the column was replaced');
AshTest::stop_sink($dst, 's4');

##############################################################################
# No value in any log
##############################################################################

my @hits = AshTest::grep_logs_for($SENTINEL, $src, $dst);
is(scalar(@hits), 0, 'no value appears in any server log')
  or diag join("\n", @hits[0 .. ($#hits < 4 ? $#hits : 4)]);

done_testing();
