# A destination database dumped (pg_dump) and restored: the extension's
# catalogs are configuration tables, dumped with their rows, but the
# identity sequence of ash_replicant.resources was not (before 1.8.0): the
# restored database held every mapping and a sequence at 1 again, and the
# next ash_replicant_map_table failed on the primary key (23505, found by an
# exploratory test).  Now the sequence's position is dumped too: mappings
# are added after the restore, their resource_id past the restored ones.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $DB = $AshTest::DB;

$dst->safe_psql($DB, "CREATE TABLE t1 (id integer PRIMARY KEY, v text); CREATE TABLE t2 (id integer PRIMARY KEY, v text);"
	  . " SELECT ash_replicant_create_sink('d');"
	  . " SELECT ash_replicant_map_table('d', 't1'::regclass);");
my $dump = $dst->basedir . '/dest.dump';
my ($out, $err) = ('', '');
ok(IPC::Run::run([ 'pg_dump', '-Fc', '-f', $dump, '-d', $dst->connstr($DB) ], '>', \$out, '2>', \$err),
	'pg_dump of the destination') or diag $err;
$dst->safe_psql($DB, "CREATE DATABASE restored");
ok(IPC::Run::run([ 'pg_restore', '-d', $dst->connstr('restored'), $dump ], '>', \$out, '2>', \$err),
	'pg_restore into a new database') or diag $err;
is($dst->safe_psql('restored', "SELECT string_agg(sink_name || ':' || target::text, ',') FROM ash_replicant.resources"),
	'd:t1', 'the mapping was restored');
my ($rc, $o, $e) = $dst->psql('restored', "SELECT ash_replicant_map_table('d', 't2'::regclass)");
is($rc, 0, 'a mapping added after the restore') or diag $e;
is($dst->safe_psql('restored', "SELECT count(DISTINCT resource_id) FROM ash_replicant.resources"), '2',
	'its resource_id is past the restored one');

done_testing();
