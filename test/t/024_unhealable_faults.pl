# Faults that waiting cannot heal end in a reason of their own, never in an
# endless retry or a slot re-created behind the watermark, and each has a
# recovery path that brings the mirror back to the source
# (docs/operations.md, "Faults that waiting cannot heal").
#
# One sink (uf, snapshot v1) reaches the source through a loopback proxy, as
# a pipeline reaches a source behind a DNS name or a virtual IP.  While it
# runs:
#
#   the slot's WAL removed (max_slot_wal_keep_size) while the pipeline lags
#     (a prepared transaction on the destination holds the target)
#                                          halted retention_lost
#   the slot dropped on the source         halted source_slot_missing; no
#                                          slot re-created, nothing applied
#   the publication dropped, a change      misconfigured source_publication_missing;
#     committed while it is gone           the change not applied
#   a standby of the source promoted and   misconfigured source_timeline_changed
#     the proxy pointed at it (a failover) before anything is applied or any
#                                          slot created; acknowledging the
#                                          timeline then halts
#                                          source_slot_missing (the promoted
#                                          server has no slot)
#
# Each reason is also what doctor's check says.  Each case ends with the
# documented recovery, a re-seed (stop, drop a slot that is left, empty the
# target, reset the checkpoint, start: the snapshot copies every row again),
# after which the mirror equals the source.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $DB = 'postgres';
my $sink = 'uf';
my $faults = 0;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none', dst_conf => "max_prepared_transactions = 4\n");
my @helpers;
END { kill 'KILL', grep { $_ } @helpers; }

AshTest::both($src, $dst, 'CREATE TABLE u (id integer PRIMARY KEY, v text)');
$src->safe_psql($DB, q{
CREATE TABLE walfill (x integer);
CREATE PUBLICATION pub_u FOR TABLE u;
INSERT INTO u SELECT g, 'r' || g FROM generate_series(1, 50) g;
CREATE FUNCTION try_drop(s text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_terminate_backend(active_pid) FROM pg_replication_slots
	 WHERE slot_name = s AND active_pid IS NOT NULL;
	PERFORM pg_drop_replication_slot(s);
	RETURN true;
EXCEPTION WHEN object_in_use THEN
	RETURN false;
END $$;
});
my $proxy_port = PostgreSQL::Test::Cluster::get_free_port();
my $proxy = AshTest::start_proxy($proxy_port, $src->port);
push @helpers, $proxy;
my $user = $src->safe_psql($DB, 'SELECT current_user');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_u', maps => [ ['u'] ],
	connection => "host=127.0.0.1 port=$proxy_port dbname=$DB user=$user",
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'healthy after the snapshot');
AshTest::wait_caught_up($src, $dst, $sink, name => 'streaming');
AshTest::assert_mirror_equal($src, $dst, ['u'], name => 'initial mirror');

sub doctor_says
{
	my ($check, $reason, $label) = @_;
	is($dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('$sink')"
			  . " WHERE check_name = '$check'"),
		"fail/$reason", "$label: doctor $check fails $reason");
}

sub halt_logged
{
	my ($reason, $label) = @_;
	ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=$sink reason=\Q$reason\E /)) >= 1,
		"$label: halt logged with reason $reason");
}

# The source's current timeline, as IDENTIFY_SYSTEM reports it: the one in
# the WAL file name (pg_control's lags behind a promotion until a checkpoint).
sub timeline_of
{
	my ($node) = @_;
	return $node->safe_psql($DB,
		"SELECT ('x' || left(pg_walfile_name(pg_current_wal_flush_lsn()), 8))::bit(32)::integer");
}

sub slots_on
{
	my ($node) = @_;
	return $node->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$sink'");
}

# The documented re-seed, from the source $node.
sub reseed
{
	my ($node, $label) = @_;
	AshTest::stop_settled($node, $dst, $sink);
	$node->safe_psql($DB, "SELECT pg_drop_replication_slot('$sink')") if slots_on($node);
	$dst->safe_psql($DB, 'TRUNCATE u, ' . AshTest::marker_table($sink));
	my ($sysid, $sdb) = AshTest::source_identity($node);
	is($dst->safe_psql($DB, "SELECT ash_replicant_reset_checkpoint('$sink', '$sysid', '$sdb')"), 't',
		"$label: checkpoint reset");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $node, name => "$label: healthy after the re-seed");
	AshTest::wait_caught_up($node, $dst, $sink, name => "$label: caught up after the re-seed");
	AshTest::assert_mirror_equal($node, $dst, ['u'], name => "$label: re-seeded mirror equals the source");
}

##############################################################################
# 1. The slot's WAL removed while the pipeline lags
##############################################################################
{
	my $label = 'slot invalidated';
	$src->safe_psql($DB, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
	$src->reload;
	$dst->safe_psql($DB, "BEGIN; LOCK TABLE u IN ACCESS EXCLUSIVE MODE; PREPARE TRANSACTION 'lag'");
	$src->safe_psql($DB, "INSERT INTO u VALUES (1001, 'while the pipeline lags')");
	ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'"
			  . " AND wait_event_type = 'Lock'", 't', timeout => 60),
		"$label: the worker waits on the held target");
	$src->safe_psql($DB, 'INSERT INTO walfill VALUES (1); SELECT pg_switch_wal()') for 1 .. 4;
	$src->safe_psql($DB, 'CHECKPOINT');
	$faults++;
	ok(AshTest::poll($src, "SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = '$sink'",
			't', timeout => 60),
		"$label: the source invalidated the slot (wal_status lost)");
	$dst->safe_psql($DB, "COMMIT PREPARED 'lag'");
	AshTest::wait_status($dst, $sink, 'halted', 'retention_lost', src => $src, name => "$label: halted/retention_lost");
	halt_logged('retention_lost', $label);
	doctor_says('slot', 'retention_lost', $label);
	$src->safe_psql($DB, 'ALTER SYSTEM RESET max_slot_wal_keep_size');
	$src->reload;
	reseed($src, $label);
}

##############################################################################
# 2. The slot dropped on the source
##############################################################################
{
	my $label = 'slot dropped';
	my $cp0 = AshTest::checkpoint_facts($dst, $sink);
	my $h0 = AshTest::table_hash($dst, 'u');
	ok(AshTest::poll($src, "SELECT try_drop('$sink')", 't', timeout => 60), "$label: the slot is dropped");
	$faults++;
	$src->safe_psql($DB, "INSERT INTO u VALUES (1002, 'after the drop')");
	AshTest::wait_status($dst, $sink, 'halted', 'source_slot_missing', src => $src,
		name => "$label: halted/source_slot_missing");
	halt_logged('source_slot_missing', $label);
	doctor_says('slot', 'source_slot_missing', $label);
	is(slots_on($src), '0', "$label: no slot re-created behind the watermark");
	is(AshTest::checkpoint_facts($dst, $sink), $cp0, "$label: checkpoint unchanged");
	is(AshTest::table_hash($dst, 'u'), $h0, "$label: nothing applied");
	reseed($src, $label);
}

##############################################################################
# 3. The publication dropped, and a change committed while it is gone
##############################################################################
{
	my $label = 'publication dropped';
	my $cp0 = AshTest::checkpoint_facts($dst, $sink);
	my $h0 = AshTest::table_hash($dst, 'u');
	$src->safe_psql($DB, "DROP PUBLICATION pub_u; INSERT INTO u VALUES (1003, 'while the publication is gone')");
	$faults++;
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_publication_missing', src => $src,
		name => "$label: misconfigured/source_publication_missing");
	halt_logged('source_publication_missing', $label);
	doctor_says('publication', 'source_publication_missing', $label);
	is(AshTest::checkpoint_facts($dst, $sink), $cp0, "$label: checkpoint unchanged");
	is(AshTest::table_hash($dst, 'u'), $h0, "$label: nothing applied");
	$src->safe_psql($DB, 'CREATE PUBLICATION pub_u FOR TABLE u, ' . AshTest::marker_table($sink));
	reseed($src, $label);
	is($dst->safe_psql($DB, 'SELECT v FROM u WHERE id = 1003'), 'while the publication is gone',
		"$label: the change made while it was gone is in the re-seeded mirror");
}

##############################################################################
# 4. A standby of the source promoted, and the pipeline reaching it
##############################################################################
{
	my $label = 'source promoted';
	$src->backup('bk');
	my $stby = PostgreSQL::Test::Cluster->new('stby');
	$stby->init_from_backup($src, 'bk', has_streaming => 1);
	$stby->start;
	$src->safe_psql($DB, "INSERT INTO u VALUES (1004, 'before the failover')");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: caught up before the failover");
	$src->wait_for_catchup($stby);
	my $cp0 = AshTest::checkpoint_facts($dst, $sink);
	my $h0 = AshTest::table_hash($dst, 'u');

	# the failover: the primary goes, the standby is promoted, the path moves
	$src->stop;
	$stby->promote;
	AshTest::stop_proxy($proxy);
	$proxy = AshTest::start_proxy($proxy_port, $stby->port);
	push @helpers, $proxy;
	$faults++;
	$stby->safe_psql($DB, "INSERT INTO u VALUES (1005, 'on the promoted standby')");
	is(timeline_of($stby), '2', "$label: the promoted standby runs on a new timeline");

	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_timeline_changed', src => $stby,
		name => "$label: misconfigured/source_timeline_changed");
	halt_logged('source_timeline_changed', $label);
	doctor_says('timeline', 'source_timeline_changed', $label);
	is(AshTest::checkpoint_facts($dst, $sink), $cp0, "$label: checkpoint unchanged");
	is(AshTest::table_hash($dst, 'u'), $h0, "$label: nothing applied");
	is(slots_on($stby), '0', "$label: no slot created on the promoted server");

	# acknowledging the timeline is not enough: the promoted server has no slot
	AshTest::stop_settled($stby, $dst, $sink);
	my ($sysid, $sdb) = AshTest::source_identity($stby);
	is($dst->safe_psql($DB, "SELECT ash_replicant_acknowledge_checkpoint_timeline('$sink', '$sysid', '$sdb', "
			  . timeline_of($stby) . ')'), 't', "$label: timeline acknowledged");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'halted', 'source_slot_missing', src => $stby,
		name => "$label: acknowledged, it halts source_slot_missing");
	is(slots_on($stby), '0', "$label: still no slot behind the watermark");
	is(AshTest::table_hash($dst, 'u'), $h0, "$label: still nothing applied");

	reseed($stby, $label);
	$stby->stop;
}

AshTest::stop_proxy($proxy);
diag "ash-proof: faults_injected=$faults checks=" . Test::More->builder->current_test;
done_testing();
