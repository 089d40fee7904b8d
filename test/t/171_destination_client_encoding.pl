# A destination whose configuration sets client_encoding (LATIN1 here, both
# databases UTF8): the source sends text in the destination database's
# encoding, and the worker's sessions now read it as such.  Before, the
# workers took the configured client encoding and converted the bytes a
# second time -- a snapshot's copy (text or binary) and a binary stream
# stored 'café' as 'cafÃ©', name and jsonb and array values too, status
# healthy (docs/operations.md, Type compatibility).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none', dst_conf => "client_encoding = 'LATIN1'\n");
my $cols = 'id integer PRIMARY KEY, s text, v varchar(20), j jsonb, a text[], n name';
my $row1 = q{(1, E'caf\u00e9', E'na\u00efve', E'{"k": "\u00e9"}', ARRAY[E'\u00fc'], E'gr\u00fc\u00df')};
my $row2 = q{(2, E'\u00e9t\u00e9', E'd\u00e9j\u00e0', E'{"k": "\u00e0"}', ARRAY[E'\u00f6'], E'na\u00efve')};
AshTest::both($src, $dst, "CREATE TABLE tb ($cols); CREATE TABLE tt ($cols); CREATE TABLE ts ($cols)");
$src->safe_psql($DB, "INSERT INTO tb VALUES $row1; INSERT INTO tt VALUES $row1;"
	  . " CREATE PUBLICATION pub_b FOR TABLE tb; CREATE PUBLICATION pub_t FOR TABLE tt; CREATE PUBLICATION pub_s FOR TABLE ts");

# bx: a v1 copy (binary) and a binary stream; tx: a v1 copy and a text stream; sx: a text stream
AshTest::setup_pipeline($src, $dst, sink => 'bx', publication => 'pub_b', maps => [ ['tb'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1', binary_transfer => true");
AshTest::setup_pipeline($src, $dst, sink => 'tx', publication => 'pub_t', maps => [ ['tt'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::setup_pipeline($src, $dst, sink => 'sx', publication => 'pub_s', maps => [ ['ts'] ]);
AshTest::wait_slot_consistent($src, $dst, $_) for qw(bx tx sx);
$src->safe_psql($DB, "INSERT INTO tb VALUES $row2; INSERT INTO tt VALUES $row2; INSERT INTO ts VALUES $row1, $row2");
my %sink_of = (tb => 'bx', tt => 'tx', ts => 'sx');
for my $t (qw(tb tt ts))
{
	my $sink = $sink_of{$t};
	AshTest::wait_caught_up($src, $dst, $sink, name => "$t: caught up");
	my $q = "SELECT string_agg(concat_ws('|', id, s, v, j, a, n) || ' ' || encode(convert_to(s, 'UTF8'), 'hex'), ' ' ORDER BY id) FROM $t";
	is($dst->safe_psql($DB, "SET client_encoding = 'UTF8'; $q"), $src->safe_psql($DB, $q), "$t: mirror equals source, byte for byte");
	is($dst->safe_psql($DB, "SELECT verdict FROM ash_replicant_verify('$sink') WHERE source_table = '$t'"), 'match',
		"$t: verify matches");
}

done_testing();
