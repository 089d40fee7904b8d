# A source table under row-level security that applies to the pipeline's
# role (docs/reasons.md#privilege_select_missing): the stream carries every
# row, a read by that role sees only those the policy lets through.  And an
# inheritance parent published alone (FOR TABLE ONLY), whose child holds rows.
#
#  rls       preflight and doctor fail privilege_select naming the table
#            (before: pass); verify says not_comparable/privilege_select_missing
#            for it (before: a count of the visible rows -- mismatch over an
#            exact mirror, match over one missing a hidden row); the stream
#            itself mirrors every row; with BYPASSRLS verify matches, and a
#            hidden row deleted from the mirror mismatches
#  snapshot  a v1 pipeline over the table: preflight fails privilege_select
#            (before: passed, the start halted privilege_select_missing)
#  stats     a destination role a target's policy limits to one tenant is
#            shown no tenant's row of stat_tables for that target (before: every
#            tenant's name and counts); a role without a policy sees them all
#  inherit   FOR TABLE ONLY a parent without rows of its own, its child with
#            one: preflight's existing_rows passes (before: warned
#            go_forward_rows_not_copied, counting the child's row)
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

my $as_mirror = AshTest::conninfo($src) =~ s/user=\S+/user=mirror/r;
q_src(q{
CREATE ROLE mirror LOGIN REPLICATION;
GRANT pg_read_all_settings TO mirror;
CREATE TABLE t (id int PRIMARY KEY, hidden bool NOT NULL DEFAULT false, v text);
ALTER TABLE t ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON t FOR SELECT TO mirror USING (NOT hidden);
GRANT SELECT ON t TO mirror;
CREATE PUBLICATION pub_r FOR TABLE t;
});
q_dst("CREATE TABLE t (id int PRIMARY KEY, hidden bool NOT NULL DEFAULT false, v text)");

sub check_of
{
	my ($fn, $sink, $check) = @_;
	return q_dst("SELECT verdict || '/' || coalesce(reason, '') || '/' || coalesce(detail, '') FROM $fn('$sink') WHERE check_name = '$check'");
}

sub verdict_of
{
	my ($sink, $table) = @_;
	return q_dst("SELECT verdict || '/' || coalesce(reason, '') || '/' || coalesce(source_rows::text, '-') || ':' || coalesce(mirror_rows::text, '-')"
		  . " FROM ash_replicant_verify('$sink') WHERE source_table = '$table'");
}

# rls
{
	AshTest::setup_pipeline($src, $dst, sink => 'r', publication => 'pub_r', maps => [ ['t'] ], start => 0,
		source_role => 'mirror', connection => $as_mirror);
	like(check_of('ash_replicant_preflight', 'r', 'privilege_select'), qr{^fail/privilege_select_missing/tables: public\.t$},
		'rls: preflight fails privilege_select for the table under a policy');
	AshTest::start_sink($dst, 'r');
	AshTest::wait_slot_consistent($src, $dst, 'r');
	q_src("INSERT INTO t VALUES (1, false, 'a'), (2, true, 'b'), (3, false, 'c')");
	AshTest::wait_caught_up($src, $dst, 'r', name => 'rls: streamed');
	is(q_dst("SELECT count(*) FROM t"), '3', 'rls: the stream mirrors every row, the hidden one too');
	like(check_of('ash_replicant_doctor', 'r', 'privilege_select'), qr{^fail/privilege_select_missing/},
		'rls: doctor fails privilege_select');
	is(verdict_of('r', 't'), 'not_comparable/privilege_select_missing/-:-', 'rls: verify does not count the visible rows');
	q_dst("DELETE FROM t WHERE id = 2");
	is(verdict_of('r', 't'), 'not_comparable/privilege_select_missing/-:-', 'rls: nor over a mirror missing a hidden row');
	q_src("ALTER ROLE mirror BYPASSRLS");
	is(verdict_of('r', 't'), 'mismatch/verify_rows_differ/3:2', 'rls: with BYPASSRLS the missing row mismatches');
	q_dst("INSERT INTO t VALUES (2, true, 'b')");
	is(verdict_of('r', 't'), 'match//3:3', 'rls: with BYPASSRLS an exact mirror matches');
	is(check_of('ash_replicant_doctor', 'r', 'privilege_select'), 'pass//', 'rls: with BYPASSRLS doctor passes privilege_select');
	q_src("ALTER ROLE mirror NOBYPASSRLS");
	AshTest::stop_sink($dst, 'r');
}

# snapshot
{
	q_dst("CREATE SCHEMA s2; CREATE TABLE s2.t (LIKE public.t INCLUDING ALL)");
	AshTest::setup_pipeline($src, $dst, sink => 'r2', publication => 'pub_r',
		maps => [ [ 's2.t', source_schema => 'public', source_table => 't' ] ], start => 0, marker => 0,
		pipeline_extra => "go_forward_only => false, snapshot => 'v1'", ignored_sources => ['public.ash_marker_r'],
		connection => $as_mirror);
	like(check_of('ash_replicant_preflight', 'r2', 'privilege_select'), qr{^fail/privilege_select_missing/},
		'snapshot: preflight fails privilege_select before the copy would');
}

# stats: per-tenant rows of stat_tables under a policy on the target
{
	q_src("CREATE TABLE acc (id int PRIMARY KEY, tenant text NOT NULL, v text); ALTER TABLE acc REPLICA IDENTITY FULL;"
		  . " CREATE PUBLICATION pub_t FOR TABLE acc");
	q_dst(q{
CREATE TABLE acc (id int PRIMARY KEY, tenant text NOT NULL, v text);
ALTER TABLE acc ENABLE ROW LEVEL SECURITY;
CREATE ROLE acme_reader LOGIN IN ROLE ash_replicant_monitor;
CREATE ROLE all_reader LOGIN IN ROLE ash_replicant_monitor BYPASSRLS;
GRANT SELECT ON acc TO acme_reader, all_reader;
CREATE POLICY own_tenant ON acc FOR SELECT TO acme_reader USING (tenant = 'acme');
});
	AshTest::setup_pipeline($src, $dst, sink => 'st', publication => 'pub_t',
		maps => [ [ 'acc', tenant_column => 'tenant', tenant_strategy => 'attribute' ] ]);
	AshTest::wait_slot_consistent($src, $dst, 'st');
	q_src("INSERT INTO acc VALUES (1, 'acme', 'x'), (2, 'globex', 'y')");
	AshTest::wait_caught_up($src, $dst, 'st', name => 'stats: streamed');
	my $tenants = "SELECT coalesce(string_agg(tenant, ',' ORDER BY tenant), '') FROM ash_replicant.stat_tables"
	  . " WHERE sink_name = 'st' AND tenant IS NOT NULL";
	is(q_dst("SET ROLE acme_reader; SELECT string_agg(tenant, ',' ORDER BY tenant) FROM acc"), 'acme',
		'stats: the policy limits acme_reader to one tenant');
	is(q_dst("SET ROLE acme_reader; $tenants"), '', 'stats: no tenant row for a role a policy applies to');
	is(q_dst("SET ROLE acme_reader; SELECT inserted FROM ash_replicant.stat_tables WHERE sink_name = 'st' AND tenant IS NULL AND target::text LIKE '%acc'"),
		'2', 'stats: the table\'s own row stays');
	is(q_dst("SET ROLE all_reader; $tenants"), 'acme,globex', 'stats: a role no policy applies to sees every tenant');
	AshTest::stop_sink($dst, 'st');
}

# inherit
{
	q_src(q{
CREATE TABLE par (id int PRIMARY KEY, v text);
CREATE TABLE kid () INHERITS (par);
INSERT INTO kid VALUES (1, 'in the child');
CREATE PUBLICATION pub_p FOR TABLE ONLY par;
});
	q_dst("CREATE TABLE par (id int PRIMARY KEY, v text)");
	AshTest::setup_pipeline($src, $dst, sink => 'ih', publication => 'pub_p', maps => [ ['par'] ], start => 0);
	is(check_of('ash_replicant_preflight', 'ih', 'existing_rows'), 'pass//',
		'inherit: the parent\'s own rows are judged, not its child\'s');
	q_src("INSERT INTO par VALUES (2, 'own')");
	like(check_of('ash_replicant_preflight', 'ih', 'existing_rows'), qr{^warn/go_forward_rows_not_copied/},
		'inherit: a row of its own warns');
}

done_testing();
