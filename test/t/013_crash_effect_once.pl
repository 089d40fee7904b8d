# Streaming mirror core: effect-once under crashes (README.md#how-apply-works, README.md#testing).
#
# A mixed workload (~200,000 row changes: inserts, updates, key changes,
# deletes, in transactions of 1 to several thousand rows) runs on the source
# while the test, at seeded random points, kills the destination with
# SIGKILL (postmaster and, after 5 s, any straggler) and restarts it, or
# terminates the source walsender of the slot.  Afterwards:
#   - the destination watermark reaches the exact commit LSN of the last source
#     transaction (read from the source WAL) and equals it;
#   - content hash and row count of the mirror equal the source's; no key twice;
#   - write audit: an AFTER INSERT OR UPDATE trigger on BOTH ends logs one row
#     per written row (key).  An AFTER INSERT trigger alone proves nothing under
#     upserts (a replayed insert becomes an update), but counting insert AND
#     update events does: a source change applied twice writes its row twice.
#     Per key, the destination's event count must equal the source's (no
#     double effect, and no lost trigger firing — README.md#how-apply-works: target triggers fire
#     as for ordinary writes).
#
# Seed: ASH_SEED (default: time), printed.  ASH_LONG=1 scales rows and faults.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
note "seed $seed (rerun with ASH_SEED=$seed)";
diag "013_crash_effect_once seed $seed";

my $long       = $ENV{ASH_LONG} ? 1 : 0;
my $target     = $long ? 1_000_000 : 200_000;    # row changes
my $faults     = $long ? 24 : 6;
my $sink       = 'crash';

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');

AshTest::both($src, $dst, q{
CREATE TABLE items (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0);
} . AshTest::write_audit_sql('items', 'bigint'));
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_crash FOR TABLE items');

# The batch size is drawn from the seed too: the default 1000 (few, large
# destination transactions) or small batches (many watermark advances to
# crash between).
my $batch = (1000, 50, 5)[ int(rand(3)) ];
note "batch_max_transactions $batch";
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_crash', maps => [ ['items'] ],
	batch_max_transactions => $batch);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams')
  or BAIL_OUT('pipeline never streamed');

# ---------------------------------------------------------------------------
# Workload script (deterministic from the seed).  Ids 1.. are inserted in
# order; key changes move a row by +100,000,000 (never twice, never onto an
# existing key).  A short pg_sleep between some transactions spreads the
# workload over the fault window.
# ---------------------------------------------------------------------------
my ($next_id, $changes, $xacts) = (1, 0, 0);
my $script = '';
while ($changes < $target)
{
	my $r = rand();
	my $size = $r < 0.35 ? 1 : $r < 0.65 ? 2 + int(rand(20)) : $r < 0.9 ? 20 + int(rand(400)) : 400 + int(rand(4000));
	my @stmts;
	my $in_xact = 0;
	while ($in_xact < $size)
	{
		my $k = rand();
		my $live_hi = $next_id - 1;
		if ($k < 0.6 || $live_hi < 100)
		{
			my $m = 1 + int(rand($size - $in_xact));
			my $to = $next_id + $m - 1;
			push @stmts, "INSERT INTO items SELECT g, g % 97, md5(g::text), 0 FROM generate_series($next_id, $to) g";
			$next_id = $to + 1;
			$in_xact += $m;
		}
		elsif ($k < 0.85)
		{
			my $m = 1 + int(rand(($size - $in_xact) < 500 ? ($size - $in_xact) : 500));
			my $lo = 1 + int(rand($live_hi));
			push @stmts, "UPDATE items SET n = n + 1, val = md5(val || n) WHERE id BETWEEN $lo AND " . ($lo + $m - 1);
			$in_xact += $m;
		}
		elsif ($k < 0.9)
		{
			my $id = 1 + int(rand($live_hi));
			push @stmts, "UPDATE items SET id = id + 100000000, grp = grp + 1 WHERE id = $id";
			$in_xact += 1;
		}
		else
		{
			my $m = 1 + int(rand(($size - $in_xact) < 50 ? ($size - $in_xact) : 50));
			my $lo = 1 + int(rand($live_hi));
			push @stmts, "DELETE FROM items WHERE id BETWEEN $lo AND " . ($lo + $m - 1);
			$in_xact += $m;
		}
	}
	$changes += $in_xact;
	$xacts++;
	$script .= "BEGIN;\n" . join(";\n", @stmts) . ";\nCOMMIT;\n";
	$script .= "SELECT pg_sleep(0.02);\n" if rand() < 0.3;
}
note "workload: $xacts transactions, ~$changes row changes, ids up to " . ($next_id - 1);

my $t0 = time;
my $w = AshTest::start_workload($src, $script, timeout => 600);

# ---------------------------------------------------------------------------
# Faults at random points while the source writes and the destination applies,
# then while the destination catches up: until the fault budget is spent or
# the destination has reached the last source commit.
# ---------------------------------------------------------------------------
my ($kills, $terms, $f) = (0, 0, 0);
my $last_commit;
my $behind = sub {
	my $wm = eval { AshTest::checkpoint_lsn($dst, $sink) };
	return 1 unless defined $wm && $wm ne '';
	return $dst->safe_psql('postgres', "SELECT '$wm'::pg_lsn < '$last_commit'::pg_lsn") eq 't';
};
while ($f < $faults)
{
	if (!defined $last_commit && !AshTest::workload_running($w))
	{
		ok(AshTest::finish_workload($w), 'source workload completed');
		# The last source transaction touching the table: its exact commit LSN.
		($last_commit) = AshTest::commit_tracked($src,
			"UPDATE items SET n = n + 1 WHERE id = (SELECT min(id) FROM items)");
		note sprintf("workload done after %.1fs; last source commit %s", time - $t0, $last_commit);
	}
	last if defined $last_commit && !$behind->();
	$f++;
	usleep(int((0.3 + rand(2.2)) * 1_000_000));    # fault timing, not synchronization
	my $wm = eval { AshTest::checkpoint_lsn($dst, $sink) } // '?';
	if (rand() < 0.5)
	{
		note sprintf("fault %d at %.1fs: kill -9 destination (watermark %s)", $f, time - $t0, $wm);
		AshTest::crash_restart($dst);
		$kills++;
	}
	else
	{
		my $n = AshTest::terminate_walsender($src, $sink);
		note sprintf("fault %d at %.1fs: terminate walsender (%s terminated, watermark %s)", $f, time - $t0, $n, $wm);
		$terms++;
	}
}
unless (defined $last_commit)
{
	ok(AshTest::finish_workload($w), 'source workload completed');
	($last_commit) = AshTest::commit_tracked($src,
		"UPDATE items SET n = n + 1 WHERE id = (SELECT min(id) FROM items)");
	note sprintf("workload done after %.1fs; last source commit %s", time - $t0, $last_commit);
}
note "$kills destination kills, $terms walsender terminations";
cmp_ok($kills + $terms, '>', 0, 'faults were injected');

ok(AshTest::wait_lsn($src, $dst, $sink, $last_commit, timeout => 240),
	'destination watermark reached the last source commit');
note sprintf("caught up after %.1fs", time - $t0);

my $st = AshTest::status_row($dst, $sink) // {};
like($st->{state} // '', qr/^(healthy|catching_up)$/, 'pipeline running, not halted')
  or diag "state=" . ($st->{state} // 'none') . " reason=" . ($st->{reason} // 'null');
is(AshTest::checkpoint_lsn($dst, $sink), $last_commit,
	'checkpoint commit_lsn equals the commit LSN of the last source transaction');

AshTest::assert_mirror_equal($src, $dst, ['items'], name => 'after crashes');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM items'),
	$src->safe_psql('postgres', 'SELECT count(*) FROM items'), 'row count equal');

# write audit, per key: destination events must equal source events
my $audit_sql = 'SELECT id, count(*) AS writes FROM items_audit GROUP BY id';
my $over = $dst->safe_psql('postgres', 'SELECT count(*) FROM items_audit') + 0;
my $src_events = $src->safe_psql('postgres', 'SELECT count(*) FROM items_audit') + 0;
note "write events: source $src_events, destination $over";
AshTest::assert_mirror_equal($src, $dst, ["($audit_sql)"], order_by => 'id',
	name => 'per-key write events (no change applied twice, none lost)');

diag "ash-proof: faults_injected=" . ($kills + $terms) . " checks=" . Test::More->builder->current_test;
done_testing();
