# ash_replicant_verify over two value shapes an exploratory test found it
# misjudged (docs/operations.md, #verifying-completeness).
#
#   xml      an xml value with an XML declaration: the stream and the copy
#            send its output function's text, which drops the declaration,
#            and the mirror holds '<a/>'; verify rendered the source by
#            xml's cast to text, which keeps it, and said
#            verify_values_differ over an exact mirror (xml into xml and
#            into text, copied and streamed): now match; a hand edit
#            still mismatches
#   tenant   a shared target whose source tenant value its target column
#            cannot hold (numeric(10,2) 12345.67 into numeric(5,2)): the
#            tenants' read repeated the failing cast and the whole verify
#            was refused source_probe_failed: now that table is
#            verify_values_differ (its mirror rows not counted: which rows
#            of the shared target are its tenants' is not known) and the
#            sink's other table is judged
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');

sub verdicts
{
	my ($sink) = @_;
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT string_agg(source_table || '=' || verdict || '/' || coalesce(reason, '-') || '/'"
		  . " || coalesce(source_rows::text, '?') || ':' || coalesce(mirror_rows::text, '?'), ' '"
		  . " ORDER BY source_table) FROM ash_replicant_verify('$sink') WHERE source_table <> 'ash_marker_$sink'");
	return $rc == 0 ? $out : "ERROR: $err";
}

# xml
$src->safe_psql($DB, q{
CREATE TABLE txx (id int PRIMARY KEY, x xml);
CREATE TABLE txt (id int PRIMARY KEY, x xml);
INSERT INTO txx VALUES (1, '<?xml version="1.0"?><a/>'), (2, '<b/>');
INSERT INTO txt VALUES (1, '<?xml version="1.0"?><a/>'), (2, '<b/>');
CREATE PUBLICATION pub_x FOR TABLE txx, txt;
});
$dst->safe_psql($DB, q{
CREATE TABLE txx (id int PRIMARY KEY, x xml);
CREATE TABLE txt (id int PRIMARY KEY, x text);
});
AshTest::setup_pipeline($src, $dst, sink => 'x', publication => 'pub_x',
	maps => [ ['txx'], ['txt'] ], pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'x', 'healthy', undef, src => $src, name => 'xml: copied');
$src->safe_psql($DB, q{INSERT INTO txx VALUES (3, '<?xml version="1.0"?><c/>');
	INSERT INTO txt VALUES (3, '<?xml version="1.0"?><c/>')});
ok(AshTest::wait_caught_up($src, $dst, 'x'), 'xml: streamed');
is($dst->safe_psql($DB, 'SELECT string_agg(x, \',\' ORDER BY id) FROM txt'), '<a/>,<b/>,<c/>',
	'xml: the mirror holds the output text, the declaration dropped');
is(verdicts('x'), 'txt=match/-/3:3 txx=match/-/3:3',
	'xml: exact mirrors match, copied and streamed (before: verify_values_differ)');
$dst->safe_psql($DB, q{UPDATE txt SET x = '<d/>' WHERE id = 3});
is(verdicts('x'), 'txt=mismatch/verify_values_differ/3:3 txx=match/-/3:3', 'xml: a hand edit still mismatches');
$dst->safe_psql($DB, q{UPDATE txt SET x = '<c/>' WHERE id = 3});

# tenant
$src->safe_psql($DB, q{
CREATE TABLE sa (id int PRIMARY KEY, tenant numeric(10,2) NOT NULL, val text);
CREATE TABLE sb (id int PRIMARY KEY, tenant numeric(10,2) NOT NULL, val text);
CREATE TABLE other (id int PRIMARY KEY, v text);
ALTER TABLE sa REPLICA IDENTITY FULL;
ALTER TABLE sb REPLICA IDENTITY FULL;
INSERT INTO sa VALUES (1, 1.00, 'a'), (2, 12345.67, 'b');
INSERT INTO sb VALUES (101, 2.00, 'x');
INSERT INTO other VALUES (1, 'o');
CREATE PUBLICATION pub_a FOR TABLE sa, other;
CREATE PUBLICATION pub_b FOR TABLE sb;
});
# go-forward: the rows that fit are there, the unfit one cannot be
$dst->safe_psql($DB, q{
CREATE TABLE shared (id int PRIMARY KEY, tenant numeric(5,2) NOT NULL, val text);
INSERT INTO shared VALUES (1, 1.00, 'a'), (101, 2.00, 'x');
CREATE TABLE other (id int PRIMARY KEY, v text);
INSERT INTO other VALUES (1, 'o');
});
my @ten = (tenant_column => 'tenant', tenant_strategy => 'attribute');
AshTest::setup_pipeline($src, $dst, sink => 'sa', publication => 'pub_a',
	maps => [ [ 'shared', source_table => 'sa', @ten ], ['other'] ]);
AshTest::setup_pipeline($src, $dst, sink => 'sb', publication => 'pub_b',
	maps => [ [ 'shared', source_table => 'sb', @ten ] ]);
ok(AshTest::wait_caught_up($src, $dst, $_), "tenant: $_ streams") for qw(sa sb);
is(verdicts('sb'), 'sb=match/-/1:1', 'tenant: the other sink of the shared target matches');
is(verdicts('sa'), 'other=match/-/1:1 sa=mismatch/verify_values_differ/2:?',
	'tenant: an unfit source tenant value: that table differs, the other is judged (before: refused)');
is(scalar(AshTest::grep_logs_for('12345.67', $src, $dst)), 0, 'tenant: the unfit value is in no log');
done_testing();
