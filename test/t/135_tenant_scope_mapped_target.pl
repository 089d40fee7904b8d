# Context tenancy writes a tenant's rows into the template's name in the
# tenant's schema (docs/reasons.md#tenant_scope_invalid).  The source data
# picks that schema: a tenant naming the schema of another mapping's target
# of the template's name (tenant 'public', template tmpl.docs, public.docs
# the mirror of other.docs) wrote into that mirror, overwriting its rows,
# healthy (found by an exploratory test).  Such a table is no tenant scope:
# the pipeline halts tenant_scope_invalid with nothing of the transaction
# committed, and the other mirror stays equal to its source.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $DB = $AshTest::DB;
my $sink = 'ot';
my $SENTINEL = 'SENTINEL_SCOPE_b71e4a';

$src->safe_psql($DB, q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text NOT NULL, title text);
ALTER TABLE docs REPLICA IDENTITY FULL;
CREATE SCHEMA other;
CREATE TABLE other.docs (id integer PRIMARY KEY, tenant text NOT NULL, title text);
CREATE PUBLICATION pub_ot FOR TABLE docs, other.docs;
INSERT INTO other.docs VALUES (1, 'x', 'other row 1'), (2, 'x', 'other row 2');
});
$dst->safe_psql($DB, q{
CREATE SCHEMA tmpl;
CREATE TABLE tmpl.docs (id integer PRIMARY KEY, tenant text NOT NULL, title text);
CREATE SCHEMA acme;
CREATE TABLE acme.docs (LIKE tmpl.docs INCLUDING ALL);
CREATE TABLE public.docs (id integer PRIMARY KEY, tenant text NOT NULL, title text);
});
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_ot',
	maps => [
		[ 'tmpl.docs', source_schema => 'public', source_table => 'docs', tenant_column => 'tenant',
			tenant_strategy => 'context' ],
		[ 'public.docs', source_schema => 'other', source_table => 'docs', on_truncate => 'mirror' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::wait_caught_up($src, $dst, $sink), 'copied and streaming');
my $other = q{SELECT string_agg(id || ':' || tenant || ':' || title, ',' ORDER BY id) FROM %s};
is($dst->safe_psql($DB, sprintf($other, 'public.docs')), $src->safe_psql($DB, sprintf($other, 'other.docs')),
	'other.docs mirrored');

my $facts = AshTest::checkpoint_facts($dst, $sink);
$src->safe_psql($DB, qq{INSERT INTO docs VALUES (1, 'acme', 'acme 1'), (2, 'public', '$SENTINEL')});
AshTest::wait_status($dst, $sink, 'halted', 'tenant_scope_invalid',
	name => 'a tenant naming the schema of another mapping\'s target: halted tenant_scope_invalid');
is($dst->safe_psql($DB, sprintf($other, 'public.docs')), $src->safe_psql($DB, sprintf($other, 'other.docs')),
	'the other mapping\'s mirror still equals its source');
is($dst->safe_psql($DB, "SELECT count(*) FROM acme.docs"), '0', 'nothing of the transaction committed');
is(AshTest::checkpoint_facts($dst, $sink), $facts, 'the checkpoint did not move');
ok(scalar(AshTest::log_lines_like($dst, qr/reason=tenant_scope_invalid .*tmpl\.docs/)),
	'the halt names the template');
my @hits = AshTest::grep_logs_for($SENTINEL, $src, $dst);
is(scalar(@hits), 0, 'no value in any server log');

done_testing();
