# A source value the destination's encoding cannot hold (docs/reasons.md,
# source_value_unrepresentable).  The worker asks every source session for
# the destination database's encoding, and the source converts each value
# it sends: a UTF8 source's '€' has no LATIN1 equivalent, and the source
# fails that change (22P05) at every attempt.  The previous build
# reconnected for ever, healthy between two attempts, the rows after it
# never applied.
#
#   1  streamed: halts source_value_unrepresentable (22P05) with the
#      transaction's commit LSN, nothing of it committed, the checkpoint
#      unchanged, its value in no destination log line; a restart halts
#      again; skipped (adopt its halt_lsn: the source no longer sends it),
#      later changes apply.
#   2  copied: a v1 snapshot of a table holding such a value halts the same
#      way, nothing of the table copied.
#   3  a source that ends the stream again and again for a reason the worker
#      does not know to be final (here: its walsender terminated each time
#      the session streams): from the third time in a row, status says
#      catching_up/source_stream_failing instead of healthy between two
#      attempts; a session that applies a transaction clears it.  (3b)
#      The same when the source ends a v1 copy's reads again and again
#      before any table of it commits.
#   4  a transaction left open at the source while the worker creates its
#      slot: status catching_up/source_slot_wait, and the worker waits past
#      connect_timeout instead of giving up and trying again; the slot is
#      created once the transaction ends.
#   5  a helper copier of a snapshot waiting for a lock on its target:
#      status catching_up/destination_lock_wait, as for the worker itself.
#   6  a v1 copy whose table a session holds locked at the source: status
#      catching_up/source_lock_wait, the COPY waiting past connect_timeout
#      with no other queued behind it, no source fault; copied once the
#      lock goes.
#   7  the same, the lock's holder committing with the pipeline as its
#      synchronous standby: neither moves (a v1 copy comes before the
#      stream); the worker logs event=snapshot.source_lock_syncrep, and
#      ending the holder's wait (pg_cancel_backend) lets the copy go on.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(dst_encoding => 'LATIN1');

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

# chr() keeps the test file ASCII: 233 is é (LATIN1 has it), 8364 is €
q_src(q{
CREATE TABLE t (id integer PRIMARY KEY, v text);
INSERT INTO t VALUES (1, 'caf' || chr(233));
CREATE TABLE c (id integer PRIMARY KEY, v text);
INSERT INTO c VALUES (1, 'ok'), (2, 'copy_enc_sentinel ' || chr(8364));
CREATE PUBLICATION pub_t FOR TABLE t;
CREATE PUBLICATION pub_c FOR TABLE c;
});
q_dst(q{
CREATE TABLE t (id integer PRIMARY KEY, v text);
CREATE TABLE c (id integer PRIMARY KEY, v text);
});
my $v1 = "go_forward_only => false, snapshot => 'v1'";

# ---------------------------------------------------------------------------
# 1: streamed
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 't', publication => 'pub_t',
	maps => [ ['t'] ], pipeline_extra => $v1);
AshTest::wait_caught_up($src, $dst, 't', name => 't copies a value LATIN1 holds')
  or BAIL_OUT('sink t never streamed');
is(q_dst('SELECT v = \'caf\' || chr(233) FROM t WHERE id = 1'), 't', '... exactly');

my $facts = AshTest::checkpoint_facts($dst, 't');
my ($commit) = AshTest::commit_tracked($src,
	q{INSERT INTO t VALUES (2, 'ok'), (3, 'stream_enc_sentinel ' || chr(8364))});
AshTest::wait_status($dst, 't', 'halted', 'source_value_unrepresentable',
	name => 'a value LATIN1 lacks: halts source_value_unrepresentable');
my $st = AshTest::status_row($dst, 't');
is($st->{halt_sqlstate}, '22P05', '... SQLSTATE 22P05');
is($st->{halt_lsn}, $commit, '... halt_lsn names the transaction');
AshTest::halt_left_nothing($dst, 't', 'SELECT count(*) FROM t', '1', $facts);

AshTest::start_sink($dst, 't');
AshTest::wait_status($dst, 't', 'halted', 'source_value_unrepresentable',
	name => 'a restart halts again', no_early_exit => 1);
is(q_dst('SELECT count(*) FROM t'), '1', '... still nothing of it');

# skip the one transaction: later changes apply
my ($sysid, $sdb) = AshTest::source_identity($src);
AshTest::stop_sink($dst, 't');
AshTest::wait_status($dst, 't', 'not_started', undef, name => 't stopped');
q_dst("SELECT ash_replicant_adopt_checkpoint('t', '$sysid', '$sdb', '$st->{halt_lsn}')");
q_src(q{INSERT INTO t VALUES (4, 'after')});
AshTest::start_sink($dst, 't');
AshTest::wait_caught_up($src, $dst, 't', name => 'skipped: later changes apply');
# the two ends' bytes differ (UTF8, LATIN1): compare the values as UTF8
my $rows = q{SELECT string_agg(id || ':' || encode(convert_to(v, 'UTF8'), 'hex'), ',' ORDER BY id) FROM t};
is(q_dst($rows), q_src($rows . ' WHERE id NOT IN (2, 3)'), 'mirror = source but the skipped transaction');
is(q_dst('SELECT string_agg(id::text, \',\' ORDER BY id) FROM t'), '1,4', '... rows 1 and 4');

# ---------------------------------------------------------------------------
# 2: copied
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'c', publication => 'pub_c',
	maps => [ ['c'] ], pipeline_extra => $v1);
AshTest::wait_status($dst, 'c', 'halted', 'source_value_unrepresentable',
	name => 'a copied value LATIN1 lacks: halts source_value_unrepresentable');
is(AshTest::status_row($dst, 'c')->{halt_sqlstate}, '22P05', '... SQLSTATE 22P05');
is(q_dst('SELECT count(*) FROM c'), '0', '... nothing of the table copied');

# ---------------------------------------------------------------------------
# 3: a stream that keeps failing
# ---------------------------------------------------------------------------
q_src(q{CREATE TABLE r (id integer PRIMARY KEY); CREATE PUBLICATION pub_r FOR TABLE r});
q_dst(q{CREATE TABLE r (id integer PRIMARY KEY)});
AshTest::setup_pipeline($src, $dst, sink => 'r', publication => 'pub_r', maps => [ ['r'] ]);
AshTest::wait_status($dst, 'r', 'healthy', undef, name => 'r healthy');
my $cut = 0;
for my $i (1 .. 4)
{
	AshTest::poll($src, "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'ash_replicant r' AND state = 'streaming'", '1')
	  or last;
	$cut += AshTest::terminate_walsender($src, 'r');
}
is($cut, 4, 'the walsender ended four times as the session streamed');
AshTest::wait_status($dst, 'r', 'catching_up', 'source_stream_failing',
	name => 'status: catching_up/source_stream_failing', no_early_exit => 1);
q_src(q{INSERT INTO r VALUES (1)});
AshTest::wait_caught_up($src, $dst, 'r', name => 'a session applies a transaction');
AshTest::wait_status($dst, 'r', 'healthy', undef, name => '... healthy again');

# ---------------------------------------------------------------------------
# 3b: a snapshot whose reads keep failing
# ---------------------------------------------------------------------------
# The source ends the copy's reading session at every attempt, before any
# table of it commits: from the third time in a row status says
# catching_up/source_stream_failing (the previous build: catching_up
# without a reason, the copy starting over for ever).
q_src(q{CREATE TABLE sn (id integer PRIMARY KEY, v text);
	INSERT INTO sn SELECT g, repeat('v', 60) FROM generate_series(1, 200000) g;
	CREATE PUBLICATION pub_sn FOR TABLE sn});
q_dst(q{CREATE TABLE sn (id integer PRIMARY KEY, v text);
CREATE FUNCTION sn_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.id = 1 THEN PERFORM pg_sleep(1); END IF; RETURN NEW; END $$;
CREATE TRIGGER sn_slow BEFORE INSERT ON sn FOR EACH ROW EXECUTE FUNCTION sn_slow()});
AshTest::setup_pipeline($src, $dst, sink => 'sn', publication => 'pub_sn', maps => [ ['sn'] ],
	pipeline_extra => $v1);
my $ended = 0;
for my $i (1 .. 3)
{
	AshTest::poll($src, q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE application_name = 'ash_replicant snapshot' AND query LIKE 'COPY %sn%' AND state = 'active'})
	  or last;
	$ended += q_src(q{SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'ash_replicant snapshot' AND query LIKE 'COPY %sn%'});
	AshTest::poll($src, q{SELECT count(*) = 0 FROM pg_stat_activity
		WHERE application_name = 'ash_replicant snapshot' AND query LIKE 'COPY %sn%' AND state = 'active'});
}
is($ended, 3, 'the source ended the copy\'s reads three times');
AshTest::wait_status($dst, 'sn', 'catching_up', 'source_stream_failing',
	name => 'status: catching_up/source_stream_failing', no_early_exit => 1);
AshTest::wait_caught_up($src, $dst, 'sn', name => 'left alone, the copy completes');
q_src(q{INSERT INTO sn VALUES (0, 'after')});
AshTest::wait_caught_up($src, $dst, 'sn', name => 'and a transaction applies');
AshTest::assert_mirror_equal($src, $dst, ['sn']);
AshTest::wait_status($dst, 'sn', 'healthy', undef, name => '... healthy again');

# ---------------------------------------------------------------------------
# 4: a slot the source is slow to create
# ---------------------------------------------------------------------------
# The source creates a logical slot once every transaction running when it
# began has ended.  With one left open, the previous build gave up after
# connect_timeout (here 2 s) and tried again for as long as it stayed open,
# catching_up without a reason; now it waits (source_slot_wait in status).
q_dst(q{ALTER SYSTEM SET ash_replicant.connect_timeout = '2s'; SELECT pg_reload_conf()});
q_src(q{CREATE TABLE w (id integer PRIMARY KEY); CREATE TABLE busy (id integer);
	CREATE PUBLICATION pub_w FOR TABLE w});
q_dst(q{CREATE TABLE w (id integer PRIMARY KEY)});
my $open = $src->background_psql($DB, on_error_stop => 1);
$open->query_safe('BEGIN; INSERT INTO busy VALUES (1)');
AshTest::setup_pipeline($src, $dst, sink => 'w', publication => 'pub_w', maps => [ ['w'] ]);
AshTest::wait_status($dst, 'w', 'catching_up', 'source_slot_wait',
	name => 'a transaction open at the source: catching_up/source_slot_wait', no_early_exit => 1);
# past connect_timeout twice over, the same session still waits
ok(AshTest::poll($src, q{SELECT coalesce(bool_or(now() - backend_start > interval '5 s'), false)
	FROM pg_stat_activity WHERE backend_type = 'walsender' AND application_name = 'ash_replicant w'}),
	'... one session waits past connect_timeout');
is(AshTest::status_row($dst, 'w')->{reason}, 'source_slot_wait', '... and says so while the transaction is open');
my (undef, undef, $wait_err) = $dst->psql($DB, "SELECT ash_replicant_wait_for_slot('w', '1 s')");
like($wait_err, qr/DETAIL:  It is catching_up: source_slot_wait \(docs\/reasons\.md#source_slot_wait\)\./,
	'... and so does ash_replicant_wait_for_slot when it times out');
$open->query_safe('COMMIT');
$open->quit;
q_src(q{INSERT INTO w VALUES (1)});
AshTest::wait_caught_up($src, $dst, 'w', name => 'the slot created once it ends: w streams');
is(join("\n", AshTest::log_lines_like($dst, qr/event=source\.fault sink=w /)), '',
	'... the worker waited: no source fault');
q_dst(q{ALTER SYSTEM RESET ash_replicant.connect_timeout; SELECT pg_reload_conf()});

# ---------------------------------------------------------------------------
# 5: a helper copier waiting for a lock on its target
# ---------------------------------------------------------------------------
# destination_lock_wait read the pipeline worker's wait only: a helper
# copier of its snapshot held back by a lock read catching_up without a
# reason.  The worker copies the large table; the helper gets the other,
# which a session holds locked.
q_src(q{CREATE TABLE ca (id integer PRIMARY KEY, v text);
	INSERT INTO ca SELECT g, repeat('v', 60) FROM generate_series(1, 300000) g;
	CREATE TABLE cz (id integer PRIMARY KEY); INSERT INTO cz VALUES (1), (2);
	CREATE PUBLICATION pub_cc FOR TABLE ca, cz});
q_dst(q{CREATE TABLE ca (id integer PRIMARY KEY, v text); CREATE TABLE cz (id integer PRIMARY KEY)});
my $lock = $dst->background_psql($DB, on_error_stop => 1);
$lock->query_safe('BEGIN; LOCK TABLE cz IN EXCLUSIVE MODE');
AshTest::setup_pipeline($src, $dst, sink => 'cc', publication => 'pub_cc', maps => [ ['ca'], ['cz'] ],
	pipeline_extra => $v1);
ok(AshTest::poll($dst, q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE wait_event_type = 'Lock' AND backend_type = 'ash_replicant snapshot'}),
	'a helper copier waits for the lock on its target');
AshTest::wait_status($dst, 'cc', 'catching_up', 'destination_lock_wait',
	name => 'status: catching_up/destination_lock_wait', no_early_exit => 1);
$lock->query_safe('COMMIT');
$lock->quit;
AshTest::wait_caught_up($src, $dst, 'cc', name => 'the lock released: copied and streaming');
AshTest::assert_mirror_equal($src, $dst, [ 'ca', 'cz' ]);

# ---------------------------------------------------------------------------
# 6: a snapshot's COPY waiting for a lock at the source
# ---------------------------------------------------------------------------
# A session at the source holds the table locked, as an ALTER TABLE, a
# VACUUM FULL or a LOCK TABLE does: the previous build gave up on the COPY
# after connect_timeout (here 2 s; its session stayed queued at the source),
# logged a source fault, and its next snapshot's slot waited for the lock's
# transaction: status said source_slot_wait.  Now the COPY waits, and
# status says source_lock_wait.
q_dst(q{ALTER SYSTEM SET ash_replicant.connect_timeout = '2s'; SELECT pg_reload_conf()});
# The lock is taken once the slot exists (an ACCESS EXCLUSIVE lock takes a
# transaction ID, and the slot waits for it): both copiers are held at gates
# on two larger tables ($g1, $g2) meanwhile, and $t is the table they take
# next.  Returns a sub that opens the gates.
sub copiers_held
{
	my ($t, $g1, $g2, $lock1, $lock2) = @_;
	my $tables = qq{CREATE TABLE $t (id integer PRIMARY KEY, v text);
	CREATE TABLE $g1 (id integer PRIMARY KEY); CREATE TABLE $g2 (id integer PRIMARY KEY);};
	q_src($tables . qq{INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 100) g;
	INSERT INTO $g1 SELECT generate_series(1, 1000); INSERT INTO $g2 SELECT generate_series(1, 1000);
	CREATE PUBLICATION pub_$t FOR TABLE $t, $g1, $g2});
	q_dst($tables);
	my $gate1 = AshTest::close_gate($dst, $g1, 1, $lock1);
	my $gate2 = AshTest::close_gate($dst, $g2, 1, $lock2);
	AshTest::setup_pipeline($src, $dst, sink => $t, publication => "pub_$t", maps => [ [$t], [$g1], [$g2] ],
		pipeline_extra => $v1);
	ok(AshTest::gate_waiting($dst, $lock1) || AshTest::gate_waiting($dst, $lock2), 'a copier is held at a gate');
	return sub { AshTest::open_gate($gate1, $lock1); AshTest::open_gate($gate2, $lock2); };
}
my $open_gates = copiers_held('sl', 'ga', 'gb', 6161, 6262);
my $slock = $src->background_psql($DB, on_error_stop => 1);
$slock->query_safe('BEGIN; LOCK TABLE sl IN ACCESS EXCLUSIVE MODE');
$open_gates->();
AshTest::wait_status($dst, 'sl', 'catching_up', 'source_lock_wait',
	name => 'a table locked at the source: catching_up/source_lock_wait', no_early_exit => 1);
# the copy locks its table before it reads it (a rewrite check, snapshot.c)
my $copy_waits = q{FROM pg_stat_activity WHERE application_name = 'ash_replicant snapshot'
	AND (query LIKE 'COPY %sl%' OR query LIKE 'LOCK TABLE %sl%') AND wait_event_type = 'Lock'};
ok(AshTest::poll($src, "SELECT coalesce(bool_or(now() - query_start > interval '5 s'), false) $copy_waits"),
	'... the COPY waits past connect_timeout');
is(q_src("SELECT count(*) $copy_waits"), '1', '... one COPY, none queued behind it');
is(AshTest::status_row($dst, 'sl')->{reason}, 'source_lock_wait', '... said while the lock is held');
$slock->query_safe('COMMIT');
$slock->quit;
AshTest::wait_caught_up($src, $dst, 'sl', name => 'the lock released: copied and streaming');
AshTest::assert_mirror_equal($src, $dst, [ 'sl', 'ga', 'gb' ]);
is(join("\n", AshTest::log_lines_like($dst, qr/event=source\.fault sink=sl /)), '',
	'... the copy waited: no source fault');
q_dst(q{ALTER SYSTEM RESET ash_replicant.connect_timeout; SELECT pg_reload_conf()});

# ---------------------------------------------------------------------------
# 7: ... whose lock holder waits for the pipeline as its synchronous standby
# ---------------------------------------------------------------------------
# A v1 copy comes before the stream: nothing acknowledges the holder's
# commit, whose locks stay until it is -- neither moves.  The worker says so
# in the log; ending the holder's wait (pg_cancel_backend: its commit stays)
# lets the copy go on.
$open_gates = copiers_held('sy', 'gc', 'gd', 6363, 6464);
q_src(q{ALTER SYSTEM SET synchronous_standby_names = '"ash_replicant sy"'});
q_src('SELECT pg_reload_conf()');
my $holder = AshTest::start_workload($src,
	"BEGIN;\nLOCK TABLE sy IN ACCESS EXCLUSIVE MODE;\nINSERT INTO sy VALUES (1000, 'under the lock');\nCOMMIT;\n",
	timeout => 300);
ok(AshTest::poll($src, "SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"),
	'the lock holder\'s commit waits for the pipeline as its synchronous standby');
$open_gates->();
ok(AshTest::wait_until(sub { AshTest::log_lines_like($dst, qr/event=snapshot\.source_lock_syncrep sink=sy copier=\d/) }),
	'the worker says the lock\'s holder waits for a synchronous standby');
AshTest::wait_status($dst, 'sy', 'catching_up', 'source_lock_wait',
	name => '... status: catching_up/source_lock_wait', no_early_exit => 1);
q_src(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'});
ok(AshTest::finish_workload($holder), 'its wait ended (pg_cancel_backend), the commit stays');
q_src('ALTER SYSTEM RESET synchronous_standby_names');
q_src('SELECT pg_reload_conf()');
AshTest::wait_caught_up($src, $dst, 'sy', name => 'the copy goes on and the pipeline streams');
AshTest::assert_mirror_equal($src, $dst, [ 'sy', 'gc', 'gd' ]);

is(scalar(AshTest::grep_logs_for('enc_sentinel', $dst)), 0, 'no value in the destination log');

done_testing();
