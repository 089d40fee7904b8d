# The keyring in a running server: a SIGHUP (new keyring_file) is picked up
# by a long-lived session, a rotated file is picked up at the next use, old
# ciphertexts keep decrypting while new ones carry the new version, a removed
# version fails closed, a refused file (world-readable, malformed) never puts
# key material into the server log or the client's error, and a bad keyring
# never stops the server from starting.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# Distinctive keys, so that any leak of them (or of a 16-digit window of
# them) in a log line is unmistakable.
sub key_hex
{
	my ($seed, $len) = @_;
	return join '', map { sprintf '%02x', ($_ * 37 + $seed * 101 + 11) % 256 } 0 .. $len - 1;
}
my %keys = (
	ce1 => key_hex(1, 32),
	ce2 => key_hex(2, 32),
	ce3 => key_hex(3, 32),
	md1 => key_hex(4, 24),
	fake => 'c0ffee' x 10 . 'c0ff',    # only ever on refused lines
);

my $node = PostgreSQL::Test::Cluster->new('keyring');
$node->init;
my $datadir = $node->data_dir;

# write a keyring file atomically with the given mode
sub write_keyring
{
	my ($name, $mode, @lines) = @_;
	my $path = "$datadir/$name";
	my $tmp = "$path.tmp";
	open(my $fh, '>', $tmp) or die "cannot write $tmp: $!";
	print $fh map { "$_\n" } @lines;
	close($fh);
	chmod($mode, $tmp) or die "chmod: $!";
	rename($tmp, $path) or die "rename: $!";
	return;
}

write_keyring('keyring_a', 0600,
	'# first keyring',
	"column_encryption 1 $keys{ce1}",
	"message_digest 1 $keys{md1}");
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ash_replicant'
ash_replicant.database = 'postgres'
ash_replicant.keyring_file = 'keyring_a'
});
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION ash_replicant;
CREATE SCHEMA shop;
CREATE TABLE shop.cards (id int PRIMARY KEY, pan bytea);
SELECT ash_replicant_create_sink('shop');
SELECT ash_replicant_map_table('shop', 'shop.cards', sensitive => '{pan}', encrypted => '{pan}');
});

my $status_sql = q{SELECT string_agg(family || '=' || coalesce(active_version::text, '-')
	|| ':' || versions::text, ' ' ORDER BY family) FROM ash_replicant_keyring_status()};
is($node->safe_psql('postgres', $status_sql),
	'column_encryption=1:{1} horizon_provenance=-:{} message_digest=1:{1} snapshot_provenance=-:{}',
	'keyring loaded from the configured file');

my $ct1 = $node->safe_psql('postgres',
	q{SELECT ash_replicant._encrypt_for_test('4111 1111 1111 1111', 'shop.cards', 'pan')});
like($ct1, qr/^\\x0100000001[0-9a-f]{24}/, 'value encrypted under version 1');

# A long-lived session: it must see keyring changes without reconnecting.
my $bg = $node->background_psql('postgres', on_error_stop => 0);
is($bg->query_safe(q{SELECT active_version FROM ash_replicant_keyring_status()
	WHERE family = 'column_encryption'}), '1', 'session sees version 1');
is($bg->query_safe(qq{SELECT ash_replicant_decrypt('$ct1', 'shop.cards', 'pan')}),
	'4111 1111 1111 1111', 'session decrypts');

# 1. SIGHUP: point keyring_file at a rotated file (versions 1 and 2)
write_keyring('keyring_b', 0600,
	"column_encryption 1 $keys{ce1}",
	"column_encryption 2 $keys{ce2}",
	"message_digest 1 $keys{md1}");
$node->append_conf('postgresql.conf', "ash_replicant.keyring_file = 'keyring_b'\n");
$node->reload;
my $seen = 0;
for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
{
	my $v = $bg->query_safe(q{SELECT active_version FROM ash_replicant_keyring_status()
		WHERE family = 'column_encryption'});
	if ($v eq '2') { $seen = 1; last; }
	usleep(100_000);
}
ok($seen, 'after SIGHUP the running session uses the new keyring file (active version 2)');
my $ct2 = $bg->query_safe(
	q{SELECT ash_replicant._encrypt_for_test('5500 0000 0000 0004', 'shop.cards', 'pan')});
like($ct2, qr/^\\x0100000002/, 'new values carry key version 2');
is($bg->query_safe(qq{SELECT ash_replicant_decrypt('$ct1', 'shop.cards', 'pan')}),
	'4111 1111 1111 1111', 'version 1 value still decrypts after rotation');
is($bg->query_safe(qq{SELECT ash_replicant_decrypt('$ct2', 'shop.cards', 'pan')}),
	'5500 0000 0000 0004', 'version 2 value decrypts');

# 2. the same file rotated in place (version 3 added): picked up at next use
write_keyring('keyring_b', 0600,
	"column_encryption 1 $keys{ce1}",
	"column_encryption 2 $keys{ce2}",
	"column_encryption 3 $keys{ce3}",
	"message_digest 1 $keys{md1}");
$node->reload;
is($bg->query_safe(q{SELECT versions::text FROM ash_replicant_keyring_status()
	WHERE family = 'column_encryption'}), '{1,2,3}', 'in-place rotation seen at next use');
my $ct3 = $bg->query_safe(
	q{SELECT ash_replicant._encrypt_for_test('3400 0000 0000 009', 'shop.cards', 'pan')});
like($ct3, qr/^\\x0100000003/, 'new values carry key version 3');

# 3. a world-readable file is refused, by the running session and new ones
chmod(0644, "$datadir/keyring_b") or die;
my ($out, $err) = $bg->query(qq{SELECT ash_replicant_decrypt('$ct1', 'shop.cards', 'pan')});
ok($err, 'world-readable keyring refused in the running session');
like($bg->{stderr}, qr/keyring_invalid \(the keyring file must not be accessible by group or others/,
	'the session is told why');
my $client_errors = $bg->{stderr};
$bg->{stderr} = '';
my ($rc, $stdout, $stderr) = $node->psql('postgres', $status_sql);
isnt($rc, 0, 'a new session is refused too');
like($stderr, qr/keyring_invalid/, 'with keyring_invalid');
$client_errors .= $stderr;

# 4. a malformed file: the bad line carries a fake key in the family field
write_keyring('keyring_b', 0600,
	"column_encryption 1 $keys{ce1}",
	"$keys{fake} 2 column_encryption",
	"column_encryption 3 $keys{ce3}");
($rc, $stdout, $stderr) = $node->psql('postgres', $status_sql);
like($stderr, qr/keyring_invalid \(line 2: unknown key family\)/,
	'malformed line refused by number');
$client_errors .= $stderr;
write_keyring('keyring_b', 0600,
	"column_encryption 1 $keys{ce1}",
	"column_encryption 2 $keys{ce2}",
	"column_encryption 2 $keys{ce3}");
($rc, $stdout, $stderr) = $node->psql('postgres', $status_sql);
like($stderr, qr/keyring_invalid \(line 3: duplicate version of family column_encryption \(first on line 2\)\)/,
	'duplicate version refused by number');
$client_errors .= $stderr;

# 5. removing a version still referenced fails closed (never "changed")
write_keyring('keyring_b', 0600,
	"column_encryption 2 $keys{ce2}",
	"column_encryption 3 $keys{ce3}");
($out, $err) = $bg->query(qq{SELECT ash_replicant_decrypt('$ct1', 'shop.cards', 'pan')});
like($bg->{stderr}, qr/keyring_version_missing \(family column_encryption has no version 1\)/,
	'a removed version fails closed with keyring_version_missing');
$client_errors .= $bg->{stderr};
$bg->{stderr} = '';
is($bg->query_safe(qq{SELECT ash_replicant_decrypt('$ct2', 'shop.cards', 'pan')}),
	'5500 0000 0000 0004', 'retained versions still decrypt');
$bg->quit;

# 6. a refused keyring never stops the server; it refuses at first use
chmod(0640, "$datadir/keyring_b") or die;
$node->restart;
($rc, $stdout, $stderr) = $node->psql('postgres', $status_sql);
like($stderr, qr/keyring_invalid/, 'after a restart with a bad keyring the server runs and refuses it');
$client_errors .= $stderr;
chmod(0600, "$datadir/keyring_b") or die;
is($node->safe_psql('postgres', $status_sql),
	'column_encryption=3:{2,3} horizon_provenance=-:{} message_digest=-:{} snapshot_provenance=-:{}',
	'fixed keyring loads without a restart');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant launcher'"),
	'launcher running');

# 7. no key material anywhere: server log, client errors
my $log = slurp_file($node->logfile);
like($log, qr/keyring_invalid \(the keyring file must not be accessible by group or others/,
	'the refusal is in the server log');
like($log, qr/keyring_invalid \(line 2: unknown key family\)/, 'the malformed line is in the server log by number');
for my $name (sort keys %keys)
{
	my $hex = $keys{$name};
	my $leaks = 0;
	for my $text ($log, $client_errors)
	{
		# the whole key, and every 16-digit window of it, in either case
		for (my $i = 0; $i + 16 <= length($hex); $i += 2)
		{
			my $window = substr($hex, $i, 16);
			$leaks++ if $text =~ /\Q$window\E/i;
		}
	}
	is($leaks, 0, "no part of key $name in the server log or client errors");
}
my @ours = grep { /ash_replicant: .*keyring/ } split /\n/, $log;
ok(scalar(@ours) >= 4, 'keyring errors were logged');
is(scalar(grep { /keyring_[ab]|\Q$datadir\E/ } @ours), 0, 'our keyring errors never name the path');

$node->stop;
done_testing();
