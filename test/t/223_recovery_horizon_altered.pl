# recovery_horizon changed under a running state mirror with a message route
# (docs/reasons.md#retention_below_recovery_horizon, #recovery_horizon_invalid).
#
# A route's claims expire after its retention, so start refuses a horizon
# above a route's retention (retention_below_recovery_horizon) and a state
# mirror with routes but no horizon (recovery_horizon_invalid).  Before the
# fix ash_replicant_alter_sink accepted both on a running pipeline: the
# worker restarted healthy while preflight failed, and claims kept the old
# expiry, so a replay inside the new horizon would apply a message twice.
# Now:
#   1. alter_sink refuses recovery_horizon above the route's retention and
#      reset_recovery_horizon, with start's reasons, and stores nothing; the
#      pipeline runs on and a message is claimed with the route's retention;
#   2. such a configuration stored anyway (planted in the catalog, as an
#      earlier version stored it) halts the worker at its reload
#      misconfigured with the reason; a message sent meanwhile has no
#      effect and no claim; preflight fails with the same reason;
#   3. alter_sink restoring the horizon starts the pipeline again and the
#      held-back message is applied once.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $sink = 'hz';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'ash_keyring'\n");
AshTenancy::write_keyring($dst, 'ash_keyring', 'message_digest 1 ' . AshTenancy::key_hex(1),
	'horizon_provenance 1 ' . AshTenancy::key_hex(3));
AshTest::both($src, $dst, 'CREATE TABLE items (id integer PRIMARY KEY)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_hz FOR TABLE items');
$dst->safe_psql($DB, 'CREATE TABLE m (content bytea, operation_key bytea, content_digest bytea)');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_hz',
	maps => [ ['items'] ], recovery_horizon => '1 hour', start => 0);
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'r', 'm'::regclass, '1 hour')");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'the routed pipeline streams')
  or BAIL_OUT('never streamed');

my $n = 0;
sub emit
{
	my ($content) = @_;
	$n++;
	$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES ($n);"
		  . " SELECT pg_logical_emit_message(true, 'r', '$content'); COMMIT;");
	return $n;
}
sub applied { return $dst->safe_psql($DB, "SELECT count(*) FROM m WHERE content = '$_[0]'"); }
sub claims { return $dst->safe_psql($DB, 'SELECT count(*) FROM ash_replicant.message_claims'); }
sub horizon { return $dst->safe_psql($DB, "SELECT coalesce(recovery_horizon::text, 'none') FROM ash_replicant.sinks WHERE sink_name = '$sink'"); }
sub claim_retention { return $dst->safe_psql($DB, 'SELECT string_agg(DISTINCT (expires_at - claimed_at)::text, \',\') FROM ash_replicant.message_claims'); }

# ---------------------------------------------------------------------------
# 1: alter_sink refuses what start refuses
# ---------------------------------------------------------------------------
my @refused = (
	[ 'a horizon above the retention', "recovery_horizon => '1 day'", 'retention_below_recovery_horizon',
		qr/a message route retains less than the sink's recovery_horizon/ ],
	[ 'the horizon reset', 'reset_recovery_horizon => true', 'recovery_horizon_invalid',
		qr/a state_mirror sink that routes messages needs a recovery_horizon/ ],
);
for my $r (@refused)
{
	my ($label, $arg, $reason, $context) = @$r;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_alter_sink('$sink', $arg)");
	isnt($rc, 0, "1: alter_sink refuses $label");
	like($err, qr/sink rejected: $reason \($context\)/, "1: ... with $reason, as start would");
	is(horizon(), '01:00:00', '1: ... and stores nothing');
}
emit('one');
AshTest::wait_caught_up($src, $dst, $sink, name => '1: caught up');
is(AshTest::status_row($dst, $sink)->{state}, 'healthy', '1: the pipeline runs on');
is(applied('one') . '/' . claims(), '1/1', '1: the message applied and claimed once');
is(claim_retention(), '01:00:00', '1: the claim kept for the route\'s retention');
is(AshTest::preflight_verdict($dst, $sink, 'configuration_complete'), 'pass/', '1: preflight passes');
# a horizon at the retention is accepted while running
$dst->safe_psql($DB, "SELECT ash_replicant_alter_sink('$sink', recovery_horizon => '60 minutes')");
AshTest::wait_caught_up($src, $dst, $sink, name => '1: a horizon equal to the retention is accepted');

# ---------------------------------------------------------------------------
# 2: a stored violation halts the worker at its reload
# ---------------------------------------------------------------------------
my $id = 1;
for my $case (
	[ 'a horizon above the retention', "recovery_horizon = '1 day'", 'retention_below_recovery_horizon' ],
	[ 'no horizon', 'recovery_horizon = NULL', 'recovery_horizon_invalid' ])
{
	my ($label, $set, $reason) = @$case;
	my $claims_before = claims();
	$dst->safe_psql($DB, "UPDATE ash_replicant.sinks SET $set, config_version = config_version + 1"
		  . " WHERE sink_name = '$sink'");
	AshTest::wait_status($dst, $sink, 'misconfigured', $reason, src => $src, timeout => 60,
		name => "2: $label, stored: the worker halts at its reload misconfigured/$reason");
	my $facts = AshTest::checkpoint_facts($dst, $sink);
	my $content = "held$id";
	my $held = emit($content);
	$id++;
	sleep 2;	# (no worker runs to apply it: nothing to wait for)
	is(applied($content) . '/' . claims(), "0/$claims_before", "2: $label: a message sent meanwhile has no effect, no claim");
	AshTest::halt_left_nothing($dst, $sink, "SELECT count(*) FROM items WHERE id = $held", '0', $facts);
	is(AshTest::preflight_verdict($dst, $sink, 'configuration_complete'), "fail/$reason",
		"2: $label: preflight fails configuration_complete with the same reason");

	# 3: the documented recovery restarts it
	$dst->safe_psql($DB, "SELECT ash_replicant_alter_sink('$sink', recovery_horizon => '1 hour')");
	AshTest::wait_caught_up($src, $dst, $sink, name => "3: $label: alter_sink started the pipeline again");
	is(applied($content) . '/' . claims(), '1/' . ($claims_before + 1), "3: $label: the held-back message applied and claimed once");
	is(claim_retention(), '01:00:00', "3: $label: every claim kept for the route's retention");
}
unlike(join("\n", AshTest::log_lines_like($dst, qr/ash_replicant/)), qr/\b(?:one|held\d)\b/,
	'no message content in the destination log');

done_testing();
