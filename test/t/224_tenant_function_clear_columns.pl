# A context-tenancy mapping's tenant_function(jsonb) is handed only the
# columns that reach the target in clear: never a skipped column, never the
# plaintext of an encrypted one (README: skipped columns never reach SQL;
# the function is the owner's code and may log what it sees).
#
# The function routes a row by what it sees (a skipped or encrypted column
# in its argument sends the row to a saw_* schema) and logs the keys it was
# handed, so every side of a change is checked:
#   c    streamed insert, update (old and new sides, REPLICA IDENTITY FULL)
#        and delete
#   cs   the rows a v1 snapshot copies
# Keys are the source's column names (nick is mapped to alias); a
# host-managed sensitive column (hm, bytea, neither skipped nor encrypted)
# reaches the target as it is, and so is in the argument.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $S = AshTenancy::sentinel();
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "column_encryption 1 " . AshTenancy::key_hex(95));

my $table = 'id integer PRIMARY KEY, org text NOT NULL, pan text, cvv text, hm bytea, nick text';
$src->safe_psql($DB, qq{
CREATE TABLE cards ($table);
CREATE TABLE cards_s ($table);
ALTER TABLE cards REPLICA IDENTITY FULL;
ALTER TABLE cards_s REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_c FOR TABLE cards;
CREATE PUBLICATION pub_cs FOR TABLE cards_s;
INSERT INTO cards_s SELECT g, 'acme', '$S span ' || g, '$S scvv ' || g, '\\x0102', 'n' || g
  FROM generate_series(1, 5) g;
});
my $tgt = 'id integer PRIMARY KEY, org text NOT NULL, pan bytea, hm bytea, alias text';
my $ddl = "CREATE TABLE cards ($tgt); CREATE TABLE cards_s ($tgt);\n";
for my $s (qw(acme saw_cvv saw_pan saw_both))
{
	$ddl .= "CREATE SCHEMA $s; CREATE TABLE $s.cards (LIKE public.cards INCLUDING ALL);"
	  . " CREATE TABLE $s.cards_s (LIKE public.cards_s INCLUDING ALL);\n";
}
$dst->safe_psql($DB, $ddl . q{
-- the tenant is the org, unless the function was handed a column it must not see
CREATE FUNCTION tenant_of(r jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	RAISE LOG 'tenant fn keys=% cvv=% pan=%',
		(SELECT string_agg(k, ',' ORDER BY k) FROM jsonb_object_keys(r) k), r->>'cvv', r->>'pan';
	RETURN CASE WHEN r ? 'cvv' AND r ? 'pan' THEN 'saw_both' WHEN r ? 'cvv' THEN 'saw_cvv'
		WHEN r ? 'pan' THEN 'saw_pan' ELSE r->>'org' END;
END $$;
});
my @map = (tenant_function => 'tenant_of(jsonb)', tenant_strategy => 'context',
	sensitive => [ 'pan', 'cvv', 'hm' ], encrypted => ['pan'], skip => ['cvv'],
	column_map => '{"nick": "alias"}');
AshTest::setup_pipeline($src, $dst, sink => 'c', publication => 'pub_c', maps => [ [ 'cards', @map ] ]);
AshTest::setup_pipeline($src, $dst, sink => 'cs', publication => 'pub_cs',
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'",
	maps => [ [ 'cards_s', source_table => 'cards_s', @map ] ]);
AshTest::wait_caught_up($src, $dst, 'c') or BAIL_OUT('c');
AshTest::wait_caught_up($src, $dst, 'cs') or BAIL_OUT('cs');

sub where_rows
{
	my ($t) = @_;
	return join ' ', map { "$_=" . $dst->safe_psql($DB, "SELECT count(*) FROM $_.$t") } qw(acme saw_cvv saw_pan saw_both);
}

is(where_rows('cards_s'), 'acme=5 saw_cvv=0 saw_pan=0 saw_both=0',
	'snapshot: every copied row is routed by its org (the function saw neither cvv nor pan)');

$src->safe_psql($DB, "INSERT INTO cards VALUES (1, 'acme', '$S pan1', '$S cvv1', '\\x01', 'a'),"
	  . " (2, 'acme', '$S pan2', '$S cvv2', NULL, 'b')");
AshTest::wait_caught_up($src, $dst, 'c');
is(where_rows('cards'), 'acme=2 saw_cvv=0 saw_pan=0 saw_both=0',
	'insert: routed by its org (the function saw neither cvv nor pan)');

# both sides of an update: a wrong old tenant fails to find the row (or
# relocates it), a wrong new tenant relocates it
$src->safe_psql($DB, "UPDATE cards SET pan = '$S pan1u', cvv = '$S cvv1u', nick = 'a2' WHERE id = 1");
AshTest::wait_caught_up($src, $dst, 'c');
is(where_rows('cards') . ' ' . $dst->safe_psql($DB, "SELECT alias FROM acme.cards WHERE id = 1"),
	'acme=2 saw_cvv=0 saw_pan=0 saw_both=0 a2', 'update: old and new sides resolve to the org');
$src->safe_psql($DB, "DELETE FROM cards WHERE id = 2");
AshTest::wait_caught_up($src, $dst, 'c');
is(where_rows('cards') . ' ' . $dst->safe_psql($DB, "SELECT string_agg(id::text, ',') FROM acme.cards"),
	'acme=1 saw_cvv=0 saw_pan=0 saw_both=0 1', 'delete: the old side resolves to the org');
is($dst->safe_psql($DB, "SELECT ash_replicant_decrypt(pan, 'acme.cards', 'pan') FROM acme.cards"),
	"$S pan1u", 'the encrypted column is still written, sealed for the tenant table');
AshTest::wait_status($dst, $_, 'healthy', undef, src => $src, name => "$_ healthy") for qw(c cs);

# what the function was handed, as it logged it: source names, no cvv, no pan
my @keys = AshTest::log_lines_like($dst, qr/tenant fn keys=/);
my %seen = map { /tenant fn keys=(\S*)/ ? ($1 => 1) : () } @keys;
ok(scalar(@keys) >= 10, 'the function ran for every side of every change and copied row (' . scalar(@keys) . ')');
is(join(' ', sort keys %seen), 'hm,id,nick,org', 'it was handed id, org, hm and nick (by source name), never cvv or pan');
my @hits = AshTenancy::grep_all_logs([$S], $dst);
is(scalar(@hits), 0, 'no plaintext of a skipped or encrypted column reaches the server log through the function')
  or diag join("\n", @hits[ 0 .. ($#hits < 5 ? $#hits : 5) ]);
done_testing();
