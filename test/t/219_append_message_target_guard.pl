# Messages routed to an append log get the guard row events get
# (docs/operations.md, Target DDL while streaming: census_drift before
# anything is written to a renamed target or one given a BEFORE ROW
# trigger), and a dropped log halts destination_table_missing.
#
# Before the fix the message event was written by a statement prepared
# once, without the check:
#   A. the log renamed and a new table created under its old name: the
#      event went into the new table (healthy);
#   B. a BEFORE INSERT trigger returning NULL on the log: transactional and
#      non-transactional message events were dropped (0 rows read as a
#      re-delivery; healthy), lost for good;
#   C. the log dropped: halted message_prefix_unmapped, whose recovery (add
#      the route) is refused since the route exists.
# Now A and B halt census_drift with nothing of the transaction written
# and the checkpoint unchanged, and once the change is reverted every
# event is in the log once; C halts misconfigured/destination_table_missing.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $structural = AshTest::append_log_columns();
my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';
my $sink = 'amg';
my $marker = AshTest::marker_table($sink);

$src->safe_psql($DB, qq{
CREATE TABLE ev (id integer PRIMARY KEY, v text); ALTER TABLE ev REPLICA IDENTITY FULL;
CREATE TABLE ev2 (id integer PRIMARY KEY, v text); ALTER TABLE ev2 REPLICA IDENTITY FULL;
CREATE TABLE $marker (id bigint PRIMARY KEY, note text); ALTER TABLE $marker REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_amg FOR TABLE ev, ev2, $marker;});
$dst->safe_psql($DB, qq{
CREATE TABLE ev_log ($structural, id integer, v text, $axes);
CREATE TABLE ev2_log ($structural, id integer, v text, $axes);
CREATE TABLE $marker ($structural, id bigint, note text, $axes);
CREATE FUNCTION drop_it() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RETURN NULL; END \$\$;});
# no census while streaming (an hour apart): the census would halt the
# renamed log by its contract, and only the message's own check is proved
my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
for my $stmt ("SELECT ash_replicant_create_sink('$sink', sink_kind => 'append_log', initial_state => 'go_forward')",
	"SELECT ash_replicant_map_table('$sink', 'ev_log'::regclass, source_table => 'ev', append_log => true)",
	"SELECT ash_replicant_map_table('$sink', 'ev2_log'::regclass, source_table => 'ev2', append_log => true)",
	"SELECT ash_replicant_map_table('$sink', '$marker'::regclass, append_log => true)",
	"SELECT ash_replicant_add_message_route('$sink', 'm1', 'ev_log'::regclass, '1 day')",
	"SELECT ash_replicant_add_message_route('$sink', 'm2', 'ev2_log'::regclass, '1 day')",
	"SELECT ash_replicant_configure_pipeline('$sink', '$conn', publication => 'pub_amg',"
	  . " source_system_identifier => '$sysid', source_database => '$sdb', census => '{\"interval_ms\": 3600000}')",
	"SELECT ash_replicant_start('$sink')")
{
	my ($rc, $o, $e) = $dst->psql($DB, $stmt);
	die "setup failed: " . substr($stmt, 0, 60) . ": $e" if $rc;
}
AshTest::wait_caught_up($src, $dst, $sink, name => 'streams') or BAIL_OUT('never streamed');

# the worker holds a statement for the message events of ev_log
$src->safe_psql($DB, q{BEGIN; INSERT INTO ev VALUES (1, 'a'); SELECT pg_logical_emit_message(true, 'm1', 'warm'); COMMIT;});
AshTest::wait_caught_up($src, $dst, $sink, name => 'warm');
is($dst->safe_psql($DB, 'SELECT count(*) FROM ev_log'), '2', 'warm: a row event and a message event');

# $ddl while streaming, then message-only transactions ($sql): halts
# census_drift with nothing written; after $undo and a start each of
# @contents is in ev_log once
sub guarded
{
	my ($label, $ddl, $undo, $sql, @contents) = @_;
	$dst->safe_psql($DB, $ddl);
	my $facts = AshTest::checkpoint_facts($dst, $sink);
	my $before = $dst->safe_psql($DB, 'SELECT count(*) FROM ev_log');
	$src->safe_psql($DB, $sql);
	AshTest::wait_status($dst, $sink, 'halted', 'census_drift', src => $src,
		name => "$label: halts census_drift");
	is(AshTest::checkpoint_facts($dst, $sink), $facts, "$label: the checkpoint unchanged");
	is($dst->safe_psql($DB, 'SELECT count(*) FROM ev_log'), $before, "$label: nothing written under the log's name");
	AshTest::stop_settled($src, $dst, $sink);
	$dst->safe_psql($DB, $undo);
	AshTest::start_sink($dst, $sink);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: resumes once reverted");
	my $in = join ',', map { "'$_'" } @contents;
	is($dst->safe_psql($DB, "SELECT count(*) FROM ev_log WHERE message_content IN ($in)"), scalar(@contents),
		"$label: every message event in the log once (none lost)");
}

# ---------------------------------------------------------------------------
# A. the log renamed, a new table under its name
# ---------------------------------------------------------------------------
guarded('A: renamed',
	qq{ALTER TABLE ev_log RENAME TO ev_log_mapped; CREATE TABLE ev_log ($structural, id integer, v text, $axes)},
	'DROP TABLE ev_log; ALTER TABLE ev_log_mapped RENAME TO ev_log',
	q{SELECT pg_logical_emit_message(true, 'm1', 'after-rename')}, 'after-rename');

# ---------------------------------------------------------------------------
# B. a BEFORE INSERT trigger returning NULL
# ---------------------------------------------------------------------------
guarded('B: trigger, transactional',
	'CREATE TRIGGER drop_it BEFORE INSERT ON ev_log FOR EACH ROW EXECUTE FUNCTION drop_it()',
	'DROP TRIGGER drop_it ON ev_log',
	q{SELECT pg_logical_emit_message(true, 'm1', 'suppressed')}, 'suppressed');
guarded('B: trigger, non-transactional',
	'CREATE TRIGGER drop_it BEFORE INSERT ON ev_log FOR EACH ROW EXECUTE FUNCTION drop_it()',
	'DROP TRIGGER drop_it ON ev_log',
	q{SELECT pg_logical_emit_message(false, 'm1', 'suppressed-nt')}, 'suppressed-nt');

# ---------------------------------------------------------------------------
# C. the route's log dropped while streaming
# ---------------------------------------------------------------------------
my $facts = AshTest::checkpoint_facts($dst, $sink);
$dst->safe_psql($DB, 'DROP TABLE ev2_log');
$src->safe_psql($DB, q{SELECT pg_logical_emit_message(true, 'm2', 'after-drop')});
AshTest::wait_status($dst, $sink, 'misconfigured', 'destination_table_missing', src => $src,
	name => 'C: a dropped log halts misconfigured/destination_table_missing');
is(AshTest::checkpoint_facts($dst, $sink), $facts, 'C: the checkpoint unchanged');

done_testing();
