# Names in the plugin options of START_REPLICATION (src/libpq_conn.c,
# ash_conn_quote_repl_literal): the replication grammar has no E'...'
# literal, which PQescapeLiteral gives a string holding a backslash, so a
# wal2json table whose name needs a backslash in add-tables ("order-items",
# t$1), or a publication with a backslash in its name, was refused by the
# source at every start (42601) and the pipeline retried for ever with no
# reason.  Each is mirrored now, mirror = source.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "output_plugin_libraries = 'pgoutput, wal2json'\n");
my $DB = $AshTest::DB;

AshTest::both($src, $dst,
	'CREATE TABLE "order-items" (id integer PRIMARY KEY, v text);'
	  . ' CREATE TABLE t$1 (id integer PRIMARY KEY, v text);'
	  . ' CREATE TABLE "back\\slash" (id integer PRIMARY KEY, v text);'
	  . ' CREATE TABLE "q\'uote" (id integer PRIMARY KEY, v text)');

my $n = 0;
for my $t ('"order-items"', 't$1', '"back\\slash"')
{
	my $sink = 'w' . ++$n;
	AshTest::setup_pipeline($src, $dst, sink => $sink, decoder => 'wal2json',
		tables => ["public.$t"], maps => [ [$t] ]);
	$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$sink', '60s')");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 20) g;"
		  . " UPDATE $t SET v = 'changed' WHERE id = 3; DELETE FROM $t WHERE id = 4");
	ok(AshTest::wait_caught_up($src, $dst, $sink), "wal2json, table $t: caught up");
	AshTest::assert_mirror_equal($src, $dst, [$t], name => "wal2json, table $t");
	is(AshTest::stat_row($dst, $sink)->{reconnects}, '0', "wal2json, table $t: no reconnect");
	AshTest::stop_sink($dst, $sink);
}

# pgoutput: a publication with a backslash and a quote in its name
$src->safe_psql($DB, q{CREATE PUBLICATION "pub\o'ne" FOR TABLE "q'uote"});
AshTest::setup_pipeline($src, $dst, sink => 'p1', publication => q{pub\o'ne}, marker => 0,
	maps => [ [q{"q'uote"}] ]);
$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('p1', '60s')");
$src->safe_psql($DB, q{INSERT INTO "q'uote" SELECT g, 'q' || g FROM generate_series(1, 20) g});
ok(AshTest::poll($dst, q{SELECT count(*) FROM "q'uote"}, '20'), 'pgoutput, publication with a backslash: streamed');
my $rows = q{SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM "q'uote"};
is($dst->safe_psql($DB, $rows), $src->safe_psql($DB, $rows), 'pgoutput, publication with a backslash: mirror = source');
AshTest::wait_status($dst, 'p1', 'healthy');

done_testing();
