# snapshot => 'incremental' under tenancy (docs/snapshots.md#incremental):
# two tables whose rows belong to tenants a and b, each tenant's rows in a
# table of its own schema (pa, pb: context tenancy), and a third whose
# tenants share one table (attribute tenancy), are copied chunk by chunk
# (ash_replicant.snapshot_workers = 2: the pipeline worker and its helper
# copy a table each at a time) while the pipeline streams a workload of inserts,
# updates, deletes, key changes and rows moving from one tenant to the other,
# and the destination is killed with -9 at seeded points of the copy.  The
# source waits for the pipeline as its synchronous standby (commits visible
# only once applied).  Each scope starts with a stale row, a row the source
# lacks, and a row the source has under the other tenant (the attribute
# table: stale rows and rows the source lacks).  Afterwards:
#   - each scope's table equals the source's rows of its tenant by content
#     hash; the template tables receive nothing; the attribute table equals
#     the source's;
#   - an audit trigger on every target table shows every host effect once:
#     per key the versions written (n, bumped by every source update)
#     strictly increase, no (key, version) is written twice;
#   - the rows the source lacks in a scope (including a row now of the other
#     tenant) are deleted, each once;
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
diag "111_snapshot_incremental_tenancy seed $seed";

my %rows = (docs => 12_000, notes => 6_000, memo => 4_000);
my %context = (docs => 1, notes => 1);
my $kills = 2;
my $sink  = 'ctxi';
my $DB    = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nrestart_after_crash = on\n"
	  . "ash_replicant.snapshot_workers = 2\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(29));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

AshTest::create_brake($dst, 4);
q_dst(q{
CREATE SCHEMA pa;
CREATE SCHEMA pb;
CREATE FUNCTION scopes() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('a'), ('b') $$;
CREATE TABLE audit (seq bigserial, tab text NOT NULL, k bigint NOT NULL, op text NOT NULL, n bigint);
CREATE FUNCTION audit_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO public.audit (tab, k, op, n) VALUES (TG_TABLE_NAME, OLD.id, TG_OP, OLD.n);
	ELSE
		INSERT INTO public.audit (tab, k, op, n) VALUES (TG_TABLE_NAME, NEW.id, TG_OP, NEW.n);
	END IF;
	RETURN NULL;
END $$;
});
for my $t (sort keys %rows)
{
	q_src(qq{
CREATE TABLE $t (id bigint PRIMARY KEY, tenant text NOT NULL, v text, n bigint NOT NULL DEFAULT 0);
ALTER TABLE $t REPLICA IDENTITY FULL;
INSERT INTO $t SELECT g, CASE WHEN g % 3 = 0 THEN 'b' ELSE 'a' END, md5(g::text), 0
  FROM generate_series(1, $rows{$t}) g;
ANALYZE $t;
});
	q_dst(qq{
CREATE TABLE $t (id bigint PRIMARY KEY, tenant text NOT NULL, v text, n bigint NOT NULL DEFAULT 0,
	replica_fingerprint bytea, replica_seen_attempt bytea);
});
	if (!$context{$t})
	{
		q_dst(qq{
INSERT INTO $t (id, tenant, v, n) VALUES (1, 'a', 'stale', -1), (6, 'b', 'stale', -1),
	(90000001, 'a', 'dest only', -1), (90000002, 'b', 'dest only', -1);
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON $t FOR EACH ROW EXECUTE FUNCTION public.audit_fn();
CREATE TRIGGER brake AFTER INSERT ON $t FOR EACH STATEMENT EXECUTE FUNCTION public.brake_fn();
});
		next;
	}
	q_dst(qq{
CREATE TABLE pa.$t (LIKE public.$t INCLUDING ALL);
CREATE TABLE pb.$t (LIKE public.$t INCLUDING ALL);
-- a stale row, a row the source lacks, a row the source has under the other tenant
INSERT INTO pa.$t (id, tenant, v, n) VALUES (1, 'a', 'stale', -1), (90000001, 'a', 'dest only', -1),
	(3, 'a', 'now b', -1);
INSERT INTO pb.$t (id, tenant, v, n) VALUES (6, 'b', 'stale', -1), (90000002, 'b', 'dest only', -1),
	(4, 'b', 'now a', -1);
});
	for my $s ('pa', 'pb')
	{
		q_dst(qq{
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON $s.$t FOR EACH ROW EXECUTE FUNCTION public.audit_fn();
CREATE TRIGGER brake AFTER INSERT ON $s.$t FOR EACH STATEMENT EXECUTE FUNCTION public.brake_fn();
});
	}
}
q_src('CREATE PUBLICATION pub_ctxi FOR TABLE docs, notes, memo');

# Workload: small transactions spread over the copy.  New keys above
# 10,000,000; a key change moves a row by +100,000,000, each key at most
# once; a tenant change moves a row to the other scope.  Every update bumps n.
my $next = 10_000_000;
my %moved;
my $script = "SET synchronous_commit = on;\n";
for my $x (1 .. 500)
{
	my @s;
	for (1 .. 1 + int(rand(3)))
	{
		my $r = rand();
		my $t = $r < 0.5 ? 'docs' : $r < 0.75 ? 'notes' : 'memo';
		my $id = 1 + int(rand($rows{$t}));
		my $k = rand();
		if ($k < 0.15) { push @s, "INSERT INTO $t VALUES ($next, '" . (rand() < 0.5 ? 'a' : 'b') . "', 'new', 0)"; $next++; }
		elsif ($k < 0.6) { push @s, "UPDATE $t SET n = n + 1, v = md5(v) WHERE id IN ($id, " . (1 + int(rand($rows{$t}))) . ")"; }
		elsif ($k < 0.75)
		{
			push @s, "UPDATE $t SET n = n + 1, tenant = CASE tenant WHEN 'a' THEN 'b' ELSE 'a' END WHERE id = $id";
		}
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

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_ctxi', marker => 0,
	maps => [ (map { [ $_, tenant_column => 'tenant', tenant_strategy => 'context',
			tenant_schema_format => 'p%s', snapshot_provenance => 'true',
			tenant_scope_function => 'public.scopes()' ] } sort keys %context),
		[ 'memo', tenant_column => 'tenant', tenant_strategy => 'attribute', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 400");
$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$sink', '2 min')");

AshTest::copy_under_kills($src, $dst, $sink, script => $script, kills => $kills,
	span => ($rows{docs} + $rows{notes} + $rows{memo}) * 0.6, seed => $seed, release => 'UPDATE brake SET ms = 0',
	last => "INSERT INTO docs VALUES (99999999, 'a', 'last', 0)", copied => 'docs:copied,memo:copied,notes:copied');

my $h = "SELECT md5(coalesce(string_agg(id || ':' || v || ':' || n, ',' ORDER BY id), '')) || ' ' || count(*)";
for my $t (sort keys %rows)
{
	for my $tenant ($context{$t} ? ('a', 'b') : ())
	{
		is(q_dst("$h FROM p$tenant.$t"), q_src("$h FROM $t WHERE tenant = '$tenant'"),
			"$t: scope $tenant equals the source's rows of tenant $tenant")
		  or do
		{
			my %s = map { $_ => 1 } split /\n/, q_src("SELECT id || ':' || v || ':' || n FROM $t WHERE tenant = '$tenant'");
			my %d = map { $_ => 1 } split /\n/, q_dst("SELECT id || ':' || v || ':' || n FROM p$tenant.$t");
			diag "only at the source: " . join(' ', grep { !$d{$_} } sort keys %s);
			diag "only in the scope: " . join(' ', grep { !$s{$_} } sort keys %d);
		};
	}
	if ($context{$t})
	{
		is(q_dst("SELECT count(*) FROM public.$t"), '0', "$t: the template receives nothing");
		is(q_dst("SELECT count(*) FROM pa.$t WHERE id = 3 AND v = 'now b'") . q_dst("SELECT count(*) FROM pb.$t WHERE id = 4 AND v = 'now a'"),
			'00', "$t: a row the other tenant has now is retired from this scope");
	}
	else
	{
		my $ht = "SELECT md5(coalesce(string_agg(id || ':' || tenant || ':' || v || ':' || n, ',' ORDER BY id), '')) || ' ' || count(*)";
		is(q_dst("$ht FROM $t"), q_src("$ht FROM $t"), "$t: equals the source's rows, tenants included");
	}
	my $bad = q_dst(qq{
		SELECT count(*) FROM (
		  SELECT k, n, lag(n) OVER w AS prev, op, lag(op) OVER w AS prev_op
		    FROM audit WHERE tab = '$t' WINDOW w AS (PARTITION BY k ORDER BY seq)) x
		 WHERE op <> 'DELETE' AND prev_op IS DISTINCT FROM 'DELETE' AND prev IS NOT NULL AND n <= prev
		   AND prev <> -1});
	is($bad, '0', "$t: per key, every version is written once and never older than one written before");
	is(q_dst("SELECT count(*) FROM (SELECT k, n FROM audit WHERE tab = '$t' AND op <> 'DELETE' AND n >= 0"
		  . " GROUP BY k, n HAVING count(*) > 1) x"), '0', "$t: no (key, version) written twice");
	is(q_dst("SELECT count(*) FROM audit WHERE tab = '$t' AND op = 'DELETE' AND k > 90000000 AND k < 100000000"),
		'2', "$t: the rows the source lacks are deleted, each once");
}
is(q_dst("SELECT snapshot_phase FROM ash_replicant.checkpoints"), 'complete', 'attempt complete');

done_testing();
