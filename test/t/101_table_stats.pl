# Per-table and per-tenant statistics (docs/operations.md#per-table-statistics):
#   - ash_replicant.stat_tables counts, per sink and target, the rows the
#     pipeline inserted, updated and deleted and the truncations, with the
#     last applied source commit time and its apply lag; for a tenant-scoped
#     mapping also per tenant;
#   - the counts are exact: written with the rows and the checkpoint, they
#     equal the source's changes across a deliberate restart and an immediate
#     stop of the destination in the middle of a backlog;
#   - privileges: ash_replicant_monitor reads the view, not the catalog;
#     tenant rows (a tenant is a value) only for roles that may SELECT the
#     table the tenant's rows are written to -- a leaky function in the
#     caller's WHERE clause sees no hidden tenant (security_barrier);
#   - ash_replicant_reset_table_stats (admin only) starts them from zero;
#   - ash_replicant_ctl status --tables prints them, tenants as the view
#     shows them to the role that runs it;
#   - dropping the sink drops its statistics;
#   - PostgreSQL's own statistics see the worker's writes while it runs
#     (pg_stat_user_tables), so autoanalyze runs on a mirrored table.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
my $sink = 'st';

$src->safe_psql($DB, q{
CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE accounts (tenant text NOT NULL, id integer NOT NULL, name text,
	PRIMARY KEY (tenant, id));
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_st FOR TABLE items, accounts;
});
$dst->safe_psql($DB, q{
CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE accounts (tenant text NOT NULL, id integer NOT NULL, name text,
	PRIMARY KEY (tenant, id));
CREATE ROLE mon LOGIN IN ROLE ash_replicant_monitor;
CREATE ROLE adm LOGIN IN ROLE ash_replicant_admin;
CREATE FUNCTION leak(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS $$
BEGIN
	RAISE NOTICE 'leaked %', $1;
	RETURN true;
END $$;
});

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_st',
	maps => [ ['items'], [ 'accounts', tenant_column => 'tenant', tenant_strategy => 'attribute' ] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams') or BAIL_OUT('no stream');

# what the source did, counted at the source
my %want = (ins => 0, upd => 0, del => 0);
sub source_round
{
	my ($lo, $hi) = @_;
	my $n = $hi - $lo + 1;
	$src->safe_psql($DB, "INSERT INTO items SELECT g, 'v' || g FROM generate_series($lo, $hi) g");
	$src->safe_psql($DB, "UPDATE items SET v = v || 'u' WHERE id BETWEEN $lo AND $hi AND id % 4 = 0");
	$src->safe_psql($DB, "DELETE FROM items WHERE id BETWEEN $lo AND $hi AND id % 10 = 0");
	$want{ins} += $n;
	$want{upd} += int($hi / 4) - int(($lo - 1) / 4);
	$want{del} += int($hi / 10) - int(($lo - 1) / 10);
	return;
}

sub stat_of
{
	my ($node, $where, $cols, %o) = @_;
	my $user = $o{user} ? "SET ROLE $o{user}; " : '';
	return $node->safe_psql($DB,
		"${user}SELECT $cols FROM ash_replicant.stat_tables WHERE sink_name = '$sink' AND $where");
}

source_round(1, 200);
$src->safe_psql($DB, q{
INSERT INTO accounts SELECT t, i, 'n' FROM unnest(ARRAY['acme_x7','globex_x7']) t, generate_series(1, 5) i;
INSERT INTO accounts SELECT 'initech_x7', i, 'n' FROM generate_series(1, 3) i;
UPDATE accounts SET name = 'm' WHERE tenant = 'acme_x7' AND id <= 2;
DELETE FROM accounts WHERE tenant = 'globex_x7' AND id = 5;
});
AshTest::wait_caught_up($src, $dst, $sink);

is(stat_of($dst, "target = 'public.items'", "inserted || '/' || updated || '/' || deleted || '/' || truncated"),
	"$want{ins}/$want{upd}/$want{del}/0", 'items: inserted/updated/deleted/truncated as the source did');
is(stat_of($dst, "target = 'public.items'", "tenant IS NULL AND last_commit_time IS NOT NULL"
	  . " AND last_applied_at >= last_commit_time AND lag_seconds >= 0"),
	't', 'items: one row, with the last applied commit time and its apply lag');

# PostgreSQL's own statistics: a background worker has no client loop that
# reports its writes, so the worker does (else autovacuum and autoanalyze
# never learn that a mirrored table changed)
$dst->safe_psql($DB, 'ALTER SYSTEM SET autovacuum_naptime = 1');
$dst->safe_psql($DB, 'SELECT pg_reload_conf()');
$dst->safe_psql($DB,
	'ALTER TABLE items SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 50)');
ok(AshTest::poll($dst, "SELECT n_tup_ins >= $want{ins} AND n_tup_upd >= $want{upd}"
	  . " AND n_tup_del >= $want{del} FROM pg_stat_user_tables WHERE relid = 'items'::regclass"),
	'the worker reports its writes to the cumulative statistics, while it runs');
ok(AshTest::poll($dst, "SELECT last_autoanalyze IS NOT NULL FROM pg_stat_user_tables"
	  . " WHERE relid = 'items'::regclass"),
	'autoanalyze runs on the mirrored table');
is(stat_of($dst, "target = 'public.accounts' AND tenant IS NULL", "inserted || '/' || updated || '/' || deleted"),
	'13/2/1', 'accounts: all tenants together');
is(stat_of($dst, "target = 'public.accounts' AND tenant IS NOT NULL",
		"string_agg(tenant || ':' || inserted || '/' || updated || '/' || deleted, ',' ORDER BY tenant)"),
	'acme_x7:5/2/0,globex_x7:5/0/1,initech_x7:3/0/0', 'accounts: per tenant, to a superuser');

# privileges
is(stat_of($dst, "true", "count(*)", user => 'mon'), '3',
	'a monitor reads the per-table rows (items, accounts, the marker table)');
is(stat_of($dst, "tenant IS NOT NULL", "count(*)", user => 'mon'), '0',
	'but no tenant row: it may not read the accounts table');
my ($rc, $out, $err) = $dst->psql($DB,
	"SET ROLE mon; SELECT count(*) FROM ash_replicant.stat_tables WHERE leak(tenant)");
unlike($err, qr/x7/, 'a leaky function in the monitor\'s WHERE clause sees no tenant');
like($err, qr/leaked/, '(the leaky function did run)');
($rc, $out, $err) = $dst->psql($DB, "SET ROLE mon; SELECT count(*) FROM ash_replicant.table_stats");
like($err, qr/permission denied/, 'the catalog itself is closed to the monitor');
($rc, $out, $err) = $dst->psql($DB, "SET ROLE mon; SELECT ash_replicant_reset_table_stats()");
like($err, qr/permission denied/, 'the monitor cannot reset');
$dst->safe_psql($DB, 'GRANT SELECT ON accounts TO mon');
is(stat_of($dst, "tenant IS NOT NULL", "string_agg(tenant, ',' ORDER BY tenant)", user => 'mon'),
	'acme_x7,globex_x7,initech_x7', 'granted SELECT on accounts, the monitor sees its tenants');

# ctl status --tables, as the monitor (no tenant) and as the superuser
$dst->safe_psql($DB, 'REVOKE SELECT ON accounts FROM mon');
sub ctl
{
	my (@args) = @_;
	my ($o, $e) = ('', '');
	IPC::Run::run([ 'ash_replicant_ctl', @args ], '<', \undef, '>', \$o, '2>', \$e);
	return ($? >> 8, $o, $e);
}
my @conn = ('-h', $dst->host, '-p', $dst->port, '-d', $DB);
my ($crc, $cout) = ctl('status', '--tables', '--sink', $sink, @conn, '-U', 'mon');
is($crc, 0, 'ctl status --tables: exit 0 for a healthy pipeline');
like($cout, qr/^st\s+public\.items\s+$want{ins}\s+$want{upd}\s+$want{del}\s+0\s/m,
	'ctl status --tables prints the counts of items');
unlike($cout, qr/x7/, 'and, run by the monitor, no tenant');
($crc, $cout) = ctl('status', '--tables', '--format', 'json', @conn);
like($cout, qr/"tenant":"acme_x7","inserted":5,"updated":2,"deleted":0/,
	'json, run by a superuser: the tenant rows');

# exact across a deliberate restart and an immediate stop of the destination
AshTest::stop_sink($dst, $sink);
source_round(201, 400);
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink);
source_round(401, 2400);
for my $r (1 .. 40)
{
	my $lo = 2400 + ($r - 1) * 50 + 1;
	source_round($lo, $lo + 49);
}
$dst->stop('immediate');
$dst->start;
AshTest::wait_caught_up($src, $dst, $sink);
is(stat_of($dst, "target = 'public.items'", "inserted || '/' || updated || '/' || deleted"),
	"$want{ins}/$want{upd}/$want{del}", 'after a restart and an immediate stop: still exact');
AshTest::assert_mirror_equal($src, $dst, ['items']);

# reset: admin only, unknown sink refused, counting starts over
($rc, $out, $err) = $dst->psql($DB, "SET ROLE adm; SELECT ash_replicant_reset_table_stats('nope')");
like($err, qr/does not exist/, 'reset of an unknown sink is refused');
is($dst->safe_psql($DB, "SET ROLE adm; SELECT ash_replicant_reset_table_stats('$sink')"), '5',
	'an admin resets the sink\'s statistics (5 rows)');
is(stat_of($dst, "true", "count(*)"), '0', 'nothing left after the reset');
source_round(10001, 10020);
AshTest::wait_caught_up($src, $dst, $sink);
is(stat_of($dst, "target = 'public.items'", "inserted"), '20', 'counting starts again from zero');

# Resets racing the worker's in-place updates of the rows (one-row source
# transactions, each a batch): the worker waits for the reset or the reset
# for it, never fails; once quiet, counting is exact again.
my $racer = $src->background_psql($DB);
$racer->query_safe("INSERT INTO items VALUES ($_, 'r')") for 20001 .. 20005;
for my $r (1 .. 20)
{
	$racer->query_safe("INSERT INTO items VALUES (" . (20005 + $_ + 10 * ($r - 1)) . ", 'r')") for 1 .. 10;
	$dst->safe_psql($DB, "SET ROLE adm; SELECT ash_replicant_reset_table_stats('$sink')");
}
$racer->quit;
AshTest::wait_caught_up($src, $dst, $sink);
is($dst->safe_psql($DB, "SELECT state FROM ash_replicant_status('$sink')"),
	'healthy', 'resets racing the counts: the pipeline stays healthy');
$dst->safe_psql($DB, "SET ROLE adm; SELECT ash_replicant_reset_table_stats('$sink')");
source_round(30001, 30010);
AshTest::wait_caught_up($src, $dst, $sink);
is(stat_of($dst, "target = 'public.items'", "inserted || '/' || updated || '/' || deleted"),
	'10/2/1', 'after the races and a quiet reset: exact');

# no row value anywhere in the view: its columns are structure and counts
is($dst->safe_psql($DB,
		"SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute"
		  . " WHERE attrelid = 'ash_replicant.stat_tables'::regclass AND attnum > 0"),
	'sink_name,target,tenant,inserted,updated,deleted,truncated,last_commit_time,last_applied_at,lag_seconds,counting_since',
	'the view\'s columns');

# the sink dropped: its statistics with it
AshTest::stop_sink($dst, $sink);
AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'ash_replicant $sink'");
$dst->safe_psql($DB, "SELECT ash_replicant_drop_sink('$sink')");
is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.table_stats"), '0',
	'dropping the sink dropped its statistics');

done_testing();
