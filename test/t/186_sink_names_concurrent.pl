# Names the source and this server tell sinks apart by.
#
# ash_replicant_create_sink refuses a name whose application name
# ("ash_replicant <sink>", compared case-blind) or replication origins
# ("ash_replicant_<sink>", "..._copier<n>") another sink's would be.  Two
# creates running at once each checked without seeing the other's
# uncommitted row, and both committed: 'Race' beside 'race', 'y' beside
# 'y_copier1' (the source's synchronous_standby_names then matched the wrong
# sink; a helper copier's origin was another sink's).  A create now waits
# for a concurrent one and judges its committed row, also from a REPEATABLE
# READ transaction whose snapshot is older.
#
# An application_name in the pipeline's conninfo no longer names its
# replication connection: the source knows it by "ash_replicant <sink>", as
# documented, and lists it as its synchronous standby by that name.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');

# A second create_sink in its own session while $first holds an uncommitted
# one; $first commits once the second waits for it or has ended.  Returns
# the second's (exit code, stderr).
sub race
{
	my ($first_sql, $second_sql, $label) = @_;
	my $first = $dst->background_psql($DB, on_error_stop => 1);
	$first->query_safe("BEGIN; $first_sql");
	my ($out, $err) = ('', '');
	my $second;
	{
		local %ENV = %ENV;
		$ENV{PGHOST} = $dst->host;
		$ENV{PGPORT} = $dst->port;
		$ENV{PGAPPNAME} = 'ash186_second';
		$second = IPC::Run::start([ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $DB, '-c', $second_sql ],
			'>', \$out, '2>', \$err);
	}
	my $settled = AshTest::wait_until(sub {
		$second->pump_nb if $second->pumpable;
		return 1 unless $second->pumpable;
		return $dst->safe_psql($DB, "SELECT count(*) FROM pg_stat_activity"
			  . " WHERE application_name = 'ash186_second' AND wait_event_type = 'Lock'") eq '1';
	});
	ok($settled, "$label: the second create waits for the first or has ended");
	$first->query_safe('COMMIT');
	$first->quit;
	$second->finish;
	return ($second->result(0), $err);
}

# --- case-blind application names -----------------------------------------------------
my ($rc, $err) = race("SELECT ash_replicant_create_sink('Race', slot_name => 'race_upper')",
	"SELECT ash_replicant_create_sink('race', slot_name => 'race_lower')", 'Race/race');
isnt($rc, 0, "concurrent create of 'race' beside 'Race': refused");
like($err, qr/ERROR:  ash_replicant: sink rejected: config_invalid \(sink "race" would be known to the source by sink "Race"'s application name/,
	"... config_invalid naming the application name, as when sequential");
is($dst->safe_psql($DB, "SELECT string_agg(sink_name, ',') FROM ash_replicant.sinks WHERE lower(sink_name) = 'race'"),
	'Race', 'only Race exists');

# --- a helper copier's origin ---------------------------------------------------------
($rc, $err) = race("SELECT ash_replicant_create_sink('y', slot_name => 'y1')",
	"SELECT ash_replicant_create_sink('y_copier1', slot_name => 'y2')", 'y/y_copier1');
isnt($rc, 0, "concurrent create of 'y_copier1' beside 'y': refused");
like($err, qr/ERROR:  ash_replicant: sink rejected: config_invalid \(sink "y_copier1" would share a replication origin with sink "y"/,
	'... config_invalid naming the origin, as when sequential');
is($dst->safe_psql($DB, "SELECT string_agg(sink_name, ',') FROM ash_replicant.sinks WHERE sink_name IN ('y', 'y_copier1')"),
	'y', 'only y exists');

# --- the second from a REPEATABLE READ transaction whose snapshot is older -------------
($rc, $err) = race("SELECT ash_replicant_create_sink('Shop', slot_name => 'shop_upper')",
	"BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM ash_replicant.sinks;"
	  . " SELECT ash_replicant_create_sink('SHOP', slot_name => 'shop_lower'); COMMIT",
	'Shop/SHOP repeatable read');
isnt($rc, 0, "concurrent create of 'SHOP' beside 'Shop' under REPEATABLE READ: refused");
like($err, qr/sink rejected: config_invalid \(sink "SHOP" would be known to the source by sink "Shop"'s application name/,
	'... config_invalid naming the application name');
is($dst->safe_psql($DB, "SELECT string_agg(sink_name, ',') FROM ash_replicant.sinks WHERE lower(sink_name) = 'shop'"),
	'Shop', 'only Shop exists');

# --- names that do not collide: both created, the second once the first committed ------
($rc, $err) = race("SELECT ash_replicant_create_sink('alpha')",
	"SELECT ash_replicant_create_sink('beta')", 'alpha/beta');
is($rc, 0, 'concurrent creates of unrelated names both succeed') or diag $err;
is($dst->safe_psql($DB, "SELECT string_agg(sink_name, ',' ORDER BY sink_name) FROM ash_replicant.sinks"
	  . " WHERE sink_name IN ('alpha', 'beta')"), 'alpha,beta', 'alpha and beta exist');

# a first create that rolls back leaves the name free
{
	my $first = $dst->background_psql($DB, on_error_stop => 1);
	$first->query_safe("BEGIN; SELECT ash_replicant_create_sink('gamma')");
	$first->query_safe('ROLLBACK');
	$first->quit;
}
($rc, undef, $err) = $dst->psql($DB, "SELECT ash_replicant_create_sink('Gamma', slot_name => 'gamma2')");
is($rc, 0, 'a name whose first create rolled back is free') or diag $err;

# --- an application_name in the conninfo ------------------------------------------------
# The names above are what the source sees only if the conninfo cannot
# change them: application_name=mirror used to name the replication
# connection (it was passed as fallback_application_name), so the source
# listed the sink under another name than the documented one.
$src->safe_psql($DB, "CREATE PUBLICATION p_app");
AshTest::both($src, $dst, "CREATE TABLE t_app (id int PRIMARY KEY, v text)");
$src->safe_psql($DB, "ALTER PUBLICATION p_app ADD TABLE t_app");
AshTest::setup_pipeline($src, $dst, sink => 'app', publication => 'p_app', maps => [ ['t_app'] ],
	connection => AshTest::conninfo($src) . " application_name=mirror");
AshTest::wait_caught_up($src, $dst, 'app', name => 'app streams');
is($src->safe_psql($DB, "SELECT r.application_name FROM pg_stat_replication r"
	  . " JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = 'app'"),
	'ash_replicant app', "the replication connection's application_name is 'ash_replicant app', not the conninfo's");
ok(AshTest::poll($src, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ash_replicant census'", '1'),
	"the census connection is 'ash_replicant census'");
is($src->safe_psql($DB, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'mirror'"), '0',
	"no source session named by the conninfo's application_name");

# listed by its documented name, the pipeline is the source's synchronous standby
$src->safe_psql($DB, q{ALTER SYSTEM SET synchronous_standby_names = '"ash_replicant app"'});
$src->safe_psql($DB, 'SELECT pg_reload_conf()');
my $sync = AshTest::poll($src,
	"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'ash_replicant app'", 'sync');
ok($sync, "listed as \"ash_replicant app\": the source's synchronous standby");
SKIP:
{
	# a commit would wait for a standby of that name for ever
	skip 'no synchronous standby of that name', 2 unless $sync;
	($rc, undef, $err) = $src->psql($DB, "INSERT INTO t_app VALUES (1, 'a')");
	is($rc, 0, 'a synchronous commit returns') or diag $err;
	is($dst->safe_psql($DB, "SELECT v FROM t_app WHERE id = 1"), 'a', '... and its row is mirrored when it does');
}
$src->safe_psql($DB, 'ALTER SYSTEM RESET synchronous_standby_names');
$src->safe_psql($DB, 'SELECT pg_reload_conf()');

done_testing();
