# The provenance fingerprint is a stored format: a row copied by one version
# of ash_replicant must fingerprint the same under the next, or every later
# snapshot would rewrite every unchanged row (and fire its triggers).  This
# test recomputes each fingerprint independently and compares it with what
# the copies stored (docs/snapshots.md#provenance).  Format 2, written:
#
#   fingerprint = \x02 || key version (uint32, big-endian)
#                 || first 16 bytes of HMAC-SHA-256(target key, message)
#   target key  = HMAC-SHA-256(snapshot_provenance key,
#                   uint32 length || "ash_replicant fingerprint 2"
#                   || for each mapped column, in the table's order:
#                      name as uint32 length || bytes, then
#                      'V' | 'P' (an encrypted column))
#   message     = a bitmap of the NULL columns (column c: bit c % 8 of byte
#                 c / 8), then for each other column its length (7 bits a
#                 byte, least significant first, the high bit on all but the
#                 last) || the type's send format | its plaintext (encrypted)
#
# Format 1, written by earlier builds and still compared (a row stamped so
# and unchanged at the source is not written again, only restamped):
#
#   fingerprint = \x01 || key version
#                 || HMAC-SHA-256(snapshot_provenance key, message)
#   message     = for each mapped column, in the table's order:
#                 name as uint32 length || bytes, then
#                 'N' (NULL) | 'V' || uint32 length || the type's send format
#                 | 'P' || uint32 length || plaintext (an encrypted column)
#
# The send formats come from the source's own send functions (int2send,
# textsend, numeric_send, ...), so any shortcut the worker takes around a
# send function must produce the same bytes.  Both copy paths are checked:
# snapshot => 'v1' (COPY binary) and snapshot => 'incremental' (chunks read
# in binary, three rows each, so a chunk's header row and its rows are told
# apart in every chunk).
use strict;
use warnings;

use lib 'test/t';
use AshTest;
use AshTenancy;
use Digest::SHA qw(hmac_sha256);
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
my $sp_key = AshTenancy::key_hex(21);
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 3 $sp_key",
	'column_encryption 1 ' . AshTenancy::key_hex(22));

# Every column kind whose send format a fast path reproduces (integers,
# dates and timestamps, text, varchar, bpchar, bytea, numeric: short and
# long stored headers, negative weights, NaN, infinities, zero, a display
# scale of 100), and others that go through their send function (float8,
# bool, uuid), with NULLs; row 6's 120 kB text outgrows the message buffer
# a target keeps between rows, which is then made afresh for the rows
# after it.
my $cols = 'id bigint PRIMARY KEY, a smallint, b integer, t text, v varchar(12), c char(6),'
  . ' by bytea, n numeric(10,2), f float8, ok boolean, u uuid, d date, ts timestamp,'
  . ' tz timestamptz, nn numeric, secret text';
my @names = qw(id a b t v c by n f ok u d ts tz nn secret);
my %sendfn = (id => 'int8send', a => 'int2send', b => 'int4send', t => 'textsend',
	v => 'varcharsend', c => 'bpcharsend', by => 'byteasend', n => 'numeric_send',
	f => 'float8send', ok => 'boolsend', u => 'uuid_send', d => 'date_send',
	ts => 'timestamp_send', tz => 'timestamptz_send', nn => 'numeric_send');

$src->safe_psql($DB, qq{
CREATE TABLE kat ($cols);
INSERT INTO kat VALUES
  (1, 7, -70000, 'plain', 'short', 'ab', '\\x00ff10', 12.50, 1.5, true,
   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-12-03', '2026-12-03 07:08:09.123456',
   '2026-12-03 07:08:09.654321+00', 12.5, 'top secret'),
  (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (3, -32768, 2147483647, 'ünïcödé ✓', '', 'xyzuvw', '\\x', -3.00, -0.0, false,
   '00000000-0000-0000-0000-000000000000', '1999-12-31', '-infinity', 'infinity', -0.5, 'ünï'),
  (4, 1, 1, repeat('long ', 500), 'v4', 'c', decode(repeat('ab', 3000), 'hex'), 99999999.99,
   'NaN', true, 'ffffffff-ffff-ffff-ffff-ffffffffffff', '4713-01-01 BC', '2000-01-01',
   '1970-01-01 00:00:00+00', 1e-200, repeat('s', 3000));
INSERT INTO kat (id, t, nn) SELECT g, CASE WHEN g = 6 THEN repeat('big ', 30000) ELSE 'row ' || g END,
  (ARRAY[0, 'NaN', 'Infinity', '-Infinity', 1e300, round(1::numeric, 100),
         -123456789.123456789012345678901234567890]::numeric[])[g - 4]
  FROM generate_series(5, 11) g;
CREATE PUBLICATION pub FOR TABLE kat;
});
# the encrypted column is sealed into bytea at the destination
(my $dcols = $cols) =~ s/secret text/secret bytea/;
for my $t (qw(kat_v1 kat_in))
{
	$dst->safe_psql($DB, "CREATE TABLE $t ($dcols, replica_fingerprint bytea, replica_seen_attempt bytea)");
}

# The expected fingerprint of each source row, by id.
my $sel = join(', ', map {
	my $n = $_;
	$n eq 'secret' ? "CASE WHEN secret IS NULL THEN 'N' ELSE 'P' || encode(convert_to(secret, 'UTF8'), 'hex') END"
	  : "CASE WHEN $n IS NULL THEN 'N' ELSE 'V' || encode($sendfn{$n}($n), 'hex') END"
} @names);
sub varlen
{
	my ($n) = @_;
	my $out = '';
	while ($n >= 0x80) { $out .= chr(($n & 0x7f) | 0x80); $n >>= 7; }
	return $out . chr($n);
}
my $tctx = pack('N', 27) . 'ash_replicant fingerprint 2'
  . join('', map { pack('N', length $_) . $_ . ($_ eq 'secret' ? 'P' : 'V') } @names);
my $tkey = hmac_sha256($tctx, pack('H*', $sp_key));
my (%want, %want1);
for my $line (split /\n/, $src->safe_psql($DB, "SELECT id, $sel FROM kat ORDER BY id"))
{
	my ($id, @v) = split /\|/, $line, -1;
	my ($msg1, $vals, @nullbits) = ('', '');
	for my $i (0 .. $#names)
	{
		$msg1 .= pack('N', length $names[$i]) . $names[$i];
		my ($kind, $hex) = (substr($v[$i], 0, 1), substr($v[$i], 1));
		$msg1 .= $kind eq 'N' ? 'N' : $kind . pack('N', length($hex) / 2) . pack('H*', $hex);
		$nullbits[$i] = $kind eq 'N' ? 1 : 0;
		$vals .= varlen(length($hex) / 2) . pack('H*', $hex) unless $kind eq 'N';
	}
	my $bitmap = pack('b*', join('', @nullbits));
	$want{$id} = unpack('H*', "\x02" . pack('N', 3) . substr(hmac_sha256($bitmap . $vals, $tkey), 0, 16));
	$want1{$id} = unpack('H*', "\x01" . pack('N', 3) . hmac_sha256($msg1, pack('H*', $sp_key)));
}
is(scalar(keys %want), 11, 'expected fingerprints of the 11 source rows');

my %map = (sensitive => ['secret'], encrypted => ['secret'], snapshot_provenance => 'true');
AshTest::setup_pipeline($src, $dst, sink => 'kv1', publication => 'pub', marker => 0,
	maps => [ [ 'kat_v1', source_table => 'kat', %map ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::setup_pipeline($src, $dst, sink => 'kin', publication => 'pub', marker => 0,
	maps => [ [ 'kat_in', source_table => 'kat', %map ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 3");

for my $sink (qw(kv1 kin))
{
	AshTest::wait_status($dst, $sink, 'healthy');
	ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines"
		  . " WHERE sink_name = '$sink'"), "$sink: snapshot complete");
}

for my $t (qw(kat_v1 kat_in))
{
	my %got = map { split /\|/ } split /\n/,
	  $dst->safe_psql($DB, "SELECT id, encode(replica_fingerprint, 'hex') FROM $t ORDER BY id");
	is(scalar(keys %got), 11, "$t: 11 rows copied");
	my @bad = grep { ($got{$_} // '') ne $want{$_} } sort { $a <=> $b } keys %want;
	is("@bad", '', "$t: every stored fingerprint is the independently computed one");
	is($dst->safe_psql($DB, "SELECT count(*) FROM $t WHERE position(convert_to('top secret', 'UTF8') IN secret) > 0"),
		'0', "$t: the encrypted column holds no plaintext");
}

# Rows stamped by an earlier build (format 1) and unchanged at the source
# are found unchanged by the next snapshot: not written (no trigger fires),
# only restamped in format 2.  Row 3's stamp is wrong: it is rewritten.
my $f1 = join(', ', map { "($_, '\\x" . ($_ == 3 ? '0100000003' . '00' x 32 : $want1{$_}) . "'::bytea)" }
	  sort { $a <=> $b } keys %want1);
AshTest::stop_settled($src, $dst, 'kv1');
$dst->safe_psql($DB, qq{
UPDATE kat_v1 k SET replica_fingerprint = f.fp FROM (VALUES $f1) f(id, fp) WHERE k.id = f.id;
CREATE TABLE kat_audit (id bigint, op text);
CREATE FUNCTION kat_audit_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS \$\$
BEGIN
	INSERT INTO public.kat_audit VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END, TG_OP);
	RETURN NULL;
END \$\$;
CREATE TRIGGER kat_audit AFTER INSERT OR UPDATE OR DELETE ON kat_v1 FOR EACH ROW EXECUTE FUNCTION kat_audit_fn();
});
is($dst->safe_psql($DB, "SELECT count(*) FROM kat_v1 WHERE length(replica_fingerprint) = 37"), '11',
	'kat_v1: every row stamped in format 1');
my ($sysid, $sdb) = AshTest::source_identity($src);
is($dst->safe_psql($DB, "SELECT ash_replicant_reset_checkpoint('kv1', '$sysid', '$sdb')"), 't',
	'kv1: checkpoint reset');
AshTest::start_sink($dst, 'kv1');
AshTest::wait_status($dst, 'kv1', 'healthy');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines"
	  . " WHERE sink_name = 'kv1'"), 'kv1: second snapshot complete');
is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || op, ',' ORDER BY id) FROM kat_audit"), '3:UPDATE',
	'format 1 stamps: only the row whose stamp differs is written again');
my %got = map { split /\|/ } split /\n/,
  $dst->safe_psql($DB, "SELECT id, encode(replica_fingerprint, 'hex') FROM kat_v1 ORDER BY id");
my @bad = grep { ($got{$_} // '') ne $want{$_} } sort { $a <=> $b } keys %want;
is("@bad", '', 'kat_v1: every row restamped in format 2');

done_testing();
