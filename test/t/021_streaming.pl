# Streaming of large in-progress transactions (pipelines.streaming, README.md#how-apply-works).
#
# The source runs with logical_decoding_work_mem at its 64 kB minimum, so any
# transaction of a few hundred rows is streamed in blocks before it commits.
# ash_replicant applies the blocks as they arrive in one destination
# transaction that STREAM COMMIT commits with the watermark; whatever would
# make that wrong rolls it back and streams again without streaming.
#
#  stream      a 30,000-change transaction (inserts, updates, key changes,
#              deletes) is applied as it streams: its rows are being written
#              while the source transaction is still open (the worker holds a
#              lock on the target before the source commits), nothing is
#              visible before the commit, one apply.streamed event, no
#              fallback; mirror equals source.
#  abort       a streamed transaction that rolls back leaves nothing; the
#              next one applies.
#  heartbeat   a non-transactional message with an ignored prefix between
#              two blocks: no fallback, the transaction streams.
#  subabort    a subtransaction whose streamed rows were applied rolls back:
#              fallback (reason subtransaction_abort), the transaction
#              arrives whole after its commit; mirror equals source.  An
#              aborted subtransaction that wrote nothing needs no fallback.
#  interleave  a small transaction commits while a streamed one is open:
#              fallback (reason interleaved); the small one is applied before
#              the large one commits; both exact.
#  resume      after the fallback's transaction is applied and the retry
#              delay (ash_replicant.streaming_retry_delay: 1 h while the long
#              transaction is open, then lowered to 1 s at run time) passed,
#              the idle worker reconnects by itself and streams the next large
#              transaction again.
#  history     a streamed transaction that touches an SCD2 target falls back
#              (history_target): its versions carry the commit LSN; exact.
#  crash       the destination is killed (SIGKILL) while a streamed
#              transaction is being applied, then the walsender is
#              terminated while another one is: mirror equals source, and a
#              per-row write audit on both ends shows every row written
#              exactly as often at both (effect-once).
#  deferred    a streamed transaction with a row the destination rejects
#              (CHECK), and one that truncates the mapped table (on_truncate
#              halt), both rolled back by the source: neither halts nor counts
#              against the retries -- the worker falls back (reasons error and
#              halt), the rolled-back transaction never arrives, and the
#              pipeline stays healthy.
#  leak        a streamed transaction with a row the destination rejects
#              (CHECK), committed, halts apply_failed at its commit LSN
#              (halt_lsn); nothing of it is visible, the checkpoint is
#              unchanged, and the planted sentinel appears in no log line or
#              status output.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $SENTINEL = 'STRM_SENTINEL_7c41e2';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "logical_decoding_work_mem = '64kB'\n",
	dst_conf => "ash_replicant.streaming_retry_delay = '1s'\n");

AshTest::both($src, $dst, q{
CREATE TABLE big (id bigint PRIMARY KEY, grp integer NOT NULL, val text);
CREATE TABLE acct (id bigint PRIMARY KEY, bal integer NOT NULL);
} . AshTest::write_audit_sql('big', 'bigint'));
$dst->safe_psql('postgres', q{
CREATE TABLE acct_hist (
	version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id bigint NOT NULL, bal integer NOT NULL,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, is_current boolean,
	UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX acct_hist_open ON acct_hist (id) WHERE valid_to_lsn IS NULL;
});
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_strm FOR TABLE big, acct');

AshTest::setup_pipeline($src, $dst, sink => 'strm', publication => 'pub_strm',
	maps => [ ['big'],
		[ 'acct_hist', source_table => 'acct', history_strategy => 'scd2',
		  history_business_key => ['id'], history_current_column => 'is_current' ] ],
	pipeline_extra => 'streaming => true', ignored_message_prefixes => ['heartbeat']);
AshTest::wait_caught_up($src, $dst, 'strm', name => 'pipeline streams')
  or BAIL_OUT('pipeline never streamed');

sub streamed_events   { return scalar(AshTest::log_lines_like($dst, qr/event=apply\.streamed sink=strm /)); }
sub fallback_events   { my ($r) = @_; return scalar(AshTest::log_lines_like($dst, qr/event=apply\.stream_fallback sink=strm reason=$r /)); }
sub resume_events     { return scalar(AshTest::log_lines_like($dst, qr/event=apply\.stream_resume sink=strm$/)); }

# Wait (up to a minute) until $cond->() holds.
sub wait_until
{
	my ($cond) = @_;
	for (1 .. 300)
	{
		return 1 if $cond->();
		usleep(200_000);
	}
	return 0;
}
sub wait_fallback { my ($r, $before) = @_; return wait_until(sub { fallback_events($r) > $before }); }
sub mirror_equal      { my ($label) = @_; AshTest::assert_mirror_equal($src, $dst, [ 'big' ], name => "$label: mirror equals source"); }

# Does the destination worker hold a lock on "big" (it is writing a streamed
# transaction that has not committed)?
sub wait_writing
{
	my ($label) = @_;
	ok(AshTest::poll($dst, q{SELECT count(*) > 0 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE c.relname = 'big' AND l.mode = 'RowExclusiveLock' AND l.granted
		AND a.backend_type = 'ash_replicant pipeline'}),
		"$label: the worker writes the transaction before the source commits it");
}

# A background source session with an open transaction.
sub open_xact
{
	my ($sql) = @_;
	my $s = $src->background_psql('postgres', on_error_stop => 1);
	$s->query_safe("BEGIN; $sql");
	return $s;
}

# --- stream -----------------------------------------------------------------
{
	my $s = open_xact(q{
INSERT INTO big SELECT g, g % 10, 'v' || g FROM generate_series(1, 20000) g;
UPDATE big SET val = val || '+' WHERE id % 4 = 0;
UPDATE big SET id = id + 1000000 WHERE id % 50 = 1;
DELETE FROM big WHERE id % 20 = 3;});
	wait_writing('stream');
	is($dst->safe_psql('postgres', 'SELECT count(*) FROM big'), '0',
		'stream: nothing is visible before the source commits');
	$s->query_safe('COMMIT');
	$s->quit;
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'stream: caught up');
	mirror_equal('stream');
	is(streamed_events(), 1, 'stream: one transaction applied as it streamed');
	is(scalar(AshTest::log_lines_like($dst, qr/event=apply\.stream_fallback/)), 0, 'stream: no fallback');
}

# --- abort ------------------------------------------------------------------
{
	my $s = open_xact(q{INSERT INTO big SELECT g, 1, 'gone' FROM generate_series(2000001, 2010000) g});
	wait_writing('abort');
	$s->query_safe('ROLLBACK');
	$s->quit;
	$src->safe_psql('postgres', q{INSERT INTO big SELECT g, 2, 'after' FROM generate_series(3000001, 3005000) g});
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'abort: caught up');
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM big WHERE val = 'gone'}), '0',
		'abort: nothing of the rolled-back transaction');
	mirror_equal('abort');
	is(streamed_events(), 2, 'abort: the next large transaction streamed');
}

# --- heartbeat --------------------------------------------------------------
{
	# a non-transactional message with an ignored prefix (a tool's
	# heartbeat) between two blocks of a streamed transaction has no effect:
	# no fallback (before: reason message, streaming lost to every heartbeat)
	my $s = open_xact(q{INSERT INTO big SELECT g, 1, 'hb' FROM generate_series(2100001, 2106000) g});
	wait_writing('heartbeat');
	$src->safe_psql('postgres', q{SELECT pg_logical_emit_message(false, 'heartbeat', 'beat')});
	$s->query_safe(q{INSERT INTO big SELECT g, 1, 'hb2' FROM generate_series(2106001, 2112000) g});
	$s->query_safe('COMMIT');
	$s->quit;
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'heartbeat: caught up');
	is(fallback_events('message'), 0, 'heartbeat: an ignored message between blocks is no fallback');
	is(streamed_events(), 3, 'heartbeat: the transaction streamed');
	mirror_equal('heartbeat');
}

# --- subabort ---------------------------------------------------------------
{
	# a subtransaction that wrote nothing aborts: no fallback
	$src->safe_psql('postgres', q{
BEGIN;
INSERT INTO big SELECT g, 3, 'sub0' FROM generate_series(4000001, 4006000) g;
SAVEPOINT a;
SELECT txid_current();
ROLLBACK TO a;
INSERT INTO big SELECT g, 3, 'sub0b' FROM generate_series(4006001, 4008000) g;
COMMIT;});
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'subabort (empty): caught up');
	is(fallback_events('subtransaction_abort'), 0, 'subabort: an empty aborted subtransaction needs no fallback');
	is(streamed_events(), 4, 'subabort: ... and the transaction streamed');

	$src->safe_psql('postgres', q{
BEGIN;
INSERT INTO big SELECT g, 4, 'sub1' FROM generate_series(5000001, 5006000) g;
SAVEPOINT a;
INSERT INTO big SELECT g, 4, 'sub1-undone' FROM generate_series(5006001, 5012000) g;
UPDATE big SET val = 'sub1-undone' WHERE id BETWEEN 5000001 AND 5001000;
ROLLBACK TO a;
INSERT INTO big SELECT g, 4, 'sub1c' FROM generate_series(5012001, 5014000) g;
SAVEPOINT b;
UPDATE big SET val = 'released' WHERE id BETWEEN 5000001 AND 5000500;
RELEASE b;
COMMIT;});
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'subabort: caught up');
	is(fallback_events('subtransaction_abort'), 1, 'subabort: fallback after applied rows of a subtransaction rolled back');
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM big WHERE val = 'sub1-undone'}), '0',
		'subabort: nothing of the rolled-back subtransaction');
	mirror_equal('subabort');
}

# a restart streams again (the fallback lasts for the worker's session)
AshTest::stop_settled($src, $dst, 'strm');
AshTest::start_sink($dst, 'strm');
AshTest::wait_caught_up($src, $dst, 'strm', name => 'restarted');

# --- interleave -------------------------------------------------------------
# (the subabort fallback may have resumed streaming already: count from here)
my $resumes = scalar(AshTest::log_lines_like($dst, qr/event=apply\.stream_resume sink=strm/));
# no resume while the long transaction is open (shortened again below)
$dst->safe_psql('postgres', "ALTER SYSTEM SET ash_replicant.streaming_retry_delay = '1h'; SELECT pg_reload_conf()");
{
	my $before = streamed_events();
	my $s = open_xact(q{INSERT INTO big SELECT g, 5, 'long' FROM generate_series(6000001, 6015000) g});
	wait_writing('interleave');
	$src->safe_psql('postgres', q{INSERT INTO big VALUES (6100001, 5, 'short')});
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'interleave: the short transaction is applied while the long one is open');
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM big WHERE val = 'short'}), '1',
		'interleave: the short transaction is visible');
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM big WHERE val = 'long'}), '0',
		'interleave: the long one is not');
	ok(fallback_events('interleaved') >= 1, 'interleave: fallback (interleaved)');
	$s->query_safe('COMMIT');
	$s->quit;
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'interleave: caught up');
	mirror_equal('interleave');
	is(streamed_events(), $before, 'interleave: the long transaction arrived whole');
}

# --- resume -----------------------------------------------------------------
# Once what the fallback concerned is applied and the retry delay (1 s here)
# has passed, the idle worker reconnects and streams again, without a restart.
{
	my $before = streamed_events();
	my $log = $dst->logfile;
	$dst->safe_psql('postgres', "ALTER SYSTEM SET ash_replicant.streaming_retry_delay = '1s'; SELECT pg_reload_conf()");
	ok(AshTest::poll($dst, qq{SELECT regexp_count(pg_read_file('$log'), 'event=apply\\.stream_resume sink=strm') > $resumes}),
		'resume: the worker reconnected by itself after the retry delay');
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'resume: caught up');
	$src->safe_psql('postgres', q{INSERT INTO big SELECT g, 5, 'again' FROM generate_series(6200001, 6208000) g});
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'resume: the next large transaction applied');
	is(streamed_events(), $before + 1, 'resume: ... as it streamed');
	mirror_equal('resume');
}

# --- history ----------------------------------------------------------------
{
	$src->safe_psql('postgres', q{
BEGIN;
INSERT INTO big SELECT g, 6, 'with-history' FROM generate_series(7000001, 7008000) g;
INSERT INTO acct SELECT g, 100 FROM generate_series(1, 50) g;
UPDATE acct SET bal = bal + 1 WHERE id <= 10;
COMMIT;});
	my ($commit) = AshTest::commit_tracked($src, 'UPDATE acct SET bal = bal + 5 WHERE id = 1');
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'history: caught up');
	is(fallback_events('history_target'), 1, 'history: fallback (history_target)');
	mirror_equal('history');
	is($dst->safe_psql('postgres', q{SELECT count(*), count(*) FILTER (WHERE is_current) FROM acct_hist}),
		'51|50', 'history: one version per key and transaction, 50 current');
	is($dst->safe_psql('postgres', q{SELECT bal FROM acct_hist WHERE id = 1 AND is_current}), '106',
		'history: the current version is the latest');
	is($dst->safe_psql('postgres', qq{SELECT count(*) FROM acct_hist WHERE valid_from_lsn <= 0}), '0',
		'history: every version carries its commit LSN');
	is($dst->safe_psql('postgres', qq{SELECT max(valid_from_lsn) = ('$commit'::pg_lsn - '0/0'::pg_lsn) FROM acct_hist}), 't',
		'history: the latest version starts at its commit LSN');
}

AshTest::stop_settled($src, $dst, 'strm');
AshTest::start_sink($dst, 'strm');
AshTest::wait_caught_up($src, $dst, 'strm', name => 'restarted for crash');

# --- crash ------------------------------------------------------------------
{
	my $s = open_xact(q{
INSERT INTO big SELECT g, 7, 'crash' FROM generate_series(8000001, 8020000) g;
UPDATE big SET val = 'crash+' WHERE id BETWEEN 8000001 AND 8005000;});
	wait_writing('crash (destination)');
	AshTest::crash_restart($dst);
	$s->query_safe(q{INSERT INTO big SELECT g, 7, 'crash2' FROM generate_series(8020001, 8025000) g});
	$s->query_safe('COMMIT');
	$s->quit;
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'crash: caught up after the destination restarted');
	mirror_equal('crash (destination)');

	$s = open_xact(q{INSERT INTO big SELECT g, 8, 'ws' FROM generate_series(8100001, 8120000) g});
	wait_writing('crash (walsender)');
	ok(AshTest::terminate_walsender($src, 'strm') >= 1, 'crash: walsender terminated mid-stream');
	$s->query_safe('COMMIT');
	$s->quit;
	AshTest::wait_caught_up($src, $dst, 'strm', name => 'crash: caught up after the walsender restarted');
	mirror_equal('crash (walsender)');
	# per key, not per operation: a key change may be applied as delete + insert
	my $audit = 'SELECT id, count(*) AS writes FROM big_audit GROUP BY id';
	AshTest::assert_mirror_equal($src, $dst, [ "($audit)" ], order_by => 'id',
		name => 'crash: every row written as often at both ends');
	is(AshTest::status_row($dst, 'strm')->{state}, 'healthy', 'crash: healthy');
}

# --- deferred ---------------------------------------------------------------
{
	$dst->safe_psql('postgres', qq{ALTER TABLE big ADD CONSTRAINT no_sentinel CHECK (val NOT LIKE '%$SENTINEL%')});
	my %case = (
		error => qq{INSERT INTO big SELECT g, 9, 'rb' FROM generate_series(9200001, 9210000) g;
INSERT INTO big VALUES (9300001, 9, 'x-$SENTINEL-x');
INSERT INTO big SELECT g, 9, 'rb' FROM generate_series(9300002, 9310000) g},
		halt => q{TRUNCATE big;
INSERT INTO big SELECT g, 9, 'rb' FROM generate_series(9400001, 9420000) g});
	my $errors = scalar(AshTest::log_lines_like($dst, qr/event=apply\.error sink=strm /));
	my %id = (error => 9500001, halt => 9500002);
	for my $reason ('error', 'halt')
	{
		my $label = "deferred ($reason)";
		my $before = fallback_events($reason);
		my $resumed = resume_events();
		my $s = open_xact($case{$reason});
		ok(wait_fallback($reason, $before),
			"$label: a streamed change that would stop the pipeline falls back");
		$s->query_safe('ROLLBACK');
		$s->quit;
		my ($commit) = AshTest::commit_tracked($src, qq{INSERT INTO big VALUES ($id{$reason}, 9, 'after $reason')});
		ok(AshTest::wait_lsn($src, $dst, 'strm', $commit), "$label: the next transaction applies");
		is(AshTest::status_row($dst, 'strm')->{state}, 'healthy', "$label: the pipeline stays healthy");
		is($dst->safe_psql('postgres', q{SELECT count(*) FROM big WHERE val = 'rb'}), '0',
			"$label: nothing of the rolled-back transaction");
		mirror_equal($label);
		ok(wait_until(sub { resume_events() > $resumed }), "$label: streaming resumes");
	}
	is(scalar(AshTest::log_lines_like($dst, qr/event=apply\.error sink=strm /)), $errors,
		'deferred: no apply error counted');
}

# --- leak -------------------------------------------------------------------
{
	my $facts = AshTest::checkpoint_facts($dst, 'strm');
	my ($commit) = AshTest::commit_tracked($src, qq{
INSERT INTO big SELECT g, 9, 'ok' FROM generate_series(9000001, 9006000) g;
INSERT INTO big VALUES (9100001, 9, 'x-$SENTINEL-x')});
	AshTest::wait_status($dst, 'strm', 'halted', 'apply_failed', src => $src);
	is(AshTest::status_row($dst, 'strm')->{halt_lsn}, $commit, 'leak: the halt names the commit LSN');
	is($dst->safe_psql('postgres', 'SELECT count(*) FROM big WHERE id BETWEEN 9000001 AND 9100001'), '0',
		'leak: nothing of the failed transaction is visible');
	is(AshTest::checkpoint_facts($dst, 'strm'), $facts, 'leak: the checkpoint is unchanged');
	my @hits = AshTest::grep_logs_for($SENTINEL, $dst);
	is(scalar(@hits), 0, 'leak: the sentinel is in no destination log line') or diag explain \@hits;
	my $outputs = join("\n",
		$dst->safe_psql('postgres', q{SELECT row_to_json(s)::text FROM ash_replicant_status() s}),
		$dst->safe_psql('postgres', q{SELECT row_to_json(d)::text FROM ash_replicant_doctor('strm') d}));
	unlike($outputs, qr/\Q$SENTINEL\E/, 'leak: nor in status or doctor output');
}

done_testing();
