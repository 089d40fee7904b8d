# ash_replicant_verify compares what the source holds with what the mirror
# holds as the stream makes it: the source's text of a value (its output
# function) read by the target type's input (docs/operations.md,
# #verifying-completeness).  Found by an exploratory test:
#
#   forms    a string target fed from bool, inet or char(n), as a value and
#            as a key: the source's digest used the type's cast to text
#            ('true' for 't', '/32' added, the padding dropped), not its
#            output function, and said mismatch over an exact mirror:
#            now match; a hand edit still mismatches
#   cut      a key the target holds as varchar(3): the source's 'abcd' was
#            cast to varchar(3), cut to 'abc' without an error, and a mirror
#            holding 'abc' matched: now verify_keys_differ
#   unfit    a source value its target type cannot hold (numeric(10,2)
#            12345.67 into numeric(5,2)): the digest's cast failed and the
#            whole verify was refused source_probe_failed: now that table is
#            verify_values_differ, the others judged
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');

$src->safe_psql($DB, q{
CREATE TABLE f (id int PRIMARY KEY, b bool, i inet, n cidr, c char(5), c4 char(4));
CREATE TABLE tk (k char(4) PRIMARY KEY, v int);
CREATE TABLE tb (k bool PRIMARY KEY, v int);
CREATE TABLE kv (k text PRIMARY KEY);
CREATE TABLE nm (id int PRIMARY KEY, amt numeric(10,2));
INSERT INTO f VALUES (1, true, '10.0.0.1', '10.1.0.0/16', 'ab', 'x'), (2, false, '::1', '::/0', 'abcde', NULL),
	(3, NULL, NULL, NULL, NULL, 'wxyz');
INSERT INTO tk VALUES ('ab', 1), ('abcd', 2);
INSERT INTO tb VALUES (true, 1), (false, 0);
INSERT INTO kv VALUES ('abcd');
INSERT INTO nm VALUES (1, 12345.67);
CREATE PUBLICATION pub_forms FOR TABLE f, tk, tb;
CREATE PUBLICATION pub_cut FOR TABLE kv, nm;
});
$dst->safe_psql($DB, q{
CREATE TABLE f (id int PRIMARY KEY, b text, i text, n varchar(40), c text, c4 varchar(10));
CREATE TABLE tk (k text PRIMARY KEY, v int);
CREATE TABLE tb (k text PRIMARY KEY, v int);
CREATE TABLE kv (k varchar(3) PRIMARY KEY);
INSERT INTO kv VALUES ('abc');
CREATE TABLE nm (id int PRIMARY KEY, amt numeric(5,2));
INSERT INTO nm VALUES (1, 123.45);
});

sub verdicts
{
	my ($sink) = @_;
	return $dst->safe_psql($DB, "SELECT string_agg(source_table || '=' || verdict || '/' || coalesce(reason, '-'), ' '"
		  . " ORDER BY source_table) FROM ash_replicant_verify('$sink') WHERE source_table <> 'ash_marker_$sink'");
}

# forms
AshTest::setup_pipeline($src, $dst, sink => 'forms', publication => 'pub_forms', maps => [ ['f'], ['tk'], ['tb'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'forms', 'healthy', undef, src => $src, name => 'forms: copied');
$src->safe_psql($DB, "INSERT INTO f VALUES (4, true, '192.168.0.7', '192.168.0.0/24', 'z', 'zz');"
	  . " UPDATE tk SET v = 3 WHERE k = 'ab'");
AshTest::wait_caught_up($src, $dst, 'forms', name => 'forms: streamed');
is($dst->safe_psql($DB, "SELECT b || ',' || i || ',' || n || ',[' || c || '],[' || c4 || ']' FROM f WHERE id = 1"),
	't,10.0.0.1,10.1.0.0/16,[ab   ],[x   ]', 'forms: the mirror holds the output functions\' text');
is(verdicts('forms'), 'f=match/- tb=match/- tk=match/-', 'forms: an exact mirror matches');
$dst->safe_psql($DB, "SET session_replication_role = replica; UPDATE f SET b = 'true' WHERE id = 1");
is(verdicts('forms'), 'f=mismatch/verify_values_differ tb=match/- tk=match/-', 'forms: a value edited by hand differs');

# cut
AshTest::setup_pipeline($src, $dst, sink => 'cut', publication => 'pub_cut', maps => [ ['kv'], ['nm'] ]);
AshTest::wait_caught_up($src, $dst, 'cut', name => 'cut: streams');
is(verdicts('cut'), 'kv=mismatch/verify_keys_differ nm=mismatch/verify_values_differ',
	'cut: a key the mirror holds cut short differs; a source value its target cannot hold differs');

done_testing();
