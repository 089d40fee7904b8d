# Context tenancy (schema per tenant) with three tenants (docs/sql-api-mapping.md, README.md#how-apply-works).
#
#  docs    tenant_column "tenant", default tenant_schema_format '%s': a row
#          goes to <tenant>.docs; the tenants are acme, globex and
#          "Initech Ltd" (a schema name that needs quoting)
#  events  tenant_function tenant_of(jsonb) (lower(org)), format 'ev_%s': rows
#          of org 'ACME' and 'Acme' both go to ev_acme.events
#  many    70 tenants, more than the per-relation plan cache holds (64): rows
#          are written, updated in an order that evicts, and moved
#
#  Inserts, same-tenant updates and deletes; relocation (an update that
#  changes the tenant moves the row to the other tenant's table, also with a
#  key change); the mapping's own target (the template) never receives a row.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $sink = 'ten_ctx';
my @tenants = ('acme', 'globex', 'Initech Ltd');
my $ntenants = 70;

$src->safe_psql('postgres', q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text, body text);
ALTER TABLE docs REPLICA IDENTITY FULL;
CREATE TABLE events (id integer PRIMARY KEY, org text, kind text, payload jsonb);
ALTER TABLE events REPLICA IDENTITY FULL;
CREATE TABLE many (id integer PRIMARY KEY, tenant text, v integer);
ALTER TABLE many REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_ctx FOR TABLE docs, events, many;
});
$dst->safe_psql('postgres', qq{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text, body text);
CREATE SCHEMA acme;
CREATE SCHEMA globex;
CREATE SCHEMA "Initech Ltd";
CREATE TABLE acme.docs (LIKE public.docs INCLUDING ALL);
CREATE TABLE globex.docs (LIKE public.docs INCLUDING ALL);
CREATE TABLE "Initech Ltd".docs (LIKE public.docs INCLUDING ALL);

CREATE TABLE events (id integer PRIMARY KEY, org text, kind text, payload jsonb);
CREATE FUNCTION tenant_of(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
	AS \$\$ SELECT lower(r->>'org') \$\$;
CREATE SCHEMA ev_acme;
CREATE SCHEMA ev_globex;
CREATE SCHEMA ev_initech;
CREATE TABLE ev_acme.events (LIKE public.events INCLUDING ALL);
CREATE TABLE ev_globex.events (LIKE public.events INCLUDING ALL);
CREATE TABLE ev_initech.events (LIKE public.events INCLUDING ALL);

CREATE TABLE many (id integer PRIMARY KEY, tenant text, v integer);
DO \$\$
BEGIN
	FOR i IN 1 .. $ntenants LOOP
		EXECUTE format('CREATE SCHEMA %I', 'm_' || lpad(i::text, 3, '0'));
		EXECUTE format('CREATE TABLE %I.many (LIKE public.many INCLUDING ALL)', 'm_' || lpad(i::text, 3, '0'));
	END LOOP;
END \$\$;
-- every tenant table of "many" as one relation, with its schema
DO \$\$
BEGIN
	EXECUTE 'CREATE VIEW all_many AS '
		|| string_agg(format('SELECT %L::text AS sch, t.* FROM %I.many t', n, n), ' UNION ALL ')
		FROM (SELECT 'm_' || lpad(i::text, 3, '0') AS n FROM generate_series(1, $ntenants) i) s;
END \$\$;
});

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_ctx',
	maps => [
		[ 'docs', tenant_column => 'tenant', tenant_strategy => 'context' ],
		[ 'events', tenant_function => 'tenant_of(jsonb)', tenant_strategy => 'context',
			tenant_schema_format => 'ev_%s' ],
		[ 'many', tenant_column => 'tenant', tenant_strategy => 'context',
			tenant_schema_format => 'm_%s' ] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'context-tenant pipeline streams')
  or BAIL_OUT('pipeline never streamed');

sub quote_ident { my ($s) = @_; $s =~ s/"/""/g; return qq{"$s"}; }

sub compare_all
{
	my ($label) = @_;
	for my $t (@tenants)
	{
		my $tl = AshTest::lit($t);
		AshTenancy::assert_same($src, 'docs', "tenant = $tl", $dst, quote_ident($t) . '.docs',
			"$label: docs of $t in its own schema");
	}
	for my $t (qw(acme globex initech))
	{
		AshTenancy::assert_same($src, 'events', "lower(org) = '$t'", $dst, "ev_$t.events",
			"$label: events of $t in ev_$t");
	}
	is($dst->safe_psql('postgres', 'SELECT (SELECT count(*) FROM public.docs) + (SELECT count(*) FROM public.events)'),
		'0', "$label: the template tables receive nothing");
}

# 1. three tenants
$src->safe_psql('postgres', q{
INSERT INTO docs SELECT g, (ARRAY['acme','globex','Initech Ltd'])[(g - 1) % 3 + 1], 'title ' || g, repeat('b', g)
	FROM generate_series(1, 15) g;
INSERT INTO events VALUES
	(1, 'ACME', 'created', '{"a": 1}'), (2, 'Acme', 'created', NULL), (3, 'acme', 'paid', '{}'),
	(4, 'Globex', 'created', '{"b": [1, 2]}'), (5, 'GLOBEX', 'paid', NULL),
	(6, 'initech', 'created', '{"c": null}'), (7, 'Initech', 'paid', '"x"');
});
$src->safe_psql('postgres', q{
UPDATE docs SET title = title || ' (edited)' WHERE id IN (1, 2, 3, 4);
UPDATE events SET kind = 'refunded' WHERE id IN (3, 5);
DELETE FROM docs WHERE id IN (13, 14);
DELETE FROM events WHERE id = 7;
});
AshTest::wait_caught_up($src, $dst, $sink);
compare_all('three tenants');

# 2. relocation across tenant schemas
$src->safe_psql('postgres', q{
BEGIN;
UPDATE docs SET tenant = 'globex' WHERE id = 1;                  -- acme -> globex
UPDATE docs SET tenant = 'Initech Ltd', id = 101 WHERE id = 4;   -- acme -> Initech Ltd, new key
UPDATE docs SET tenant = 'acme', title = 'moved back' WHERE id = 2;  -- globex -> acme
UPDATE events SET org = 'GLOBEX' WHERE id = 1;                   -- ev_acme -> ev_globex
UPDATE events SET org = 'Acme' WHERE id = 2;                     -- same tenant after lower()
COMMIT;
});
AshTest::wait_caught_up($src, $dst, $sink);
compare_all('after relocation');
is($dst->safe_psql('postgres', q{SELECT (SELECT count(*) FROM acme.docs WHERE id IN (1, 4))
	|| ' ' || (SELECT count(*) FROM globex.docs WHERE id = 1)
	|| ' ' || (SELECT count(*) FROM "Initech Ltd".docs WHERE id = 101)}),
	'0 1 1', 'moved rows left the old tenant table and are in the new one');

# 3. more tenants than the plan cache holds
$src->safe_psql('postgres', qq{
INSERT INTO many SELECT i, lpad(i::text, 3, '0'), i FROM generate_series(1, $ntenants) i;
});
# in reverse order: each tenant table was least recently used when touched
$src->safe_psql('postgres', qq{
DO \$\$
BEGIN
	FOR i IN REVERSE $ntenants .. 1 LOOP
		UPDATE many SET v = v + 1000 WHERE id = i;
	END LOOP;
END \$\$;
UPDATE many SET tenant = '070' WHERE id = 1;           -- m_001 -> m_070
UPDATE many SET tenant = '001', v = -2 WHERE id = 2;   -- m_002 -> m_001
DELETE FROM many WHERE id = 3;
INSERT INTO many SELECT i + 100, lpad(i::text, 3, '0'), i FROM generate_series(1, $ntenants) i;
});
AshTest::wait_caught_up($src, $dst, $sink);
AshTenancy::assert_same($src, q{(SELECT 'm_' || tenant AS sch, id, tenant, v FROM many)}, undef,
	$dst, 'all_many', "$ntenants tenants: every row in its tenant's table", order_by => 'sch, id');

compare_all('at the end');
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src);

done_testing();
