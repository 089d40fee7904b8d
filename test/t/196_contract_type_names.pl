# Contract manifest type names (docs/reasons.md#contract_incompatible): a
# target column's type is recorded schema-qualified (pg_catalog's excepted),
# whatever search_path the binding, the census or the doctor runs under.
#   1. a domain and an enum in public, a domain in another schema: the
#      doctor (SECURITY DEFINER, search_path pg_catalog, pg_temp) passes on
#      the healthy pipeline the worker bound under the database's path;
#   2. ALTER DATABASE ... SET search_path (the other schema taken off the
#      path, then put back) and a restart: the binding admits it unchanged;
#   3. a manifest recorded with the old rendering (format_type under the
#      worker's path of the time: names visible there unqualified) is
#      admitted and re-recorded qualified, doctor and binding alike;
#   4. a real retype (to a same-named domain of another schema) still fails
#      the doctor and halts contract_incompatible, recorded either way.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

q_dst(q{CREATE DOMAIN posnum AS numeric CHECK (VALUE >= 0);
	CREATE SCHEMA appd;
	CREATE DOMAIN appd.apnum AS numeric CHECK (VALUE >= 0);
	ALTER DATABASE postgres SET search_path = "$user", public, appd});
AshTest::both($src, $dst, q{CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
	CREATE TABLE t (id integer PRIMARY KEY, n numeric, a numeric, m mood)});
q_dst(q{ALTER TABLE t ALTER n TYPE posnum, ALTER a TYPE appd.apnum});
$src->safe_psql($DB, q{CREATE PUBLICATION pub FOR TABLE t});
AshTest::setup_pipeline($src, $dst, sink => 'sp', publication => 'pub', maps => [ ['t'] ]);
$src->safe_psql($DB, q{INSERT INTO t VALUES (1, 1, 1, 'ok')});
ok(AshTest::wait_caught_up($src, $dst, 'sp'), 'streams');

my $slot = q{(SELECT slot_name FROM ash_replicant.sinks WHERE sink_name = 'sp')};
my $types = sub {
	return q_dst("SELECT string_agg(e.key || '=' || (e.value->>'type'), ' ' ORDER BY e.key)"
		  . " FROM ash_replicant.checkpoints, jsonb_each(contract->'relations'->'public.t'->'columns') e"
		  . " WHERE slot_name = $slot");
};
my $doctor = sub {
	return q_dst(q{SELECT verdict || ' ' || coalesce(reason, '') FROM ash_replicant_doctor('sp')
		WHERE check_name = 'contract'});
};
my $restart = sub {
	AshTest::stop_sink($dst, 'sp');
	AshTest::wait_status($dst, 'sp', 'not_started', undef, src => $src, name => "stopped ($_[0])");
	AshTest::start_sink($dst, 'sp');
};
my $qualified = 'a=appd.apnum id=integer m=public.mood n=public.posnum';

# 1. the doctor on the healthy pipeline
is($types->(), $qualified, 'recorded type names are qualified outside pg_catalog');
is($doctor->(), 'pass ', 'doctor: contract passes on the healthy pipeline');

# 2. the database's search_path changes, nothing else does
q_dst(q{ALTER DATABASE postgres RESET search_path});
$restart->('path reset');
$src->safe_psql($DB, q{INSERT INTO t VALUES (2, 2, 2, 'sad')});
ok(AshTest::wait_caught_up($src, $dst, 'sp'), 'applied after appd left the search_path');
AshTest::wait_status($dst, 'sp', 'healthy', undef, src => $src, name => 'healthy, path reset');
q_dst(q{ALTER DATABASE postgres SET search_path = "$user", public, appd});
$restart->('path set again');
$src->safe_psql($DB, q{INSERT INTO t VALUES (3, 3, 3, 'happy')});
ok(AshTest::wait_caught_up($src, $dst, 'sp'), 'applied after appd came back on the search_path');
AshTest::wait_status($dst, 'sp', 'healthy', undef, src => $src, name => 'healthy, path set again');
is($doctor->(), 'pass ', 'doctor: contract passes after both path changes');
ok(!$dst->log_contains(qr/reason=contract_incompatible/), 'no contract_incompatible logged');

# 3. a manifest as the old rendering recorded it: each type through
# format_type under the worker's path of the time (pg_catalog pinned first,
# then the database's, appd on it); the path is the default one now.
my $legacy = sub {
	q_dst(qq{SET search_path = pg_catalog, "\$user", public, appd;
	UPDATE ash_replicant.checkpoints c SET contract = l.doc,
	       contract_fingerprint = sha256(convert_to(l.doc::text, 'UTF8'))
	  FROM (SELECT jsonb_set(contract, '{relations,public.t,columns}',
	               (SELECT jsonb_object_agg(e.key, jsonb_set(e.value, '{type}',
	                         to_jsonb(format_type(a.atttypid, a.atttypmod))))
	                  FROM jsonb_each(contract->'relations'->'public.t'->'columns') e
	                  JOIN pg_attribute a ON a.attrelid = 'public.t'::regclass
	                                     AND a.attname = e.value->>'target')) AS doc
	          FROM ash_replicant.checkpoints WHERE slot_name = $slot) l
	 WHERE c.slot_name = $slot});
};
AshTest::stop_sink($dst, 'sp');
AshTest::wait_status($dst, 'sp', 'not_started', undef, src => $src, name => 'stopped (legacy)');
q_dst(q{ALTER DATABASE postgres RESET search_path});
$legacy->();
is($types->(), 'a=apnum id=integer m=mood n=posnum', 'the manifest holds the old rendering');
is($doctor->(), 'pass ', 'doctor: a manifest of the old rendering passes');
AshTest::start_sink($dst, 'sp');
$src->safe_psql($DB, q{INSERT INTO t VALUES (4, 4, 4, 'ok')});
ok(AshTest::wait_caught_up($src, $dst, 'sp'), 'the old rendering binds and applies');
AshTest::wait_status($dst, 'sp', 'healthy', undef, src => $src, name => 'healthy after the old rendering');
is($types->(), $qualified, 'the binding re-recorded the names qualified');
ok($dst->log_contains(qr/event=contract\.extended sink=sp change=type_names_qualified/),
	'the re-recording is logged as such');
ok(!$dst->log_contains(qr/reason=contract_incompatible/), 'still no contract_incompatible logged');

# 4. a real retype: public.posnum -> appd.posnum, a domain of the same name
AshTest::stop_sink($dst, 'sp');
AshTest::wait_status($dst, 'sp', 'not_started', undef, src => $src, name => 'stopped (retype)');
q_dst(q{CREATE DOMAIN appd.posnum AS numeric CHECK (VALUE >= 0)});
q_dst(q{ALTER TABLE t ALTER n TYPE appd.posnum});
is($doctor->(), 'fail contract_incompatible', 'doctor: a retyped column fails (qualified manifest)');
q_dst(q{ALTER TABLE t ALTER n TYPE public.posnum});
$legacy->();
is($types->(), 'a=apnum id=integer m=mood n=posnum', 'the old rendering again, before the retype');
q_dst(q{ALTER TABLE t ALTER n TYPE appd.posnum});
is($doctor->(), 'fail contract_incompatible',
	'doctor: a retyped column fails (old rendering, the name held by two schemas)');
AshTest::start_sink($dst, 'sp');
AshTest::wait_status($dst, 'sp', 'misconfigured', 'contract_incompatible', src => $src,
	name => 'the binding halts contract_incompatible on the retype');
done_testing();
