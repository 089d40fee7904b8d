# snapshot => 'incremental' into SCD2 history mirrors (docs/snapshots.md#incremental):
# two tables with existing rows (the second's under attribute tenancy, its
# rows moving between tenants a and b) are copied chunk by chunk into version
# tables (ash_replicant.snapshot_workers = 2: the pipeline worker copies one,
# its helper the other) while the pipeline streams a workload of inserts,
# updates, deletes and key changes, and the destination is killed with -9 at
# seeded points of the copy.  The source waits for the pipeline as its
# synchronous standby, so every workload transaction has its commit record
# in the WAL well before it becomes visible: a chunk read meanwhile does not
# show it although its snapshot's WAL position is past that commit.  Such a
# change reaches the chunk's keys after the chunk, and must land after the
# chunk's version -- a version positioned at the snapshot's WAL position
# would be taken for history past the change, and the change skipped.
# The targets start with stale open versions, open versions the source
# lacks and an old closed version.  Afterwards:
#   - the open versions equal the source rows by content hash;
#   - per key the versions follow each other without overlap, each closed
#     one ends after it starts, and n (bumped by every source update)
#     strictly increases along them: no change applied twice, none lost
#     under a version written after it;
#   - the open versions the source lacks are closed, not deleted; the old
#     closed version is untouched;
#   - the attempt is complete and the pipeline healthy.
# Seed: ASH_SEED (default: time), printed.
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
diag "110_snapshot_incremental_scd2 seed $seed";

my $rows1 = 12_000;
my $rows2 = 6_000;
my $kills = 2;
my $sink  = 'hist';
my $DB    = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nrestart_after_crash = on\n"
	  . "ash_replicant.snapshot_workers = 2\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(23));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_src(qq{
CREATE TABLE acct (id bigint PRIMARY KEY, v text, n bigint NOT NULL DEFAULT 0);
CREATE TABLE acct2 (id bigint PRIMARY KEY, v text, n bigint NOT NULL DEFAULT 0, tenant text NOT NULL DEFAULT 'a');
ALTER TABLE acct2 REPLICA IDENTITY FULL;  -- the tenant of an old row
CREATE VIEW acct_v AS SELECT id, v, n FROM acct;
CREATE VIEW acct2_v AS SELECT id, v, n, tenant FROM acct2;
INSERT INTO acct SELECT g, md5(g::text), 0 FROM generate_series(1, $rows1) g;
INSERT INTO acct2 SELECT g, md5((-g)::text), 0, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END
  FROM generate_series(1, $rows2) g;
ANALYZE acct; ANALYZE acct2;
CREATE PUBLICATION pub_hist FOR TABLE acct, acct2;
});
for my $t ('acct', 'acct2')
{
	AshTest::provenance_history($dst, $t);
	q_dst(qq{
-- stale open versions (the source has these keys), open versions the
-- source lacks, an old closed version
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn) SELECT g, 'stale', -1, 16 FROM generate_series(1, 40) g;
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn)
  SELECT g, 'dest only', -1, 16 FROM generate_series(90000001, 90000020) g;
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn, valid_to_lsn) VALUES (60, 'old', -2, 8, 16);
});
}
# acct2's rows belong to tenants a and b (attribute tenancy), and move
# between them: a relocation closes the key's version under one tenant and
# opens one under the other, which a change delivered after the chunk that
# copied the key must not take for another tenant's conflicting history.
q_dst(q{
ALTER TABLE acct2_hist ADD COLUMN tenant text NOT NULL DEFAULT 'a';
UPDATE acct2_hist SET tenant = 'b' WHERE id % 2 = 1 AND id <= 40;  -- the source's tenant
CREATE OR REPLACE VIEW acct2_v AS SELECT id, v, n, tenant FROM acct2_hist WHERE valid_to_lsn IS NULL;
});
# A brake until the faults are done: every statement into a target sleeps
# brake.ms, so that the copy outlasts the seeded faults.
AshTest::create_brake($dst, 4);
q_dst(q{
CREATE TRIGGER brake1 AFTER INSERT ON acct_hist FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();
CREATE TRIGGER brake2 AFTER INSERT ON acct2_hist FOR EACH STATEMENT EXECUTE FUNCTION brake_fn();
});

# Workload: small transactions spread over the copy.  New keys above
# 10,000,000; a key change moves a row by +100,000,000, each key at most
# once.  Every update bumps n.
my $next = 10_000_000;
my %moved;
my $script = "SET synchronous_commit = on;\n";
for my $x (1 .. 500)
{
	my @s;
	for (1 .. 1 + int(rand(3)))
	{
		my ($t, $rows) = rand() < 0.6 ? ('acct', $rows1) : ('acct2', $rows2);
		my $id = 1 + int(rand($rows));
		my $k = rand();
		if ($k < 0.2) { push @s, "INSERT INTO $t VALUES ($next, 'new', 0)"; $next++; }
		elsif ($k < 0.75 && $t eq 'acct2' && rand() < 0.3)
		{
			push @s, "UPDATE $t SET n = n + 1, tenant = CASE tenant WHEN 'a' THEN 'b' ELSE 'a' END WHERE id = $id";
		}
		elsif ($k < 0.75) { push @s, "UPDATE $t SET n = n + 1, v = md5(v) WHERE id IN ($id, " . (1 + int(rand($rows))) . ")"; }
		elsif ($k < 0.9) { push @s, "DELETE FROM $t WHERE id = $id"; }
		else
		{
			next if $moved{"$t/$id"}++;
			push @s, "UPDATE $t SET id = id + 100000000 WHERE id = $id";
		}
	}
	next unless @s;
	$script .= "BEGIN;\n" . join(";\n", @s) . ";\nCOMMIT;\n";
	$script .= "SELECT pg_sleep(0.03);\n" if $x % 2 == 0;
}

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_hist', marker => 0,
	maps => [
		[ 'acct_hist', source_table => 'acct', history_strategy => 'scd2',
		  history_business_key => ['id'], snapshot_provenance => 'true' ],
		[ 'acct2_hist', source_table => 'acct2', history_strategy => 'scd2',
		  history_business_key => ['id'], snapshot_provenance => 'true',
		  tenant_column => 'tenant', tenant_strategy => 'attribute' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 400");
$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$sink', '2 min')");

# the source waits for the pipeline as its synchronous standby while the
# destination is killed during the copy
AshTest::copy_under_kills($src, $dst, $sink, script => $script, kills => $kills,
	span => ($rows1 + $rows2) * 0.6, seed => $seed, release => 'UPDATE brake SET ms = 0',
	last => "INSERT INTO acct VALUES (99999999, 'last', 0)", copied => 'acct:copied,acct2:copied');

for my $t ('acct', 'acct2')
{
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'id',
		name => "$t: open versions after faults during the incremental snapshot");
	my $bad = q_dst(qq{
		SELECT string_agg(id::text, ',') FROM (
		  SELECT id, n, valid_from_lsn, valid_to_lsn,
		         lag(n) OVER w AS pn, lag(valid_to_lsn) OVER w AS pto, lag(vid) OVER w AS pvid
		    FROM ${t}_hist WINDOW w AS (PARTITION BY id ORDER BY valid_from_lsn)) x
		 WHERE (pvid IS NOT NULL AND pto IS NULL) OR pto > valid_from_lsn
		    OR valid_to_lsn <= valid_from_lsn OR (pn IS NOT NULL AND n <= pn)});
	is($bad, '', "$t: per key, versions in order without overlap, n strictly increasing")
	  or diag q_dst("SELECT * FROM ${t}_hist WHERE id IN ($bad) ORDER BY id, valid_from_lsn");
	is(q_dst("SELECT count(*) FILTER (WHERE valid_to_lsn IS NOT NULL) || '/' || count(*) FROM ${t}_hist"
		  . " WHERE id BETWEEN 90000001 AND 90000020"), '20/20',
		"$t: the open versions the source lacks are closed, not deleted");
	is(q_dst("SELECT v || ':' || valid_to_lsn FROM ${t}_hist WHERE n = -2"), 'old:16',
		"$t: the old closed version is untouched");
}
is(q_dst("SELECT snapshot_phase FROM ash_replicant.checkpoints"), 'complete', 'attempt complete');

done_testing();
