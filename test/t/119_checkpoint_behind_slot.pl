# A slot past what the destination remembers (docs/reasons.md,
# checkpoint_behind_slot).  A logical slot starts a session at its confirmed
# position whatever position is asked for, so the transactions between the
# destination's checkpoint and the slot are never delivered: a destination
# restored from a backup, or a slot advanced by another client, used to
# stream on with those transactions missing, `healthy`.  Acknowledgements of
# keepalives (nothing to apply) move the slot too; each is recorded first
# (checkpoints.acknowledged_lsn), so such a slot is no false alarm.
#
#   1  keepalive acknowledgements (writes to an unpublished table) move the
#      slot; the destination killed with -9 right after: the pipeline comes
#      back healthy, and the recorded position covers the slot's.
#   2  the destination restored from a physical backup taken before three
#      applied transactions: the restored server's pipeline halts
#      checkpoint_behind_slot naming both positions, the mirror as the
#      backup left it, doctor's check slot fails with it; a reset re-seeds
#      it (v1) to the source's content.
#   3  the slot advanced by another client past two mapped transactions:
#      halts the same way; adopting the slot's position accepts the loss
#      and later changes stream.
#   4  a checkpoint of the previous version (no recorded position) behind an
#      idle slot: the first start takes the slot's position, healthy.
#   5  the source waiting for the pipeline as its synchronous standby:
#      commits of unpublished tables return (their acknowledgements are
#      recorded at once), and a kill -9 after them is no false alarm.
#   6  an append log too: its slot follows the source's WAL with nothing to
#      apply, a commit of an unpublished table returns while the source
#      waits for it (both held until its next event before), and a kill -9
#      after them is no false alarm.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
# the destination is backed up with pg_basebackup (section 2)
my ($src, $dst) = AshTest::start_pair(dst_conf => "wal_level = replica\nmax_wal_senders = 4\n");
my $sink = 'rs';
my $SENTINEL = 'sentinel_b119_k4';

$src->safe_psql($DB, qq{
CREATE TABLE acc (id integer PRIMARY KEY, v text);
INSERT INTO acc SELECT g, 'v' || g FROM generate_series(1, 50) g;
CREATE TABLE noise (id serial PRIMARY KEY, v text);
CREATE PUBLICATION pub_rs FOR TABLE acc;
});
$dst->safe_psql($DB, "CREATE TABLE acc (id integer PRIMARY KEY, v text)");
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_rs',
	maps => [ [ 'acc' ] ], pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_caught_up($src, $dst, $sink, name => 'the pipeline copies and streams')
  or BAIL_OUT('the pipeline never streamed');

my ($sysid, $sdb) = AshTest::source_identity($src);
my $identity = AshTest::lit($sysid) . ', ' . AshTest::lit($sdb);

sub confirmed
{
	return $src->safe_psql($DB,
		"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$sink'");
}

sub recorded_covers
{
	my ($node, $lsn) = @_;
	return $node->safe_psql($DB,
		"SELECT GREATEST(end_lsn, acknowledged_lsn) >= '$lsn'::pg_lsn FROM ash_replicant.checkpoints"
		  . " WHERE slot_name = '$sink'");
}

# the slot moves past the last applied transaction on keepalives alone
sub idle_past
{
	$src->safe_psql($DB, "INSERT INTO noise (v) SELECT 'n' FROM generate_series(1, 10)")
	  for 1 .. 5;
	my $end = $src->safe_psql($DB, 'SELECT pg_current_wal_insert_lsn()');
	return AshTest::poll($src,
		"SELECT confirmed_flush_lsn >= '$end'::pg_lsn FROM pg_replication_slots WHERE slot_name = '$sink'",
		't');
}

sub slot_check
{
	my ($node) = @_;
	return $node->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '')"
		  . " FROM ash_replicant_doctor('$sink') WHERE check_name = 'slot'");
}

sub offline
{
	my ($node) = @_;
	AshTest::stop_sink($node, $sink);
	AshTest::poll($node, "SELECT worker_pid IS NULL FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'",
		't');
}

# ---------------------------------------------------------------------------
# 1: keepalive acknowledgements are recorded before they are sent
# ---------------------------------------------------------------------------
ok(idle_past(), 'idle: keepalive acknowledgements move the slot past the last applied commit');
is(recorded_covers($dst, confirmed()), 't', 'idle: the recorded position covers the slot\'s');
AshTest::crash_restart($dst);
AshTest::wait_caught_up($src, $dst, $sink, name => 'idle: after kill -9 the pipeline streams again');
AshTest::wait_status($dst, $sink, 'healthy', undef, name => 'idle: healthy, no false alarm');

# ---------------------------------------------------------------------------
# 2: the destination restored from a backup
# ---------------------------------------------------------------------------
$dst->backup('before');
$src->safe_psql($DB, qq{
INSERT INTO acc VALUES (1001, 'after the backup $SENTINEL');
UPDATE acc SET v = 'changed $SENTINEL' WHERE id <= 5;
DELETE FROM acc WHERE id > 45;
});
AshTest::wait_caught_up($src, $dst, $sink, name => 'restore: the later transactions applied');
AshTest::assert_mirror_equal($src, $dst, ['acc']);
my $mirror_then = AshTest::table_hash($dst, 'acc');
$dst->stop;

my $dst2 = PostgreSQL::Test::Cluster->new('dst2');
$dst2->init_from_backup($dst, 'before');
$dst2->start;
my $restored = AshTest::table_hash($dst2, 'acc');
isnt($restored, $mirror_then, 'restore: the backup predates the later transactions');
AshTest::wait_status($dst2, $sink, 'halted', 'checkpoint_behind_slot',
	name => 'restore: the restored destination halts checkpoint_behind_slot');
is(AshTest::table_hash($dst2, 'acc'), $restored, 'restore: the mirror is as the backup left it');
ok(AshTest::log_lines_like($dst2,
		qr/event=pipeline\.halt sink=$sink reason=checkpoint_behind_slot .*confirmed position [0-9A-F]+\/[0-9A-F]+ is past .*\([0-9A-F]+\/[0-9A-F]+\)/) >= 1,
	'restore: the halt names both positions');

is(slot_check($dst2), 'fail/checkpoint_behind_slot', 'restore: doctor fails check slot with it');

# re-seed: a reset takes a new snapshot (v1); without provenance the rows
# the source deleted meanwhile would be kept, so the target is emptied first
offline($dst2);
$dst2->safe_psql($DB, "TRUNCATE acc");
$dst2->safe_psql($DB, "SELECT ash_replicant_reset_checkpoint('$sink', $identity)");
AshTest::start_sink($dst2, $sink);
AshTest::wait_caught_up($src, $dst2, $sink, name => 'restore: re-seeded');
AshTest::assert_mirror_equal($src, $dst2, ['acc']);

# ---------------------------------------------------------------------------
# 3: the slot advanced by another client
# ---------------------------------------------------------------------------
offline($dst2);
$src->safe_psql($DB, qq{
INSERT INTO acc VALUES (2001, 'skipped $SENTINEL');
UPDATE acc SET v = 'skipped too $SENTINEL' WHERE id = 10;
});
$src->safe_psql($DB, "SELECT pg_replication_slot_advance('$sink', pg_current_wal_lsn())");
AshTest::start_sink($dst2, $sink);
AshTest::wait_status($dst2, $sink, 'halted', 'checkpoint_behind_slot',
	name => 'advanced: the pipeline halts checkpoint_behind_slot');
is($dst2->safe_psql($DB, "SELECT count(*) FROM acc WHERE id = 2001"), '0',
	'advanced: nothing streamed past the gap');
is(slot_check($dst2), 'fail/checkpoint_behind_slot', 'advanced: doctor fails check slot with it');

# accept the loss: adopt the slot's position
offline($dst2);
my $slot_at = confirmed();
$dst2->safe_psql($DB, "SELECT ash_replicant_adopt_checkpoint('$sink', $identity, '$slot_at')");
AshTest::start_sink($dst2, $sink);
$src->safe_psql($DB, "INSERT INTO acc VALUES (3001, 'after the adoption')");
AshTest::wait_caught_up($src, $dst2, $sink, name => 'advanced: adopted, later changes stream');
is($dst2->safe_psql($DB, "SELECT count(*) FROM acc WHERE id IN (2001, 3001)"), '1',
	'advanced: the adopted loss stays lost, the later change is mirrored');
is(slot_check($dst2), 'pass/', 'advanced: doctor passes check slot once adopted');

# ---------------------------------------------------------------------------
# 4: a checkpoint of the previous version
# ---------------------------------------------------------------------------
offline($dst2);
$dst2->safe_psql($DB, "UPDATE ash_replicant.checkpoints SET acknowledged_lsn = NULL WHERE slot_name = '$sink'");
$src->safe_psql($DB, "INSERT INTO noise (v) VALUES ('n')");
$src->safe_psql($DB, "SELECT pg_replication_slot_advance('$sink', pg_current_wal_lsn())");
my $armed_at = confirmed();
AshTest::start_sink($dst2, $sink);
AshTest::wait_caught_up($src, $dst2, $sink, name => 'previous version: the first start streams');
AshTest::wait_status($dst2, $sink, 'healthy', undef, name => 'previous version: healthy');
is($dst2->safe_psql($DB,
		"SELECT acknowledged_lsn >= '$armed_at'::pg_lsn FROM ash_replicant.checkpoints WHERE slot_name = '$sink'"),
	't', 'previous version: the first start recorded the slot\'s position');

# ---------------------------------------------------------------------------
# 5: the source waits for the pipeline
# ---------------------------------------------------------------------------
ok(AshTest::sync_standby($src, $sink, 1), 'sync: the pipeline is the source\'s synchronous standby');
my $returned = 0;
for (1 .. 20)
{
	my ($rc) = $src->psql($DB, "INSERT INTO noise (v) SELECT 'n' FROM generate_series(1, 3)", timeout => 60);
	$returned++ if defined $rc && $rc == 0;
}
is($returned, 20, 'sync: commits of an unpublished table return');
is(recorded_covers($dst2, confirmed()), 't', 'sync: the recorded position covers the slot\'s');
AshTest::crash_restart($dst2);
AshTest::wait_caught_up($src, $dst2, $sink, name => 'sync: after kill -9 the pipeline streams again');
AshTest::wait_status($dst2, $sink, 'healthy', undef, name => 'sync: healthy, no false alarm');
AshTest::sync_standby($src, $sink, 0);
AshTest::assert_mirror_equal($src, $dst2, ['acc'], where => 'id NOT IN (10, 2001)');

# ---------------------------------------------------------------------------
# 6: an append log acknowledges positions with nothing to apply too
# ---------------------------------------------------------------------------
my $al = 'al';
my $almarker = AshTest::marker_table($al);
my $structural = AshTest::append_log_columns();
my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';
$src->safe_psql($DB, qq{
CREATE TABLE ev (id integer PRIMARY KEY, v text);
ALTER TABLE ev REPLICA IDENTITY FULL;
CREATE TABLE $almarker (id bigint PRIMARY KEY, note text);
ALTER TABLE $almarker REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_al FOR TABLE ev, $almarker;
});
$dst2->safe_psql($DB, qq{
CREATE TABLE ev_log ($structural, id integer, v text, $axes);
CREATE TABLE $almarker ($structural, id bigint, note text, $axes);
});
my $conn = AshTest::conninfo($src);
for my $stmt (
	"SELECT ash_replicant_create_sink('$al', sink_kind => 'append_log', initial_state => 'go_forward')",
	"SELECT ash_replicant_map_table('$al', 'ev_log'::regclass, source_table => 'ev', append_log => true)",
	"SELECT ash_replicant_map_table('$al', '$almarker'::regclass, append_log => true)",
	"SELECT ash_replicant_configure_pipeline('$al', " . AshTest::lit($conn) . ", publication => 'pub_al',"
	  . " source_system_identifier => " . AshTest::lit($sysid) . ", source_database => " . AshTest::lit($sdb)
	  . ", census => '{\"interval_ms\": 1000}')",
	"SELECT ash_replicant_start('$al')")
{
	my ($rc, $out, $err) = $dst2->psql($DB, $stmt);
	BAIL_OUT("append log setup: $err") if $rc;
}
$dst2->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$al', '1 min')");
$src->safe_psql($DB, "INSERT INTO ev VALUES (1, 'a')");
AshTest::wait_caught_up($src, $dst2, $al, name => 'append log: streams');
$src->safe_psql($DB, "INSERT INTO noise (v) SELECT 'n' FROM generate_series(1, 100)") for 1 .. 3;
my $end = $src->safe_psql($DB, 'SELECT pg_current_wal_insert_lsn()');
ok(AshTest::poll($src, "SELECT confirmed_flush_lsn >= '$end'::pg_lsn FROM pg_replication_slots"
		  . " WHERE slot_name = '$al'", 't'),
	'append log: keepalive acknowledgements move its slot (before: held at the last event until the next one)');
ok(AshTest::sync_standby($src, $al, 1), 'append log: the source\'s synchronous standby');
my ($arc) = $src->psql($DB, "INSERT INTO noise (v) VALUES ('n')", timeout => 60);
is($arc, 0, 'append log: a commit of an unpublished table returns (before: waited for the next event)');
AshTest::sync_standby($src, $al, 0);
AshTest::crash_restart($dst2);
$src->safe_psql($DB, "INSERT INTO ev VALUES (2, 'b')");
AshTest::wait_caught_up($src, $dst2, $al, name => 'append log: after kill -9 it streams again');
AshTest::wait_status($dst2, $al, 'healthy', undef, name => 'append log: healthy, no origin gap');
is($dst2->safe_psql($DB, "SELECT string_agg(id::text, ',' ORDER BY id) FROM ev_log"), '1,2',
	'append log: each event once');

my @leak = grep { /$SENTINEL/ } (AshTest::log_lines_like($dst2, qr/ash_replicant/),
	AshTest::log_lines_like($dst, qr/ash_replicant/));
is(scalar(@leak), 0, 'no row value in the extension\'s log lines');

done_testing();
