# wal2json writes values in the source database's encoding; pgoutput and
# pglogical send them in the client_encoding the worker asks for (the
# destination's), the source converting.  A LATIN1 source database's
# 'caf<e9>' reached a UTF8 destination as the raw byte 0xE9 (invalid UTF-8,
# unreadable there), and its 'Ã©' as 'é'; an SQL_ASCII source's high bytes
# likewise -- healthy (found by an exploratory test).  The worker converts a
# wal2json message from the source's encoding (server_encoding at
# connection) and checks it:
#   - LATIN1 source, UTF8 destination: mirrored exactly (as UTF8 text);
#   - SQL_ASCII source, a byte not valid UTF-8: halted
#     source_value_unrepresentable, nothing of the transaction committed,
#     the value in no log; a UTF8 source streams on unchanged (every other
#     wal2json test);
#   - a logical message is not converted: its bytes pass as pgoutput sends
#     them, and one whose prefix is ignored, holding such a byte, is no
#     fault (before: halted source_value_unrepresentable with its
#     transaction's rows).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "output_plugin_libraries = 'pgoutput, wal2json'\n");
my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_ENC_0c94d1';

$src->safe_psql($DB, "CREATE DATABASE lat ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;"
	  . " CREATE DATABASE sqla ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
for my $db (qw(lat sqla))
{
	$src->safe_psql($db, "CREATE TABLE enc (id integer PRIMARY KEY, t text, j json)");
	$dst->safe_psql($DB, "CREATE SCHEMA $db; CREATE TABLE $db.enc (id integer PRIMARY KEY, t text, j json)");
	AshTest::setup_pipeline($src, $dst, sink => $db, connection => AshTest::conninfo($src, dbname => $db),
		decoder => 'wal2json', tables => ['public.enc'], marker => 0, source_database => $db,
		ignored_message_prefixes => ['ign'],
		maps => [ [ "$db.enc", source_schema => 'public', source_table => 'enc' ] ]);
	$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$db', '60s')");
}

# LATIN1: chr() keeps this file ASCII (233: e acute; 195, 169: A tilde, copyright)
$src->safe_psql('lat', q{INSERT INTO enc VALUES
 (1, 'caf' || chr(233), json_build_object('k', 'caf' || chr(233))),
 (2, chr(195) || chr(169), to_json(chr(195) || chr(169))),
 (3, 'plain', '{}')});
$src->safe_psql('lat', "UPDATE enc SET t = t || chr(233) WHERE id = 3");
my $rows = "SET client_encoding = 'UTF8'; SELECT string_agg(id || ':' || t || ':' || j::text, ' ' ORDER BY id) FROM %s";
ok(AshTest::poll($dst, "SELECT count(*) FROM lat.enc WHERE t LIKE 'plain_'", '1'), 'LATIN1 source: streamed');
is($dst->safe_psql($DB, sprintf($rows, 'lat.enc')), $src->safe_psql('lat', sprintf($rows, 'enc')),
	'LATIN1 source: mirrored exactly');
AshTest::wait_status($dst, 'lat', 'healthy');

# SQL_ASCII: a byte no UTF8 text may hold
# a logical message is passed on as its bytes, as pgoutput sends them: one
# whose prefix is ignored, holding such a byte, is no fault (before: halted
# source_value_unrepresentable, the transaction's row with it)
$src->safe_psql('sqla', "BEGIN; INSERT INTO enc VALUES (1, 'ascii', '{}');"
	  . " SELECT pg_logical_emit_message(true, 'ign', 'x' || convert_from('\\xe9', 'SQL_ASCII')); COMMIT");
ok(AshTest::poll($dst, "SELECT count(*) FROM sqla.enc", '1'), 'SQL_ASCII source: ASCII streamed');
is(AshTest::status_row($dst, 'sqla')->{state}, 'healthy', 'SQL_ASCII source: an ignored message of any bytes is no fault');
my $facts = AshTest::checkpoint_facts($dst, 'sqla');
$src->safe_psql('sqla', "BEGIN; INSERT INTO enc VALUES (2, 'ok', '{}');"
	  . " INSERT INTO enc VALUES (3, '$SENTINEL' || convert_from('\\xe9', 'SQL_ASCII'), '{}'); COMMIT");
AshTest::wait_status($dst, 'sqla', 'halted', 'source_value_unrepresentable',
	name => 'SQL_ASCII source, a byte not valid UTF-8: halted source_value_unrepresentable');
is($dst->safe_psql($DB, "SELECT count(*) FROM sqla.enc"), '1', 'nothing of the transaction committed');
is(AshTest::checkpoint_facts($dst, 'sqla'), $facts, 'the checkpoint did not move');
my @hits = AshTest::grep_logs_for($SENTINEL, $dst);
is(scalar(@hits), 0, 'the value is in no destination log line');

done_testing();
