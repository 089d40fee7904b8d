# Two sinks sharing a context-tenancy template with snapshot provenance, as
# docs/sql-api-mapping.md allows when their tenant_scope_functions never name
# the same tenant: sa's scope is {ta}, sb's is {tb}.  A row of sa's source
# whose tenant is tb, outside sa's declared scopes, was written into sb's
# scope table tb.docs (over sb's row of the same key), healthy (found by QA).
# A context mapping with a tenant_scope_function writes only the tenants it
# returns: such a row halts tenant_scope_invalid naming the template, nothing
# of the transaction committed (tb.docs and the checkpoint unchanged), the
# sentinel in no log; sa's in-scope rows still stream, and sb is untouched.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 1\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(33));
my $S = AshTenancy::sentinel();
$src->safe_psql('postgres', q{
CREATE TABLE docs_a (id integer PRIMARY KEY, tenant text, title text);
CREATE TABLE docs_b (id integer PRIMARY KEY, tenant text, title text);
ALTER TABLE docs_a REPLICA IDENTITY FULL;
ALTER TABLE docs_b REPLICA IDENTITY FULL;
INSERT INTO docs_a VALUES (1, 'ta', 'a1');
INSERT INTO docs_b VALUES (1, 'tb', 'b1'), (2, 'tb', 'b2');
CREATE PUBLICATION pub_a FOR TABLE docs_a;
CREATE PUBLICATION pub_b FOR TABLE docs_b;
});
$dst->safe_psql('postgres', q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE SCHEMA ta; CREATE TABLE ta.docs (LIKE public.docs INCLUDING ALL);
CREATE SCHEMA tb; CREATE TABLE tb.docs (LIKE public.docs INCLUDING ALL);
CREATE FUNCTION scope_a() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('ta') $$;
CREATE FUNCTION scope_b() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('tb') $$;
CREATE TABLE ash_marker_sa (id bigint PRIMARY KEY, note text, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE ash_marker_sb (id bigint PRIMARY KEY, note text, replica_fingerprint bytea, replica_seen_attempt bytea);
});
for my $s ('sa', 'sb')
{
	my $x = substr($s, 1);
	$src->safe_psql('postgres', "CREATE TABLE ash_marker_$s (id bigint PRIMARY KEY, note text); ALTER PUBLICATION pub_$x ADD TABLE ash_marker_$s");
	AshTest::setup_pipeline($src, $dst, sink => $s, publication => "pub_$x", marker => 0,
		pipeline_extra => "go_forward_only => false, snapshot => 'v1'",
		maps => [ [ 'docs', source_table => "docs_$x", tenant_column => 'tenant', tenant_strategy => 'context',
				snapshot_provenance => 'true', tenant_scope_function => "public.scope_$x()" ],
			[ "ash_marker_$s", snapshot_provenance => 'true' ] ]);
	AshTest::wait_caught_up($src, $dst, $s, timeout => 60) or BAIL_OUT("$s never streamed");
}
my $rows = q{(SELECT id, tenant, title FROM %s.docs)};
AshTenancy::assert_same($src, 'docs_a', undef, $dst, sprintf($rows, 'ta'), 'sa copied: ta.docs = docs_a');
AshTenancy::assert_same($src, 'docs_b', undef, $dst, sprintf($rows, 'tb'), 'sb copied: tb.docs = docs_b');

# in scope: streams
$src->safe_psql('postgres', q{INSERT INTO docs_a VALUES (4, 'ta', 'a4')});
AshTest::wait_caught_up($src, $dst, 'sa');
AshTenancy::assert_same($src, 'docs_a', undef, $dst, sprintf($rows, 'ta'), 'an in-scope row streams into ta.docs');

# sa's source now has rows of tenant tb (key 2 is sb's key 2 in tb.docs)
my $before = AshTenancy::state($dst, 'sa', 'tb.docs', 'ta.docs');
$src->safe_psql('postgres', qq{INSERT INTO docs_a VALUES (5, 'ta', 'a5'), (2, 'tb', '$S'), (3, 'tb', 'stray')});
AshTenancy::expect_halt($src, $dst, 'sa', 'tenant_scope_invalid', $before,
	label => 'a tenant outside the scope function\'s scopes');
ok(scalar(AshTest::log_lines_like($dst, qr/reason=tenant_scope_invalid .*public\.docs/)),
	'the halt names the template');
AshTenancy::assert_same($src, 'docs_b', undef, $dst, sprintf($rows, 'tb'), "sb's scope table holds sb's rows only");
is(AshTest::status_row($dst, 'sb')->{state}, 'healthy', 'sb healthy');

AshTenancy::assert_no_leak([$S], [ $src, $dst ], [], 'sentinel');
done_testing();
