# ash_replicant_decrypt's errors never name a tenant.  Under context tenancy
# a tenant's table lives in a schema named by the tenant value, and a report
# that takes the table from the row (tableoid) puts no name in its
# statement: the error (and so the server log) must not print that schema.
#   - a value decrypted against another tenant's table: ciphertext_invalid
#   - a column that does not exist there: decrypt_binding_invalid
#   - a column that exists but is not encrypted: decrypt_binding_invalid
#   - a table of a tenant's schema no mapping relates to: the same
# A mapping's own target (the template) is still named in full.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $T1 = lc(AshTenancy::sentinel());
my $T2 = lc(AshTenancy::sentinel());
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "column_encryption 1 " . AshTenancy::key_hex(71));
$src->safe_psql($DB, q{
CREATE TABLE vault (id integer PRIMARY KEY, tenant text NOT NULL, secret text, note text);
ALTER TABLE vault REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_v FOR TABLE vault;
});
$dst->safe_psql($DB, qq{
CREATE TABLE vault (id integer PRIMARY KEY, tenant text NOT NULL, secret bytea, note text);
CREATE SCHEMA $T1; CREATE SCHEMA $T2;
CREATE TABLE $T1.vault (LIKE public.vault INCLUDING ALL);
CREATE TABLE $T2.vault (LIKE public.vault INCLUDING ALL);
CREATE TABLE $T1.other (id integer, secret bytea);
CREATE ROLE reader LOGIN; GRANT ash_replicant_decrypt TO reader;
GRANT USAGE ON SCHEMA $T1, $T2 TO reader; GRANT SELECT ON public.vault, $T1.vault, $T2.vault, $T1.other TO reader;
});
AshTest::setup_pipeline($src, $dst, sink => 'v', publication => 'pub_v',
	maps => [ [ 'vault', tenant_column => 'tenant', tenant_strategy => 'context',
		sensitive => ['secret'], encrypted => ['secret'] ] ]);
AshTest::wait_caught_up($src, $dst, 'v') or BAIL_OUT('v');
$src->safe_psql($DB, "INSERT INTO vault VALUES (1, '$T1', 'x1', 'n'), (2, '$T2', 'x2', 'n')");
AshTest::wait_caught_up($src, $dst, 'v');
$dst->safe_psql($DB, "INSERT INTO $T1.other SELECT id, secret FROM $T1.vault");
is($dst->safe_psql($DB, "SET ROLE reader; SELECT ash_replicant_decrypt(secret, tableoid::regclass, 'secret') FROM $T1.vault"),
	'x1', 'a tenant\'s value decrypts against its own table');

sub decrypt_error
{
	my ($sql) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SET ROLE reader; $sql");
	return $rc == 0 ? '(no error)' : $err;
}

my @cases = (
	[ 'another tenant\'s table', "SELECT ash_replicant_decrypt(a.secret, b.tableoid::regclass, 'secret') FROM $T1.vault a, $T2.vault b",
		qr/ciphertext_invalid \(authentication failed: the value was altered or does not belong to column "secret" of table "vault"\)/ ],
	[ 'a missing column', "SELECT ash_replicant_decrypt(secret, tableoid::regclass, 'no_such_column') FROM $T1.vault",
		qr/decrypt_binding_invalid \(column "no_such_column" does not exist on table "vault"\)/ ],
	[ 'a column not encrypted', "SELECT ash_replicant_decrypt(secret, tableoid::regclass, 'note') FROM $T1.vault",
		qr/decrypt_binding_invalid \(column "note" of table "vault" is not an encrypted column of any mapping\)/ ],
	[ 'a table no mapping relates to', "SELECT ash_replicant_decrypt(secret, tableoid::regclass, 'secret') FROM $T1.other",
		qr/decrypt_binding_invalid \(column "secret" of table "other" is not an encrypted column of any mapping\)/ ],
	[ 'the template, by its name', "SELECT ash_replicant_decrypt(secret, 'public.vault', 'secret') FROM $T1.vault",
		qr/ciphertext_invalid \(authentication failed: the value was altered or does not belong to column "public"\."vault"\."secret"\)/ ]);
for my $c (@cases)
{
	my ($label, $sql, $re) = @$c;
	my $err = decrypt_error($sql);
	like($err, $re, "$label: refused, naming the column and the table");
	unlike($err, qr/\Q$T1\E|\Q$T2\E/i, "$label: the error names no tenant");
}
my @err_lines = grep { /ERROR/ } AshTenancy::grep_all_logs([ $T1, $T2 ], $dst);
is(scalar(@err_lines), 0, 'no ERROR line of the server log names a tenant')
  or diag join("\n", @err_lines);
done_testing();
