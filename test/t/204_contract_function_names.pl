# Contract manifest function names (docs/reasons.md#contract_incompatible): a
# mapping's tenant_function is recorded schema-qualified (pg_catalog's
# excepted), whatever search_path the binding, the census or the doctor runs
# under.
#   1. a tenant_function in public and one in another schema: the doctor
#      (SECURITY DEFINER, search_path pg_catalog, pg_temp) passes on the
#      healthy pipeline the worker bound under the database's path;
#   2. ALTER DATABASE ... SET search_path (the other schema put on the path,
#      then taken off again) and a restart: the binding admits it unchanged;
#   3. a manifest recorded with the old rendering (to_regprocedure's text
#      under the worker's path of the time: a function visible there
#      unqualified) is admitted and re-recorded qualified, doctor and
#      binding alike; so is one with a domain's name in the old rendering
#      too (test 196);
#   4. a real change (the tenant function replaced by a same-named function
#      of another schema) still fails the doctor and halts
#      contract_incompatible, recorded either way.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, q{CREATE TABLE ev (id integer PRIMARY KEY, org text, v integer);
	CREATE TABLE ew (id integer PRIMARY KEY, org text, v integer)});
q_dst(q{CREATE DOMAIN posnum AS integer CHECK (VALUE >= 0); ALTER TABLE ev ALTER v TYPE posnum});
$src->safe_psql($DB, q{ALTER TABLE ev REPLICA IDENTITY FULL; ALTER TABLE ew REPLICA IDENTITY FULL;
	CREATE PUBLICATION pub FOR TABLE ev, ew});
q_dst(q{CREATE FUNCTION tenant_of(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
		AS $$ SELECT lower(r->>'org') $$;
	CREATE SCHEMA tfs;
	CREATE FUNCTION tfs.tenant_by(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
		AS $$ SELECT lower(r->>'org') $$;
	CREATE SCHEMA ev_acme; CREATE TABLE ev_acme.ev (LIKE public.ev INCLUDING ALL);
	CREATE SCHEMA ew_acme; CREATE TABLE ew_acme.ew (LIKE public.ew INCLUDING ALL)});
AshTest::setup_pipeline($src, $dst, sink => 'sf', publication => 'pub', maps => [
	[ 'ev', tenant_function => 'tenant_of(jsonb)', tenant_strategy => 'context',
		tenant_schema_format => 'ev_%s' ],
	[ 'ew', tenant_function => 'tfs.tenant_by(jsonb)', tenant_strategy => 'context',
		tenant_schema_format => 'ew_%s' ] ]);
my $n = 0;
my $insert = sub {
	$n++;
	$src->safe_psql($DB, "INSERT INTO ev VALUES ($n, 'ACME', $n); INSERT INTO ew VALUES ($n, 'Acme', $n)");
};
my $applied = sub {
	return q_dst(q{SELECT (SELECT count(*) FROM ev_acme.ev) || '/' || (SELECT count(*) FROM ew_acme.ew)});
};
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'streams');
$insert->();
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'applied');
is($applied->(), '1/1', 'both tenant functions route');

my $slot = q{(SELECT slot_name FROM ash_replicant.sinks WHERE sink_name = 'sf')};
my $functions = sub {
	return q_dst("SELECT string_agg(r.key || '=' || (r.value->'tenant'->>'function'), ' ' ORDER BY r.key)"
		  . " FROM ash_replicant.checkpoints, jsonb_each(contract->'relations') r"
		  . " WHERE slot_name = $slot AND jsonb_typeof(r.value->'tenant') = 'object'");
};
my $doctor = sub {
	return q_dst(q{SELECT verdict || ' ' || coalesce(reason, '') FROM ash_replicant_doctor('sf')
		WHERE check_name = 'contract'});
};
my $restart = sub {
	AshTest::stop_sink($dst, 'sf');
	AshTest::wait_status($dst, 'sf', 'not_started', undef, src => $src, name => "stopped ($_[0])");
	AshTest::start_sink($dst, 'sf');
};
my $qualified = 'public.ev=public.tenant_of(jsonb) public.ew=tfs.tenant_by(jsonb)';

# 1. the doctor on the healthy pipeline
is($functions->(), $qualified, 'recorded tenant functions are qualified outside pg_catalog');
is($doctor->(), 'pass ', 'doctor: contract passes on the healthy pipeline');

# 2. the database's search_path changes, nothing else does
q_dst(q{ALTER DATABASE postgres SET search_path = "$user", tfs, public});
$restart->('tfs on the path');
$insert->();
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'applied after tfs came on the search_path');
AshTest::wait_status($dst, 'sf', 'healthy', undef, src => $src, name => 'healthy, path changed');
is($applied->(), '2/2', 'both tenant functions route, path changed');
is($doctor->(), 'pass ', 'doctor: contract passes, path changed');
q_dst(q{ALTER DATABASE postgres RESET search_path});
$restart->('path reset');
$insert->();
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'applied after the path was reset');
AshTest::wait_status($dst, 'sf', 'healthy', undef, src => $src, name => 'healthy, path reset');
is($doctor->(), 'pass ', 'doctor: contract passes after both path changes');
is($functions->(), $qualified, 'recorded tenant functions unchanged');
ok(!$dst->log_contains(qr/reason=contract_incompatible/), 'no contract_incompatible logged');

# 3. a manifest as the old rendering recorded it: each tenant function
# through the old expression under the worker's path of the time
# (pg_catalog pinned first, then a path with public and tfs on it).
# With a true argument, each target column's type too, through format_type
# under that path (as test 196 does).
my $legacy = sub {
	my $types = $_[0] ? 'true' : 'false';
	q_dst(qq{SET search_path = pg_catalog, "\$user", public, tfs;
	UPDATE ash_replicant.checkpoints c SET contract = l.doc,
	       contract_fingerprint = sha256(convert_to(l.doc::text, 'UTF8'))
	  FROM (SELECT jsonb_set(contract, '{relations}',
	               (SELECT jsonb_object_agg(e.key, CASE WHEN $types AND e.value ? 'columns'
	                         THEN jsonb_set(f.v, '{columns}',
	                              (SELECT jsonb_object_agg(k.key, jsonb_set(k.value, '{type}',
	                                        to_jsonb(format_type(a.atttypid, a.atttypmod))))
	                                 FROM jsonb_each(f.v->'columns') k
	                                 JOIN pg_attribute a ON a.attrelid = r.target
	                                                    AND a.attname = k.value->>'target'))
	                         ELSE f.v END)
	                  FROM jsonb_each(contract->'relations') e
	                  LEFT JOIN ash_replicant.resources r ON r.sink_name = 'sf'
	                   AND quote_ident(r.source_schema) || '.' || quote_ident(r.source_table) = e.key,
	                  LATERAL (SELECT CASE WHEN jsonb_typeof(e.value->'tenant') = 'object'
	                         THEN jsonb_set(e.value, '{tenant,function}', to_jsonb(
	                              CASE WHEN r.tenant_function::text ~ '^[0-9]+\$'
	                                THEN r.tenant_function::text
	                                ELSE coalesce(to_regprocedure(r.tenant_function::text)::text,
	                                              r.tenant_function::text) END))
	                         ELSE e.value END AS v) f)) AS doc
	          FROM ash_replicant.checkpoints WHERE slot_name = $slot) l
	 WHERE c.slot_name = $slot});
};
my $old = 'public.ev=tenant_of(jsonb) public.ew=tenant_by(jsonb)';
AshTest::stop_sink($dst, 'sf');
AshTest::wait_status($dst, 'sf', 'not_started', undef, src => $src, name => 'stopped (legacy)');
$legacy->();
is($functions->(), $old, 'the manifest holds the old rendering');
is($doctor->(), 'pass ', 'doctor: a manifest of the old rendering passes');
AshTest::start_sink($dst, 'sf');
$insert->();
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'the old rendering binds and applies');
AshTest::wait_status($dst, 'sf', 'healthy', undef, src => $src, name => 'healthy after the old rendering');
is($applied->(), '4/4', 'both tenant functions route after the old rendering');
is($functions->(), $qualified, 'the binding re-recorded the names qualified');
ok($dst->log_contains(qr/event=contract\.extended sink=sf change=function_names_qualified/),
	'the re-recording is logged as such');
ok(!$dst->log_contains(qr/reason=contract_incompatible/), 'still no contract_incompatible logged');

# ... and with the domain's name as the old rendering recorded it too
my $evtype = sub {
	return q_dst("SELECT contract->'relations'->'public.ev'->'columns'->'v'->>'type'"
		  . " FROM ash_replicant.checkpoints WHERE slot_name = $slot");
};
is($evtype->(), 'public.posnum', 'the domain is recorded qualified');
AshTest::stop_sink($dst, 'sf');
AshTest::wait_status($dst, 'sf', 'not_started', undef, src => $src, name => 'stopped (legacy, types)');
$legacy->(1);
is($functions->() . ' v=' . $evtype->(), "$old v=posnum", 'the manifest holds the old rendering of both');
is($doctor->(), 'pass ', 'doctor: a manifest of the old rendering of both passes');
AshTest::start_sink($dst, 'sf');
$insert->();
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'the old rendering of both binds and applies');
AshTest::wait_status($dst, 'sf', 'healthy', undef, src => $src, name => 'healthy after the old rendering of both');
is($functions->() . ' v=' . $evtype->(), "$qualified v=public.posnum", 'the binding re-recorded both qualified');
ok($dst->log_contains(
		qr/event=contract\.extended sink=sf change=function_names_qualified,type_names_qualified/),
	'the re-recording of both is logged as such');
ok(!$dst->log_contains(qr/reason=contract_incompatible/), 'no contract_incompatible logged yet');

# 4. a real change: public.tenant_of -> tfs.tenant_of, a function of the
# same name and arguments
my $remap = sub {
	q_dst("SELECT ash_replicant_map_table(sink_name => 'sf', target => 'ev'::regclass,"
		  . " tenant_function => '$_[0]', tenant_strategy => 'context', tenant_schema_format => 'ev_%s')");
};
AshTest::stop_sink($dst, 'sf');
AshTest::wait_status($dst, 'sf', 'not_started', undef, src => $src, name => 'stopped (change)');
q_dst(q{CREATE FUNCTION tfs.tenant_of(r jsonb) RETURNS text LANGUAGE sql IMMUTABLE
	AS $$ SELECT lower(r->>'org') $$});
$remap->('tfs.tenant_of(jsonb)');
is($doctor->(), 'fail contract_incompatible', 'doctor: a replaced tenant function fails (qualified manifest)');
$remap->('public.tenant_of(jsonb)');
is($doctor->(), 'pass ', 'doctor: passes once the function is mapped back');
$legacy->();
is($functions->(), $old,
	'the old rendering again, before the change (tfs.tenant_of shadowed by public)');
$remap->('tfs.tenant_of(jsonb)');
is($doctor->(), 'fail contract_incompatible',
	'doctor: a replaced tenant function fails (old rendering, the name held by two schemas)');
AshTest::start_sink($dst, 'sf');
AshTest::wait_status($dst, 'sf', 'misconfigured', 'contract_incompatible', src => $src,
	name => 'the binding halts contract_incompatible on the change');
done_testing();
