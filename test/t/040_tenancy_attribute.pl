# Attribute tenancy with three tenants (docs/sql-api-mapping.md, README.md#how-apply-works).
#
#  accounts  tenant column "tenant", NOT part of the destination key (id): every
#            update and delete is scoped by the tenant; source key (tenant, id)
#  orders    tenant column "org" renamed to "tenant" (column_map), part of the
#            destination key (tenant, id): the same id under three tenants
#
#  1. inserts, same-tenant updates and deletes for acme, globex, initech: the
#     mirror equals the source, tenant by tenant
#  2. relocation: an update that changes the tenant (with and without a key
#     change) is applied as a delete under the old tenant and an insert under
#     the new one (a write audit on the destination shows exactly that)
#  3. scoping: rows that exist at the source only (committed before the slot:
#     a go-forward mirror never saw them) share an id with a mirrored row of
#     another tenant; deleting them at the source must not delete the other
#     tenant's row (counted as a missing-row delete, logged value-free), and
#     updating one whose id is free inserts the full image
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $sink = 'ten_attr';
my @tenants = qw(acme globex initech);

$src->safe_psql('postgres', q{
CREATE TABLE accounts (tenant text NOT NULL, id integer NOT NULL, name text, balance numeric,
	PRIMARY KEY (tenant, id));
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE TABLE orders (org text NOT NULL, id integer NOT NULL, item text, qty integer,
	PRIMARY KEY (org, id));
ALTER TABLE orders REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_attr FOR TABLE accounts, orders;
-- committed before the slot exists: never seen by the go-forward mirror
INSERT INTO accounts VALUES ('globex', 50, 'pre-slot globex 50', 0),
	('initech', 51, 'pre-slot initech 51', 0);
});
$dst->safe_psql('postgres', q{
CREATE TABLE accounts (tenant text NOT NULL, id integer PRIMARY KEY, name text, balance numeric);
CREATE TABLE orders (tenant text NOT NULL, id integer NOT NULL, item text, qty integer,
	PRIMARY KEY (tenant, id));
CREATE TABLE audit (seq bigserial PRIMARY KEY, tbl text, op text, tenant text, id integer);
CREATE FUNCTION audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO audit (tbl, op, tenant, id) VALUES (TG_TABLE_NAME, TG_OP, OLD.tenant, OLD.id);
	ELSE
		INSERT INTO audit (tbl, op, tenant, id) VALUES (TG_TABLE_NAME, TG_OP, NEW.tenant, NEW.id);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER accounts_audit AFTER INSERT OR UPDATE OR DELETE ON accounts
	FOR EACH ROW EXECUTE FUNCTION audit_fn();
CREATE TRIGGER orders_audit AFTER INSERT OR UPDATE OR DELETE ON orders
	FOR EACH ROW EXECUTE FUNCTION audit_fn();
});

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_attr',
	maps => [
		[ 'accounts', tenant_column => 'tenant', tenant_strategy => 'attribute' ],
		[ 'orders', tenant_column => 'org', tenant_strategy => 'attribute',
			column_map => '{"org": "tenant"}' ] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'attribute-tenant pipeline streams')
  or BAIL_OUT('pipeline never streamed');

sub compare_all
{
	my ($label) = @_;
	# rows committed before the slot are the source's only (until touched)
	my $seen = "name NOT LIKE 'pre-slot%'";
	AshTenancy::assert_same($src, 'accounts', $seen, $dst, 'accounts', "$label: accounts");
	AshTenancy::assert_same($src, 'orders', undef, $dst, 'orders', "$label: orders",
		order_by => 't::text');
	for my $t (@tenants)
	{
		AshTenancy::assert_same($src, 'accounts', "tenant = '$t' AND $seen", $dst, 'accounts',
			"$label: accounts of $t", dst_where => "tenant = '$t'");
		AshTenancy::assert_same($src, 'orders', "org = '$t'", $dst, 'orders',
			"$label: orders of $t", dst_where => "tenant = '$t'");
	}
}

# 1. three tenants: inserts, same-tenant updates, deletes
$src->safe_psql('postgres', q{
INSERT INTO accounts SELECT (ARRAY['acme','globex','initech'])[(g - 1) / 4 + 1], g, 'account ' || g, g * 10
	FROM generate_series(1, 12) g;
INSERT INTO orders SELECT t, i, 'item ' || t || i, i FROM unnest(ARRAY['acme','globex','initech']) t,
	generate_series(1, 4) i;
});
$src->safe_psql('postgres', q{
UPDATE accounts SET balance = balance + 1 WHERE tenant = 'acme';
UPDATE orders SET qty = qty * 100 WHERE org = 'globex' AND id <= 2;
UPDATE orders SET item = 'renamed' WHERE org = 'initech' AND id = 1;
DELETE FROM accounts WHERE id = 12;
DELETE FROM orders WHERE org = 'initech' AND id = 4;
});
AshTest::wait_caught_up($src, $dst, $sink);
compare_all('three tenants');
is($dst->safe_psql('postgres', q{SELECT string_agg(tenant || ':' || qty, ',' ORDER BY tenant) FROM orders WHERE id = 1}),
	'acme:1,globex:100,initech:1', 'the same id under three tenants: only the updated tenant changed');

# 2. relocation across tenants
$dst->safe_psql('postgres', 'TRUNCATE audit');
$src->safe_psql('postgres', q{
BEGIN;
UPDATE accounts SET tenant = 'globex' WHERE id = 1;                    -- acme -> globex
UPDATE accounts SET tenant = 'initech', id = 101 WHERE id = 2;         -- acme -> initech, new key
UPDATE accounts SET name = 'same tenant' WHERE id = 5;                 -- globex, no move
UPDATE orders SET org = 'initech', id = 31 WHERE org = 'acme' AND id = 3;
UPDATE orders SET org = 'globex', id = 10 WHERE org = 'acme' AND id = 2;
COMMIT;
});
AshTest::wait_caught_up($src, $dst, $sink);
compare_all('after relocation');
is($dst->safe_psql('postgres', q{SELECT string_agg(tbl || ' ' || op || ' ' || tenant || ' ' || id, E'\n' ORDER BY seq) FROM audit}),
	join("\n",
		'accounts DELETE acme 1', 'accounts INSERT globex 1',
		'accounts DELETE acme 2', 'accounts INSERT initech 101',
		'accounts UPDATE globex 5',
		'orders DELETE acme 3', 'orders INSERT initech 31',
		'orders DELETE acme 2', 'orders INSERT globex 10'),
	'relocation = delete under the old tenant + insert under the new; same-tenant update in place');

# 3. scoping by tenant
my $missing0 = (AshTest::stat_row($dst, $sink) // {})->{missing_row_deletes} // 0;
$src->safe_psql('postgres', q{INSERT INTO accounts VALUES ('acme', 50, 'acme 50', 5)});
AshTest::wait_caught_up($src, $dst, $sink);
is($dst->safe_psql('postgres', 'SELECT tenant FROM accounts WHERE id = 50'), 'acme',
	'acme row 50 mirrored (the source also holds globex 50, unseen)');
$dst->safe_psql('postgres', 'TRUNCATE audit');
$src->safe_psql('postgres', q{
DELETE FROM accounts WHERE tenant = 'globex' AND id = 50;
UPDATE accounts SET name = 'touched initech 51' WHERE tenant = 'initech' AND id = 51;
});
AshTest::wait_caught_up($src, $dst, $sink);
is($dst->safe_psql('postgres', q{SELECT tenant || ' ' || name FROM accounts WHERE id = 50}), 'acme acme 50',
	'a delete of globex 50 leaves acme 50 alone (scoped by tenant)');
is($dst->safe_psql('postgres', q{SELECT tenant || ' ' || name FROM accounts WHERE id = 51}),
	'initech touched initech 51', 'an update of a row the mirror lacks inserts the full image under its tenant');
is($dst->safe_psql('postgres', q{SELECT string_agg(op || ' ' || tenant || ' ' || id, ',' ORDER BY seq) FROM audit WHERE tbl = 'accounts'}),
	'INSERT initech 51', 'no write touched another tenant\'s row');
is(((AshTest::stat_row($dst, $sink) // {})->{missing_row_deletes} // 0) - $missing0, 1,
	'the scoped delete that found nothing is counted');
ok(scalar(AshTest::log_lines_like($dst, qr/event=apply\.delete_missing sink=\Q$sink\E table=\S*accounts count=1/)) >= 1,
	'and logged as an event');
compare_all('after scoped writes');

AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src);
my $st = AshTest::stat_row($dst, $sink) // {};
cmp_ok($st->{applied_changes} // 0, '>=', 40, 'stat_pipelines counts the applied changes');

done_testing();
