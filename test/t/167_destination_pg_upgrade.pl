# pg_upgrade of a destination keeps the installation and its pipelines run
# on (docs/operations.md, "Moving a destination").  Before, pg_upgrade
# --check refused any database with the extension: "Checking for reg* data
# types in user tables fatal" -- resources.tenant_function,
# resources.tenant_scope_function and message_routes.target_function were
# regprocedure, and pg_upgrade does not keep function OIDs (found by an
# exploratory test).  Since 1.10.0 they hold the function's schema-qualified
# signature as text, resolved when used.
#
#   before   a pipeline streams a context-tenancy mapping whose
#            tenant_scope_function names the tenant tables, and a message
#            route to a function; stopped, the destination stopped
#   upgrade  pg_upgrade --check passes, pg_upgrade into a new cluster
#            succeeds; the functions got new OIDs
#   after    the installation id is kept, the stored signatures are
#            qualified; started, the source's changes made meanwhile arrive,
#            mirror = source per tenant table, a message routed before and
#            one routed after reach the function, verify (which runs the
#            scope function) matches
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use IPC::Run;
use File::Path qw(make_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $sink = 'up';
my $dst_conf = "ash_replicant.keyring_file = 'ash_keyring'\n";
my @keyring = ('message_digest 1 ' . AshTenancy::key_hex(1), 'horizon_provenance 1 ' . AshTenancy::key_hex(3),
	'snapshot_provenance 1 ' . AshTenancy::key_hex(21));
my ($src, $dst) = AshTest::start_pair(log_statement => 'none', dst_conf => $dst_conf);
AshTenancy::write_keyring($dst, 'ash_keyring', @keyring);
$dst->reload;

$src->safe_psql($DB, q{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text);
ALTER TABLE orgdocs REPLICA IDENTITY FULL;
CREATE TABLE items (id integer PRIMARY KEY, v text);
CREATE PUBLICATION pub_up FOR TABLE orgdocs, items;
INSERT INTO orgdocs SELECT g, CASE WHEN g % 3 = 0 THEN 'a' ELSE 'b' END, 'v' FROM generate_series(1, 30) g;
INSERT INTO items SELECT g, 'i' || g FROM generate_series(1, 50) g;
});
$dst->safe_psql($DB, q{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE SCHEMA pa;
CREATE SCHEMA pb;
CREATE TABLE pa.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE pb.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE items (id integer PRIMARY KEY, v text);
CREATE FUNCTION org_scopes() RETURNS SETOF text LANGUAGE sql STABLE
	AS $$ VALUES ('a'), ('b') $$;
CREATE TABLE fn_log (content text);
CREATE FUNCTION m_fn(p text, c bytea) RETURNS void LANGUAGE sql
	AS $$ INSERT INTO fn_log VALUES (convert_from(c, 'UTF8')) $$;
});
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_up', start => 0, recovery_horizon => '1 hour',
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'",
	maps => [ [ 'orgdocs', tenant_column => 'tenant', tenant_strategy => 'context',
			tenant_schema_format => 'p%s', snapshot_provenance => 'true',
			tenant_scope_function => 'public.org_scopes()' ], ['items'] ]);
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'pf', 'm_fn(text,bytea)'::regprocedure, '1 hour')");
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'before: the copy ends healthy');
$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES (51, 'x');"
	  . " SELECT pg_logical_emit_message(true, 'pf', 'one'); COMMIT;");
AshTest::wait_caught_up($src, $dst, $sink, name => 'before: streams');
is($dst->safe_psql($DB, "SELECT string_agg(content, ',') FROM fn_log"), 'one', 'before: the route had its effect');

my $inst = $dst->safe_psql($DB, 'SELECT installation_id FROM ash_replicant.installation');
my $oids_before = $dst->safe_psql($DB, "SELECT 'm_fn(text,bytea)'::regprocedure::oid || ',' || 'org_scopes()'::regprocedure::oid");
AshTest::stop_settled($src, $dst, $sink);
$dst->stop;
my $bindir = $dst->config_data('--bindir');

# the source moves on meanwhile
$src->safe_psql($DB, q{
DELETE FROM orgdocs WHERE id <= 4;
UPDATE orgdocs SET v = 'new' WHERE id BETWEEN 10 AND 15;
INSERT INTO orgdocs SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, 'late' FROM generate_series(31, 40) g;
DELETE FROM items WHERE id <= 5;
UPDATE items SET v = 'upd' WHERE id BETWEEN 20 AND 25;
BEGIN; INSERT INTO items VALUES (60, 'y'); SELECT pg_logical_emit_message(true, 'pf', 'two'); COMMIT;
});

# the new cluster, configured as the old one (and the keyring copied)
my $new = PostgreSQL::Test::Cluster->new('dst_new');
$new->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
my $conf = slurp_file($dst->data_dir . '/postgresql.conf');
my ($ash_conf) = $conf =~ /(\nshared_preload_libraries = 'ash_replicant'\n.*)\z/s;
# preloaded during the upgrade too: no launcher runs in binary-upgrade mode
$new->append_conf('postgresql.conf', $ash_conf);
AshTenancy::write_keyring($new, 'ash_keyring', @keyring);

sub upgrade
{
	my (@extra) = @_;
	my $wd = $new->basedir . '/upg';
	make_path($wd);
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ "$bindir/pg_upgrade", '--no-sync', '-d', $dst->data_dir, '-D', $new->data_dir,
			'-b', $bindir, '-B', $bindir, '-s', $new->host, '-p', $dst->port, '-P', $new->port, @extra ],
		'>', \$out, '2>', \$err, init => sub { chdir $wd });
	my $reg = join("\n", map { slurp_file($_) } glob($new->data_dir . "/pg_upgrade_output.d/*/tables_using_reg.txt"));
	return ($ok, "$out\n$err\n$reg");
}

my ($ok, $txt) = upgrade('--check');
ok($ok, 'upgrade: pg_upgrade --check passes') or diag $txt;
($ok, $txt) = upgrade();
ok($ok, 'upgrade: pg_upgrade into a new cluster') or diag $txt;
BAIL_OUT('pg_upgrade failed') unless $ok;

$new->start;
isnt($new->safe_psql($DB, "SELECT 'm_fn(text,bytea)'::regprocedure::oid || ',' || 'org_scopes()'::regprocedure::oid"),
	$oids_before, 'upgrade: the functions have new OIDs');
is($new->safe_psql($DB, 'SELECT installation_id FROM ash_replicant.installation'), $inst,
	'after: the installation id is kept');
is($new->safe_psql($DB, "SELECT (SELECT string_agg(tenant_scope_function, ',') FROM ash_replicant.resources)"
		  . " || ' ' || (SELECT target_function FROM ash_replicant.message_routes)"),
	'public.org_scopes() public.m_fn(text,bytea)', 'after: the signatures are stored qualified');

AshTest::start_sink($new, $sink);
AshTest::wait_status($new, $sink, 'healthy', undef, src => $src, name => 'after: started, healthy');
AshTest::wait_caught_up($src, $new, $sink, name => 'after: caught up');
AshTest::assert_mirror_equal($src, $new, ['items'], name => 'after: mirror = source');
my $rows = "SELECT coalesce(string_agg(id || '|' || tenant || '|' || v, ',' ORDER BY id), '') FROM";
for my $t ('a', 'b')
{
	is($new->safe_psql($DB, "$rows p$t.orgdocs"), $src->safe_psql($DB, "$rows orgdocs WHERE tenant = '$t'"),
		"after: mirror = source in tenant table p$t.orgdocs");
}
$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES (61, 'z');"
	  . " SELECT pg_logical_emit_message(true, 'pf', 'three'); COMMIT;");
AshTest::wait_caught_up($src, $new, $sink, name => 'after: streams on');
is($new->safe_psql($DB, "SELECT string_agg(content, ',' ORDER BY content) FROM fn_log"), 'one,three,two',
	'after: the route reaches the function, before and after the upgrade');
is($new->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '-') FROM ash_replicant_verify('$sink')"
		  . " WHERE source_table = 'orgdocs'"),
	'match/-', 'after: verify runs the scope function and matches');

done_testing();
