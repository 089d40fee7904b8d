# An incremental snapshot of a source that commits asynchronously
# (docs/snapshots.md, Incremental, fact 4): a transaction committed with
# synchronous_commit = off is visible to other sessions before its commit
# record is flushed, and a crash of the source before the flush loses it.  A
# chunk read under a snapshot that shows such a transaction must not be
# committed at the destination before the source flushed it: the stream
# never delivers a lost transaction, so nothing would take its effect out of
# the mirror again.
#
# A chunk has the source flush (a logical message committed with
# synchronous_commit = local).  Where the source refuses that -- a role
# without EXECUTE on pg_logical_emit_message, as the first three scenarios
# connect -- the chunk waits for the source's own flushes.  Here the
# source's WAL writer runs every 10 s and nothing else flushes: an
# asynchronous UPDATE of a row the third chunk copies stays unflushed while
# the copy runs.  Then the source loses its WAL buffers twice, one table
# each: stopped in immediate mode and started again (a new postmaster), and
# a backend killed with SIGKILL (the same postmaster restarts every backend
# and recovers: its start time does not change).  Afterwards each mirror
# must equal the source, which no longer has the update.  Then the same in
# a table a helper copies.
#
# Then with the flush request allowed: the chunk that reads the unflushed
# update has the source flush it at once (no wait for the WAL writer, the
# message seen by a logical decoding consumer of the source, acknowledged
# with no effect by the pipeline's own stream); after an immediate stop the
# source still has the update, and so has the mirror.
#
# Last, a quiet source whose reads write WAL (wal_log_hints, as with data
# checksums: the first read of a page since a checkpoint that sets its hint
# bits logs the page): no commit needs that WAL, and a chunk whose snapshot
# shows what an earlier chunk's showed waits for it neither at the flush
# check nor with its window open.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "wal_writer_delay = 10s\nautovacuum = off\nbgwriter_lru_maxpages = 0\n"
	  . "checkpoint_timeout = 1h\nrestart_after_crash = on\nwal_log_hints = on\n",
	# the worker waits at the gate while the source's WAL writer comes round
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.receive_timeout = '120s'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(37));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

# The first three scenarios' role: no superuser, and no EXECUTE on
# pg_logical_emit_message (revoked from PUBLIC): its chunks wait.
q_src(q{
CREATE ROLE snapread LOGIN REPLICATION;
GRANT pg_read_all_settings TO snapread;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO snapread;
REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, bytea) FROM PUBLIC;
});
my $snapread = "host=127.0.0.1 port=" . $src->port . " dbname=$DB user=snapread";

# The destination side of source tables (id, val): provenance columns, and
# a view of what the source has, for the comparison.
sub mirror_tables
{
	q_dst(join '', map { "CREATE TABLE $_ (id bigint PRIMARY KEY, val text NOT NULL,"
		  . " replica_fingerprint bytea, replica_seen_attempt bytea);"
		  . " CREATE VIEW ${_}_v AS SELECT id, val FROM $_;" } @_);
	return;
}

# An incremental pipeline copying @$tables in chunks of 500; %o: restricted
# (connect as snapread), pending (max_pending_chunks).
sub incremental
{
	my ($sink, $pub, $tables, %o) = @_;
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => $pub, marker => 0,
		($o{restricted} ? (connection => $snapread, source_role => 'snapread') : ()),
		maps => [ map { [ $_, snapshot_provenance => 'true' ] } @$tables ],
		pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 500"
		  . ($o{pending} ? ", max_pending_chunks => $o{pending}" : ''));
	return;
}

sub refused_logged
{
	my ($sink) = @_;
	return scalar(grep { /event=snapshot\.flush_request_refused sink=$sink copier=\d+ sqlstate=42501/ }
		  split /\n/, slurp_file($dst->logfile));
}

# The source answers again after a crash (its recovery takes a moment).
sub source_back
{
	my $deadline = time + 60;
	while (time < $deadline)
	{
		my ($rc) = $src->psql($DB, 'SELECT 1');
		return 1 if $rc == 0;
		sleep 1;
	}
	return 0;
}

# kill -9 one client backend of the source: the postmaster ends every
# backend and runs crash recovery, its WAL buffers lost.
sub kill_backend
{
	my $bg = $src->background_psql($DB, on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	my $started = q_src('SELECT pg_postmaster_start_time()');
	kill 'KILL', $pid;
	eval { $bg->quit; };
	ok(source_back(), 'the source recovered from the killed backend');
	is(q_src('SELECT pg_postmaster_start_time()'), $started, 'the same postmaster (its start time kept)');
	return;
}

my $n = 0;
for my $crash ('immediate', 'backend')
{
	$n++;
	my $sink = "incasync$n";
	my $t    = "t$n";
	my $lock = 4544 + $n;
	q_src(qq{
CREATE TABLE $t (id bigint PRIMARY KEY, val text NOT NULL);
CREATE VIEW ${t}_v AS SELECT id, val FROM $t;
INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 2000) g;
CREATE PUBLICATION pub_$sink FOR TABLE $t;
VACUUM $t;
CHECKPOINT;
});
	mirror_tables($t);
	# the first chunk waits at the gate until the asynchronous update is in
	my $gate = AshTest::close_gate($dst, $t, 10, $lock);
	incremental($sink, "pub_$sink", [$t], restricted => 1);
	ok(AshTest::gate_waiting($dst, $lock), "$crash: the copy waits at the gate, its first chunk uncommitted");

	# Right after the WAL writer's round (an asynchronous commit of its
	# own flushed), so that the next one is 10 s away: committed, visible,
	# not flushed (no other commit on the source flushes it).
	my $mark = q_src("SET synchronous_commit = off; CREATE TEMP TABLE m (); SELECT pg_current_wal_insert_lsn()");
	ok(AshTest::poll($src, "SELECT pg_current_wal_flush_lsn() >= '$mark'"), "$crash: the WAL writer ran");
	my $lsn = q_src("SET synchronous_commit = off; UPDATE $t SET val = 'async' WHERE id = 1500;"
		  . " SELECT pg_current_wal_insert_lsn()");
	is(q_src("SELECT val FROM $t WHERE id = 1500"), 'async', "$crash: the asynchronous update is visible at the source");
	AshTest::open_gate($gate, $lock);

	# the third chunk (1001..1500) reads the update: it waits for the flush
	ok(AshTest::poll($dst, "SELECT count(*) >= 1000 FROM $t"), "$crash: the copy passes its second chunk");
	sleep(1);
	is(q_dst("SELECT count(*) FROM $t WHERE id > 1000"), '0',
		"$crash: the chunk that read the unflushed update is not written");
	is(q_src("SELECT pg_current_wal_flush_lsn() < '$lsn'"), 't', "$crash: the update is still unflushed");
	cmp_ok(refused_logged($sink), '>=', 1, "$crash: the source refused the flush request (event=snapshot.flush_request_refused)");

	if ($crash eq 'immediate')
	{
		$src->stop('immediate');
		$src->start;
	}
	else
	{
		kill_backend();
	}
	is(q_src("SELECT val FROM $t WHERE id = 1500"), 'v1500', "$crash: the crash lost the unflushed update");

	ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = '$sink'"),
		"$crash: the copy completes");
	my ($c1) = AshTest::commit_tracked($src, "UPDATE $t SET val = val || '!' WHERE id = 7");
	ok(AshTest::wait_lsn($src, $dst, $sink, $c1), "$crash: the pipeline streams after the source's crash");
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'id',
		name => "$crash: after the source lost an update a chunk had read");
	is(AshTest::status_row($dst, $sink)->{state} // '', 'healthy', "$crash: healthy");
	my ($done) = grep { /event=snapshot\.complete sink=$sink / } split /\n/, slurp_file($dst->logfile);
	like($done // '', qr/ flush_requests=0$/, "$crash: no flush request made (refused)");
}

# The same with a helper (ash_replicant.snapshot_workers = 2, the default):
# the pipeline worker copies h1 (its first chunk held at a gate until the
# helper is there, idle: a worker that finds no helper ready copies the
# helper's table itself), a helper copies h2, granted four chunks at once
# (max_pending_chunks 5), and waits at a gate in its second (the third read
# ahead before it).
# The asynchronous update is to a key of h2's fourth chunk, read after the
# gate opens.  (Tables vacuumed: their reads write no WAL, nothing flushes
# the update.)
q_src(q{
CREATE TABLE h1 (id bigint PRIMARY KEY, val text NOT NULL);
CREATE TABLE h2 (id bigint PRIMARY KEY, val text NOT NULL);
CREATE VIEW h1_v AS SELECT id, val FROM h1;
CREATE VIEW h2_v AS SELECT id, val FROM h2;
INSERT INTO h1 SELECT g, 'v' || g FROM generate_series(1, 30000) g;
INSERT INTO h2 SELECT g, 'v' || g FROM generate_series(1, 3000) g;
CREATE PUBLICATION pub_incasync4 FOR TABLE h1, h2;
VACUUM h1;
VACUUM h2;
CHECKPOINT;
});
mirror_tables('h1', 'h2');
my $t4 = q_src("SELECT now()");
my $wgate4 = AshTest::close_gate($dst, 'h1', 5, 4550);
my $gate4 = AshTest::close_gate($dst, 'h2', 800, 4549);
incremental('incasync4', 'pub_incasync4', [ 'h1', 'h2' ], restricted => 1, pending => 5);
ok(AshTest::gate_waiting($dst, 4550), "helper: the worker's first chunk waits at its gate");
ok(AshTest::poll($src, "SELECT count(*) >= 2 FROM pg_stat_activity"
	  . " WHERE application_name = 'ash_replicant snapshot' AND backend_start > '$t4'"),
	"helper: the worker's and its helper's chunk connections are open");
ok(AshTest::poll($dst,
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'"
	  . " AND wait_event = 'Extension'"), 'helper: the helper is idle');
AshTest::open_gate($wgate4, 4550);
ok(AshTest::gate_waiting($dst, 4549), 'helper: the helper waits at the gate in its second chunk');
my $mark4 = q_src("SET synchronous_commit = off; CREATE TEMP TABLE m (); SELECT pg_current_wal_insert_lsn()");
ok(AshTest::poll($src, "SELECT pg_current_wal_flush_lsn() >= '$mark4'"), 'helper: the WAL writer ran');
my $lsn4 = q_src("SET synchronous_commit = off; UPDATE h2 SET val = 'async' WHERE id = 1900;"
	  . " SELECT pg_current_wal_insert_lsn()");
AshTest::open_gate($gate4, 4549);
ok(AshTest::poll($dst, "SELECT count(*) >= 1500 FROM h2"), 'helper: the helper passes its third chunk');
sleep(2);	# a chunk waits for the flush for 1 s, then is dropped
ok(scalar(grep({ /event=snapshot\.flush_wait sink=incasync4 table=public\.h2 copier=[1-9]/ }
		split /\n/, slurp_file($dst->logfile))),
	'helper: the helper dropped the chunk at the flush check');
is(q_dst("SELECT count(*) FROM h2 WHERE id > 1500"), '0',
	'helper: the chunk that read the unflushed update is not written');
is(q_src("SELECT pg_current_wal_flush_lsn() < '$lsn4'"), 't', 'helper: the update is still unflushed');
$src->stop('immediate');
$src->start;
is(q_src("SELECT val FROM h2 WHERE id = 1900"), 'v1900', 'helper: the crash lost the unflushed update');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'incasync4'"),
	'helper: the copy completes');
AshTest::assert_mirror_equal($src, $dst, [ 'h1_v', 'h2_v' ], order_by => 'id',
	name => 'helper: after the source lost an update a helper\'s chunk had read');

# ---------------------------------------------------------------------------
# forced  the flush request allowed (the test's superuser): the chunk that
#         reads the unflushed update has the source flush it
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE t5 (id bigint PRIMARY KEY, val text NOT NULL);
CREATE VIEW t5_v AS SELECT id, val FROM t5;
INSERT INTO t5 SELECT g, 'v' || g FROM generate_series(1, 2000) g;
CREATE PUBLICATION pub_incforce FOR TABLE t5;
VACUUM t5;
CHECKPOINT;
SELECT 1 FROM pg_create_logical_replication_slot('watch', 'test_decoding');
});
mirror_tables('t5');
my $gate5 = AshTest::close_gate($dst, 't5', 10, 4551);
incremental('incforce', 'pub_incforce', ['t5']);
ok(AshTest::gate_waiting($dst, 4551), 'forced: the copy waits at the gate, its first chunk uncommitted');
my $mark5 = q_src("SET synchronous_commit = off; CREATE TEMP TABLE m (); SELECT pg_current_wal_insert_lsn()");
ok(AshTest::poll($src, "SELECT pg_current_wal_flush_lsn() >= '$mark5'"), 'forced: the WAL writer ran');
my $lsn5 = q_src("SET synchronous_commit = off; UPDATE t5 SET val = 'async' WHERE id = 1500;"
	  . " SELECT pg_current_wal_insert_lsn()");
is(q_src("SELECT pg_current_wal_flush_lsn() < '$lsn5'"), 't', 'forced: the asynchronous update is unflushed');
AshTest::open_gate($gate5, 4551);
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'incforce'"),
	'forced: the copy completes');
is(q_src("SELECT pg_current_wal_flush_lsn() >= '$lsn5'"), 't', 'forced: the source flushed the update');
is(scalar(grep { /event=snapshot\.(flush_wait|flush_request_refused) sink=incforce / } split /\n/, slurp_file($dst->logfile)),
	0, 'forced: no chunk waited for the source\'s WAL writer');
my ($done5) = grep { /event=snapshot\.complete sink=incforce / } split /\n/, slurp_file($dst->logfile);
like($done5 // '', qr/ mode=incremental flush_requests=[1-9]\d*$/,
	'forced: the completion line counts the flush requests');
cmp_ok(q_src("SELECT count(*) FROM pg_logical_slot_peek_changes('watch', NULL, NULL)"
	  . " WHERE data LIKE 'message: transactional: 1 prefix: ash_replicant.flush,%'"), '>=', 1,
	'forced: a logical decoding consumer of the source saw the flush request');
q_src("SELECT pg_drop_replication_slot('watch')");
$src->stop('immediate');
$src->start;
is(q_src("SELECT val FROM t5 WHERE id = 1500"), 'async', 'forced: the update survived the immediate stop');
my ($c5) = AshTest::commit_tracked($src, "UPDATE t5 SET val = val || '!' WHERE id = 7");
ok(AshTest::wait_lsn($src, $dst, 'incforce', $c5), 'forced: the pipeline streams after the stop');
AshTest::assert_mirror_equal($src, $dst, ['t5_v'], order_by => 'id', name => 'forced: the mirror');
is(AshTest::status_row($dst, 'incforce')->{state} // '', 'healthy',
	'forced: healthy (its stream acknowledged its own flush requests with no effect)');

# A table loaded, then a checkpoint: every chunk's read logs the pages whose
# hint bits it sets.  The copy waits at a gate in its second chunk; the
# source then flushes everything (a checkpoint, which commits nothing) and
# its WAL writer is stopped: from then on the page images the chunks' reads
# write stay unflushed, so the walsender's position passes no later chunk's
# WAL position.  Each chunk shows what the second showed: none may wait for
# that WAL, neither at the flush check nor with its window open, and the
# copy completes with the WAL writer stopped.
q_src(q{
CREATE TABLE t3 (id bigint PRIMARY KEY, val text NOT NULL);
CREATE VIEW t3_v AS SELECT id, val FROM t3;
INSERT INTO t3 SELECT g, repeat('h', 200) || g FROM generate_series(1, 5000) g;
CREATE PUBLICATION pub_incasync3 FOR TABLE t3;
CHECKPOINT;
});
mirror_tables('t3');
my $gate3 = AshTest::close_gate($dst, 't3', 600, 4548);
incremental('incasync3', 'pub_incasync3', ['t3']);
ok(AshTest::gate_waiting($dst, 4548), 'hint bits: the copy waits at the gate in its second chunk');
q_src("CHECKPOINT");	# everything written so far flushed
my $walwriter = q_src("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
ok($walwriter =~ /^\d+$/ && kill('STOP', $walwriter), 'hint bits: the source\'s WAL writer stopped');
my $walsz = q_src("SELECT pg_current_wal_insert_lsn()");
my $xmax3 = q_src("SELECT txid_snapshot_xmax(txid_current_snapshot())");
AshTest::open_gate($gate3, 4548);
my $done3 = AshTest::poll($dst,
	"SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'incasync3'",
	't', timeout => 60);
my $unflushed = q_src("SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()"
	  . " AND pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$walsz') > 8192 * 4");
my $xids3 = q_src("SELECT txid_snapshot_xmax(txid_current_snapshot()) - $xmax3");
kill('CONT', $walwriter);
ok($done3, 'hint bits: the copy completes while its reads\' WAL is unflushed');
cmp_ok($xids3, '<=', 1, "hint bits: at most one flush request after the gate ($xids3 transaction ids)");
is($unflushed, 't', 'hint bits: the chunks\' reads wrote page images, unflushed');
my @waits = grep { /event=snapshot\.flush_wait sink=incasync3 / } split /\n/, slurp_file($dst->logfile);
cmp_ok(scalar(@waits), '<=', 1, 'hint bits: at most the first chunk waited for the WAL writer (' . scalar(@waits) . ')');
AshTest::assert_mirror_equal($src, $dst, ['t3_v'], order_by => 'id', name => 'hint bits: the mirror');

done_testing();
