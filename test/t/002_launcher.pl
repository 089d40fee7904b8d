# The launcher boots with the library preloaded: without the extension, then
# with the extension and no pipeline, and never loops on errors -- also when
# ash_replicant.database names no database yet.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Error lines of the server's log.  Autovacuum's own are left out: a fast
# shutdown (the restart below) terminates a running autovacuum worker with
# a FATAL, and DROP EXTENSION cancels one working on a table it drops with
# an ERROR -- the postmaster's and the lock manager's doing, not the
# launcher's.  So is the FATAL of a session of this test's psql that had
# not yet read psql's goodbye when the fast shutdown came (its lines carry
# the test's application_name; the launcher's do not).  The lines are
# compared with an empty list so that a failure shows them.
sub error_lines
{
	my ($node) = @_;
	return [ grep { !/terminating autovacuum process due to administrator command|canceling autovacuum task/ }
		  grep { !/\b002_launcher\.pl FATAL:  terminating connection due to administrator command/ }
		  grep { /\b(ERROR|FATAL|PANIC):/ } split /\n/, slurp_file($node->logfile) ];
}

my $node = PostgreSQL::Test::Cluster->new('launcher');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ash_replicant'
ash_replicant.database = 'postgres'
ash_replicant.naptime = '200ms'
});
$node->start;

# 1. no extension: the launcher says once that it supervises nothing
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant launcher'"),
	'launcher running without the extension');
sleep(2);    # let several naptimes pass: must not produce repeated lines
my $log = slurp_file($node->logfile);
my $absent = () = $log =~ /extension not installed in database/g;
is($absent, 1, 'logs "extension not installed" exactly once');
is_deeply(error_lines($node), [], 'no error without the extension');

# 2. extension, no pipeline
$node->safe_psql('postgres', 'CREATE EXTENSION ash_replicant');
$node->safe_psql('postgres', 'SELECT 1');
sleep(2);
$log = slurp_file($node->logfile);
my $idle = () = $log =~ /no enabled pipeline; supervising nothing/g;
is($idle, 1, 'logs "no enabled pipeline" exactly once');
is_deeply(error_lines($node), [], 'no error with the extension and no pipeline');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ash_replicant_status()'), '0',
	'status lists no pipeline');

# 3. the launcher survives a restart and a pipeline-less SIGHUP
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$node->restart;
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant launcher'"),
	'launcher back after restart');
is_deeply(error_lines($node), [], 'no error after restart');

# 3b. a pipeline configured in a database the launcher does not supervise:
# nothing will start it, and status says why (before: catching_up, no reason)
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', q{CREATE EXTENSION ash_replicant;
SELECT ash_replicant_create_sink(sink_name => 'elsewhere', slot_name => 'elsewhere');
SELECT ash_replicant_configure_pipeline(sink_name => 'elsewhere',
	connection => 'host=127.0.0.1 port=1 dbname=app', publication => 'pub',
	source_system_identifier => '1', source_database => 'app');
SELECT ash_replicant_start('elsewhere');});
is($node->safe_psql('other', q{SELECT state || '/' || coalesce(reason, '') FROM ash_replicant_status('elsewhere')}),
	'catching_up/launcher_database_mismatch', 'status: launcher_database_mismatch');
is($node->safe_psql('other', q{SELECT verdict || '/' || reason FROM ash_replicant_doctor('elsewhere') WHERE check_name = 'runtime'}),
	'fail/launcher_database_mismatch', 'doctor: the same');
$node->safe_psql('other', 'DROP EXTENSION ash_replicant');

# 4. dropping the extension puts the launcher back to idle without errors
$node->safe_psql('postgres', 'DROP EXTENSION ash_replicant');
sleep(1);
is_deeply(error_lines($node), [], 'no error after DROP EXTENSION');

# 5. ash_replicant.database names no database: the first launcher dies
# connecting (one FATAL), the next waits for the database and says so once
# (before: a FATAL every 5 s, for ever); created, the launcher connects
$node->append_conf('postgresql.conf', "ash_replicant.database = 'later'\n");
$node->restart;
sleep(13);    # more than two restart intervals of a launcher (5 s)
my @fatal = grep { /FATAL:  database "later" does not exist/ } split /\n/, slurp_file($node->logfile);
cmp_ok(scalar(@fatal), '<=', 1, 'a missing database: at most one FATAL, not one every 5 s');
like(slurp_file($node->logfile), qr/database "later" \(ash_replicant\.database\) does not exist; supervising nothing until it is created/,
	'the launcher says it waits for the database');
$node->safe_psql('postgres', 'CREATE DATABASE later');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ash_replicant launcher' AND datname = 'later'"),
	'created, the launcher connects to it');

$node->stop;
done_testing();
