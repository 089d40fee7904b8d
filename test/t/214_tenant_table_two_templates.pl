# Context tenancy: a tenant's table is the template's name in schema
# format(tenant_schema_format, tenant).  Two context mappings whose
# templates share a table name (public.docs and other.docs, both '%s')
# resolve tenant t1 of both source tables to t1.docs: the rows of one
# overwrote and deleted the other's, healthy (found by QA).  The same with
# formats whose names overlap ('a_%s' and '%s': tenant t1 of one and a_t1 of
# the other).  ash_replicant_map_table refuses such a pair (config_invalid,
# nothing stored); registrations planted from before the rule are named by
# doctor's destination_mappings, and such a table is written by no mapping:
# the pipeline halts tenant_scope_invalid naming the mapping's target,
# nothing of the transaction committed, the checkpoint unchanged, no value
# in any log.  Formats that cannot meet ('a_%s' and 'b_%s') register and
# mirror.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $S1 = AshTenancy::sentinel();
my $S2 = AshTenancy::sentinel();

my $ddl = q{
CREATE SCHEMA other;
CREATE TABLE public.docs (id integer PRIMARY KEY, tenant text, title text);
CREATE TABLE other.docs (id integer PRIMARY KEY, tenant text, title text);
CREATE TABLE public.notes (id integer PRIMARY KEY, tenant text, title text);
CREATE TABLE other.notes (id integer PRIMARY KEY, tenant text, title text);
CREATE TABLE public.items (id integer PRIMARY KEY, tenant text, title text);
CREATE TABLE other.items (id integer PRIMARY KEY, tenant text, title text);
};
$src->safe_psql('postgres', $ddl . q{
ALTER TABLE public.docs REPLICA IDENTITY FULL;
ALTER TABLE other.docs REPLICA IDENTITY FULL;
ALTER TABLE public.notes REPLICA IDENTITY FULL;
ALTER TABLE other.notes REPLICA IDENTITY FULL;
ALTER TABLE public.items REPLICA IDENTITY FULL;
ALTER TABLE other.items REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_docs FOR TABLE public.docs, other.docs;
CREATE PUBLICATION pub_notes FOR TABLE public.notes, other.notes;
CREATE PUBLICATION pub_items FOR TABLE public.items, other.items;
});
$dst->safe_psql('postgres', $ddl . q{
CREATE SCHEMA t1;
CREATE TABLE t1.docs (LIKE public.docs INCLUDING ALL);
CREATE SCHEMA a_t1;
CREATE TABLE a_t1.notes (LIKE public.notes INCLUDING ALL);
CREATE TABLE a_t1.items (LIKE public.items INCLUDING ALL);
CREATE SCHEMA b_t1;
CREATE TABLE b_t1.items (LIKE public.items INCLUDING ALL);
});
my @ctx = (tenant_column => 'tenant', tenant_strategy => 'context');

# registration refuses a second template of the name whose format can meet
sub map_sql
{
	my ($sink, $target, $format) = @_;
	return "SELECT ash_replicant_map_table(sink_name => '$sink', target => '$target'::regclass,"
	  . " tenant_column => 'tenant', tenant_strategy => 'context', tenant_schema_format => '$format')";
}
$dst->safe_psql('postgres', q{SELECT ash_replicant_create_sink(sink_name => 'probe', slot_name => 'probe')});
for my $case ([ 'public.docs', '%s', 'other.docs', '%s' ], [ 'public.notes', 'a_%s', 'other.notes', '%s' ],
	[ 'public.docs', 'x%s', 'other.docs', '%sy' ], [ 'public.notes', '%s_b', 'other.notes', '%s' ])
{
	my ($t1, $f1, $t2, $f2) = @$case;
	$dst->safe_psql('postgres', map_sql('probe', $t1, $f1));
	my ($rc, $out, $err) = $dst->psql('postgres', map_sql('probe', $t2, $f2));
	like($err, qr/mapping rejected: config_invalid .*can be one table/, "$t1 '$f1' and $t2 '$f2' refused");
	is($dst->safe_psql('postgres', "SELECT count(*) FROM ash_replicant.resources WHERE sink_name = 'probe' AND target = '$t2'::regclass"),
		'0', "... nothing stored");
	$dst->safe_psql('postgres', "SELECT ash_replicant_unmap_table('probe', '$t1'::regclass)");
}
$dst->safe_psql('postgres', map_sql('probe', 'public.docs', 'a_%s') . '; ' . map_sql('probe', 'other.docs', 'b_%s'));
is($dst->safe_psql('postgres', "SELECT count(*) FROM ash_replicant.resources WHERE sink_name = 'probe'"), '2',
	"formats that cannot meet ('a_%s', 'b_%s') registered");
$dst->safe_psql('postgres', q{SELECT ash_replicant_drop_sink('probe')});

# registrations from before the rule (planted): doctor names them, the
# worker halts at the first write to such a table
AshTest::setup_pipeline($src, $dst, sink => 'two_docs', publication => 'pub_docs', start => 0,
	maps => [ [ 'public.docs', @ctx, tenant_schema_format => 'p_%s' ], [ 'other.docs', @ctx, tenant_schema_format => 'q_%s' ] ]);
AshTest::setup_pipeline($src, $dst, sink => 'two_notes', publication => 'pub_notes', start => 0,
	maps => [ [ 'public.notes', @ctx, tenant_schema_format => 'a_%s' ], [ 'other.notes', @ctx, tenant_schema_format => 'q_%s' ] ]);
$dst->safe_psql('postgres', q{UPDATE ash_replicant.resources SET tenant_schema_format = '%s' WHERE target IN ('public.docs'::regclass, 'other.docs'::regclass, 'other.notes'::regclass)});
for my $s ('two_docs', 'two_notes')
{
	like($dst->safe_psql('postgres', "SELECT verdict || '/' || reason FROM ash_replicant_doctor('$s') WHERE check_name = 'destination_mappings'"),
		qr{^fail/config_invalid$}, "$s: doctor's destination_mappings names the planted pair");
	AshTest::start_sink($dst, $s);
}
AshTest::setup_pipeline($src, $dst, sink => 'two_items', publication => 'pub_items',
	maps => [ [ 'public.items', @ctx, tenant_schema_format => 'a_%s' ],
		[ 'other.items', @ctx, tenant_schema_format => 'b_%s' ] ]);
for my $s ('two_docs', 'two_notes', 'two_items')
{
	AshTest::wait_caught_up($src, $dst, $s) or BAIL_OUT("$s never streamed");
}

# '%s' and '%s': t1.docs is a tenant table of both
my $before = AshTenancy::state($dst, 'two_docs', 't1.docs');
$src->safe_psql('postgres', qq{INSERT INTO public.docs VALUES (1, 't1', '$S1')});
AshTenancy::expect_halt($src, $dst, 'two_docs', 'tenant_scope_invalid', $before,
	label => 'two templates, one tenant table');
ok(scalar(AshTest::log_lines_like($dst, qr/reason=tenant_scope_invalid .*public\.docs/)),
	'the halt names the mapping\'s target');

# 'a_%s' and '%s': a_t1.notes is tenant t1's of public.notes, a_t1's of other.notes
$before = AshTenancy::state($dst, 'two_notes', 'a_t1.notes');
$src->safe_psql('postgres', qq{INSERT INTO other.notes VALUES (1, 'a_t1', '$S2')});
AshTenancy::expect_halt($src, $dst, 'two_notes', 'tenant_scope_invalid', $before,
	label => 'overlapping formats');
ok(scalar(AshTest::log_lines_like($dst, qr/reason=tenant_scope_invalid .*other\.notes/)),
	'the halt names the other mapping\'s target');

# 'a_%s' and 'b_%s' never meet: both mirror
$src->safe_psql('postgres', q{INSERT INTO public.items VALUES (1, 't1', 'pi'); INSERT INTO other.items VALUES (1, 't1', 'oi')});
AshTest::wait_caught_up($src, $dst, 'two_items');
is(AshTest::status_row($dst, 'two_items')->{state}, 'healthy', 'formats that cannot meet: healthy');
AshTenancy::assert_same($src, 'public.items', undef, $dst, 'a_t1.items', 'public.items mirrored into a_t1.items');
AshTenancy::assert_same($src, 'other.items', undef, $dst, 'b_t1.items', 'other.items mirrored into b_t1.items');

AshTenancy::assert_no_leak([ $S1, $S2 ], [ $src, $dst ], [], 'sentinels');
done_testing();
