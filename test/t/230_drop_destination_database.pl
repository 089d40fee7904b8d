# DROP DATABASE ... WITH (FORCE) of ash_replicant.database while its
# pipelines run, then the database, the extension and the pipelines created
# again under the same names, with ash_replicant.max_pipelines = 2.  The
# dropped database's pipelines held both shared-memory slots under its OID;
# the launcher of the new database looked at slots of its own OID only, so
# the new pipelines waited pipeline_slots_exhausted until a server restart
# (stop/start did nothing).  The launcher frees the slots of a database that
# no longer exists once their workers are gone.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none', no_extension => 1,
	dst_conf => "ash_replicant.database = 'destdb'\nash_replicant.max_pipelines = 2\n");
$src->safe_psql('postgres', 'CREATE DATABASE destdb');
$src->safe_psql('destdb', 'CREATE EXTENSION pg_walinspect');
$dst->safe_psql('postgres', 'CREATE DATABASE destdb');
$AshTest::DB = 'destdb';
my $DB = 'destdb';

# the sinks of one round: created, started, their slots consistent
sub configure
{
	$dst->safe_psql($DB, 'CREATE EXTENSION ash_replicant');
	for my $s (qw(s1 s2))
	{
		$dst->safe_psql($DB, "CREATE TABLE t_$s (id int PRIMARY KEY, v text)");
		$src->safe_psql($DB, "CREATE TABLE IF NOT EXISTS t_$s (id int PRIMARY KEY, v text);"
			  . " DROP PUBLICATION IF EXISTS pub_$s; CREATE PUBLICATION pub_$s FOR TABLE t_$s;"
			  . " TRUNCATE t_$s");
		$src->safe_psql($DB, "DROP TABLE IF EXISTS ash_marker_$s");
		AshTest::setup_pipeline($src, $dst, sink => $s, publication => "pub_$s", maps => [ ["t_$s"] ]);
	}
}

# each sink streams rows into its mirror
sub streams
{
	my ($round) = @_;
	for my $s (qw(s1 s2))
	{
		AshTest::wait_slot_consistent($src, $dst, $s);
		$src->safe_psql($DB, "INSERT INTO t_$s SELECT g, '$round' FROM generate_series(1, 50) g");
		ok(AshTest::wait_caught_up($src, $dst, $s), "$round: $s caught up");
		AshTest::assert_mirror_equal($src, $dst, ["t_$s"], name => "$round: $s mirror");
	}
}

configure();
streams('first');
is(AshTest::poll($dst, "SELECT count(*) = 2 FROM ash_replicant_status() WHERE state = 'healthy'"), 1,
	'first: both pipelines healthy');

# a plain DROP DATABASE is refused while the launcher is connected
my ($rc, $out, $err) = $dst->psql('postgres', 'DROP DATABASE destdb');
isnt($rc, 0, 'plain DROP DATABASE refused while the launcher is connected');
like($err, qr/is being accessed by other users/, '... as PostgreSQL says');
($rc, $out, $err) = $dst->psql('postgres', 'DROP DATABASE destdb WITH (FORCE)');
is($rc, 0, 'DROP DATABASE WITH (FORCE) while the pipelines run') or diag $err;
ok(AshTest::wait_until(sub { scalar AshTest::log_lines_like($dst,
	qr/database "destdb" \(ash_replicant.database\) does not exist/) }),
	'the launcher waits for the database');
for my $s (qw(s1 s2))
{
	AshTest::poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = '$s' AND active");
	$src->safe_psql($DB, "SELECT pg_drop_replication_slot('$s')");
}

$dst->safe_psql('postgres', 'CREATE DATABASE destdb');
ok(AshTest::wait_until(sub { scalar AshTest::log_lines_like($dst, qr/database "destdb" exists now/) }),
	'the launcher sees the database again');
ok(AshTest::wait_until(sub { scalar AshTest::log_lines_like($dst,
	qr/freed 2 pipeline slots of a dropped database/) }, timeout => 30),
	'the launcher frees the two slots of the dropped database');
configure();

# no stop/start, no restart: the new pipelines get the freed slots
ok(AshTest::poll($dst, "SELECT count(*) = 2 FROM ash_replicant_status() WHERE state = 'healthy'",
	't', timeout => 30), 'second: both recreated pipelines run');
is(scalar(AshTest::log_lines_like($dst, qr/no_free_slot/)), 0, 'no pipeline waited for a slot');
streams('second') if AshTest::poll($dst, "SELECT count(*) = 2 FROM ash_replicant_status() WHERE state = 'healthy'",
	't', timeout => 1);
done_testing();
