# A message route whose target table or function is dropped at the
# destination (docs/reasons.md#destination_table_missing).
#
# A state mirror routes 'pt' to a table and 'pf' to a function.  Before the
# fix the worker dereferenced the missing names and died with SIGSEGV, and
# the postmaster restarted every backend in a loop; status stayed
# catching_up.  Now, for each of
#   - the table dropped while streaming, then a message for it;
#   - the function dropped while streaming, then a message for it;
#   - the table dropped while stopped, then a start with no message;
# the sink halts misconfigured destination_table_missing, no process dies
# by a signal, the checkpoint is unchanged and nothing of the failing
# transaction is applied; doctor and preflight fail configuration_complete
# with the same reason; recreating the target and adding the route again
# (the documented recovery) lets the pipeline run on and apply the message.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $sink = 'rt';
my $marker = AshTest::marker_table($sink);
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	# as in production: a crash restarts the server (the loop this test
	# guards against) rather than ending the run
	dst_conf => "ash_replicant.keyring_file = 'ash_keyring'\nrestart_after_crash = on\n");

sub key_hex { my ($seed) = @_; return join '', map { sprintf '%02x', ($_ * 29 + $seed * 83 + 7) % 256 } 0 .. 31; }
{
	my $path = $dst->data_dir . '/ash_keyring';
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh "message_digest 1 " . key_hex(1) . "\nhorizon_provenance 1 " . key_hex(3) . "\n";
	close($fh);
	chmod(0600, $path) or die "chmod: $!";
}

my $create_table = 'CREATE TABLE m_tab (content text, operation_key bytea, content_digest bytea)';
my $create_function = q{CREATE FUNCTION m_fn(p text, c bytea) RETURNS void LANGUAGE sql
	AS $$ INSERT INTO fn_log VALUES (convert_from(c, 'UTF8')) $$};
my $route_table = "SELECT ash_replicant_add_message_route('$sink', 'pt', 'm_tab'::regclass, '1 hour')";
my $route_function = "SELECT ash_replicant_add_message_route('$sink', 'pf', 'm_fn(text,bytea)'::regprocedure, '1 hour')";

AshTest::both($src, $dst, qq{
CREATE TABLE items (id integer PRIMARY KEY);
CREATE TABLE $marker (id bigint PRIMARY KEY, note text);
});
$src->safe_psql($DB, "CREATE PUBLICATION pub_rt FOR TABLE items, $marker");
$dst->safe_psql($DB, "$create_table; CREATE TABLE fn_log (content text); $create_function");

my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
for my $stmt ("SELECT ash_replicant_create_sink('$sink', recovery_horizon => '1 hour')",
	"SELECT ash_replicant_map_table('$sink', 'items'::regclass)",
	"SELECT ash_replicant_map_table('$sink', '$marker'::regclass)",
	$route_table, $route_function,
	"SELECT ash_replicant_configure_pipeline('$sink', '$conn', publication => 'pub_rt',"
	  . " source_system_identifier => '$sysid', source_database => '$sdb', census => '{\"interval_ms\": 1000}')",
	"SELECT ash_replicant_start('$sink')")
{
	my ($rc, $o, $e) = $dst->psql($DB, $stmt);
	die "setup failed: " . substr($stmt, 0, 60) . ": $e" if $rc;
}
AshTest::wait_caught_up($src, $dst, $sink, name => 'the routed pipeline streams')
  or BAIL_OUT('pipeline never streamed');

# both routes used once: the worker holds a prepared plan for each
$src->safe_psql($DB, q{BEGIN; INSERT INTO items VALUES (1);
	SELECT pg_logical_emit_message(true, 'pt', 'one');
	SELECT pg_logical_emit_message(true, 'pf', 'one'); COMMIT;});
AshTest::wait_caught_up($src, $dst, $sink, name => 'both routes applied');
is($dst->safe_psql($DB, "SELECT (SELECT string_agg(content, ',') FROM m_tab) || '/'"
	  . " || (SELECT string_agg(content, ',') FROM fn_log)"), 'one/one', 'each route had its effect');

my $signal_re = qr/terminated by signal/;

# A transaction with a row and a message for $prefix, after $drop ran at the
# destination: the sink halts with the reason, applies nothing of it.
sub dropped_while_streaming
{
	my ($label, $drop, $prefix, $content, $id) = @_;
	my $facts = AshTest::checkpoint_facts($dst, $sink);
	$dst->safe_psql($DB, $drop);
	$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES ($id);"
		  . " SELECT pg_logical_emit_message(true, '$prefix', '$content'); COMMIT;");
	AshTest::wait_status($dst, $sink, 'misconfigured', 'destination_table_missing', src => $src,
		name => "$label: the sink halts misconfigured destination_table_missing");
	AshTest::halt_left_nothing($dst, $sink, "SELECT count(*) FROM items WHERE id = $id", '0', $facts);
	is(scalar(AshTest::log_lines_like($dst, $signal_re)), 0, "$label: no process died by a signal");
	like(AshTest::halt_line($dst, $sink, 'destination_table_missing'), qr/message route/,
		"$label: the halt names a message route");
	return;
}

# Recreate what was dropped, add the route again and start: the message
# held back is applied now, once.
sub recover
{
	my ($label, $prefix, $create, $route, $check_sql, $want) = @_;
	$dst->safe_psql($DB, "SELECT ash_replicant_drop_message_route('$sink', '$prefix')");
	$dst->safe_psql($DB, $create);
	$dst->safe_psql($DB, $route);
	AshTest::start_sink($dst, $sink);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: runs on after the route is restored");
	is($dst->safe_psql($DB, $check_sql), $want, "$label: the held-back message and its row applied once");
	return;
}

# ---------------------------------------------------------------------------
# The table dropped while streaming
# ---------------------------------------------------------------------------
dropped_while_streaming('table', 'DROP TABLE m_tab', 'pt', 'two', 2);
recover('table', 'pt', $create_table, $route_table,
	"SELECT (SELECT string_agg(content, ',') FROM m_tab) || '/' || (SELECT count(*) FROM items WHERE id = 2)",
	'two/1');

# ---------------------------------------------------------------------------
# The function dropped while streaming
# ---------------------------------------------------------------------------
dropped_while_streaming('function', 'DROP FUNCTION m_fn(text, bytea)', 'pf', 'three', 3);
recover('function', 'pf', $create_function, $route_function,
	"SELECT (SELECT string_agg(content, ',' ORDER BY content) FROM fn_log) || '/'"
	  . " || (SELECT count(*) FROM items WHERE id = 3)",
	'one,three/1');

# ---------------------------------------------------------------------------
# The table dropped while stopped; start with no message to apply
# ---------------------------------------------------------------------------
AshTest::stop_settled($src, $dst, $sink);
$dst->safe_psql($DB, 'DROP TABLE m_tab');
is(AshTest::preflight_verdict($dst, $sink, 'configuration_complete'), 'fail/destination_table_missing',
	'preflight: a route with a dropped target fails configuration_complete');
is($dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('$sink')"
	  . " WHERE check_name = 'configuration_complete'"), 'fail/destination_table_missing',
	'doctor: the same verdict');
my $facts = AshTest::checkpoint_facts($dst, $sink);
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'misconfigured', 'destination_table_missing', src => $src,
	name => 'stopped: the start halts misconfigured destination_table_missing');
is(AshTest::checkpoint_facts($dst, $sink), $facts, 'stopped: the checkpoint unchanged');
is(scalar(AshTest::log_lines_like($dst, $signal_re)), 0, 'stopped: no process died by a signal');

$dst->safe_psql($DB, "SELECT ash_replicant_drop_message_route('$sink', 'pt')");
$dst->safe_psql($DB, $create_table);
$dst->safe_psql($DB, $route_table);
is(AshTest::preflight_verdict($dst, $sink, 'configuration_complete'), 'pass/',
	'preflight passes once the route is restored');
AshTest::start_sink($dst, $sink);
$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES (4); SELECT pg_logical_emit_message(true, 'pt', 'four'); COMMIT;");
AshTest::wait_caught_up($src, $dst, $sink, name => 'stopped: runs on after the route is restored');
is($dst->safe_psql($DB, "SELECT string_agg(content, ',') FROM m_tab"), 'four', 'stopped: the next message applied');
is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.message_claims"), '5',
	'one claim per applied message');
is(scalar(AshTest::log_lines_like($dst, $signal_re)), 0, 'no process died by a signal in the whole run');
unlike(join("\n", AshTest::log_lines_like($dst, qr/ash_replicant/)), qr/\b(?:two|three|four)\b/,
	'no message content in the destination log');

done_testing();
