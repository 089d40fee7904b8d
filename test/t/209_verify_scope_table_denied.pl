# ash_replicant_verify reads a context-tenancy mapping's tenant tables as the
# sink owner (docs/operations.md#verifying-completeness).  A tenant table
# the owner may no longer read raised the owner's permission error out of
# verify, for every mapping of the sink; a target the owner cannot read is
# not_comparable config_invalid (test 207), and so is a tenant table now.
#
#   denied   the owner loses SELECT on one tenant table: that mapping is
#            not_comparable config_invalid, the sink's other mapping still
#            judged (match); SELECT granted again, both match
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
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

$src->safe_psql($DB, q{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text);
ALTER TABLE orgdocs REPLICA IDENTITY FULL;
CREATE TABLE plain (id integer PRIMARY KEY, v text);
CREATE PUBLICATION pub_vd FOR TABLE orgdocs, plain;
INSERT INTO orgdocs SELECT g, CASE WHEN g % 3 = 0 THEN 'a' ELSE 'b' END, 'v' FROM generate_series(1, 30) g;
INSERT INTO plain SELECT g, 'w' FROM generate_series(1, 5) g;
});
q_dst(q{
CREATE ROLE app LOGIN;
CREATE SCHEMA pa AUTHORIZATION app;
CREATE SCHEMA pb AUTHORIZATION app;
GRANT CREATE ON SCHEMA public TO app;
SET ROLE app;
CREATE TABLE public.orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE pa.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE pb.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE public.plain (id integer PRIMARY KEY, v text);
CREATE FUNCTION public.org_scopes() RETURNS SETOF text LANGUAGE sql STABLE
	AS $$ VALUES ('a'), ('b') $$;
});
AshTest::setup_pipeline($src, $dst, sink => 'vd', publication => 'pub_vd', start => 0,
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'",
	maps => [ [ 'orgdocs', tenant_column => 'tenant', tenant_strategy => 'context',
			tenant_schema_format => 'p%s', snapshot_provenance => 'true',
			tenant_scope_function => 'public.org_scopes()' ], ['plain'] ]);
q_dst("ALTER TABLE ash_marker_vd OWNER TO app; SELECT ash_replicant_alter_sink('vd', owner => 'app')");
AshTest::start_sink($dst, 'vd');
AshTest::wait_status($dst, 'vd', 'healthy', undef, src => $src, name => 'the copy ends healthy');

sub verdicts
{
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT source_table || ':' || verdict || ':' || coalesce(reason, '')"
		  . " FROM ash_replicant_verify('vd') WHERE source_table IN ('orgdocs', 'plain')"
		  . " ORDER BY source_table");
	note("verify rc=$rc err=$err") if $rc != 0;
	return $rc == 0 ? $out : "error";
}

is(verdicts(), "orgdocs:match:\nplain:match:", 'both mappings match');
q_dst("REVOKE SELECT ON pb.orgdocs FROM app");
is(verdicts(), "orgdocs:not_comparable:config_invalid\nplain:match:",
	'denied: a tenant table the owner cannot read is config_invalid, the other mapping judged');
q_dst("GRANT SELECT ON pb.orgdocs TO app");
is(verdicts(), "orgdocs:match:\nplain:match:", 'denied: SELECT granted again, both match');
done_testing();
