# Tenancy edge cases found by QA.  (1) A tenant column of a domain over
# boolean: false was mirrored as tenant 'f' (the check compared the type to
# boolean itself); it halts tenant_required like a plain boolean's false,
# nothing committed.  (2) Context tenancy, a tenant's table keyed by other
# columns than its template's identity (PRIMARY KEY (title); the template's
# key is id): it was written (healthy) and a later write needing the upsert
# failed apply_failed 42P10; the first write to it halts census_drift
# naming the template, nothing committed, and a tenant table keyed as the
# template mirrors.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');

# (1) a domain over boolean
my $ddl = q{
CREATE DOMAIN flag AS boolean;
CREATE TABLE plainb (id integer PRIMARY KEY, tenant boolean, title text);
CREATE TABLE domb (id integer PRIMARY KEY, tenant flag, title text);
};
$src->safe_psql('postgres', $ddl . q{
ALTER TABLE plainb REPLICA IDENTITY FULL;
ALTER TABLE domb REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_bool FOR TABLE plainb, domb;
});
$dst->safe_psql('postgres', $ddl);
AshTest::setup_pipeline($src, $dst, sink => 'tb', publication => 'pub_bool',
	maps => [ [ 'plainb', tenant_column => 'tenant', tenant_strategy => 'attribute' ],
		[ 'domb', tenant_column => 'tenant', tenant_strategy => 'attribute' ] ]);
AshTest::wait_caught_up($src, $dst, 'tb') or BAIL_OUT('never streamed');
$src->safe_psql('postgres', q{INSERT INTO plainb VALUES (1, true, 'x'); INSERT INTO domb VALUES (1, true, 'x')});
AshTest::wait_caught_up($src, $dst, 'tb');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM domb'), '1', 'a true tenant of a domain over boolean mirrors');
my $before = AshTenancy::state($dst, 'tb', 'plainb', 'domb');
$src->safe_psql('postgres', q{BEGIN; INSERT INTO plainb VALUES (3, true, 'y'); INSERT INTO domb VALUES (2, false, 'domain false'); COMMIT;});
AshTenancy::expect_halt($src, $dst, 'tb', 'tenant_required', $before,
	label => 'a false tenant of a domain over boolean');

# (2) a tenant table keyed by other columns than the template's identity
$src->safe_psql('postgres', q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
ALTER TABLE docs REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_key FOR TABLE docs;
});
$dst->safe_psql('postgres', q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
CREATE SCHEMA good; CREATE TABLE good.docs (LIKE public.docs INCLUDING ALL);
CREATE SCHEMA other; CREATE TABLE other.docs (id integer, tenant text, title text PRIMARY KEY);
});
AshTest::setup_pipeline($src, $dst, sink => 'tk', publication => 'pub_key',
	maps => [ [ 'docs', tenant_column => 'tenant', tenant_strategy => 'context' ] ]);
AshTest::wait_caught_up($src, $dst, 'tk') or BAIL_OUT('never streamed');
$src->safe_psql('postgres', q{INSERT INTO docs VALUES (1, 'good', 'one')});
AshTest::wait_caught_up($src, $dst, 'tk');
AshTenancy::assert_same($src, 'docs', undef, $dst, 'good.docs', 'a tenant table keyed as its template mirrors');
$before = AshTenancy::state($dst, 'tk', 'good.docs', 'other.docs');
$src->safe_psql('postgres', q{INSERT INTO docs VALUES (2, 'good', 'two'), (3, 'other', 'three')});
AshTenancy::expect_halt($src, $dst, 'tk', 'census_drift', $before,
	label => 'a tenant table keyed by other columns');
ok(scalar(AshTest::log_lines_like($dst, qr/reason=census_drift .*public\.docs/)),
	'the halt names the template');

# keyed as the template: the transaction applies once
$dst->safe_psql('postgres', q{ALTER TABLE other.docs DROP CONSTRAINT docs_pkey; ALTER TABLE other.docs ADD PRIMARY KEY (id)});
AshTest::start_sink($dst, 'tk');
AshTest::wait_caught_up($src, $dst, 'tk');
is(AshTest::status_row($dst, 'tk')->{state}, 'healthy', 'rekeyed: healthy');
AshTenancy::assert_same($src, 'docs', "tenant = 'other'", $dst, 'other.docs', 'the transaction applied once');
done_testing();
