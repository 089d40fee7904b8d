# snapshot => 'v1' under faults (docs/snapshots.md, README.md#testing): 1,000,000 existing rows in
# two tables (TOASTed values among them) are copied while a workload of
# inserts, updates, deletes, primary-key changes and TOAST rewrites runs on
# the source; at seeded random points of the copy the destination is killed
# with SIGKILL (postmaster and stragglers) and, once, the source is stopped
# with -m immediate.  Afterwards:
#   - the watermark reaches the last source commit and the mirror's content
#     hash equals the source's for both tables;
#   - a destination audit trigger shows every key inserted exactly once (a
#     table copied twice, or a copied row streamed again as an insert, would
#     show twice) and no key updated more often than at the source;
#   - the attempt is complete, every table copied once in the catalog.
#
# Seed: ASH_SEED (default: time), printed.  ASH_LONG=1: more rows and faults.
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
diag "061_snapshot_crash seed $seed";

my $long   = $ENV{ASH_LONG} ? 1 : 0;
my $rows1  = $long ? 1_500_000 : 600_000;
my $rows2  = $long ? 1_000_000 : 400_000;
my $kills  = $long ? 5 : 2;
my $sink   = 'snapcrash';
my $DB     = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');

my $ddl = q{
CREATE TABLE big1 (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0, blob text);
CREATE TABLE big2 (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0, blob text);
};
AshTest::both($src, $dst, $ddl . AshTest::write_audit_sql('big1', 'bigint') . AshTest::write_audit_sql('big2', 'bigint'));
# the source audits its own writes after the initial load only
$src->safe_psql($DB, qq{
ALTER TABLE big1 DISABLE TRIGGER big1_audit; ALTER TABLE big2 DISABLE TRIGGER big2_audit;
INSERT INTO big1 SELECT g, g % 97, md5(g::text), 0, CASE WHEN g % 5000 = 0 THEN repeat(md5(g::text), 200) END
  FROM generate_series(1, $rows1) g;
INSERT INTO big2 SELECT g, g % 89, md5((-g)::text), 0, CASE WHEN g % 7000 = 0 THEN repeat(md5(g::text), 150) END
  FROM generate_series(1, $rows2) g;
ALTER TABLE big1 ENABLE TRIGGER big1_audit; ALTER TABLE big2 ENABLE TRIGGER big2_audit;
ANALYZE big1; ANALYZE big2;
CREATE PUBLICATION pub_snapcrash FOR TABLE big1, big2;
});

# Workload: small transactions spread over the copy (deterministic from the
# seed).  New keys above 10,000,000; a key change moves a row by
# +100,000,000, each source key at most once.
my $next = 10_000_000;
my %moved;
my $script = '';
for my $x (1 .. 400)
{
	my $t = rand() < 0.6 ? 'big1' : 'big2';
	my $max = $t eq 'big1' ? $rows1 : $rows2;
	my @s;
	for (1 .. 1 + int(rand(4)))
	{
		my $k = rand();
		my $id = 1 + int(rand($max));
		if ($k < 0.3)
		{
			my $m = 1 + int(rand(50));
			push @s, "INSERT INTO $t SELECT g, g % 97, md5(g::text), 0, NULL FROM generate_series($next, " . ($next + $m - 1) . ") g";
			$next += $m;
		}
		elsif ($k < 0.6) { push @s, "UPDATE $t SET n = n + 1, val = md5(val) WHERE id IN ($id, " . (1 + int(rand($max))) . ")"; }
		elsif ($k < 0.75) { push @s, "DELETE FROM $t WHERE id = $id"; }
		elsif ($k < 0.85)
		{
			next if $moved{"$t.$id"}++;
			push @s, "UPDATE $t SET id = id + 100000000 WHERE id = $id";
		}
		else { push @s, "UPDATE $t SET blob = repeat(md5(random()::text), 120) WHERE id = $id"; }
	}
	next unless @s;
	$script .= "BEGIN;\n" . join(";\n", @s) . ";\nCOMMIT;\n";
	$script .= "SELECT pg_sleep(0.05);\n" if $x % 4 == 0;
}

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_snapcrash',
	maps => [ ['big1'], ['big2'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$sink', '2 min')");

my $w = AshTest::start_workload($src, $script, timeout => 600);

# faults while the copy runs: destination SIGKILLs at seeded progress
# points, then one immediate stop of the source
my $faults = 0;
for my $i (1 .. $kills + 1)
{
	my $source_fault = ($i == $kills + 1);
	my $at = int(rand(($rows1 + $rows2) / 3));
	my $seen = AshTest::poll($dst,
		"SELECT coalesce(sum(rows_copied), 0) > $at OR bool_and(state = 'copied') FROM ash_replicant.stat_snapshot_tables WHERE sink_name = '$sink'",
		't', quiet => 1);
	my $phase = $dst->safe_psql($DB, "SELECT snapshot_phase FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'");
	note "fault $i at >$at rows (phase $phase): " . ($source_fault ? 'source immediate stop' : 'destination kill -9');
	if ($source_fault)
	{
		$src->stop('immediate');
		usleep(300_000);
		$src->start;
	}
	else
	{
		AshTest::crash_restart($dst);
	}
	$faults++;
	last if $phase eq 'complete';
}
diag "ash-proof: faults_injected=$faults checks=5";

# the workload may have died with the source: finish what it did
AshTest::finish_workload($w);

ok(AshTest::wait_caught_up($src, $dst, $sink, name => 'caught up after the faults'),
	'watermark reaches the last source commit');
AshTest::assert_mirror_equal($src, $dst, [ 'big1', 'big2' ], name => 'after faults during the snapshot');

for my $t ('big1', 'big2')
{
	my $dup = $dst->safe_psql($DB,
		"SELECT count(*) FROM (SELECT id FROM ${t}_audit WHERE op = 'INSERT' GROUP BY id HAVING count(*) > 1) x");
	is($dup, '0', "$t: no key inserted twice at the destination");
	my $missing = $dst->safe_psql($DB,
		"SELECT count(*) FROM $t d WHERE NOT EXISTS (SELECT 1 FROM ${t}_audit a WHERE a.id = d.id AND a.op = 'INSERT')");
	# a row moved by a key change arrives as an update of its old key
	my $moved = $dst->safe_psql($DB, "SELECT count(*) FROM $t WHERE id >= 100000000");
	ok($missing <= $moved, "$t: every row but moved ones was inserted at the destination ($missing, $moved moved)");
	my $src_updates = $src->safe_psql($DB,
		"SELECT coalesce(json_object_agg(id, c), '{}') FROM (SELECT id, count(*) c FROM ${t}_audit WHERE op = 'UPDATE' GROUP BY id) x");
	$dst->safe_psql($DB, "CREATE TEMP TABLE x (j json)");
	my $over = $dst->safe_psql($DB, qq{
		WITH s AS (SELECT key::bigint AS id, value::text::int AS c FROM json_each('$src_updates'::json))
		SELECT count(*) FROM (SELECT id, count(*) c FROM ${t}_audit WHERE op = 'UPDATE' GROUP BY id) d
		 LEFT JOIN s USING (id) WHERE d.c > coalesce(s.c, 0)});
	is($over, '0', "$t: no key updated more often at the destination than at the source");
}

my $cat = $dst->safe_psql($DB,
	"SELECT string_agg(source_table || ':' || state, ',' ORDER BY source_table) FROM ash_replicant.snapshot_tables");
is($cat, 'ash_marker_snapcrash:copied,big1:copied,big2:copied', 'every table of the attempt copied');
is($dst->safe_psql($DB, "SELECT snapshot_phase FROM ash_replicant.checkpoints"), 'complete', 'attempt complete');

done_testing();
