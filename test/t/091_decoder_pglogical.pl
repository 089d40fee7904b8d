# 091_decoder_pglogical.pl
#
# Decoder pglogical against the real pglogical 2.x output plugin: a source
# with pglogical preloaded, a node and a replication set, consumed by a
# NON-superuser replication role through pglogical_output (allowed by
# output_plugin_libraries).  Mirrors types, TOAST, key changes, NULLs and
# deletes, compared by content hash; effect-once across a kill -9 of the
# destination (an audit trigger counts every write); a queued TRUNCATE
# halts source_truncate; a set that does not replicate deletes is refused
# like a narrowed publication; a source database without pglogical halts
# decoder_extension_missing; on_truncate mirror is refused at start.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use PostgreSQL::Test::Utils;
use Test::More;

use AshTest;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(
	name_prefix => 'pgl_',
	src_conf => qq{
shared_preload_libraries = 'pglogical'
output_plugin_libraries = 'pgoutput, pglogical_output'
track_commit_timestamp = on
});

# the source: pglogical, its node, a replication set, the mirrored tables
$src->safe_psql($DB, q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');
SELECT pglogical.create_replication_set('mirror_set');
});
my $ddl = q{
CREATE TABLE items (
	id bigint PRIMARY KEY, name text, qty int, price numeric(12,3), ok boolean,
	at timestamptz, day date, doc jsonb, raw bytea, tags text[], u uuid, big text);
CREATE TABLE accounts (k1 int, k2 text, v text, PRIMARY KEY (k1, k2));
};
AshTest::both($src, $dst, $ddl);
AshTest::both($src, $dst, AshTest::write_audit_sql('items', 'bigint'));
$src->safe_psql($DB, q{
SELECT pglogical.replication_set_add_table('mirror_set', 'items');
SELECT pglogical.replication_set_add_table('mirror_set', 'accounts');
});

# a replication role that is not a superuser: it needs SELECT on the mapped
# tables and read access to pglogical's catalog (coverage, census, doctor);
# pglogical_output itself reads its catalog without privilege checks
my $conn = "host=127.0.0.1 port=" . $src->port . " dbname=$DB user=mirror";

AshTest::both($src, $dst, "CREATE TABLE ash_marker_pgl (id bigint PRIMARY KEY, note text)");
$src->safe_psql($DB, q{
SELECT pglogical.replication_set_add_table('mirror_set', 'ash_marker_pgl');
CREATE ROLE mirror LOGIN REPLICATION;
GRANT SELECT ON items, accounts, ash_marker_pgl TO mirror;
GRANT USAGE ON SCHEMA pglogical TO mirror;
GRANT SELECT ON pglogical.replication_set, pglogical.replication_set_table,
	pglogical.local_node, pglogical.node, pglogical.tables TO mirror;
});
is($src->safe_psql($DB, "SELECT rolsuper FROM pg_roles WHERE rolname = 'mirror'"), 'f',
	'the replication role is not a superuser');

AshTest::setup_pipeline($src, $dst,
	sink => 'pgl', replication_sets => ['mirror_set'], connection => $conn, marker => 0,
	maps => [ ['items'], ['accounts'], ['ash_marker_pgl'] ]);
AshTest::wait_status($dst, 'pgl', 'healthy', undef, src => $src);
is($src->safe_psql($DB, "SELECT plugin FROM pg_replication_slots WHERE slot_name = 'pgl'"),
	'pglogical_output', 'the slot decodes with pglogical_output');

# every type, NULLs, a TOASTed value, key changes, deletes
$src->safe_psql($DB, q{
INSERT INTO items SELECT g, 'item ' || g, g * 3, g / 7.0, g % 2 = 0,
	'2026-12-01 10:00+00'::timestamptz + g * interval '1 hour', DATE '2026-01-01' + g,
	jsonb_build_object('g', g, 'tag', 'é' || g), decode(md5(g::text), 'hex'),
	ARRAY['a' || g, NULL, 'c'], md5(g::text)::uuid, NULL
  FROM generate_series(1, 200) g;
INSERT INTO items (id, name) VALUES (1000, NULL);
UPDATE items SET big = repeat(md5(id::text), 4000) WHERE id <= 5;
UPDATE items SET qty = qty + 1 WHERE id <= 10;
UPDATE items SET id = id + 10000 WHERE id BETWEEN 20 AND 25;
DELETE FROM items WHERE id BETWEEN 30 AND 39;
INSERT INTO accounts SELECT g % 7, 'k' || g, 'v' || g FROM generate_series(1, 50) g;
UPDATE accounts SET k2 = k2 || 'x' WHERE k1 = 3;
DELETE FROM accounts WHERE k1 = 4;
});
$src->safe_psql($DB, "INSERT INTO ash_marker_pgl VALUES (1, 'marker')");
AshTest::poll($dst, "SELECT count(*) FROM ash_marker_pgl", '1');
AshTest::assert_mirror_equal($src, $dst, [ 'items', 'accounts' ], name => 'pglogical mirror');

# effect-once across a kill -9 of the destination mid-stream
$src->safe_psql($DB, q{
CREATE PROCEDURE burst() LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1..300 LOOP
		INSERT INTO items (id, name, qty) VALUES (5000 + i, 'burst', i);
		UPDATE items SET qty = qty + 1 WHERE id = 5000 + i;
		COMMIT;
	END LOOP;
END $$;
CALL burst();
});
AshTest::crash_restart($dst);
$src->safe_psql($DB, "INSERT INTO ash_marker_pgl VALUES (2, 'marker')");
AshTest::poll($dst, "SELECT count(*) FROM ash_marker_pgl", '2');
AshTest::assert_mirror_equal($src, $dst, [ 'items', 'accounts' ], name => 'after kill -9');
is($dst->safe_psql($DB, "SELECT count(*) FROM items_audit WHERE id > 5000"),
	$src->safe_psql($DB, "SELECT count(*) FROM items_audit WHERE id > 5000"),
	'every change applied exactly once across the crash (audit rows equal)');

# no row value reaches the destination's log
my @leak = AshTest::grep_logs_for('item 17', $dst);
is(scalar(@leak), 0, 'no row value in the destination log');

# a queued TRUNCATE halts source_truncate, committing nothing of its transaction
$src->safe_psql($DB, "BEGIN; INSERT INTO accounts VALUES (99, 'z', 'z'); TRUNCATE items; COMMIT;");
AshTest::wait_status($dst, 'pgl', 'halted', 'source_truncate', src => $src);
is($dst->safe_psql($DB, "SELECT count(*) FROM accounts WHERE k1 = 99"), '0',
	'nothing of the halted transaction is applied');
AshTest::stop_sink($dst, 'pgl');

# on_truncate other than halt cannot be honoured: refused at start
my ($rc, $out, $err) = $dst->psql($DB, q{
SELECT ash_replicant_create_sink('pgl_mirror_trunc');
SELECT ash_replicant_map_table('pgl_mirror_trunc', 'accounts'::regclass, on_truncate => 'mirror');
});
is($rc, 0, 'a second sink maps with on_truncate mirror');
($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_configure_pipeline('pgl_mirror_trunc',"
	  . " connection => " . AshTest::lit($conn) . ", decoder => 'pglogical',"
	  . " replication_sets => ARRAY['mirror_set'], source_system_identifier => "
	  . AshTest::lit((AshTest::source_identity($src))[0]) . ", source_database => 'postgres');"
	  . " SELECT ash_replicant_start('pgl_mirror_trunc')");
like($err, qr/decoder_capability_unsupported/, 'on_truncate mirror under pglogical refused at start');

# a set that does not replicate deletes is a narrowed contract
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('narrow_set', replicate_delete := false);
CREATE TABLE narrow (id int PRIMARY KEY, v text);
SELECT pglogical.replication_set_add_table('narrow_set', 'narrow');
GRANT SELECT ON narrow TO mirror;
});
$dst->safe_psql($DB, "CREATE TABLE narrow (id int PRIMARY KEY, v text)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_narrow', replication_sets => ['narrow_set'], connection => $conn, marker => 0,
	maps => [ ['narrow'] ]);
AshTest::wait_status($dst, 'pgl_narrow', 'misconfigured', 'publication_contract_incompatible',
	src => $src);
AshTest::stop_sink($dst, 'pgl_narrow');

# a source database without pglogical
$src->safe_psql($DB, "CREATE DATABASE nopgl");
$src->safe_psql('nopgl', "CREATE TABLE narrow2 (id int PRIMARY KEY)");
$dst->safe_psql($DB, "CREATE TABLE narrow2 (id int PRIMARY KEY)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_noext', replication_sets => ['mirror_set'], marker => 0,
	connection => "host=127.0.0.1 port=" . $src->port . " dbname=nopgl",
	source_database => 'nopgl', maps => [ ['narrow2'] ]);
AshTest::wait_status($dst, 'pgl_noext', 'halted',
	'decoder_extension_missing', src => $src);


done_testing();
