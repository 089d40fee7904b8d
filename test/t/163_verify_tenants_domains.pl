# ash_replicant_verify judges which tenant a row belongs to, and renders
# domains and a shared target's tenants as the target holds them
# (docs/operations.md#verifying-completeness).  Found by an exploratory
# test:
#
#   ctx      context tenancy (scopes a and a long one, format 'p%s', a
#            tenant_scope_function): the scope tables' counts and digests
#            were summed and no row said which table it was in, so a row
#            moved by hand into another tenant's table still matched.  Now
#            each row's digest carries its scope -- on the source the
#            tenant as the stream sends it, on the mirror the scope of the
#            table holding it: verify_values_differ, put back: match; the
#            same with the tenant column skipped from the target, and with
#            the moved row's tenant column rewritten to its new table's
#   twice    a scope function naming a scope twice: its table was read
#            twice (30:40): now once, match
#   tfunc    context tenancy by a tenant_function: the destination decides
#            a row's scope, which the source cannot render:
#            not_comparable/verify_tenant_scopes_unknown, never a match that
#            could hide a misplaced row
#   dom      source DOMAINs over bool, char(5), inet, cidr feeding text
#            targets (values, a key, an SCD2 business key): the source
#            rendered them by their cast to text ('true', no padding, '/32')
#            and an exact mirror was verify_keys_differ/values_differ: now
#            match; a hand edit still differs
#   shared   two sinks writing one target, attribute tenancy on char(6) and
#            bool tenant columns: the tenants were rendered by their cast to
#            text ('acme', 'true'), not as the target holds them ('acme  ',
#            't'), and an exact mirror was verify_rows_differ 6:0: now
#            match; a hand edit differs
#   leak     the long scope is in no output and no log line
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
my $long = 'scopesentinel' . sprintf('%08x', int(rand(2**32)));
my @outputs;

sub verdicts
{
	my ($sink) = @_;
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT string_agg(source_table || '=' || verdict || '/' || coalesce(reason, '-') || '/'"
		  . " || coalesce(source_rows::text, '?') || ':' || coalesce(mirror_rows::text, '?'), ' '"
		  . " ORDER BY source_table) FROM ash_replicant_verify('$sink') WHERE source_table <> 'ash_marker_$sink'");
	push @outputs, $out, $err;
	return $rc == 0 ? $out : "ERROR: $err";
}
my $v1 = "go_forward_only => false, snapshot => 'v1'";

# --- ctx, twice, tfunc ----------------------------------------------------------
$src->safe_psql($DB, qq{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text);
CREATE TABLE orgnotes (id integer PRIMARY KEY, org text NOT NULL, v text);
CREATE TABLE orgev (id integer PRIMARY KEY, org text NOT NULL, v text);
ALTER TABLE orgdocs REPLICA IDENTITY FULL;
ALTER TABLE orgnotes REPLICA IDENTITY FULL;
ALTER TABLE orgev REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_ctx FOR TABLE orgdocs, orgnotes, orgev;
INSERT INTO orgdocs SELECT g, CASE WHEN g % 3 = 0 THEN 'a' ELSE '$long' END, 'v' FROM generate_series(1, 30) g;
INSERT INTO orgnotes SELECT g, CASE WHEN g % 3 = 0 THEN 'a' ELSE '$long' END, 'v' FROM generate_series(1, 30) g;
INSERT INTO orgev SELECT g, CASE WHEN g % 3 = 0 THEN 'a' ELSE '$long' END, 'v' FROM generate_series(1, 30) g;
});
$dst->safe_psql($DB, qq{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE orgnotes (id integer PRIMARY KEY, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE orgev (id integer PRIMARY KEY, org text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE SCHEMA pa;
CREATE SCHEMA p$long;
CREATE TABLE pa.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE p$long.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE pa.orgnotes (LIKE public.orgnotes INCLUDING ALL);
CREATE TABLE p$long.orgnotes (LIKE public.orgnotes INCLUDING ALL);
CREATE TABLE pa.orgev (LIKE public.orgev INCLUDING ALL);
CREATE TABLE p$long.orgev (LIKE public.orgev INCLUDING ALL);
CREATE TABLE scopes (s text);
INSERT INTO scopes VALUES ('a'), ('$long');
GRANT SELECT ON scopes TO PUBLIC;
CREATE FUNCTION org_scopes() RETURNS SETOF text LANGUAGE sql STABLE AS \$\$ SELECT s FROM public.scopes \$\$;
CREATE FUNCTION org_of(jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT \$1 ->> 'org' \$\$;
});
my @ctx = (tenant_strategy => 'context', tenant_schema_format => 'p%s', snapshot_provenance => 'true',
	tenant_scope_function => 'public.org_scopes()');
AshTest::setup_pipeline($src, $dst, sink => 'ctx', publication => 'pub_ctx', pipeline_extra => $v1,
	maps => [ [ 'orgdocs', tenant_column => 'tenant', @ctx ],
		[ 'orgnotes', tenant_column => 'org', skip => ['org'], @ctx ],
		[ 'orgev', tenant_function => 'public.org_of(jsonb)', @ctx ] ]);
AshTest::wait_status($dst, 'ctx', 'healthy', undef, src => $src, name => 'ctx: copied');
is($dst->safe_psql($DB, "SELECT (SELECT count(*) FROM pa.orgdocs) || '/' || (SELECT count(*) FROM p$long.orgdocs)"
	  . " || '/' || (SELECT count(*) FROM pa.orgnotes) || '/' || (SELECT count(*) FROM p$long.orgnotes)"),
	'10/20/10/20', 'ctx: the copy put each row in its tenant\'s table');
my $exact = 'orgdocs=match/-/30:30 orgev=not_comparable/verify_tenant_scopes_unknown/?:? orgnotes=match/-/30:30';
is(verdicts('ctx'), $exact, 'ctx: an exact mirror matches; a tenant_function scope is not comparable');

# a row of tenant a moved into the other tenant's table, tenant column kept
my $move = "SET session_replication_role = replica;"
  . " WITH m AS (DELETE FROM pa.%s WHERE id = 3 RETURNING *) INSERT INTO p$long.%s SELECT * FROM m";
my $back = "SET session_replication_role = replica;"
  . " WITH m AS (DELETE FROM p$long.%s WHERE id = 3 RETURNING *) INSERT INTO pa.%s SELECT * FROM m";
$dst->safe_psql($DB, sprintf($move, 'orgdocs', 'orgdocs'));
is(verdicts('ctx'), 'orgdocs=mismatch/verify_values_differ/30:30 orgev=not_comparable/verify_tenant_scopes_unknown/?:?'
	  . ' orgnotes=match/-/30:30', 'ctx: a row in another tenant\'s table differs');
# ... and its tenant column rewritten to the new table's tenant
$dst->safe_psql($DB, "SET session_replication_role = replica; UPDATE p$long.orgdocs SET tenant = '$long' WHERE id = 3");
like(verdicts('ctx'), qr/^orgdocs=mismatch\/verify_values_differ\/30:30 /, 'ctx: ... relabelled too, it still differs');
$dst->safe_psql($DB, "SET session_replication_role = replica; UPDATE p$long.orgdocs SET tenant = 'a' WHERE id = 3");
$dst->safe_psql($DB, sprintf($back, 'orgdocs', 'orgdocs'));
is(verdicts('ctx'), $exact, 'ctx: the row put back matches');

# the tenant column skipped from the target: only the table tells the tenant
$dst->safe_psql($DB, sprintf($move, 'orgnotes', 'orgnotes'));
is(verdicts('ctx'), 'orgdocs=match/-/30:30 orgev=not_comparable/verify_tenant_scopes_unknown/?:?'
	  . ' orgnotes=mismatch/verify_values_differ/30:30', 'ctx: a skipped tenant column: a moved row differs');
$dst->safe_psql($DB, sprintf($back, 'orgnotes', 'orgnotes'));
is(verdicts('ctx'), $exact, 'ctx: the skipped tenant column\'s row put back matches');

# twice: a scope named twice is one table
$dst->safe_psql($DB, "INSERT INTO scopes VALUES ('a')");
is(verdicts('ctx'), $exact, 'twice: a scope named twice is read once');
$dst->safe_psql($DB, "DELETE FROM scopes WHERE s = 'a'; INSERT INTO scopes VALUES ('a')");

# streamed rows land where the copy put them
$src->safe_psql($DB, "INSERT INTO orgdocs VALUES (31, 'a', 'w'), (32, '$long', 'w');"
	  . " UPDATE orgnotes SET v = 'w' WHERE id IN (3, 4)");
AshTest::wait_caught_up($src, $dst, 'ctx', name => 'ctx: streamed');
is(verdicts('ctx'), 'orgdocs=match/-/32:32 orgev=not_comparable/verify_tenant_scopes_unknown/?:?'
	  . ' orgnotes=match/-/30:30', 'ctx: streamed rows match');

# --- dom ------------------------------------------------------------------------
$src->safe_psql($DB, q{
CREATE DOMAIN dflag AS bool;
CREATE DOMAIN dcode AS char(5);
CREATE DOMAIN dip AS inet;
CREATE DOMAIN dnet AS cidr;
CREATE TABLE dv (id int PRIMARY KEY, f dflag, c dcode, i dip, n dnet);
CREATE TABLE dk (k dcode PRIMARY KEY, v int);
CREATE TABLE dh (k dflag PRIMARY KEY, v int);
ALTER TABLE dh REPLICA IDENTITY FULL;
INSERT INTO dv VALUES (1, true, 'ab', '10.0.0.1', '10.1.0.0/16'), (2, false, 'abcde', '::1', '::/0'),
	(3, NULL, NULL, NULL, NULL);
INSERT INTO dk VALUES ('ab', 1), ('xyz', 2);
INSERT INTO dh VALUES (true, 1), (false, 0);
CREATE PUBLICATION pub_dom FOR TABLE dv, dk, dh;
});
$dst->safe_psql($DB, q{
CREATE TABLE dv (id int PRIMARY KEY, f text, c text, i text, n varchar(40));
CREATE TABLE dk (k text PRIMARY KEY, v int);
CREATE TABLE dh_hist (vid bigserial PRIMARY KEY, k text NOT NULL, v int,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, UNIQUE (k, valid_from_lsn));
CREATE UNIQUE INDEX dh_hist_open ON dh_hist (k) WHERE valid_to_lsn IS NULL;
});
AshTest::setup_pipeline($src, $dst, sink => 'dom', publication => 'pub_dom', pipeline_extra => $v1,
	maps => [ ['dv'], ['dk'],
		[ 'dh_hist', source_table => 'dh', history_strategy => 'scd2', history_business_key => ['k'] ] ]);
AshTest::wait_status($dst, 'dom', 'healthy', undef, src => $src, name => 'dom: copied');
$src->safe_psql($DB, "INSERT INTO dv VALUES (4, true, 'z', '192.168.0.7', '192.168.0.0/24');"
	  . " INSERT INTO dk VALUES ('q', 3); UPDATE dh SET v = 2 WHERE k");
AshTest::wait_caught_up($src, $dst, 'dom', name => 'dom: streamed');
is($dst->safe_psql($DB, "SELECT f || ',[' || c || '],' || i || ',' || n FROM dv WHERE id = 1")
	  . ' ' . $dst->safe_psql($DB, "SELECT string_agg('[' || k || ']', ' ' ORDER BY k) FROM dk")
	  . ' ' . $dst->safe_psql($DB, "SELECT string_agg(k, ' ' ORDER BY k) FROM dh_hist WHERE valid_to_lsn IS NULL"),
	't,[ab   ],10.0.0.1,10.1.0.0/16 [ab   ] [q    ] [xyz  ] f t', 'dom: the mirror holds the output functions\' text');
is(verdicts('dom'), 'dh=match/-/2:2 dk=match/-/3:3 dv=match/-/4:4', 'dom: an exact mirror of domain columns matches');
$dst->safe_psql($DB, "UPDATE dv SET f = 'true' WHERE id = 1; UPDATE dk SET k = 'ab' WHERE k = 'ab   ';"
	  . " UPDATE dh_hist SET k = 'true' WHERE k = 't' AND valid_to_lsn IS NULL");
is(verdicts('dom'), 'dh=mismatch/verify_keys_differ/2:2 dk=mismatch/verify_keys_differ/3:3'
	  . ' dv=mismatch/verify_values_differ/4:4', 'dom: hand edits differ');

# --- shared ---------------------------------------------------------------------
$src->safe_psql($DB, q{
CREATE TABLE sa (id int PRIMARY KEY, tenant char(6) NOT NULL, val text);
ALTER TABLE sa REPLICA IDENTITY FULL;
INSERT INTO sa SELECT g, 'acme', 'a' || g FROM generate_series(1, 5) g;
CREATE PUBLICATION pub_a FOR TABLE sa;
CREATE TABLE sb (id int PRIMARY KEY, tenant bool NOT NULL, val text);
ALTER TABLE sb REPLICA IDENTITY FULL;
INSERT INTO sb SELECT 100 + g, true, 'b' || g FROM generate_series(1, 5) g;
CREATE PUBLICATION pub_b FOR TABLE sb;
});
$dst->safe_psql($DB, 'CREATE TABLE shared (id int PRIMARY KEY, tenant text NOT NULL, val text)');
my @ten = (tenant_column => 'tenant', tenant_strategy => 'attribute');
AshTest::setup_pipeline($src, $dst, sink => 'sa', publication => 'pub_a', pipeline_extra => $v1,
	maps => [ [ 'shared', source_table => 'sa', @ten ] ]);
AshTest::wait_caught_up($src, $dst, 'sa', name => 'sa: copied and streams');
AshTest::setup_pipeline($src, $dst, sink => 'sb', publication => 'pub_b', pipeline_extra => $v1,
	maps => [ [ 'shared', source_table => 'sb', @ten ] ]);
AshTest::wait_caught_up($src, $dst, 'sb', name => 'sb: copied and streams');
$src->safe_psql($DB, "INSERT INTO sa VALUES (6, 'acme', 'a6'); INSERT INTO sb VALUES (106, true, 'b6')");
AshTest::wait_caught_up($src, $dst, 'sa', name => 'sa: streamed');
AshTest::wait_caught_up($src, $dst, 'sb', name => 'sb: streamed');
is($dst->safe_psql($DB, "SELECT string_agg('[' || tenant || ']:' || n, ' ' ORDER BY tenant)"
	  . " FROM (SELECT tenant, count(*) n FROM shared GROUP BY 1) x"),
	'[acme  ]:6 [t]:6', 'shared: the tenants as streamed');
is(verdicts('sa') . ' ' . verdicts('sb'), 'sa=match/-/6:6 sb=match/-/6:6',
	'shared: char(n) and bool tenants of a shared target match');
$dst->safe_psql($DB, "UPDATE shared SET val = 'x' WHERE id IN (2, 102)");
is(verdicts('sa') . ' ' . verdicts('sb'), 'sa=mismatch/verify_values_differ/6:6 sb=mismatch/verify_values_differ/6:6',
	'shared: a hand edit differs');

# --- leak -----------------------------------------------------------------------
AshTenancy::assert_no_leak([$long], [ $src, $dst ], \@outputs, 'leak: the long scope');

done_testing();
