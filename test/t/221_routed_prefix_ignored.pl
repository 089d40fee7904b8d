# A routed prefix listed in ignored_message_prefixes
# (docs/reasons.md#message_route_invalid).
#
# The worker looks at the ignored list before the routes, so a routed prefix
# listed there is acknowledged with no effect and no claim.
# ash_replicant_add_message_route refuses a prefix that is ignored; before
# the fix ash_replicant_alter_sink accepted the other order, the running
# worker restarted healthy and dropped the routed messages, doctor silent.
# Now:
#   1. alter_sink refuses it with message_route_invalid and stores nothing;
#      the route still applies;
#   2. a configuration holding the overlap (planted in the catalog, as an
#      earlier version stored it) halts the running worker at its reload
#      misconfigured/message_route_invalid; a routed message sent meanwhile
#      is not acknowledged (no effect, no claim); preflight and doctor fail
#      configuration_complete and start refuses, with the same reason;
#   3. alter_sink taking the prefix out starts the pipeline again, and the
#      held-back message is applied once.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $sink = 'rp';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'ash_keyring'\n");
AshTenancy::write_keyring($dst, 'ash_keyring', 'message_digest 1 ' . AshTenancy::key_hex(1),
	'horizon_provenance 1 ' . AshTenancy::key_hex(3));
AshTest::both($src, $dst, 'CREATE TABLE items (id integer PRIMARY KEY)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_rp FOR TABLE items');
$dst->safe_psql($DB, 'CREATE TABLE m_tab (content bytea, operation_key bytea, content_digest bytea)');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_rp',
	maps => [ ['items'] ], recovery_horizon => '1 hour', ignored_message_prefixes => ['ig'], start => 0);
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'rt', 'm_tab'::regclass, '1 hour')");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'the routed pipeline streams')
  or BAIL_OUT('never streamed');

my $n = 0;
sub emit
{
	my ($prefix, $content) = @_;
	$n++;
	$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES ($n);"
		  . " SELECT pg_logical_emit_message(true, '$prefix', '$content'); COMMIT;");
	return $n;
}
sub applied
{
	my ($content) = @_;
	return $dst->safe_psql($DB, "SELECT count(*) FROM m_tab WHERE content = '$content'");
}
sub claims { return $dst->safe_psql($DB, 'SELECT count(*) FROM ash_replicant.message_claims'); }
sub ignored { return $dst->safe_psql($DB, "SELECT ignored_message_prefixes::text FROM ash_replicant.sinks WHERE sink_name = '$sink'"); }

emit('rt', 'one');
emit('ig', 'one');
AshTest::wait_caught_up($src, $dst, $sink, name => 'baseline applied');
is(applied('one') . '/' . claims(), '1/1', 'baseline: the routed message applied and claimed once');

# ---------------------------------------------------------------------------
# 1: alter_sink refuses to ignore a routed prefix
# ---------------------------------------------------------------------------
my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_alter_sink('$sink', ignored_message_prefixes => '{ig,rt}')");
isnt($rc, 0, 'alter_sink: a routed prefix put into ignored_message_prefixes is refused');
like($err, qr/rejected: message_route_invalid \(a routed prefix is listed in ignored_message_prefixes\)/,
	'... with message_route_invalid, as add_message_route refuses the other order');
unlike($err, qr/\brt\b/, '... naming no prefix');
is(ignored(), '{ig}', '... and nothing is stored');
emit('rt', 'two');
AshTest::wait_caught_up($src, $dst, $sink, name => '1: caught up');
is(AshTest::status_row($dst, $sink)->{state}, 'healthy', '1: the pipeline runs on');
is(applied('two') . '/' . claims(), '1/2', '1: the routed message is still applied and claimed');

# ---------------------------------------------------------------------------
# 2: a stored overlap (an earlier version let alter_sink store it)
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, "UPDATE ash_replicant.sinks SET ignored_message_prefixes = '{ig,rt}',"
	  . " config_version = config_version + 1 WHERE sink_name = '$sink'");
AshTest::wait_status($dst, $sink, 'misconfigured', 'message_route_invalid', src => $src,
	timeout => 60, name => '2: the worker halts at its reload misconfigured/message_route_invalid');
my $facts = AshTest::checkpoint_facts($dst, $sink);
my $held = emit('rt', 'three');
sleep 2;	# (no worker runs to apply it: nothing to wait for)
is(applied('three') . '/' . claims(), '0/2', '2: a routed message sent meanwhile has no effect and no claim');
AshTest::halt_left_nothing($dst, $sink, "SELECT count(*) FROM items WHERE id = $held", '0', $facts);
like(AshTest::halt_line($dst, $sink, 'message_route_invalid'), qr/context="[^"]*\(a routed prefix is listed in ignored_message_prefixes\)"/,
	'2: the halt says why');
is(AshTest::preflight_verdict($dst, $sink, 'configuration_complete'), 'fail/message_route_invalid',
	'2: preflight fails configuration_complete with message_route_invalid');
is($dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('$sink')"
	  . " WHERE check_name = 'configuration_complete'"), 'fail/message_route_invalid',
	'2: doctor the same');
($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_start('$sink')");
like($err, qr/start rejected: message_route_invalid/, '2: start refuses it too');
unlike(join("\n", AshTest::log_lines_like($dst, qr/ash_replicant event=/)), qr/\b(?:rt|three)\b/,
	'2: no prefix or content in the worker\'s log lines');

# ---------------------------------------------------------------------------
# 3: the documented recovery
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, "SELECT ash_replicant_alter_sink('$sink', ignored_message_prefixes => '{ig}')");
AshTest::wait_caught_up($src, $dst, $sink, name => '3: alter_sink started the pipeline again');
is(applied('three') . '/' . claims(), '1/3', '3: the held-back message applied and claimed once');
is($dst->safe_psql($DB, "SELECT count(*) FROM items WHERE id = $held"), '1', '3: its row too');

done_testing();
