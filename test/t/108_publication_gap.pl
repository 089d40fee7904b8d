# A mapped table out of the publication and back under a pipeline without a
# snapshot (docs/reasons.md#publication_gap).  pgoutput never decodes the
# changes made while the table was out; nothing could fill that hole, so the
# pipeline halts publication_gap instead of mirroring on top of it:
#   - the start records how the publication holds each mapped table
#     (ash_replicant.publication_members);
#   - out and back while stopped: preflight and doctor fail check
#     "publication" with publication_gap; the next start halts, checkpoint and
#     mirror unchanged, no value in any log; a restart alone halts again;
#   - ash_replicant_acknowledge_publication_gap accepts the loss (offline,
#     identity restated): the next start streams on, the rows changed during
#     the gap stay as they were (the documented loss);
#   - the publication narrowed (publish) and widened again while stopped:
#     preflight names every table, the start halts, acknowledged at once;
#   - out and back while streaming: the census halts; re-seeding with
#     snapshot => 'v1' copies the table again, mirror = source by content
#     hash, and the records are dropped (the snapshot watches from then on);
#   - a table still held through its schema is no gap; a table published only
#     after it was mapped is recorded when it appears, no gap;
#   - census disabled: the start alone finds a gap; every table of a sink
#     acknowledged at once;
#   - the records follow the checkpoint: a reset drops them;
#   - a mapped table dropped and created again (while streaming: the census
#     halts) or replaced by a rename (while stopped: the start halts) under a
#     schema's membership, which no catalog row of the publication shows.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_PUBGAP_7f3c91';

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }


sub records
{
	my ($slot) = @_;
	return q_dst("SELECT coalesce(string_agg(source_table, ',' ORDER BY source_table), '')"
		  . " FROM ash_replicant.publication_members WHERE slot_name = '$slot'");
}

# The verdict of check "publication" of preflight or doctor: verdict/reason
sub publication_check
{
	my ($fn, $sink) = @_;
	return q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_${fn}('$sink')"
		  . " WHERE check_name = 'publication'");
}

sub halts_logged
{
	my ($sink) = @_;
	return scalar(() = AshTest::log_lines_like($dst,
			qr/event=pipeline\.halt sink=$sink reason=publication_gap /));
}

my ($sysid, $dbname) = AshTest::source_identity($src);
my $identity = AshTest::lit($sysid) . ", " . AshTest::lit($dbname);
my $identity_named = "source_system_identifier => " . AshTest::lit($sysid)
  . ", source_database => " . AshTest::lit($dbname);

AshTest::both($src, $dst,
	"CREATE TABLE orders (id bigint PRIMARY KEY, v text); CREATE TABLE keep (id integer PRIMARY KEY, v text)");
q_src("CREATE PUBLICATION pub FOR TABLE orders, keep");
AshTest::setup_pipeline($src, $dst, sink => 's1', publication => 'pub',
	maps => [ ['orders'], ['keep'] ]);
q_dst("SELECT ash_replicant_wait_for_slot('s1', '60s')");
q_src("INSERT INTO orders SELECT g, md5(g::text) FROM generate_series(1, 500) g;"
	  . " INSERT INTO keep SELECT g, 'k' || g FROM generate_series(1, 100) g");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'go-forward pipeline: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 'streamed');
is(records('s1'), 'ash_marker_s1,keep,orders', 'the start records how the publication holds each mapped table');
like(q_dst("SELECT published FROM ash_replicant.publication_members WHERE slot_name = 's1' AND source_table = 'orders'"),
	qr/^(col:[0-9a-f]+:\d+,)+def:\d+:\d+,def:tbl:\d+,rel:\d+(,typ:[0-9a-f]+:\d+\.-?\d+)+$/, 'a table held by its own publication row is recorded by that row (and the publication, the table and its columns by their own)');
is(q_dst("SELECT has_table_privilege('ash_replicant_monitor', 'ash_replicant.publication_members', 'SELECT')"),
	'f', 'the records are not readable by a monitor (default-deny)');

##############################################################################
# Out and back while stopped: the next start halts
##############################################################################

AshTest::stop_settled($src, $dst, 's1');
my $facts = AshTest::checkpoint_facts($dst, 's1');
my $mirror = AshTest::table_hash($dst, 'orders');
q_src("ALTER PUBLICATION pub DROP TABLE orders");
q_src("UPDATE orders SET v = '$SENTINEL' WHERE id <= 10");
q_src("ALTER PUBLICATION pub ADD TABLE orders");
q_src("UPDATE orders SET v = 'after the gap' WHERE id = 20; UPDATE keep SET v = 'kept on' WHERE id = 1");
is(publication_check('preflight', 's1'), 'fail/publication_gap', 'preflight sees the gap before the start');
is(publication_check('doctor', 's1'), 'fail/publication_gap', 'doctor sees the gap before the start');
is(q_dst("SELECT detail FROM ash_replicant_doctor('s1') WHERE check_name = 'publication'"), 'public.orders',
	'the detail names the table');
AshTest::start_sink($dst, 's1');
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap', name => 'out and back while stopped: halted publication_gap');
is(AshTest::checkpoint_facts($dst, 's1'), $facts, 'the halt left the checkpoint as it was');
is(AshTest::table_hash($dst, 'orders'), $mirror, 'the halt left the mirror as it was');
is(q_dst("SELECT v FROM keep WHERE id = 1"), 'k1', 'nothing after the gap was applied, to any table');
ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=s1 reason=publication_gap .*public\.orders/)),
	'the halt names the table');

# a restart alone finds the same gap
my $halts = halts_logged('s1');
AshTest::start_sink($dst, 's1');
ok(AshTest::wait_until(sub { halts_logged('s1') > $halts }), 'a restart alone halts again');
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap', name => 'still halted publication_gap');

##############################################################################
# Acknowledge: offline, identity restated; the loss is accepted
##############################################################################

my ($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_acknowledge_publication_gap('s1', $identity, 'public', 'orders')");
like($err, qr/pipeline_running/, 'acknowledging refuses while the pipeline is enabled');
AshTest::stop_settled($src, $dst, 's1');
($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_acknowledge_publication_gap('s1', 'not-the-source', 'x', 'public', 'orders')");
like($err, qr/source_identity_mismatch/, 'acknowledging refuses another source identity');
unlike($err, qr/\Q$sysid\E/, 'the refusal does not echo the identity');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s1', $identity, 'public', 'orders')"),
	't', 'the gap is acknowledged');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s1', $identity, 'public', 'orders')"),
	'f', 'a second acknowledgement changes nothing');
is(publication_check('preflight', 's1'), 'pass/', 'preflight passes once the gap is acknowledged');
ok(scalar(AshTest::log_lines_like($dst, qr/event=publication\.gap_acknowledged sink=s1 table=public\.orders/)),
	'the acknowledgement is logged');
AshTest::start_sink($dst, 's1');
q_src("UPDATE orders SET v = 'after the acknowledgement' WHERE id = 30");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'acknowledged: caught up');
AshTest::wait_status($dst, 's1', 'healthy');
is(q_dst("SELECT v FROM orders WHERE id = 30"), 'after the acknowledgement', 'changes after the gap are mirrored');
is(q_dst("SELECT v FROM orders WHERE id = 20"), 'after the gap', 'changes made after the table came back are mirrored');
is(q_dst("SELECT count(*) FROM orders WHERE v = '$SENTINEL'"), '0',
	'the changes made while the table was out are missing (the accepted loss)');
is(q_dst("SELECT v FROM keep WHERE id = 1"), 'kept on', 'the other table streamed on');
is(records('s1'), 'ash_marker_s1,keep,orders', 'the next start recorded the table again');
my $census = q_dst("SELECT coalesce(last_census_at, '-infinity') FROM ash_replicant.stat_pipelines WHERE sink_name = 's1'");
ok(AshTest::poll($dst, "SELECT last_census_at > '$census' FROM ash_replicant.stat_pipelines WHERE sink_name = 's1'"),
	'a census ran since');
is(q_dst("SELECT count(*) FROM ash_replicant.publication_members WHERE slot_name = 's1' AND xmax <> '0'"), '0',
	'a census that finds nothing changed writes nothing (no record even locked)');

##############################################################################
# The publication redefined while stopped: narrowed and widened again
##############################################################################

AshTest::stop_settled($src, $dst, 's1');
q_src("ALTER PUBLICATION pub SET (publish = 'insert')");
q_src("DELETE FROM keep WHERE id = 2; UPDATE orders SET v = '$SENTINEL' WHERE id = 31");
q_src("ALTER PUBLICATION pub SET (publish = 'insert, update, delete, truncate')");
is(publication_check('preflight', 's1'), 'fail/publication_gap',
	'a publication narrowed and widened again while stopped: preflight fails');
like(q_dst("SELECT detail FROM ash_replicant_preflight('s1') WHERE check_name = 'publication'"),
	qr/public\.keep.*public\.orders|public\.orders.*public\.keep/, 'every table of the publication is named');
AshTest::start_sink($dst, 's1');
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap',
	name => 'a publication narrowed and widened again: halted publication_gap');
is(q_dst("SELECT count(*) FROM keep WHERE id = 2"), '1', 'the delete it withheld is not applied (it never will be)');
AshTest::stop_settled($src, $dst, 's1');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s1', $identity)"), 't', 'acknowledged for every table');
AshTest::start_sink($dst, 's1');
AshTest::wait_status($dst, 's1', 'healthy', undef, name => 'acknowledged: healthy');

##############################################################################
# Out and back while streaming: the census halts; re-seed with v1
##############################################################################

my $warned = () = AshTest::log_lines_like($dst, qr/event=coverage\.warning sink=s1 reason=mapping_never_matches/);
q_src("ALTER PUBLICATION pub DROP TABLE orders");
q_src("UPDATE orders SET v = '$SENTINEL' WHERE id BETWEEN 40 AND 60; DELETE FROM orders WHERE id BETWEEN 61 AND 70");
ok(AshTest::wait_until(sub {
			scalar(() = AshTest::log_lines_like($dst,
					qr/event=coverage\.warning sink=s1 reason=mapping_never_matches/)) > $warned;
		}),
	'the census warns mapping_never_matches while the table is out');
is(AshTest::status_row($dst, 's1')->{state}, 'healthy', 'a table out of the publication alone does not halt');
q_src("ALTER PUBLICATION pub ADD TABLE orders");
q_src("INSERT INTO orders VALUES (501, 'back')");
AshTest::wait_status($dst, 's1', 'halted', 'publication_gap',
	name => 'out and back while streaming: the census halts publication_gap');

# re-seed: a v1 snapshot copies every mapped table, the stream goes on.
# Without provenance a copy keeps rows the source lacks (the rows deleted
# during the gaps): the targets are emptied first, as docs/reasons.md says.
AshTest::stop_settled($src, $dst, 's1');
q_dst("TRUNCATE orders, keep");
q_dst("SELECT ash_replicant_configure_pipeline(sink_name => 's1', connection => "
	  . AshTest::lit(AshTest::conninfo($src)) . ", publication => 'pub',"
	  . " $identity_named, census => '{\"interval_ms\": 1000}'::jsonb,"
	  . " go_forward_only => false, snapshot => 'v1')");
AshTest::start_sink($dst, 's1');
ok(AshTest::wait_caught_up($src, $dst, 's1'), 're-seeded with v1: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 're-seeded with v1');
AshTest::wait_status($dst, 's1', 'healthy');
is(records('s1'), '', 'with a snapshot configured the records are dropped (the snapshot watches the publication)');

##############################################################################
# No gap: a table still held through its schema; a table published late
##############################################################################

AshTest::both($src, $dst,
	"CREATE SCHEMA sch; CREATE TABLE sch.w (id integer PRIMARY KEY, v text); CREATE TABLE late (id integer PRIMARY KEY, v text)");
q_src("CREATE PUBLICATION pub2 FOR TABLE sch.w, TABLES IN SCHEMA sch");
AshTest::setup_pipeline($src, $dst, sink => 's2', publication => 'pub2',
	maps => [ ['sch.w'], ['late'] ], census => '{"enabled": false}');
q_dst("SELECT ash_replicant_wait_for_slot('s2', '60s')");
q_src("INSERT INTO sch.w SELECT g, 'w' || g FROM generate_series(1, 50) g");
ok(AshTest::wait_caught_up($src, $dst, 's2'), 'schema-published pipeline: caught up');
like(q_dst("SELECT published FROM ash_replicant.publication_members WHERE slot_name = 's2' AND source_table = 'w'"),
	qr/^(col:[0-9a-f]+:\d+,)+def:\d+:\d+,def:tbl:\d+,ns:\d+,rel:\d+(,typ:[0-9a-f]+:\d+\.-?\d+)+$/, 'a table held by its row and its schema is recorded by both (and by its own OID)');
is(records('s2'), 'ash_marker_s2,w', 'a mapped table not published yet is not recorded');

AshTest::stop_settled($src, $dst, 's2');
q_src("ALTER PUBLICATION pub2 DROP TABLE sch.w");
q_src("UPDATE sch.w SET v = 'through its schema' WHERE id <= 5");
q_src("ALTER PUBLICATION pub2 ADD TABLE sch.w");
q_src("ALTER PUBLICATION pub2 ADD TABLE late; INSERT INTO late VALUES (1, 'late')");
AshTest::start_sink($dst, 's2');
ok(AshTest::wait_caught_up($src, $dst, 's2'), 'held through its schema throughout: caught up');
is(AshTest::status_row($dst, 's2')->{state}, 'catching_up',
	'a table held through its schema throughout is no gap (census off: never healthy, never halted)');
is(halts_logged('s2'), 0, 'no publication_gap halt for a table held through its schema');
AshTest::assert_mirror_equal($src, $dst, [ 'sch.w', 'late' ], name => 'held through its schema');
is(records('s2'), 'ash_marker_s2,late,w', 'a table published after it was mapped is recorded when it appears');

# census disabled: the start alone finds a gap (the schema's row and the
# table's row both dropped, the table's added back)
AshTest::stop_settled($src, $dst, 's2');
q_src("ALTER PUBLICATION pub2 DROP TABLES IN SCHEMA sch; ALTER PUBLICATION pub2 DROP TABLE sch.w");
q_src("UPDATE sch.w SET v = '$SENTINEL' WHERE id = 7");
q_src("ALTER PUBLICATION pub2 ADD TABLE sch.w");
AshTest::start_sink($dst, 's2');
AshTest::wait_status($dst, 's2', 'halted', 'publication_gap',
	name => 'census disabled: the start finds the gap');
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=s2 reason=publication_gap .*sch\.w/)),
	'the halt names the schema-qualified table');

# acknowledging every table at once (no schema and table given)
AshTest::stop_settled($src, $dst, 's2');
($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_acknowledge_publication_gap('s2', $identity, 'sch', NULL)");
like($err, qr/config_invalid/, 'a schema without a table is refused');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s2', $identity)"), 't',
	'every table of the sink acknowledged at once');
is(records('s2'), '', 'no record is left');
AshTest::start_sink($dst, 's2');
q_src("UPDATE sch.w SET v = 'acknowledged' WHERE id = 8");
ok(AshTest::wait_caught_up($src, $dst, 's2'), 'acknowledged at once: caught up');
is(q_dst("SELECT v FROM sch.w WHERE id = 8"), 'acknowledged', 'the table streams on');
is(records('s2'), 'ash_marker_s2,late,w', 'the start recorded every table again');

# a reset drops the checkpoint and its records with it
AshTest::stop_settled($src, $dst, 's2');
q_dst("SELECT ash_replicant_reset_checkpoint('s2', $identity)");
is(records('s2'), '', 'a reset drops the records with the checkpoint');

##############################################################################
# A table dropped and created again under its name, or another renamed into
# it, is another table: the mirror holds its predecessor's rows, which no
# change deleted -- a gap, though no catalog row of the publication changed
# (a schema's membership holds both)
##############################################################################

AshTest::both($src, $dst,
	"CREATE SCHEMA rep; CREATE TABLE rep.r (id integer PRIMARY KEY, v text); CREATE TABLE rep.q (id integer PRIMARY KEY, v text)");
q_src("CREATE PUBLICATION pub3 FOR TABLES IN SCHEMA rep");
AshTest::setup_pipeline($src, $dst, sink => 's3', publication => 'pub3',
	maps => [ ['rep.r'], ['rep.q'] ], census => '{"interval_ms": 1000}');
q_dst("SELECT ash_replicant_wait_for_slot('s3', '60s')");
q_src("INSERT INTO rep.r SELECT g, 'r' || g FROM generate_series(1, 20) g;"
	  . " INSERT INTO rep.q SELECT g, 'q' || g FROM generate_series(1, 20) g");
ok(AshTest::wait_caught_up($src, $dst, 's3'), 'schema publication: caught up');
AshTest::wait_status($dst, 's3', 'healthy');
q_src("DROP TABLE rep.r");
q_src("CREATE TABLE rep.r (id integer PRIMARY KEY, v text); INSERT INTO rep.r VALUES (100, '$SENTINEL')");
AshTest::wait_status($dst, 's3', 'halted', 'publication_gap',
	name => 'a table dropped and created again while streaming: the census halts publication_gap');
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=s3 reason=publication_gap .*rep\.r/)),
	'the halt names the replaced table');

AshTest::stop_settled($src, $dst, 's3');
is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('s3', $identity)"), 't', 'the replacement acknowledged');
AshTest::start_sink($dst, 's3');
AshTest::wait_status($dst, 's3', 'healthy', undef, name => 'acknowledged: healthy');
AshTest::stop_settled($src, $dst, 's3');
$facts = AshTest::checkpoint_facts($dst, 's3');
q_src("BEGIN; CREATE TABLE rep.q_new (id integer PRIMARY KEY, v text);"
	  . " ALTER TABLE rep.q RENAME TO q_old; ALTER TABLE rep.q_new RENAME TO q; DROP TABLE rep.q_old;"
	  . " INSERT INTO rep.q VALUES (7, '$SENTINEL'); COMMIT");
AshTest::start_sink($dst, 's3');
AshTest::wait_status($dst, 's3', 'halted', 'publication_gap',
	name => 'another table renamed into a mapped name while stopped: the start halts publication_gap');
is(q_dst("SELECT v FROM rep.q WHERE id = 7"), 'q7', 'nothing of the new table is applied');
is(AshTest::checkpoint_facts($dst, 's3'), $facts, 'the checkpoint is unchanged');

##############################################################################
# No value in any log
##############################################################################

my @hits = AshTest::grep_logs_for($SENTINEL, $src, $dst);
is(scalar(@hits), 0, 'no value changed during a gap appears in any server log')
  or diag join("\n", @hits[0 .. ($#hits < 4 ? $#hits : 4)]);

done_testing();
