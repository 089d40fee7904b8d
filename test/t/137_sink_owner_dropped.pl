# The sink owner's role dropped under a running pipeline (REASSIGN OWNED,
# DROP OWNED, DROP ROLE: nothing of ours depends on the role): the worker
# went on writing as the dropped role's OID, with PUBLIC's rights, healthy
# (found by an exploratory test).  Now the pipeline halts
# destination_owner_invalid before it writes anything more.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $DB = $AshTest::DB;

AshTest::both($src, $dst, "CREATE TABLE t (id integer PRIMARY KEY, v text)");
$src->safe_psql($DB, "CREATE PUBLICATION pub FOR TABLE t");
$dst->safe_psql($DB, "CREATE ROLE own; GRANT SELECT, INSERT, UPDATE, DELETE ON t TO PUBLIC");
AshTest::setup_pipeline($src, $dst, sink => 'od', publication => 'pub', maps => [ ['t'] ], start => 0);
$dst->safe_psql($DB, "GRANT SELECT, INSERT, UPDATE, DELETE ON ash_marker_od TO PUBLIC;"
	  . " SELECT ash_replicant_alter_sink('od', owner => 'own')");
AshTest::start_sink($dst, 'od');
$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('od', '60s')");
$src->safe_psql($DB, "INSERT INTO t VALUES (1, 'one')");
ok(AshTest::wait_caught_up($src, $dst, 'od'), 'written as the sink owner');

$dst->safe_psql($DB, "REASSIGN OWNED BY own TO CURRENT_USER; DROP OWNED BY own; DROP ROLE own");
$src->safe_psql($DB, "INSERT INTO t VALUES (2, 'two')");
AshTest::wait_status($dst, 'od', 'misconfigured', 'destination_owner_invalid',
	name => 'the sink owner dropped: halted destination_owner_invalid');
is($dst->safe_psql($DB, "SELECT count(*) FROM t"), '1', 'nothing written as the dropped role');

done_testing();
