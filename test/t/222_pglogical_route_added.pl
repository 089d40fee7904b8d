# A message route added to a running pglogical pipeline
# (docs/reasons.md#decoder_capability_unsupported).
#
# pglogical delivers no logical messages: ash_replicant_start refuses a sink
# with routes under it.  Before the fix a route added while the pipeline
# ran restarted its worker, which ran on healthy with a route that could
# never receive anything, while doctor failed (wal2json's worker halted).
# Now, for an append log and for a state mirror:
#   - the worker halts at its reload misconfigured/decoder_capability_unsupported,
#     nothing of a transaction sent meanwhile is applied, the checkpoint is
#     unchanged; doctor fails configuration_complete with the same reason;
#   - dropping the route and starting again applies the held-back rows;
#   - a recovery_horizon set on the running state mirror before its first
#     route is added does not halt it (a horizon without routes mis-applies
#     nothing; start would refuse it, the worker runs on).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none', name_prefix => 'pgl_',
	src_conf => "shared_preload_libraries = 'pglogical'\noutput_plugin_libraries = 'pgoutput, pglogical_output'\ntrack_commit_timestamp = on\n");
$src->safe_psql($DB, q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');
SELECT pglogical.create_replication_set('mirror_set');
CREATE TABLE ev (id integer PRIMARY KEY, v text);
CREATE TABLE st (id integer PRIMARY KEY, v text);
SELECT pglogical.replication_set_add_table('mirror_set', 'ev');
SELECT pglogical.replication_set_add_table('mirror_set', 'st');
ALTER TABLE ev REPLICA IDENTITY FULL;
});
my $structural = AshTest::append_log_columns();
my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';
$dst->safe_psql($DB, qq{CREATE TABLE ev_log ($structural, id integer, v text, $axes);
	CREATE TABLE st (id integer PRIMARY KEY, v text);
	CREATE TABLE st_msg (content bytea, operation_key bytea, content_digest bytea);});

my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
for my $stmt (
	"SELECT ash_replicant_create_sink('pl', sink_kind => 'append_log', initial_state => 'go_forward',"
	  . " ignored_sources => '{public.st}')",
	"SELECT ash_replicant_map_table('pl', 'ev_log'::regclass, source_table => 'ev', append_log => true)",
	"SELECT ash_replicant_configure_pipeline('pl', '$conn', decoder => 'pglogical', replication_sets => '{mirror_set}',"
	  . " source_system_identifier => '$sysid', source_database => '$sdb', census => '{\"interval_ms\": 1000}')",
	"SELECT ash_replicant_start('pl')")
{
	my ($rc, $out, $err) = $dst->psql($DB, $stmt);
	die "setup failed: " . substr($stmt, 0, 70) . ": $err" if $rc;
}
AshTest::wait_slot_consistent($src, $dst, 'pl');
$src->safe_psql($DB, q{INSERT INTO ev VALUES (1, 'a')});
AshTest::poll($dst, 'SELECT count(*) = 1 FROM ev_log', 't', timeout => 60);
AshTest::wait_status($dst, 'pl', 'healthy', undef, name => 'the pglogical append log streams');

# ---------------------------------------------------------------------------
# An append log: a route added while running
# ---------------------------------------------------------------------------
my $facts = AshTest::checkpoint_facts($dst, 'pl');
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('pl', 'evmsg', 'ev_log'::regclass, '1 day')");
AshTest::wait_status($dst, 'pl', 'misconfigured', 'decoder_capability_unsupported', src => $src, timeout => 60,
	name => 'append log: the worker halts at its reload misconfigured/decoder_capability_unsupported');
$src->safe_psql($DB, q{BEGIN; INSERT INTO ev VALUES (2, 'b'); SELECT pg_logical_emit_message(true, 'evmsg', 'never arrives'); COMMIT;});
sleep 2;	# (no worker runs to apply it: nothing to wait for)
is($dst->safe_psql($DB, 'SELECT count(*) FROM ev_log'), '1', 'append log: nothing of a later transaction applied');
is(AshTest::checkpoint_facts($dst, 'pl'), $facts, 'append log: the checkpoint unchanged');
like(AshTest::halt_line($dst, 'pl', 'decoder_capability_unsupported'),
	qr/context="[^"]*\(decoder pglogical cannot deliver the logical messages the sink routes\)"/,
	'append log: the halt says why');
is($dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('pl')"
	  . " WHERE check_name = 'configuration_complete'"), 'fail/decoder_capability_unsupported',
	'append log: doctor fails configuration_complete with the same reason');
$dst->safe_psql($DB, "SELECT ash_replicant_drop_message_route('pl', 'evmsg')");
AshTest::start_sink($dst, 'pl');
AshTest::poll($dst, 'SELECT count(*) = 2 FROM ev_log', 't', timeout => 60);
AshTest::wait_status($dst, 'pl', 'healthy', undef, name => 'append log: without the route it streams again');
is($dst->safe_psql($DB, "SELECT string_agg(operation || ':' || coalesce(v, ''), ',' ORDER BY commit_lsn, ordinal) FROM ev_log"),
	'insert:a,insert:b', 'append log: the held-back row applied once, no message event');

# ---------------------------------------------------------------------------
# A state mirror: a horizon set while running, then a route
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'sm', decoder => 'pglogical', replication_sets => ['mirror_set'],
	maps => [ ['st'] ], ignored_sources => ['public.ev'], marker => 0);
AshTest::wait_slot_consistent($src, $dst, 'sm');
$src->safe_psql($DB, q{INSERT INTO st VALUES (1, 'a')});
AshTest::poll($dst, 'SELECT count(*) = 1 FROM st', 't', timeout => 60);
AshTest::wait_status($dst, 'sm', 'healthy', undef, name => 'the pglogical state mirror streams');
$dst->safe_psql($DB, "SELECT ash_replicant_alter_sink('sm', recovery_horizon => '1 hour')");
$src->safe_psql($DB, q{INSERT INTO st VALUES (2, 'b')});
AshTest::poll($dst, 'SELECT count(*) = 2 FROM st', 't', timeout => 60);
AshTest::wait_status($dst, 'sm', 'healthy', undef,
	name => 'state mirror: a horizon set while running (no route yet) does not halt it');
$facts = AshTest::checkpoint_facts($dst, 'sm');
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('sm', 'stmsg', 'st_msg'::regclass, '1 hour')");
AshTest::wait_status($dst, 'sm', 'misconfigured', 'decoder_capability_unsupported', src => $src, timeout => 60,
	name => 'state mirror: the route halts the worker at its reload');
$src->safe_psql($DB, q{INSERT INTO st VALUES (3, 'c')});
sleep 2;	# (no worker runs to apply it: nothing to wait for)
is($dst->safe_psql($DB, 'SELECT count(*) FROM st'), '2', 'state mirror: nothing of a later transaction applied');
is(AshTest::checkpoint_facts($dst, 'sm'), $facts, 'state mirror: the checkpoint unchanged');
is(AshTest::preflight_verdict($dst, 'sm', 'configuration_complete'), 'fail/decoder_capability_unsupported',
	'state mirror: preflight fails with the same reason');
$dst->safe_psql($DB, "SELECT ash_replicant_drop_message_route('sm', 'stmsg');"
	  . " SELECT ash_replicant_alter_sink('sm', reset_recovery_horizon => true)");
AshTest::start_sink($dst, 'sm');
AshTest::poll($dst, 'SELECT count(*) = 3 FROM st', 't', timeout => 60);
AshTest::wait_status($dst, 'sm', 'healthy', undef, name => 'state mirror: without the route it streams again');

done_testing();
