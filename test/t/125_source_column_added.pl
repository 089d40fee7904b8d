# A column added at the source while its table is mirrored
# (docs/reasons.md#source_column_added): ALTER TABLE ... ADD COLUMN gives the
# rows that exist then a value no change carries.  The previous build
# mirrored on, healthy, with those rows holding what the target gave them
# (NULL, or the target's default) instead of the source's default.
#
#   1  a column added to a table whose target has no rows: applied, the
#      record follows.
#   2  a nullable column without a default, added at both ends while
#      stopped, behind a change of the table from before it: halted
#      source_column_added all the same (whether the rows hold NULL at the
#      source cannot be told: the source's rows now hold what changes made
#      since wrote; a volatile default that was dropped leaves no trace);
#      nothing of the transaction committed, a restart alone halts again;
#      acknowledged offline for the one table (refused while enabled, for
#      another identity, for every table at once): the mark survives the
#      re-delivered older description and is used up by the addition; the
#      transaction applied once, mirror = source.
#   3  a target column added ahead with a default of its own, the source's
#      with another, while streaming: halted, nothing of the transaction
#      committed, the checkpoint unchanged; the rows made to agree,
#      acknowledged: mirror = source.
#   4  a source column added with a default (a sentinel) before its target
#      column: halted source_column_unmapped; the target column added, the
#      start halts source_column_added; made to agree, acknowledged: mirror
#      = source; the sentinel in no server log.
#   5  v1: the copy records the columns it copied, so a column added right
#      after it is judged (the first streamed change of the table is the
#      one after the ADD): halted source_column_added.
#   5b incremental: a chunk writes some rows only, so a column added while
#      a chunk is held (a gate) halts at the first chunk read with it (the
#      next session's); the record keeps the earlier chunks' columns, no
#      row of a later chunk committed.
#   6  the records are default-deny and go with their checkpoint (reset).
use strict;
use warnings;
use lib 'test/t';
use AshTenancy;
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_col_added_5e1d';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(31));
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

my ($sysid, $dbname) = AshTest::source_identity($src);
my $identity = AshTest::lit($sysid) . ", " . AshTest::lit($dbname);

sub record
{
	my ($slot, $table) = @_;
	return q_dst("SELECT array_to_string(columns, ',') FROM ash_replicant.source_columns"
		  . " WHERE slot_name = '$slot' AND source_table = '$table'");
}

sub halted_added
{
	my ($sink, $name) = @_;
	return AshTest::wait_status($dst, $sink, 'halted', 'source_column_added', name => $name);
}

AshTest::both($src, $dst, q{
CREATE TABLE a1 (id integer PRIMARY KEY, v text);
CREATE TABLE a2 (id integer PRIMARY KEY, v text);
CREATE TABLE a3 (id integer PRIMARY KEY, v text);
CREATE TABLE a4 (id integer PRIMARY KEY, v text);
});
q_src('CREATE PUBLICATION pub_a FOR TABLE a1, a2, a3, a4');
AshTest::setup_pipeline($src, $dst, sink => 'sa', publication => 'pub_a',
	maps => [ ['a1'], ['a2'], ['a3'], ['a4'] ]);
q_dst("SELECT ash_replicant_wait_for_slot('sa', '60s')");
q_src(join ';', map { "INSERT INTO $_ SELECT g, 'r' || g FROM generate_series(1, 5) g" } qw(a1 a2 a3));
AshTest::wait_caught_up($src, $dst, 'sa', name => 'streamed');
is(record('sa', 'a1'), 'id,v', 'the first change records the source columns its target is fed');
is(q_dst("SELECT has_table_privilege('ash_replicant_monitor', 'ash_replicant.source_columns', 'SELECT')"),
	'f', 'the records are not readable by a monitor (default-deny)');

# 1: no target row predates the column
q_dst('ALTER TABLE a4 ADD COLUMN c integer');
q_src("ALTER TABLE a4 ADD COLUMN c integer DEFAULT 9; INSERT INTO a4 (id, v) VALUES (1, 'r1')");
AshTest::wait_caught_up($src, $dst, 'sa', name => 'a column added to a table without rows: applied');
AshTest::wait_status($dst, 'sa', 'healthy', undef, name => 'healthy after a column no row needs');
AshTest::assert_mirror_equal($src, $dst, ['a4'], name => 'a column no row needs');
is(record('sa', 'a4'), 'id,v,c', 'the record follows the description applied');

# 2: nullable, no default: halts all the same; the operator knows.  Made
# while stopped, behind a change of the table from before the column: a
# restart may deliver that one first, under the old description
AshTest::stop_settled($src, $dst, 'sa');
q_dst('ALTER TABLE a3 ADD COLUMN n text');
q_src("UPDATE a3 SET v = 'before' WHERE id = 1");
q_src("ALTER TABLE a3 ADD COLUMN n text; INSERT INTO a3 VALUES (6, 'r6', 'n6')");
AshTest::start_sink($dst, 'sa');
halted_added('sa', 'a nullable column without a default halts source_column_added');
is(q_dst('SELECT count(*) FROM a3 WHERE id = 6'), '0', 'nothing of the transaction committed');
ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=sa reason=source_column_added .*public\.a3: source columns n were added while its target held rows/)),
	'the halt names the table and the column');
my $halts = () = AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=sa reason=source_column_added /);
AshTest::start_sink($dst, 'sa');
ok(AshTest::wait_until(sub {
			(() = AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=sa reason=source_column_added /)) > $halts }),
	'a restart alone halts again');
halted_added('sa', 'still halted source_column_added');
my ($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_acknowledge_column_added('sa', $identity, 'public', 'a3')");
like($err, qr/pipeline_running/, 'acknowledging refuses while the pipeline is enabled');
AshTest::stop_settled($src, $dst, 'sa');
($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_acknowledge_column_added('sa', 'not-the-source', 'x', 'public', 'a3')");
like($err, qr/source_identity_mismatch/, 'acknowledging refuses another source identity');
($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_acknowledge_column_added('sa', $identity, NULL, NULL)");
like($err, qr/config_invalid/, 'acknowledging names one table: every table at once would take additions not seen yet');
is(q_dst("SELECT ash_replicant_acknowledge_column_added('sa', $identity, 'public', 'a3')"), 't',
	'NULL at both ends: acknowledged');
is(q_dst("SELECT added_acknowledged FROM ash_replicant.source_columns WHERE slot_name = 'sa' AND source_table = 'a3'"),
	't', 'the record is marked');
is(q_dst("SELECT ash_replicant_acknowledge_column_added('sa', $identity, 'public', 'a3')"), 'f',
	'a second acknowledgement changes nothing');
ok(scalar(AshTest::log_lines_like($dst, qr/event=columns\.added_acknowledged sink=sa table=public\.a3/)),
	'the acknowledgement is logged');
AshTest::start_sink($dst, 'sa');
AshTest::wait_caught_up($src, $dst, 'sa', name => 'acknowledged: streams on');
AshTest::assert_mirror_equal($src, $dst, ['a3'], name => 'acknowledged');
is(record('sa', 'a3'), 'id,v,n', 'the description adding the column was taken');
is(q_dst("SELECT added_acknowledged FROM ash_replicant.source_columns WHERE slot_name = 'sa' AND source_table = 'a3'"),
	'f', 'the mark is used up');

# 3: the target's default is not the source's
q_dst('ALTER TABLE a2 ADD COLUMN c integer DEFAULT 0');
AshTest::wait_caught_up($src, $dst, 'sa', quiet => 1);
# the census admits the target's addition to the contract (it changes the
# checkpoint's fingerprint): only then is the checkpoint the one to keep
AshTest::poll($dst, "SELECT contract->'relations'->'public.a2'->'columns' ? 'c'"
	  . " FROM ash_replicant.checkpoints WHERE slot_name = 'sa'", 't');
my $facts = AshTest::checkpoint_facts($dst, 'sa');
q_src("ALTER TABLE a2 ADD COLUMN c integer DEFAULT 7; INSERT INTO a2 VALUES (6, 'r6', 6)");
halted_added('sa', 'a column added ahead at the target halts source_column_added');
AshTest::halt_left_nothing($dst, 'sa', 'SELECT count(*) FROM a2', 5, $facts);
AshTest::stop_settled($src, $dst, 'sa');
q_dst('UPDATE a2 SET c = 7');
is(q_dst("SELECT ash_replicant_acknowledge_column_added('sa', $identity, 'public', 'a2')"), 't',
	'the rows made to agree, the addition is acknowledged');
AshTest::start_sink($dst, 'sa');
AshTest::wait_caught_up($src, $dst, 'sa', name => 'made to agree: streams on');
AshTest::assert_mirror_equal($src, $dst, ['a2'], name => 'made to agree');

# 4: added before its target column, with a default
q_src("ALTER TABLE a1 ADD COLUMN s text DEFAULT '$SENTINEL'; INSERT INTO a1 VALUES (6, 'r6', 'x')");
AshTest::wait_status($dst, 'sa', 'misconfigured', 'source_column_unmapped', name => 'an unmapped column halts first');
q_dst('ALTER TABLE a1 ADD COLUMN s text');
AshTest::start_sink($dst, 'sa');
halted_added('sa', 'mapped now, the source\'s default halts source_column_added');
is(q_dst('SELECT count(*) FROM a1'), '5', 'nothing of the transaction committed');
AshTest::stop_settled($src, $dst, 'sa');
q_dst("UPDATE a1 SET s = '$SENTINEL'");
is(q_dst("SELECT ash_replicant_acknowledge_column_added('sa', $identity, 'public', 'a1')"), 't', 'acknowledged');
AshTest::start_sink($dst, 'sa');
AshTest::wait_caught_up($src, $dst, 'sa', name => 'made to agree with the source\'s default: streams on');
AshTest::assert_mirror_equal($src, $dst, [ 'a1', 'a2', 'a3', 'a4' ], name => 'every table');

# 5: a v1 copy records what it copied
AshTest::both($src, $dst, 'CREATE TABLE b1 (id integer PRIMARY KEY, v text)');
q_src("INSERT INTO b1 SELECT g, 'b' || g FROM generate_series(1, 20) g; CREATE PUBLICATION pub_b FOR TABLE b1");
AshTest::setup_pipeline($src, $dst, sink => 'sb', publication => 'pub_b', maps => [ ['b1'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_caught_up($src, $dst, 'sb', name => 'v1: copied');
is(record('sb', 'b1'), 'id,v', 'the copy recorded the columns it copied');
q_dst('ALTER TABLE b1 ADD COLUMN d integer');
q_src("ALTER TABLE b1 ADD COLUMN d integer DEFAULT 3; INSERT INTO b1 VALUES (21, 'b21', 3)");
halted_added('sb', 'v1: a column added after the copy halts source_column_added');
is(q_dst('SELECT count(*) FROM b1'), '20', 'nothing of the transaction committed');

# 5b: an incremental chunk writes some rows only: judged like the stream
q_src(q{CREATE TABLE i1 (id bigint PRIMARY KEY, val text NOT NULL);
INSERT INTO i1 SELECT g, 'v' || g FROM generate_series(1, 400) g;
CREATE PUBLICATION pub_i FOR TABLE i1});
q_dst(q{CREATE TABLE i1 (id bigint PRIMARY KEY, val text NOT NULL, d integer,
	replica_fingerprint bytea, replica_seen_attempt bytea)});
my $gate = AshTest::close_gate($dst, 'i1', 50, 4545);
AshTest::setup_pipeline($src, $dst, sink => 'si', publication => 'pub_i', marker => 0,
	maps => [ [ 'i1', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 20");
ok(AshTest::gate_waiting($dst, 4545), 'incremental: a chunk waits at the gate');
q_src('ALTER TABLE i1 ADD COLUMN d integer DEFAULT 3');
# a session describes the table once: the next one reads it with the column
is(AshTest::terminate_walsender($src, 'si'), '1', 'incremental: the session ends during the copy');
AshTest::open_gate($gate, 4545);
halted_added('si', 'incremental: a chunk read after the column was added halts source_column_added');
is(record('si', 'i1'), 'id,val', 'the record keeps the columns the earlier chunks copied');
is(q_dst('SELECT count(*) FROM i1 WHERE d IS NOT NULL'), '0', 'no row of a chunk under the new column committed');

# 6: the records go with their checkpoint
AshTest::stop_settled($src, $dst, 'sb');
q_dst("SELECT ash_replicant_reset_checkpoint('sb', $identity)");
is(record('sb', 'b1'), '', 'a reset drops the records with the checkpoint');

my @hits = AshTest::grep_logs_for($SENTINEL, $src, $dst);
is(scalar(@hits), 0, 'no value of an added column appears in any server log')
  or diag join("\n", @hits[0 .. ($#hits < 4 ? $#hits : 4)]);

done_testing();
