# snapshot => 'incremental' under faults (docs/snapshots.md#incremental):
# three tables with existing rows (TOASTed values among them) are copied
# chunk by chunk, at the same time (ash_replicant.snapshot_workers = 3: the
# pipeline worker writes big1's chunks, its helpers big2's and big3's:
# "Tables in parallel"), while the pipeline streams and a workload of
# inserts, updates, deletes, primary-key changes and TOAST rewrites runs on
# the source on every table; at seeded random points of the
# copy a process of the destination is killed: the postmaster and its
# stragglers, the helper or the pipeline worker with SIGKILL (the postmaster
# restarts every process), the helper with SIGTERM (it fails alone: the
# worker restarts its session).  The destination starts with stale rows and
# rows the source lacks in big1 and big2; big3's target starts empty (a
# table copied whole in one session is then not scanned for unseen rows,
# one whose copy a fault interrupted is).  Afterwards:
#   - the watermark reaches the last source commit and the mirror's content
#     hash equals the source's for both tables (provenance columns aside);
#   - a destination audit trigger on provenance sinks shows every host effect
#     exactly once: every source update bumps a version n, so per key the
#     versions written (insert, update) at the destination strictly increase
#     -- a chunk row written over a newer streamed one, or a change applied
#     twice, would repeat or lower one; rows the source lacks are deleted once;
#   - while it ran (big2's second chunk held at a destination gate in the
#     helper's transaction): big1 and big2 copying with their rows in
#     stat_snapshot_tables, status catching_up, phase copying, and nothing
#     streamed meanwhile; big3 and big2 finished by helpers 2 and 1
#     (event=snapshot.table_copied ... copier=N), big1 by the worker;
#     event=snapshot.progress at most every 10 s per copier;
#   - the attempt is complete, every table copied, no window left open.
#
# Seed: ASH_SEED (default: time), printed.  ASH_LONG=1: 1,000,000 rows in the
# large table and more faults.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
note "seed $seed (rerun with ASH_SEED=$seed)";
diag "065_snapshot_incremental seed $seed";

my $long   = $ENV{ASH_LONG} ? 1 : 0;
my $rows1  = $long ? 1_000_000 : 60_000;
my $rows2  = $long ? 200_000 : 20_000;
my $rows3  = $long ? 100_000 : 8_000;
my $kills  = $long ? 8 : 4;
my $sink   = 'incr';
my $DB     = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nrestart_after_crash = on\n"
	  . "ash_replicant.snapshot_workers = 3\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

# Was table's event=snapshot.table_copied line lost to a crash?  The worker
# logs it once the last chunk committed (a helper's: once the helper
# reported it), so a fault between the commit and the line leaves the table
# copied and no line: then the destination's log shows the crash's
# recovery after the table's retirement (logged inside the last chunk's
# transaction) and no table_copied line of the table.
sub line_lost_to_crash
{
	my ($table) = @_;
	my $log = join("\n", map { slurp_file($_) } AshTest::log_files($dst));
	my $at = rindex($log, "event=snapshot.retired sink=$sink table=public.$table ");
	return 0 if $at < 0;
	my $rest = substr($log, $at);
	return $rest =~ /automatic recovery in progress|terminated by signal/
	  && $rest !~ /event=snapshot\.table_copied sink=\Q$sink\E table=public\.\Q$table\E /;
}

# big1 is the large table; big2 has a two-column key.  n is a version:
# every update of the workload bumps it.
my $ddl = q{
CREATE TABLE big1 (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0, blob text);
CREATE TABLE big2 (a integer, b integer, val text, n bigint NOT NULL DEFAULT 0, blob text, PRIMARY KEY (a, b));
CREATE VIEW big1_v AS SELECT id, grp, val, n, blob FROM big1;
CREATE VIEW big2_v AS SELECT a, b, val, n, blob FROM big2;
CREATE TABLE big3 (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0, blob text);
CREATE VIEW big3_v AS SELECT id, grp, val, n, blob FROM big3;
};
q_src($ddl . qq{
INSERT INTO big1 SELECT g, g % 97, md5(g::text), 0, CASE WHEN g % 2000 = 0 THEN repeat(md5(g::text), 200) END
  FROM generate_series(1, $rows1) g;
INSERT INTO big2 SELECT g % 100, g / 100, md5((-g)::text), 0, CASE WHEN g % 3000 = 0 THEN repeat(md5(g::text), 150) END
  FROM generate_series(1, $rows2) g;
-- a key no statement of the workload touches: the gate below holds it
INSERT INTO big2 VALUES (3, 500000, 'gate', 0, NULL);
INSERT INTO big3 SELECT g, g % 13, md5(g::text), 0, NULL FROM generate_series(1, $rows3) g;
ANALYZE big1; ANALYZE big2; ANALYZE big3;
CREATE PUBLICATION pub_incr FOR TABLE big1, big2, big3;
});
q_dst(q{
CREATE TABLE big1 (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0, blob text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE big2 (a integer, b integer, val text, n bigint NOT NULL DEFAULT 0, blob text,
	replica_fingerprint bytea, replica_seen_attempt bytea, PRIMARY KEY (a, b));
CREATE VIEW big1_v AS SELECT id, grp, val, n, blob FROM big1;
CREATE VIEW big2_v AS SELECT a, b, val, n, blob FROM big2;
CREATE TABLE big3 (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0, blob text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE VIEW big3_v AS SELECT id, grp, val, n, blob FROM big3;
-- stale rows (the source has these keys) and rows the source lacks
INSERT INTO big1 (id, grp, val, n) SELECT g, 0, 'stale', -1 FROM generate_series(1, 50) g;
INSERT INTO big1 (id, grp, val, n) SELECT g, 0, 'dest only', -1 FROM generate_series(90000001, 90000040) g;
INSERT INTO big2 (a, b, val, n) VALUES (7, 9999999, 'dest only', -1), (1, 0, 'stale', -1);
-- audit: every host effect, in order
CREATE TABLE audit (seq bigserial, tab text NOT NULL, k text NOT NULL, op text NOT NULL, n bigint);
});
# a trigger function reads its table's key columns: one for the id-keyed tables, one for big2
q_dst(q{
CREATE FUNCTION audit_id_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO public.audit (tab, k, op, n) VALUES (TG_TABLE_NAME, OLD.id::text, TG_OP, OLD.n);
	ELSE
		INSERT INTO public.audit (tab, k, op, n) VALUES (TG_TABLE_NAME, NEW.id::text, TG_OP, NEW.n);
	END IF;
	RETURN NULL;
END $$;
CREATE FUNCTION audit2_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO public.audit (tab, k, op, n) VALUES ('big2', OLD.a || '/' || OLD.b, TG_OP, OLD.n);
	ELSE
		INSERT INTO public.audit (tab, k, op, n) VALUES ('big2', NEW.a || '/' || NEW.b, TG_OP, NEW.n);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER audit1 AFTER INSERT OR UPDATE OR DELETE ON big1 FOR EACH ROW EXECUTE FUNCTION audit_id_fn();
CREATE TRIGGER audit3 AFTER INSERT OR UPDATE OR DELETE ON big3 FOR EACH ROW EXECUTE FUNCTION audit_id_fn();
CREATE TRIGGER audit2 AFTER INSERT OR UPDATE OR DELETE ON big2 FOR EACH ROW EXECUTE FUNCTION audit2_fn();
});
# A brake until the faults are done: every statement into a target sleeps
# brake.ms.  On a quiet machine the three tables are copied in about two
# seconds, before the seeded faults could land in the helpers' copies.
AshTest::create_brake($dst, 100);
q_dst(q{
CREATE TRIGGER brake1 AFTER INSERT ON big1 FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();
CREATE TRIGGER brake2 AFTER INSERT ON big2 FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();
CREATE TRIGGER brake3 AFTER INSERT ON big3 FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();
});

# Workload: small transactions spread over the copy (deterministic from the
# seed).  New keys above 10,000,000 (big1) or with b >= 100,000 (big2); a key
# change moves a row of big1 by +100,000,000, each source key at most once.
# Every update bumps n.
my $next = 10_000_000;
my $next2 = 100_000;
my %moved;
my $script = '';
my $xacts = $long ? 3000 : 600;
for my $x (1 .. $xacts)
{
	my @s;
	for (1 .. 1 + int(rand(4)))
	{
		my $k = rand();
		my $which = rand();
		if ($which < 0.15)
		{
			my $id = 1 + int(rand($rows3));
			if ($k < 0.3) { push @s, "INSERT INTO big3 VALUES (" . ($next + 50_000_000) . ", 1, 'new', 0, NULL)"; $next++; }
			elsif ($k < 0.75) { push @s, "UPDATE big3 SET n = n + 1, val = md5(val) WHERE id = $id"; }
			else { push @s, "DELETE FROM big3 WHERE id = $id"; }
		}
		elsif ($which < 0.7)
		{
			my $id = 1 + int(rand($rows1));
			if ($k < 0.25)
			{
				my $m = 1 + int(rand(20));
				push @s, "INSERT INTO big1 SELECT g, g % 97, md5(g::text), 0, NULL FROM generate_series($next, " . ($next + $m - 1) . ") g";
				$next += $m;
			}
			elsif ($k < 0.55) { push @s, "UPDATE big1 SET n = n + 1, val = md5(val) WHERE id IN ($id, " . (1 + int(rand($rows1))) . ")"; }
			elsif ($k < 0.7) { push @s, "DELETE FROM big1 WHERE id = $id"; }
			elsif ($k < 0.8)
			{
				next if $moved{$id}++;
				push @s, "UPDATE big1 SET id = id + 100000000 WHERE id = $id";
			}
			else { push @s, "UPDATE big1 SET n = n + 1, blob = repeat(md5(random()::text), 120) WHERE id = " . (2000 * (1 + int(rand($rows1 / 2000)))); }
		}
		else
		{
			my ($a, $b) = (int(rand(100)), int(rand($rows2 / 100)));
			if ($k < 0.3) { push @s, "INSERT INTO big2 VALUES (" . int(rand(100)) . ", " . $next2++ . ", 'new', 0, NULL)"; }
			elsif ($k < 0.7) { push @s, "UPDATE big2 SET n = n + 1, val = md5(coalesce(val, '')) WHERE a = $a AND b = $b"; }
			elsif ($k < 0.85) { push @s, "DELETE FROM big2 WHERE a = $a AND b = $b"; }
			else { push @s, "UPDATE big2 SET n = n + 1, val = 'toasted unchanged' WHERE blob IS NOT NULL AND a = $a"; }
		}
	}
	next unless @s;
	$script .= "BEGIN;\n" . join(";\n", @s) . ";\nCOMMIT;\n";
	$script .= "SELECT pg_sleep(0.05);\n" if $x % 3 == 0;
}

# big2's key (3, 500000) follows 800 rows: in its second chunk, which the
# helper writes (the pipeline worker writes big1's until big1 is copied)
my $gate = AshTest::close_gate($dst, 'big2', undef, 6565, where => 'NEW.a = 3 AND NEW.b = 500000');

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_incr', marker => 0,
	maps => [ [ 'big1', snapshot_provenance => 'true' ], [ 'big2', snapshot_provenance => 'true' ],
		[ 'big3', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 500, max_pending_chunks => 4");
$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$sink', '2 min')");

my $w = AshTest::start_workload($src, $script, timeout => 900);

# while the copy runs: the helper's chunk of big2 waits at the gate, the
# worker waits for it (fork-join): both tables copying with their rows,
# status catching_up, phase copying, and the stream applies nothing
ok(AshTest::gate_waiting($dst, 6565), "big2's second chunk waits at the gate");
is(AshTest::gate_holders($dst), 'ash_replicant snapshot', 'the writer held at the gate is the helper');
ok(AshTest::poll($dst,
	"SELECT (SELECT count(*) FROM ash_replicant.stat_snapshot_tables WHERE sink_name = '$sink'"
	  . "   AND source_table IN ('big1', 'big2') AND state = 'copying' AND rows_copied > 0) = 2"
	  . " AND (SELECT state FROM ash_replicant_status('$sink')) = 'catching_up'"
	  . " AND (SELECT snapshot_phase FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink') = 'copying'"),
	'while the copy runs: big1 and big2 copying with their rows, status catching_up, phase copying')
  or diag q_dst("SELECT * FROM ash_replicant.stat_snapshot_tables");
{
	# the workload commits meanwhile; the worker waits for the helper's commit
	my $wm = AshTest::checkpoint_lsn($dst, $sink);
	AshTest::poll($src, "SELECT pg_current_wal_lsn() > '$wm'::pg_lsn + 100000");
	usleep(500_000);
	is(AshTest::checkpoint_lsn($dst, $sink), $wm, 'nothing streamed is applied while the chunks are in flight');
}
AshTest::open_gate($gate, 6565);

# faults at seeded progress points, in increasing order: the helper's while
# big2 is being copied (at most a third of it, both tables advance a chunk
# at a time), the others spread over the copy
# (not one already signalled: a helper sent SIGTERM may still be exiting
# while the worker starts its next session)
my @signalled = (0);
sub process_pid
{
	my ($type) = @_;
	return q_dst("SELECT coalesce(min(pid), 0) FROM pg_stat_activity WHERE backend_type = '$type'"
		  . " AND pid NOT IN (" . join(',', @signalled) . ")");
}
my @kinds = map { (qw(helper_kill worker_kill helper_term postmaster))[ $_ % 4 ] } 0 .. $kills - 1;
my @faults_at = sort { $a->[0] <=> $b->[0] }
  map { [ $_ =~ /^helper/ ? 1000 + int(rand($rows2 * 0.6)) : int(rand(($rows1 + $rows2) * 0.8)), $_ ] } @kinds;
my ($faults, $helper_faults) = (0, 0);
for my $f (@faults_at)
{
	my ($at, $kind) = @$f;
	AshTest::poll($dst,
		"SELECT coalesce(sum(rows_copied), 0) > $at OR bool_and(state = 'copied') FROM ash_replicant.snapshot_tables",
		't');
	my $phase = q_dst("SELECT coalesce(snapshot_phase, '') FROM ash_replicant.checkpoints");
	last if $phase eq 'complete';
	if ($kind eq 'postmaster')
	{
		note "fault at >$at rows: destination kill -9";
		AshTest::crash_restart($dst);
		$faults++;
		next;
	}
	my $type = $kind eq 'worker_kill' ? 'ash_replicant pipeline' : 'ash_replicant snapshot';
	# the helper of this session (started again after each fault)
	AshTest::poll($dst, "SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = '$type'"
		  . " AND pid NOT IN (" . join(',', @signalled) . ")) >= 1"
		  . " OR (SELECT state FROM ash_replicant.snapshot_tables WHERE source_table = 'big2') = 'copied'");
	# (the one polled may be a helper of the last session, stopped as the
	# next one starts: then the next session's)
	my $pid = process_pid($type);
	for (my $i = 0; !$pid && $i < 200; $i++)
	{
		last if q_dst("SELECT state FROM ash_replicant.snapshot_tables WHERE source_table = 'big2'") eq 'copied';
		usleep(50_000);
		$pid = process_pid($type);
	}
	note "fault at >$at rows: $kind of pid $pid";
	next unless $pid;
	usleep(int(rand(200_000)));	# anywhere in a round
	kill($kind eq 'helper_term' ? 'TERM' : 'KILL', $pid);
	push @signalled, $pid;
	$faults++;
	$helper_faults++ if $kind =~ /^helper/;
	# back up (after a SIGKILL the postmaster restarts every process)
	AshTest::poll($dst, "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'"
		  . " AND pid <> $pid");
}
diag "ash-proof: faults_injected=$faults helper_faults=$helper_faults seed=$seed";
q_dst('UPDATE brake SET ms = 0');
ok($helper_faults >= 2, "the helper was killed in the middle of its copy ($helper_faults times)");

ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints", 't',
	timeout => $long ? 1800 : 300), 'the incremental attempt completes');
ok(AshTest::finish_workload($w), 'workload ran to its end');

# caught up: the last source commit is applied (a key of its own: the
# workload may have deleted any row of the seed)
my ($commit) = AshTest::commit_tracked($src, "INSERT INTO big2 VALUES (0, 900000, 'last', 0, NULL)");
ok(AshTest::wait_lsn($src, $dst, $sink, $commit), 'watermark reaches the last source commit');
AshTest::wait_status($dst, $sink, 'healthy');
AshTest::assert_mirror_equal($src, $dst, ['big1_v'], order_by => 'id',
	name => 'after faults during the incremental snapshot');
AshTest::assert_mirror_equal($src, $dst, ['big2_v'], order_by => 'a, b',
	name => 'after faults during the incremental snapshot');
AshTest::assert_mirror_equal($src, $dst, ['big3_v'], order_by => 'id',
	name => 'after faults during the incremental snapshot');

# effect-once, per key: versions written strictly increase; one delete of a
# row the source lacks
for my $t ('big1', 'big2', 'big3')
{
	my $bad = q_dst(qq{
		SELECT count(*) FROM (
		  SELECT k, n, lag(n) OVER (PARTITION BY k ORDER BY seq) AS prev, op, lag(op) OVER (PARTITION BY k ORDER BY seq) AS prev_op
		    FROM audit WHERE tab = '$t') x
		 WHERE op <> 'DELETE' AND prev_op IS DISTINCT FROM 'DELETE' AND prev IS NOT NULL AND n <= prev AND NOT (prev = -1)});
	is($bad, '0', "$t: per key, every version is written once and never older than one written before");
	my $dup = q_dst("SELECT count(*) FROM (SELECT k, n FROM audit WHERE tab = '$t' AND op <> 'DELETE' AND n >= 0"
		  . " GROUP BY k, n HAVING count(*) > 1) x");
	is($dup, '0', "$t: no (key, version) written twice");
}
is(q_dst("SELECT count(*) FROM audit WHERE tab = 'big1' AND op = 'DELETE' AND k::bigint > 90000000"), '40',
	'the rows the source lacks are retired, each once');
is(q_dst("SELECT count(*) FROM big1 WHERE id > 90000000 AND id < 100000000"), '0', 'none of them is left');
is(q_dst("SELECT count(*) FROM big2 WHERE b = 9999999"), '0', 'big2: the row the source lacks is retired');
# (a crash between the last chunk's retirement and its commit logs a second
# line, when the chunk is copied again)
my @retired3 = AshTest::log_lines_like($dst, qr/event=snapshot\.retired sink=\Q$sink\E table=public\.big3 /);
ok(@retired3 >= 1 && !grep({ $_ !~ / rows=0( scan=skipped)?$/ } @retired3),
	'big3, empty at its first chunk: nothing to retire');
note 'big3 ' . (($retired3[-1] // '') =~ /scan=skipped/ ? 'was copied in one session, not scanned' : 'was scanned');

# catalog: complete, copied, windows closed
is(q_dst("SELECT string_agg(source_table || ':' || state, ',' ORDER BY source_table) FROM ash_replicant.snapshot_tables"),
	'big1:copied,big2:copied,big3:copied', 'every table of the attempt copied');
# the last chunk of each table: big3 (the smallest) by helper 2, big2 by
# helper 1, big1 by the worker (each copier keeps its table, in copy order,
# until it is copied)
for my $tc ([ 'big1', 0 ], [ 'big2', 1 ], [ 'big3', 2 ])
{
	my @l = AshTest::log_lines_like($dst, qr/event=snapshot\.table_copied sink=\Q$sink\E table=public\.$tc->[0] /);
	if (!@l && line_lost_to_crash($tc->[0]))
	{
		pass("$tc->[0]: copied; its table_copied line was lost to a crash right after the commit");
		next;
	}
	like($l[-1] // '', qr/ copier=$tc->[1] rows=/, "$tc->[0]: its last chunk written by copier $tc->[1]");
}
ok(q_dst("SELECT bool_and(chunks_copied > 1 AND chunk_cursor IS NULL) FROM ash_replicant.snapshot_tables") eq 't',
	'each table copied in chunks, its cursor cleared');
is(q_dst("SELECT snapshot_phase FROM ash_replicant.checkpoints"), 'complete', 'attempt complete');
ok(AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ash_replicant snapshot'"),
	'no helper is left once every table is copied');

# progress lines: at most one per 10 s
my @prog = AshTest::log_lines_like($dst, qr/event=snapshot\.progress sink=\Q$sink\E /);
note scalar(@prog) . " progress lines";
my @ts = map { /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)/ ? $1 : () } @prog;
my $close = 0;
for my $i (1 .. $#ts)
{
	my ($a, $b) = map { my @p = /(\d+):(\d+):(\d+)$/; $p[0] * 3600 + $p[1] * 60 + $p[2] } @ts[ $i - 1, $i ];
	$close++ if $b - $a < 9 && $b >= $a;
}
ok($close <= $faults, "snapshot.progress at most every 10 s per worker ($close closer, $faults restarts)");

done_testing();
