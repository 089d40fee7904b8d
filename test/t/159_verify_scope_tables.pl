# ash_replicant_verify of a context-tenancy mapping reads the tenant tables
# its tenant_scope_function names (docs/operations.md#verifying-completeness).
# That list was made in SPI's memory and used after SPI_finish freed it:
# the mirror's statement named freed bytes as its table (syntax errors,
# invalid UTF-8, 3 of 4 calls with a long scope name; it could print
# whatever that memory held, a tenant among it), found by an exploratory
# test.  Test 081 passed by luck with one-letter scopes.
#
#   scopes   two scopes, one of them a long name: six calls, each match,
#            the long scope in no output and no log line
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(21));
$dst->reload;
my $long = 'scopesentinel' . ('q' x 30) . sprintf('%08x', int(rand(2**32)));

$src->safe_psql($DB, qq{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text);
ALTER TABLE orgdocs REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_vt FOR TABLE orgdocs;
INSERT INTO orgdocs SELECT g, CASE WHEN g % 3 = 0 THEN 'a' ELSE '$long' END, 'v' FROM generate_series(1, 30) g;
});
$dst->safe_psql($DB, qq{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE SCHEMA pa;
CREATE SCHEMA p$long;
CREATE TABLE pa.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE p$long.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE FUNCTION org_scopes() RETURNS SETOF text LANGUAGE sql STABLE
	AS \$\$ SELECT DISTINCT tenant FROM (VALUES ('a'), ('$long')) x(tenant) \$\$;
});
AshTest::setup_pipeline($src, $dst, sink => 'vt', publication => 'pub_vt', marker => 0,
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'",
	maps => [ [ 'orgdocs', tenant_column => 'tenant', tenant_strategy => 'context',
			tenant_schema_format => 'p%s', snapshot_provenance => 'true',
			tenant_scope_function => 'public.org_scopes()' ] ]);
AshTest::wait_status($dst, 'vt', 'healthy', undef, src => $src, name => 'the copy ends healthy');

my @outputs;
my $matches = 0;
for my $i (1 .. 6)
{
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT verdict || '/' || coalesce(reason, '-') || '/' || source_rows || '/' || mirror_rows"
		  . " FROM ash_replicant_verify('vt')");
	push @outputs, $out, $err;
	$matches++ if $rc == 0 && $out eq 'match/-/30/30';
	note "call $i: rc=$rc out=$out" . ($err ne '' ? ' (an error)' : '');
}
is($matches, 6, 'scopes: every call compares both tenant tables and matches');
AshTenancy::assert_no_leak([$long], [ $src, $dst ], \@outputs, 'scopes: the long scope');

done_testing();
