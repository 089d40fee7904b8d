# A destination database restored from pg_dump into another cluster (a move
# to a new host, a copy for tests) does not start its pipelines by itself
# (docs/reasons.md#destination_restored).  The catalogs are configuration
# tables, dumped with their rows, enabled flag included: before, the
# restored cluster's launcher started every enabled pipeline as soon as it
# saw it -- in a two-step restore (schema, then data) before the targets'
# rows were in, applying the source's deletes to rows not yet loaded, which
# the data then brought back, healthy (found by an exploratory test).
# Native logical replication restores its subscriptions disabled; here the
# pipeline waits for ash_replicant_start in the installation it runs in.
#
#  restore   dump of a destination whose pipeline is enabled, the source
#            changed after it, restored into a new cluster: not_started /
#            destination_restored, no worker, no walsender, the restored rows
#            untouched; doctor says so; ash_replicant_start runs it, mirror =
#            source
#  update    on 1.8.0 catalogs doctor's checkpoint checks are skipped
#            extension_version_mismatch (before: checkpoint_state_unknown);
#            the 1.8.0 -> 1.9.0 update records the installation for every
#            enabled pipeline (it keeps running), none for a stopped one
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
AshTest::both($src, $dst, 'CREATE TABLE zz (id int PRIMARY KEY, v text)');
$src->safe_psql($DB, "INSERT INTO zz SELECT g, 'v' || g FROM generate_series(1, 500) g;"
	  . " CREATE PUBLICATION pub FOR TABLE zz");
AshTest::setup_pipeline($src, $dst, sink => 'm', publication => 'pub', maps => [ ['zz'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'm', 'healthy', undef, src => $src, name => 'restore: the original streams');
AshTest::wait_caught_up($src, $dst, 'm', name => 'restore: caught up');

# the launcher looks elsewhere: the pipeline stays enabled, nothing moves
# the slot past the checkpoint the dump holds
$dst->append_conf('postgresql.conf', "ash_replicant.database = 'nowhere'\n");
$dst->restart;
AshTest::poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'm' AND active");
my $dump = $dst->basedir . '/dest.dump';
my ($out, $err) = ('', '');
ok(IPC::Run::run([ 'pg_dump', '-Fc', '-f', $dump, '-d', $dst->connstr($DB) ], '>', \$out, '2>', \$err),
	'restore: pg_dump of the destination') or diag $err;
is($dst->safe_psql($DB, "SELECT enabled FROM ash_replicant.pipelines WHERE sink_name = 'm'"), 't',
	'restore: the dumped pipeline is enabled');
$dst->stop;

# the source moves on after the dump
$src->safe_psql($DB, "DELETE FROM zz WHERE id <= 20; UPDATE zz SET v = 'new' WHERE id BETWEEN 21 AND 30;"
	  . " INSERT INTO zz SELECT g, 'late' FROM generate_series(501, 520) g");

my $dst2 = AshTest::start_destination('dst2', log_statement => 'none', no_extension => 1);
ok(IPC::Run::run([ 'pg_restore', '-d', $dst2->connstr($DB), $dump ], '>', \$out, '2>', \$err),
	'restore: pg_restore into a new cluster') or diag $err;

# a few of the launcher's naptimes (500 ms)
sleep 3;
my $st = AshTest::status_row($dst2, 'm') // {};
is(($st->{state} // '') . '/' . ($st->{reason} // ''), 'not_started/destination_restored',
	'restore: the restored pipeline is not started, and status says why') or diag explain $st;
ok(!defined $st->{worker_pid}, 'restore: no worker');
is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'm' AND active"), '0',
	'restore: nothing consumes the slot');
is($dst2->safe_psql($DB, "SELECT count(*) || '/' || count(*) FILTER (WHERE id <= 20) FROM zz"), '500/20',
	'restore: the restored rows are the dump\'s, untouched');
is($dst2->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('m')"
		  . " WHERE check_name = 'runtime'"), 'fail/destination_restored',
	'restore: doctor names it');
my $stat = $dst2->safe_psql($DB, "SELECT state || '/' || coalesce(reason, '') FROM ash_replicant.stat_pipelines"
	  . " WHERE sink_name = 'm'");
is($stat, 'not_started/destination_restored', 'restore: stat_pipelines says the same');

my ($rc, $o, $e) = $dst2->psql($DB, "SELECT ash_replicant_wait_for_slot('m', '2s')");
like($e, qr/is not started.*\n.*DETAIL:  Its reason: destination_restored/, 'restore: wait_for_slot says so');

# started in this installation, it runs from the restored checkpoint
$dst2->safe_psql($DB, "SELECT ash_replicant_start('m')");
AshTest::wait_status($dst2, 'm', 'healthy', undef, src => $src, name => 'restore: started, healthy');
AshTest::wait_caught_up($src, $dst2, 'm', name => 'restore: caught up');
is(AshTest::table_hash($dst2, 'zz'), AshTest::table_hash($src, 'zz'), 'restore: mirror = source');
is($dst2->safe_psql($DB, "SELECT p.started_in = i.installation_id FROM ash_replicant.pipelines p,"
		  . " ash_replicant.installation i WHERE p.sink_name = 'm'"), 't',
	'restore: the start recorded this installation');

# update: 1.8.0 catalogs, one pipeline enabled and one stopped
$dst2->safe_psql($DB, "CREATE DATABASE upg");
$dst2->safe_psql('upg', qq{
CREATE EXTENSION ash_replicant VERSION '1.8.0';
SELECT ash_replicant_create_sink('a');
SELECT ash_replicant_create_sink('b');
});
my ($sysid, $sdb) = AshTest::source_identity($src);
for my $s ('a', 'b')
{
	$dst2->safe_psql('upg', "SELECT ash_replicant_configure_pipeline('$s', connection => "
		  . AshTest::lit(AshTest::conninfo($src)) . ", publication => 'pub', source_system_identifier => "
		  . AshTest::lit($sysid) . ", source_database => " . AshTest::lit($sdb) . ")");
}
$dst2->safe_psql('upg', "UPDATE ash_replicant.pipelines SET enabled = true WHERE sink_name = 'a'");
# the library is newer than these catalogs: the checks that read the
# checkpoint say so (before: failed checkpoint_state_unknown, "look at the
# server log")
is($dst2->safe_psql('upg', "SELECT string_agg(check_name || ':' || verdict || '/' || coalesce(reason, ''), ' '"
		  . " ORDER BY check_name) FROM ash_replicant_doctor('a')"
		  . " WHERE check_name IN ('checkpoint_state', 'slot', 'watermark')"),
	'checkpoint_state:skipped/extension_version_mismatch slot:skipped/extension_version_mismatch'
	  . ' watermark:skipped/extension_version_mismatch',
	'update: doctor on the older catalogs names the version mismatch');
$dst2->safe_psql('upg', "SET ash_replicant.pipelines_stopped = on; ALTER EXTENSION ash_replicant UPDATE");
is($dst2->safe_psql('upg', "SELECT string_agg(sink_name || ':' || (started_in IS NOT DISTINCT FROM"
		  . " (SELECT installation_id FROM ash_replicant.installation))::text || ':'"
		  . " || (started_in IS NULL)::text, ',' ORDER BY sink_name) FROM ash_replicant.pipelines"),
	'a:true:false,b:false:true', 'update: the enabled pipeline is recorded as started here, the stopped one not');
is($dst2->safe_psql('upg', "SELECT count(*) FROM ash_replicant.installation"), '1', 'update: one installation');

done_testing();
