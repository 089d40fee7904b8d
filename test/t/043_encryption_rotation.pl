# Sensitive columns encrypted in apply, and key rotation (docs/sql-api-mapping.md, docs/keys.md).
#
#  cards  attribute tenancy; pan sensitive + encrypted (bytea target), cvv
#         sensitive + skipped (no target column)
#  vault  context tenancy; secret sensitive + encrypted: the ciphertext is bound
#         to the tenant's own table, and re-sealed when the row moves
#
#  1. key version 1: stored values are ciphertexts (format 1, version 1,
#     33 bytes longer than the plaintext, no plaintext inside, a fresh nonce
#     per value); a member of ash_replicant_decrypt reads them back equal to
#     the source; others may not call the function; a value does not
#     decrypt against another tenant's table
#  2. rotation by adding version 2 to the file (no reload): new and updated
#     rows carry version 2, untouched rows keep version 1 and still decrypt
#  3. rotation by pointing keyring_file at another file + SIGHUP: version 3
#  4. removing version 1 fails closed for v1 values only
#     (keyring_version_missing); putting it back makes them readable again
#  5. a keyring file that becomes group-readable: misconfigured/keyring_invalid
#     with mirror and checkpoint unchanged; fixed mode, start: converges
#  6. a keyring without column_encryption: a (re)start is refused,
#     misconfigured/keyring_missing_family, nothing applied; key back: converges
#  Throughout: no plaintext in the destination's logs.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
my $sink = 'enc';
my %key = map { $_ => AshTenancy::key_hex($_) } 1 .. 3;
my $md = 'message_digest 1 ' . AshTenancy::key_hex(9);

AshTenancy::write_keyring($dst, 'keyring', $md, "column_encryption 1 $key{1}");

$src->safe_psql('postgres', q{
CREATE TABLE cards (id integer PRIMARY KEY, tenant text NOT NULL, holder text, pan text, cvv text);
ALTER TABLE cards REPLICA IDENTITY FULL;
CREATE TABLE vault (id integer PRIMARY KEY, tenant text, secret text, note text);
ALTER TABLE vault REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_enc FOR TABLE cards, vault;
});
$dst->safe_psql('postgres', q{
CREATE TABLE cards (id integer PRIMARY KEY, tenant text NOT NULL, holder text, pan bytea);
CREATE TABLE vault (id integer PRIMARY KEY, tenant text, secret bytea, note text);
CREATE SCHEMA acme;
CREATE SCHEMA globex;
CREATE SCHEMA initech;
CREATE TABLE acme.vault (LIKE public.vault INCLUDING ALL);
CREATE TABLE globex.vault (LIKE public.vault INCLUDING ALL);
CREATE TABLE initech.vault (LIKE public.vault INCLUDING ALL);
CREATE ROLE reader LOGIN;
GRANT ash_replicant_decrypt TO reader;
GRANT USAGE ON SCHEMA acme, globex, initech TO reader;
GRANT SELECT ON cards, acme.vault, globex.vault, initech.vault TO reader;
CREATE ROLE outsider LOGIN;
GRANT SELECT ON cards TO outsider;
});

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_enc',
	maps => [
		[ 'cards', tenant_column => 'tenant', tenant_strategy => 'attribute',
			sensitive => [ 'pan', 'cvv' ], encrypted => ['pan'], skip => ['cvv'] ],
		[ 'vault', tenant_column => 'tenant', tenant_strategy => 'context',
			sensitive => ['secret'], encrypted => ['secret'] ] ]);

AshTest::wait_caught_up($src, $dst, $sink, name => 'encrypting pipeline streams')
  or BAIL_OUT('pipeline never streamed');

# plaintexts are derived from the id, so both ends can compute them
my $pan = q{'4111 1111 1111 ' || lpad(id::text, 4, '0')};
my $secret = q{'secret of ' || tenant || ' #' || id};

$src->safe_psql('postgres', qq{
INSERT INTO cards SELECT g, (ARRAY['acme','globex','initech'])[g % 3 + 1], 'holder ' || g, NULL, 'cvv' || g
	FROM generate_series(1, 9) g;
UPDATE cards SET pan = $pan;
INSERT INTO cards VALUES (10, 'acme', 'same pan A', '5555 0000 0000 0000', '111'),
	(11, 'acme', 'same pan B', '5555 0000 0000 0000', '222'),
	(12, 'globex', 'no pan', NULL, NULL);
INSERT INTO vault SELECT g, (ARRAY['acme','globex','initech'])[g % 3 + 1], NULL, 'note ' || g
	FROM generate_series(1, 6) g;
UPDATE vault SET secret = $secret;
});
AshTest::wait_caught_up($src, $dst, $sink);

# decrypted view of the destination, as a member of ash_replicant_decrypt
sub cards_plain_sql
{
	return q{SET ROLE reader; SELECT id, tenant, holder, ash_replicant_decrypt(pan, 'public.cards', 'pan') FROM cards ORDER BY id};
}

sub vault_plain
{
	my ($t) = @_;
	return $dst->safe_psql('postgres',
		qq{SET ROLE reader; SELECT id, tenant, ash_replicant_decrypt(secret, '$t.vault', 'secret'), note FROM $t.vault ORDER BY id});
}

sub check_plain
{
	my ($label) = @_;
	is($dst->safe_psql('postgres', cards_plain_sql()),
		$src->safe_psql('postgres', 'SELECT id, tenant, holder, pan FROM cards ORDER BY id'),
		"$label: cards decrypt to the source values");
	for my $t (qw(acme globex initech))
	{
		is(vault_plain($t),
			$src->safe_psql('postgres', "SELECT id, tenant, secret, note FROM vault WHERE tenant = '$t' ORDER BY id"),
			"$label: $t.vault decrypts to the source values");
	}
}

# key version of every stored value, "id:version" (NULL values skipped)
sub versions
{
	my ($table, $col) = @_;
	return $dst->safe_psql('postgres',
		"SELECT string_agg(id || ':' || ('x' || encode(substr($col, 2, 4), 'hex'))::bit(32)::int, ',' ORDER BY id)"
		  . " FROM $table WHERE $col IS NOT NULL");
}

# 1. version 1
check_plain('v1');
is($dst->safe_psql('postgres', qq{SELECT count(*) FROM cards WHERE pan IS NOT NULL AND NOT (
	get_byte(pan, 0) = 1 AND substr(pan, 2, 4) = '\\x00000001'::bytea
	AND octet_length(pan) = octet_length(convert_to($pan, 'UTF8')) + 33
	AND position(convert_to($pan, 'UTF8') in pan) = 0)
	AND id < 10}), '0', 'v1: every pan is format 1, key version 1, plaintext + 33 bytes, no plaintext inside');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM cards WHERE pan IS NULL}), '1', 'v1: a NULL stays NULL');
is($dst->safe_psql('postgres', q{SELECT (SELECT pan FROM cards WHERE id = 10) = (SELECT pan FROM cards WHERE id = 11)}),
	'f', 'v1: equal plaintexts give different ciphertexts (fresh nonce)');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM information_schema.columns WHERE table_name = 'cards' AND column_name = 'cvv'}),
	'0', 'v1: the skipped sensitive column has no target');
is(versions('acme.vault', 'secret') . ' ' . versions('globex.vault', 'secret'), '3:1,6:1 1:1,4:1',
	'v1: tenant tables hold version-1 ciphertexts');

my ($rc, $out, $err) = $dst->psql('postgres',
	q{SET ROLE outsider; SELECT ash_replicant_decrypt(pan, 'public.cards', 'pan') FROM cards WHERE id = 1});
isnt($rc, 0, 'v1: a role outside ash_replicant_decrypt may not decrypt');
like($err, qr/permission denied/, 'v1: refused by privilege');
($rc, $out, $err) = $dst->psql('postgres',
	q{SET ROLE reader; SELECT ash_replicant_decrypt(secret, 'globex.vault', 'secret') FROM acme.vault WHERE id = 3});
isnt($rc, 0, "v1: an acme value does not decrypt against globex's table");
like($err, qr/ciphertext_invalid/, 'v1: refused as ciphertext_invalid');

# relocation across tenant schemas re-seals for the new table
$src->safe_psql('postgres', q{UPDATE vault SET tenant = 'globex', secret = secret WHERE id = 3});
AshTest::wait_caught_up($src, $dst, $sink);
is($dst->safe_psql('postgres', q{SELECT count(*) FROM acme.vault WHERE id = 3}), '0', 'moved: gone from acme.vault');
is($dst->safe_psql('postgres', q{SET ROLE reader; SELECT ash_replicant_decrypt(secret, 'globex.vault', 'secret') FROM globex.vault WHERE id = 3}),
	'secret of acme #3', 'moved: decrypts against globex.vault');

# 2. rotation: add version 2 to the file, no reload
AshTenancy::write_keyring($dst, 'keyring', $md, "column_encryption 1 $key{1}", "column_encryption 2 $key{2}");
$src->safe_psql('postgres', qq{
INSERT INTO cards VALUES (20, 'initech', 'holder 20', NULL, 'x');
UPDATE cards SET pan = $pan WHERE id = 20;
UPDATE cards SET pan = $pan, holder = 'renewed' WHERE id = 1;
INSERT INTO vault VALUES (20, 'initech', NULL, 'n20');
UPDATE vault SET secret = $secret WHERE id = 20;
});
AshTest::wait_caught_up($src, $dst, $sink);
is(versions('cards', 'pan'), '1:2,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:1,10:1,11:1,20:2',
	'v2: new and updated values use version 2, untouched ones keep version 1');
is(versions('initech.vault', 'secret'), '2:1,5:1,20:2', 'v2: tenant table too');
check_plain('v1+v2');

# 3. another file, SIGHUP
AshTenancy::write_keyring($dst, 'keyring_b', $md, "column_encryption 1 $key{1}",
	"column_encryption 2 $key{2}", "column_encryption 3 $key{3}");
$dst->append_conf('postgresql.conf', "ash_replicant.keyring_file = 'keyring_b'\n");
$dst->reload;
$src->safe_psql('postgres', qq{INSERT INTO cards VALUES (30, 'globex', 'holder 30', NULL, 'y');
UPDATE cards SET pan = $pan WHERE id = 30;});
AshTest::wait_caught_up($src, $dst, $sink);
is(versions('cards', 'pan'), '1:2,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:1,10:1,11:1,20:2,30:3',
	'v3: after SIGHUP to a new file, new values use version 3');
check_plain('v1+v2+v3');
is($dst->safe_psql('postgres', q{SELECT active_version || ' ' || versions::text FROM ash_replicant_keyring_status() WHERE family = 'column_encryption'}),
	'3 {1,2,3}', 'keyring status shows the versions');

# 4. remove version 1: its values fail closed, the others still decrypt
AshTenancy::write_keyring($dst, 'keyring_b', $md, "column_encryption 2 $key{2}", "column_encryption 3 $key{3}");
($rc, $out, $err) = $dst->psql('postgres',
	q{SET ROLE reader; SELECT ash_replicant_decrypt(pan, 'public.cards', 'pan') FROM cards WHERE id = 2});
isnt($rc, 0, 'v1 removed: a version-1 value does not decrypt');
like($err, qr/keyring_version_missing/, 'v1 removed: keyring_version_missing');
is($dst->safe_psql('postgres', q{SET ROLE reader; SELECT ash_replicant_decrypt(pan, 'public.cards', 'pan') FROM cards WHERE id = 30}),
	'4111 1111 1111 0030', 'v1 removed: a version-3 value still decrypts');
$src->safe_psql('postgres', qq{INSERT INTO cards VALUES (31, 'acme', 'holder 31', NULL, 'z');
UPDATE cards SET pan = $pan WHERE id = 31;});
AshTest::wait_caught_up($src, $dst, $sink, name => 'v1 removed: the pipeline still streams');
AshTenancy::write_keyring($dst, 'keyring_b', $md, "column_encryption 1 $key{1}",
	"column_encryption 2 $key{2}", "column_encryption 3 $key{3}");
check_plain('v1 restored');

# 5. a keyring that becomes unacceptable (group-readable) mid-stream: the next
#    transaction is refused before any write, misconfigured/keyring_invalid;
#    fixing the mode and starting again converges
my $before = AshTenancy::state($dst, $sink, qw(cards acme.vault globex.vault initech.vault));
chmod(0640, $dst->data_dir . '/keyring_b') or die "chmod: $!";
$src->safe_psql('postgres', qq{INSERT INTO cards VALUES (40, 'acme', 'holder 40', NULL, 'w');
UPDATE cards SET pan = $pan WHERE id = 40;
INSERT INTO vault VALUES (40, 'acme', 'secret of acme #40', 'n40');});
AshTenancy::expect_halt($src, $dst, $sink, 'keyring_invalid', $before, state => 'misconfigured',
	label => 'group-readable keyring');
chmod(0600, $dst->data_dir . '/keyring_b') or die "chmod: $!";
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'keyring fixed: resumed');
check_plain('after the keyring fix');
is(versions('cards', 'pan'), '1:2,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:1,10:1,11:1,20:2,30:3,31:3,40:3',
	'after the keyring fix: versions as expected');

# 6. a keyring without column_encryption: the pipeline refuses to start
#    (misconfigured/keyring_missing_family) before touching anything; with the
#    key back it resumes
AshTest::stop_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'not_started', undef, src => $src);
$before = AshTenancy::state($dst, $sink, qw(cards acme.vault globex.vault initech.vault));
AshTenancy::write_keyring($dst, 'keyring_b', $md);
$src->safe_psql('postgres', qq{INSERT INTO cards VALUES (50, 'globex', 'holder 50', NULL, 'v');
UPDATE cards SET pan = $pan WHERE id = 50;});
AshTest::start_sink($dst, $sink);
AshTenancy::expect_halt($src, $dst, $sink, 'keyring_missing_family', $before, state => 'misconfigured',
	label => 'keyring without column_encryption');
AshTenancy::write_keyring($dst, 'keyring_b', $md, "column_encryption 1 $key{1}",
	"column_encryption 2 $key{2}", "column_encryption 3 $key{3}");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'key back: resumed');
check_plain('after keyring_missing_family');

# no plaintext in the destination's logs
my @plain = map { "4111 1111 1111 " . sprintf('%04d', $_) } (1 .. 9, 20, 30, 31);
push @plain, '4111 1111 1111 0040', '4111 1111 1111 0050', '5555 0000 0000 0000', map { "secret of $_" } qw(acme globex initech);
my @hits = map { AshTest::grep_logs_for($_, $dst) } @plain;
is(scalar(@hits), 0, 'no plaintext of a sensitive column in the destination log')
  or diag join("\n", @hits[ 0 .. ($#hits < 4 ? $#hits : 4) ]);

AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src);

done_testing();
