# Values that compare equal but differ, and destination settings that change
# how a value's text is read (docs/operations.md, "Values as text").
#
#  equal   a stale mirror row under a key equal to the source's but not the
#          same value (numeric 1.0 / 1.00, float8 0 / -0, interval '1 day' /
#          '24 hours'): a v1 snapshot and a streamed insert leave the
#          source's key (before: the mirror kept its own, healthy)
#  read    a destination with array_nulls = off and xmloption = document:
#          a NULL array element stays NULL in a streamed row (before: the
#          string 'NULL', healthy), an XML content value is mirrored
#          (before: halted apply_failed 2200M), copied and streamed
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "array_nulls = off\nxmloption = document\n");

# text forms at both ends: the same value reads the same
sub same
{
	my ($t, $name) = @_;
	my $sql = "SET extra_float_digits = 3; SET IntervalStyle = postgres; SELECT string_agg(x::text, ' | ' ORDER BY x::text) FROM $t x";
	is($dst->safe_psql($DB, $sql), $src->safe_psql($DB, $sql), $name);
}

AshTest::both($src, $dst, q{
CREATE TABLE kn (id numeric PRIMARY KEY, v text);
CREATE TABLE kf (id float8 PRIMARY KEY, v text);
CREATE TABLE ki (id interval PRIMARY KEY, v text);
CREATE TABLE sn (id numeric PRIMARY KEY, v text);
CREATE TABLE an (id int PRIMARY KEY, a text[]);
CREATE TABLE xm (id int PRIMARY KEY, x xml);
});
$src->safe_psql($DB, q{
INSERT INTO kn VALUES (1.00, 'fresh'), (2, 'two');
INSERT INTO kf VALUES ('-0', 'fresh');
INSERT INTO ki VALUES ('24 hours', 'fresh');
INSERT INTO an VALUES (1, '{NULL,"NULL",x}');
INSERT INTO xm VALUES (1, 'fragment <a/> text');
CREATE PUBLICATION pub_k FOR TABLE kn, kf, ki;
CREATE PUBLICATION pub_s FOR TABLE sn;
CREATE PUBLICATION pub_r FOR TABLE an, xm;
});
$dst->safe_psql($DB, q{
INSERT INTO kn VALUES (1.0, 'stale');
INSERT INTO kf VALUES ('0', 'stale');
INSERT INTO ki VALUES ('1 day', 'stale');
INSERT INTO sn VALUES (5.0, 'stale');
});

# equal: a snapshot over the stale rows, and a streamed insert
AshTest::setup_pipeline($src, $dst, sink => 'eq', publication => 'pub_k',
	maps => [ ['kn'], ['kf'], ['ki'] ], pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'eq', 'healthy', undef, src => $src, name => 'equal: the snapshot ends healthy');
AshTest::wait_caught_up($src, $dst, 'eq', name => 'equal: caught up');
same($_, "equal: the snapshot leaves the source's key in $_") for qw(kn kf ki);
AshTest::setup_pipeline($src, $dst, sink => 'es', publication => 'pub_s', maps => [ ['sn'] ]);
AshTest::wait_slot_consistent($src, $dst, 'es');
$src->safe_psql($DB, "INSERT INTO sn VALUES (5.000, 'fresh')");
AshTest::wait_caught_up($src, $dst, 'es', name => 'equal: streamed');
same('sn', "equal: a streamed insert leaves the source's key");

# read: the destination's own input settings do not apply
AshTest::setup_pipeline($src, $dst, sink => 'rd', publication => 'pub_r',
	maps => [ ['an'], ['xm'] ], pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'rd', 'healthy', undef, src => $src, name => 'read: the snapshot ends healthy');
AshTest::wait_caught_up($src, $dst, 'rd', name => 'read: copied');
$src->safe_psql($DB, q{
INSERT INTO an VALUES (2, '{NULL,"NULL",x}');
INSERT INTO xm VALUES (2, 'fragment <a/> text');
});
AshTest::wait_caught_up($src, $dst, 'rd', name => 'read: streamed');
is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || (a[1] IS NULL) || ':' || (a[2] IS NULL), ',' ORDER BY id) FROM an"),
	'1:true:false,2:true:false', 'read: a NULL element stays NULL, a "NULL" string stays a string, copied and streamed');
same('an', 'read: the arrays equal the source\'s');
same('xm', 'read: the XML content values equal the source\'s');
is((AshTest::status_row($dst, 'rd') // {})->{state}, 'healthy', 'read: healthy');

done_testing();
