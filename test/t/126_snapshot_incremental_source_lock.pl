# An incremental snapshot (docs/snapshots.md, Incremental, Faults and
# restarts) whose tables a session at the source holds locked, as an ALTER
# TABLE, a VACUUM FULL or a LOCK TABLE does, while the pipeline streams.
# The previous build read the chunk and waited for it, the stream standing
# still meanwhile: after connect_timeout it gave up (its read left queued at
# the source), logged a source fault and started the session again, to wait
# again; and a source that waits for the pipeline as its synchronous standby
# waited for it with the lock held -- nothing moved until the worker gave up.
# Now:
#   - a chunk's read gives up on a lock after 200 ms (lock_timeout at the
#     source); the worker sends its read again to wait for the lock without
#     waiting for it itself, a helper's table pauses; both copiers log
#     event=snapshot.source_lock; status says catching_up/source_lock_wait,
#     also past connect_timeout;
#   - a commit of another table is mirrored while the tables stay locked,
#     also by a session started meanwhile (the walsender ended: it reads
#     only catalogs before it copies), and a synchronous standby's commit
#     made under the lock returns;
#   - a helper whose table is locked copies another table meanwhile;
#   - at most one read per copier waits at the source (an ended session's
#     read leaves the lock's queue: client_connection_check_interval), no
#     source fault is logged, the same worker process copies on once the
#     lock is released (event=snapshot.source_lock_released, once a table),
#     and the mirror equals the source;
#   - a go-forward pipeline's preflight (existing_rows) judges a locked
#     table by its estimate after a second.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $sink = 'slk';
my $DB   = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.connect_timeout = '3s'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(33));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_both { q_src($_[0]); q_dst($_[0]); return; }

my $prov = 'replica_fingerprint bytea, replica_seen_attempt bytea';
q_src(q{
CREATE TABLE ta (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE tb (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE s (id bigint PRIMARY KEY, v text NOT NULL);
INSERT INTO ta SELECT g, 'a' || g FROM generate_series(1, 300) g;
INSERT INTO tb SELECT g, 'b' || g FROM generate_series(1, 300) g;
INSERT INTO s VALUES (1, 's1');
CREATE PUBLICATION pub_slk FOR TABLE ta, tb, s;
});
q_dst(qq{
CREATE TABLE ta (id bigint PRIMARY KEY, v text NOT NULL, $prov);
CREATE TABLE tb (id bigint PRIMARY KEY, v text NOT NULL, $prov);
CREATE TABLE s (id bigint PRIMARY KEY, v text NOT NULL, $prov);
CREATE VIEW ta_v AS SELECT id, v FROM ta;
CREATE VIEW tb_v AS SELECT id, v FROM tb;
CREATE VIEW s_v AS SELECT id, v FROM s;
});
q_src(q{CREATE VIEW ta_v AS SELECT id, v FROM ta; CREATE VIEW tb_v AS SELECT id, v FROM tb;
	CREATE VIEW s_v AS SELECT id, v FROM s});

# The worker copies s first (one row), the helper ta, then the worker tb.
# The worker is held at a gate on s's row while the tables are locked at
# the source (after the slot exists: an ACCESS EXCLUSIVE lock takes a
# transaction ID, which the slot's creation would wait for).
my $gate = AshTest::close_gate($dst, 's', 1, 7171);
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_slk', marker => 0,
	maps => [ map { [ $_, snapshot_provenance => 'true' ] } qw(ta tb s) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 20");
ok(AshTest::gate_waiting($dst, 7171), 'the worker waits at the gate on its first table');
my $pid = q_dst("SELECT worker_pid FROM ash_replicant_status('$sink')");
ok($pid =~ /^\d+$/, 'the worker runs');
my $lock = $src->background_psql($DB, on_error_stop => 1);
$lock->query_safe('BEGIN; LOCK TABLE ta, tb IN ACCESS EXCLUSIVE MODE');
AshTest::open_gate($gate, 7171);

for my $c ([ 'tb', 0 ], [ 'ta', 1 ])
{
	my ($t, $n) = @$c;
	ok(AshTest::wait_until(sub {
				AshTest::log_lines_like($dst,
					qr/event=snapshot\.source_lock sink=$sink table=public\.$t copier=$n$/) }),
		"copier $n meets the lock on $t");
}
AshTest::wait_status($dst, $sink, 'catching_up', 'source_lock_wait',
	name => 'tables locked at the source: catching_up/source_lock_wait', no_early_exit => 1);

# the stream goes on while the tables stay locked
my ($c1) = AshTest::commit_tracked($src, "INSERT INTO s VALUES (2, 's2')");
ok(AshTest::wait_lsn($src, $dst, $sink, $c1), 'a commit of another table is mirrored meanwhile');
is(q_dst("SELECT v FROM s WHERE id = 2"), 's2', '... its row is there');

# well past connect_timeout: nothing queued, no fault, status unchanged
sleep 7;
my $waits = q{FROM pg_stat_activity WHERE application_name = 'ash_replicant snapshot'
	AND wait_event_type = 'Lock'};
cmp_ok(q_src("SELECT count(*) $waits"), '<=', 2, 'at most a read per copier waits at the source');
is(AshTest::status_row($dst, $sink)->{reason}, 'source_lock_wait', 'status says so after connect_timeout');
is(join("\n", AshTest::log_lines_like($dst, qr/event=source\.fault sink=$sink /)), '',
	'no source fault while the tables are locked');

# A session that starts while the tables stay locked (the walsender ended)
# reads only catalogs before it copies: it streams, and its reads wait.
is(AshTest::terminate_walsender($src, $sink), '1', 'the walsender is terminated while the tables are locked');
my ($c3) = AshTest::commit_tracked($src, "INSERT INTO s VALUES (3, 's3')");
ok(AshTest::wait_lsn($src, $dst, $sink, $c3), '... the next session streams, the tables still locked');
AshTest::wait_status($dst, $sink, 'catching_up', 'source_lock_wait',
	name => '... and its reads wait: catching_up/source_lock_wait', no_early_exit => 1);
is(scalar(AshTest::log_lines_like($dst, qr/event=source\.fault sink=$sink /)), 1,
	'... one source fault: the walsender ended');
# the ended session's read left the lock's queue (client_connection_check_interval):
# one read waits there for long, the new session's worker's
sleep 3;
is(q_src("SELECT count(*) $waits AND now() - query_start > interval '1 s'"), '1',
	'... the ended session\'s read no longer waits at the source');

# a synchronous standby's commit made under the lock returns
ok(AshTest::sync_standby($src, $sink, 1), 'the pipeline is the source\'s synchronous standby');
$lock->query_safe("INSERT INTO ta VALUES (1000, 'under the lock')");
$lock->query_safe('COMMIT');
pass('the commit made under the lock returned');
$lock->quit;
AshTest::sync_standby($src, $sink, 0);

ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = '$sink'"),
	'the lock released: the attempt completes');
# (the worker takes the helper's table once its own is copied)
for my $t (qw(ta tb))
{
	is(scalar(AshTest::log_lines_like($dst,
				qr/event=snapshot\.source_lock_released sink=$sink table=public\.$t copier=\d$/)), 1,
		"the lock on $t logged released, once");
}
my ($c2) = AshTest::commit_tracked($src, "UPDATE s SET v = 's1!' WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, $sink, $c2), 'watermark reaches the last source commit');
AshTest::wait_status($dst, $sink, 'healthy');
is(q_dst("SELECT worker_pid FROM ash_replicant_status('$sink')"), $pid, 'the same worker process copied on');
is(scalar(AshTest::log_lines_like($dst, qr/event=source\.fault sink=$sink /)), 1, 'no other source fault');
AshTest::assert_mirror_equal($src, $dst, [ 'ta_v', 'tb_v', 's_v' ], order_by => 'id');

# A helper whose table is locked copies another meanwhile: the worker
# copies wa (held at a gate while wb is locked), then wc (large); the
# helper meets the lock on wb and copies wd instead (before: it tried wb
# again and again, wd waiting for the worker).
q_src(q{
CREATE TABLE wa (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE wb (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE wc (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE wd (id bigint PRIMARY KEY, v text NOT NULL);
INSERT INTO wa VALUES (1, 'a1');
INSERT INTO wb SELECT g, 'b' || g FROM generate_series(1, 300) g;
INSERT INTO wc SELECT g, 'c' || g FROM generate_series(1, 3000) g;
INSERT INTO wd SELECT g, 'd' || g FROM generate_series(1, 300) g;
CREATE PUBLICATION pub_w FOR TABLE wa, wb, wc, wd;
});
for my $t (qw(wa wb wc wd))
{
	q_dst("CREATE TABLE $t (id bigint PRIMARY KEY, v text NOT NULL, $prov)");
	q_both("CREATE VIEW ${t}_v AS SELECT id, v FROM $t");
}
my $wgate = AshTest::close_gate($dst, 'wa', 1, 7373);
AshTest::setup_pipeline($src, $dst, sink => 'sw', publication => 'pub_w', marker => 0,
	maps => [ map { [ $_, snapshot_provenance => 'true' ] } qw(wa wb wc wd) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 20");
ok(AshTest::gate_waiting($dst, 7373), 'sw: the worker waits at the gate on its first table');
my $wlock = $src->background_psql($DB, on_error_stop => 1);
$wlock->query_safe('BEGIN; LOCK TABLE wb IN ACCESS EXCLUSIVE MODE');
AshTest::open_gate($wgate, 7373);
ok(AshTest::wait_until(sub {
			AshTest::log_lines_like($dst, qr/event=snapshot\.table_copied sink=sw table=public\.wd copier=1 /) }),
	'sw: the helper copies wd while wb stays locked');
is(q_dst("SELECT state FROM ash_replicant.snapshot_tables WHERE slot_name = 'sw' AND source_table = 'wb'"),
	'pending', '... wb not yet');
$wlock->query_safe('COMMIT');
$wlock->quit;
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'sw'"),
	'sw: the lock released, the attempt completes');
AshTest::assert_mirror_equal($src, $dst, [ map { "${_}_v" } qw(wa wb wc wd) ], order_by => 'id');

# A go-forward pipeline's question "which mapped tables have rows?" (its
# first start, preflight and doctor: existing_rows) reads a row of each:
# a table locked at the source is judged by its estimate after a second
# (before: preflight waited connect_timeout for the lock, then failed the
# check source_probe_failed).
q_src(q{CREATE TABLE gl (id bigint PRIMARY KEY); INSERT INTO gl SELECT generate_series(1, 10);
	CREATE TABLE ge (id bigint PRIMARY KEY); ANALYZE ge;
	CREATE PUBLICATION pub_gl FOR TABLE gl, ge});
q_dst(q{CREATE TABLE gl (id bigint PRIMARY KEY); CREATE TABLE ge (id bigint PRIMARY KEY)});
AshTest::setup_pipeline($src, $dst, sink => 'gl', publication => 'pub_gl', marker => 0,
	maps => [ ['gl'], ['ge'] ], start => 0);
my $glock = $src->background_psql($DB, on_error_stop => 1);
$glock->query_safe('BEGIN; LOCK TABLE gl, ge IN ACCESS EXCLUSIVE MODE');
like(q_dst(q{SELECT verdict || '|' || reason || '|' || detail FROM ash_replicant_preflight('gl')
	WHERE check_name = 'existing_rows'}),
	qr/^warn\|go_forward_rows_not_copied\|tables with rows that a go-forward start does not copy: public\.gl;/,
	'preflight: a locked table with rows (never estimated) is named, an analyzed empty one is not');
$glock->query_safe('COMMIT');
$glock->quit;

done_testing();
