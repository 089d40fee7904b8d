# 092_decoder_pglogical.pl
#
# Decoder pglogical against the real pglogical 2.x output plugin: a source
# with pglogical preloaded, a node and a replication set, consumed by a
# NON-superuser replication role through pglogical_output (allowed by
# output_plugin_libraries).  Mirrors types, TOAST, key changes, NULLs and
# deletes, compared by content hash; a transaction with a replication
# origin mirrored (forward_origins all), and skipped under origin => 'none';
# effect-once across a kill -9 of the
# destination (an audit trigger counts every write); TRUNCATE, which
# pglogical queues in pglogical.queue, applied per on_truncate (mirror,
# ignored for an ignored table, halt), also as the first change of a
# session; doctor passes every check of a healthy sink; pglogical_output
# taken out of output_plugin_libraries fails doctor's check and halts the
# running pipeline decoder_plugin_not_allowed; switching the decoder or the
# sets of an existing checkpoint halts decoder_contract_incompatible; a set
# that does not replicate deletes, a column list or a row filter on a mapped
# table is refused like a narrowed publication (a table also in a full set,
# or a narrowed set of ignored tables only, is not); a
# source database without pglogical halts decoder_extension_missing; a
# snapshot v1 copies existing rows before the stream; a mapped table out of
# its set and back halts publication_gap without a snapshot (re-seeded with
# v1) and is copied again with one, as after a mapped column replaced.  The
# shared scenarios (types, TOAST, kill -9 ...) run under pglogical in
# 090_decoders.pl too.
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
CREATE TABLE scratch (id int PRIMARY KEY);
};
AshTest::both($src, $dst, $ddl);
AshTest::both($src, $dst, AshTest::write_audit_sql('items', 'bigint'));
$src->safe_psql($DB, q{
SELECT pglogical.replication_set_add_table('mirror_set', 'items');
SELECT pglogical.replication_set_add_table('mirror_set', 'accounts');
SELECT pglogical.replication_set_add_table('mirror_set', 'scratch');
});

# a replication role that is not a superuser: it needs SELECT on the mapped
# tables and read access to pglogical's catalog (coverage, census, doctor);
# pglogical_output itself reads its catalog without privilege checks
my $conn = "host=127.0.0.1 port=" . $src->port . " dbname=$DB user=mirror";

AshTest::both($src, $dst, "CREATE TABLE ash_marker_pgl (id bigint PRIMARY KEY, note text)");
$src->safe_psql($DB, q{
SELECT pglogical.replication_set_add_table('mirror_set', 'ash_marker_pgl');
CREATE ROLE mirror LOGIN REPLICATION;
-- the origin created below makes this source look like a subscriber, whose
-- replica sessions an ordinary trigger ignores: pglogical's TRUNCATE trigger
-- must fire always (test 139)
CREATE FUNCTION truncate_triggers_always() RETURNS void LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
	FOR r IN SELECT tgrelid::regclass AS rel, tgname FROM pg_trigger
	          WHERE tgfoid = 'pglogical.queue_truncate()'::regprocedure AND tgenabled <> 'A'
	LOOP
		EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', r.rel, r.tgname);
	END LOOP;
END $$;
SELECT truncate_triggers_always();
GRANT SELECT ON items, accounts, scratch, ash_marker_pgl TO mirror;
GRANT USAGE ON SCHEMA pglogical TO mirror;
GRANT SELECT ON pglogical.replication_set, pglogical.replication_set_table,
	pglogical.local_node, pglogical.node, pglogical.tables TO mirror;
});
is($src->safe_psql($DB, "SELECT rolsuper FROM pg_roles WHERE rolname = 'mirror'"), 'f',
	'the replication role is not a superuser');

AshTest::setup_pipeline($src, $dst,
	sink => 'pgl', decoder => 'pglogical', replication_sets => ['mirror_set'], connection => $conn, marker => 0,
	ignored_sources => ['public.scratch'],
	maps => [ ['items'], [ 'accounts', on_truncate => 'mirror' ], ['ash_marker_pgl'] ]);
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

# a transaction that reached the source through replication (it carries a
# replication origin) is mirrored too: pglogical forwards it only because the
# session asks for forward_origins 'all'
$src->safe_psql($DB, q{
SELECT pg_replication_origin_create('upstream');
SELECT pg_replication_origin_session_setup('upstream');
INSERT INTO accounts VALUES (77, 'origin', 'forwarded');
SELECT pg_replication_origin_session_reset();
INSERT INTO ash_marker_pgl VALUES (100, 'after the origin');
});
AshTest::poll($dst, "SELECT count(*) FROM ash_marker_pgl WHERE id = 100", '1');
is($dst->safe_psql($DB, "SELECT v FROM accounts WHERE k1 = 77"), 'forwarded',
	'a change with a replication origin is mirrored (forward_origins all)');

# origin => 'none': pglogical says the origin (an Origin message after
# BEGIN), and the transactions that carry one are skipped
AshTest::both($src, $dst, 'CREATE TABLE onone (id int PRIMARY KEY, v text NOT NULL)');
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('none_set');
SELECT pglogical.replication_set_add_table('none_set', 'onone');
SELECT truncate_triggers_always();
GRANT SELECT ON onone TO mirror;
});
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_none', decoder => 'pglogical', replication_sets => ['none_set'], connection => $conn,
	marker => 0, maps => [ ['onone'] ], pipeline_extra => "origin => 'none'");
AshTest::wait_status($dst, 'pgl_none', 'healthy', undef, src => $src);
AshTest::wait_slot_consistent($src, $dst, 'pgl_none');
$src->safe_psql($DB, q{
INSERT INTO onone VALUES (1, 'local');
SELECT pg_replication_origin_session_setup('upstream');
INSERT INTO onone VALUES (2, 'mirrored here');
UPDATE onone SET v = 'changed by a mirror' WHERE id = 1;
SELECT pg_replication_origin_session_reset();
});
my ($none_last) = AshTest::commit_tracked($src, "INSERT INTO onone VALUES (3, 'local again')");
ok(AshTest::wait_lsn($src, $dst, 'pgl_none', $none_last), 'origin none under pglogical: caught up');
is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM onone"),
	'1:local,3:local again', 'origin none under pglogical: the transactions of an origin are skipped');
AshTest::stop_sink($dst, 'pgl_none');
$src->safe_psql($DB, "SELECT pg_replication_origin_drop('upstream')");

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
ok(AshTest::poll($dst, "SELECT count(*) FROM ash_marker_pgl WHERE id = 2", '1'),
	'caught up after kill -9');
AshTest::assert_mirror_equal($src, $dst, [ 'items', 'accounts' ], name => 'after kill -9');
is($dst->safe_psql($DB, "SELECT count(*) FROM items_audit WHERE id > 5000"),
	$src->safe_psql($DB, "SELECT count(*) FROM items_audit WHERE id > 5000"),
	'every change applied exactly once across the crash (audit rows equal)');

# no row value reaches the destination's log
my @leak = AshTest::grep_logs_for('item 17', $dst);
is(scalar(@leak), 0, 'no row value in the destination log');

# TRUNCATE, which pglogical queues in pglogical.queue: applied as the mapping
# says; an ignored table's is ignored
my $marker = 2;
sub caught_up
{
	my ($name) = @_;
	$marker++;
	$src->safe_psql($DB, "INSERT INTO ash_marker_pgl VALUES ($marker, 'marker')");
	AshTest::poll($dst, "SELECT count(*) FROM ash_marker_pgl WHERE id = $marker", '1');
	AshTest::assert_mirror_equal($src, $dst, [ 'items', 'accounts' ], name => $name);
}
$src->safe_psql($DB, "BEGIN; TRUNCATE scratch; INSERT INTO accounts VALUES (98, 'y', 'y'); COMMIT;");
caught_up('truncate of an ignored table ignored');
$src->safe_psql($DB, "TRUNCATE accounts; INSERT INTO accounts VALUES (1, 'after', 'truncate');");
caught_up('truncate mirrored (on_truncate mirror)');
is($dst->safe_psql($DB, "SELECT count(*) FROM accounts"), '1', 'the mirror holds only what follows the truncate');

# a new session has described nothing yet: the queued TRUNCATE's table is
# read from the source's catalog and described to apply first
AshTest::stop_sink($dst, 'pgl');
AshTest::wait_status($dst, 'pgl', 'not_started', undef, src => $src, no_early_exit => 1);
$src->safe_psql($DB, "INSERT INTO accounts VALUES (2, 'before', 'restart')");
AshTest::start_sink($dst, 'pgl');
AshTest::wait_status($dst, 'pgl', 'healthy', undef, src => $src);
$src->safe_psql($DB, "TRUNCATE accounts; INSERT INTO accounts VALUES (3, 'after', 'restart');");
caught_up('truncate first in a session mirrored');
AshTest::stop_sink($dst, 'pgl');
AshTest::wait_status($dst, 'pgl', 'not_started', undef, src => $src, no_early_exit => 1);
$src->safe_psql($DB, "TRUNCATE accounts");
AshTest::start_sink($dst, 'pgl');
caught_up('truncate as the first change of a session mirrored');

# on_truncate halt: source_truncate, committing nothing of the transaction
$src->safe_psql($DB, "BEGIN; INSERT INTO accounts VALUES (99, 'z', 'z'); TRUNCATE items; COMMIT;");
AshTest::wait_status($dst, 'pgl', 'halted', 'source_truncate', src => $src);
is($dst->safe_psql($DB, "SELECT count(*) FROM accounts WHERE k1 = 99"), '0',
	'nothing of the halted transaction is applied');
AshTest::stop_sink($dst, 'pgl');

# doctor judges the sets as a publication: a healthy pglogical sink passes
# every check
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('side_set');
SELECT pglogical.create_replication_set('side_set2');
CREATE TABLE side (id int PRIMARY KEY, v text);
SELECT pglogical.replication_set_add_table('side_set', 'side');
SELECT pglogical.replication_set_add_table('side_set2', 'side');
GRANT SELECT ON side TO mirror;
CREATE PUBLICATION side_pub FOR TABLE side;
GRANT pg_read_all_settings TO mirror;
});
$dst->safe_psql($DB, "CREATE TABLE side (id int PRIMARY KEY, v text)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_side', decoder => 'pglogical', replication_sets => ['side_set'],
	connection => $conn, marker => 0, maps => [ ['side'] ]);
AshTest::wait_status($dst, 'pgl_side', 'healthy', undef, src => $src);
$src->safe_psql($DB, "INSERT INTO side VALUES (1, 'one')");
AshTest::poll($dst, "SELECT count(*) FROM side", '1');
is($dst->safe_psql($DB, "SELECT string_agg(check_name || ' ' || verdict, ', ' ORDER BY check_name)"
	  . " FROM ash_replicant_doctor('pgl_side') WHERE verdict <> 'pass'"),
	'', 'doctor: every check of a healthy pglogical sink passes');

# output_plugin_libraries without pglogical_output (15.19+): doctor fails the
# check, the running pipeline halts decoder_plugin_not_allowed when its slot
# starts decoding again
$src->safe_psql($DB, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput'; SELECT pg_reload_conf()");
AshTest::poll($src, "SELECT current_setting('output_plugin_libraries')", 'pgoutput');
is($dst->safe_psql($DB, "SELECT verdict || ' ' || reason FROM ash_replicant_preflight('pgl_side')"
	  . " WHERE check_name = 'output_plugin'"),
	'fail decoder_plugin_not_allowed', 'preflight: pglogical_output not allowed');
AshTest::poll($src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pgl_side' AND active", '1');
AshTest::terminate_walsender($src, 'pgl_side');
AshTest::wait_status($dst, 'pgl_side', 'misconfigured', 'decoder_plugin_not_allowed', src => $src);
$src->safe_psql($DB, "ALTER SYSTEM RESET output_plugin_libraries; SELECT pg_reload_conf()");
AshTest::poll($src, "SELECT current_setting('output_plugin_libraries')", 'pgoutput, pglogical_output');
AshTest::start_sink($dst, 'pgl_side');
AshTest::wait_status($dst, 'pgl_side', 'healthy', undef, src => $src, name => 'pgl_side healthy again');

# switching the decoder, or the replication sets, of an existing checkpoint
# is a contract change
AshTest::stop_sink($dst, 'pgl_side');
AshTest::wait_status($dst, 'pgl_side', 'not_started', undef, src => $src, no_early_exit => 1);
my ($sysid) = AshTest::source_identity($src);
my $reconf = sub {
	my ($table_set) = @_;
	$dst->safe_psql($DB, "SELECT ash_replicant_configure_pipeline('pgl_side', connection => "
		  . AshTest::lit($conn) . ", $table_set, source_system_identifier => " . AshTest::lit($sysid)
		  . ", source_database => 'postgres')");
	AshTest::start_sink($dst, 'pgl_side');
};
$reconf->("publication => 'side_pub'");
AshTest::wait_status($dst, 'pgl_side', 'misconfigured', 'decoder_contract_incompatible', src => $src,
	name => 'pglogical to pgoutput on an existing checkpoint: decoder_contract_incompatible');
AshTest::stop_sink($dst, 'pgl_side');
$reconf->("decoder => 'pglogical', replication_sets => ARRAY['side_set2']");
AshTest::wait_status($dst, 'pgl_side', 'misconfigured', 'decoder_contract_incompatible', src => $src,
	name => 'other replication sets on an existing checkpoint: decoder_contract_incompatible');
AshTest::stop_sink($dst, 'pgl_side');

# snapshot v1: rows that exist before the slot are copied, then streamed on
# from the slot pglogical_output's creation exported
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('snap_set');
CREATE TABLE snap (id int PRIMARY KEY, v text, big text);
SELECT pglogical.replication_set_add_table('snap_set', 'snap');
GRANT SELECT ON snap TO mirror;
INSERT INTO snap SELECT g, 'pre ' || g, CASE WHEN g % 100 = 0 THEN repeat(md5(g::text), 1000) END
	FROM generate_series(1, 5000) g;
});
$dst->safe_psql($DB, "CREATE TABLE snap (id int PRIMARY KEY, v text, big text)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_snap', decoder => 'pglogical', replication_sets => ['snap_set'],
	connection => $conn, marker => 0, maps => [ ['snap'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'pgl_snap', 'healthy', undef, src => $src);
$src->safe_psql($DB, "UPDATE snap SET v = 'streamed' WHERE id % 7 = 0; DELETE FROM snap WHERE id % 11 = 0;"
	  . " INSERT INTO snap VALUES (6000, 'post', NULL)");
AshTest::poll($dst, "SELECT count(*) FROM snap WHERE id = 6000", '1');
AshTest::assert_mirror_equal($src, $dst, ['snap'], name => 'snapshot v1 then stream under pglogical');
is($dst->safe_psql($DB, "SELECT snapshot_phase FROM ash_replicant.checkpoints WHERE slot_name = 'pgl_snap'"),
	'complete', 'the snapshot completed');
# completeness verified against the source, as for pgoutput
is($dst->safe_psql($DB, "SELECT source_table || '=' || verdict || '/' || coalesce(reason, '-')"
	  . " FROM ash_replicant_verify('pgl_snap')"),
	'snap=match/-', 'ash_replicant_verify: the pglogical mirror matches its source');
$dst->safe_psql($DB, "DELETE FROM snap WHERE id = 1");
is($dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '-')"
	  . " FROM ash_replicant_verify('pgl_snap')"),
	'mismatch/verify_rows_differ', 'ash_replicant_verify: a row missing from the mirror is found');
AshTest::stop_sink($dst, 'pgl_snap');

# a set that does not replicate deletes is a narrowed contract
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('narrow_set', replicate_delete := false);
CREATE TABLE narrow (id int PRIMARY KEY, v text);
SELECT pglogical.replication_set_add_table('narrow_set', 'narrow');
GRANT SELECT ON narrow TO mirror;
});
$dst->safe_psql($DB, "CREATE TABLE narrow (id int PRIMARY KEY, v text)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_narrow', decoder => 'pglogical', replication_sets => ['narrow_set'], connection => $conn, marker => 0,
	maps => [ ['narrow'] ]);
AshTest::wait_status($dst, 'pgl_narrow', 'misconfigured', 'publication_contract_incompatible',
	src => $src);
AshTest::stop_sink($dst, 'pgl_narrow');

# ... but pglogical ORs the sets that hold a table: the same table also in a
# set that replicates deletes is covered; a narrowed set of ignored tables
# only is no concern
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('wide_set');
SELECT pglogical.replication_set_add_table('wide_set', 'narrow');
SELECT pglogical.create_replication_set('ign_set', replicate_update := false);
CREATE TABLE ign (id int PRIMARY KEY);
SELECT pglogical.replication_set_add_table('ign_set', 'ign');
GRANT SELECT ON ign TO mirror;
});
$dst->safe_psql($DB, "CREATE TABLE narrow_or (id int PRIMARY KEY, v text)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_or', decoder => 'pglogical', replication_sets => [ 'narrow_set', 'wide_set', 'ign_set' ],
	connection => $conn, marker => 0, ignored_sources => ['public.ign'],
	maps => [ [ 'narrow_or', source_table => 'narrow' ] ]);
AshTest::wait_status($dst, 'pgl_or', 'healthy', undef, src => $src,
	name => 'a table in a narrowed and a full set, a narrowed set of ignored tables: healthy');
$src->safe_psql($DB, "INSERT INTO narrow VALUES (1, 'a'), (2, 'b'); DELETE FROM narrow WHERE id = 1;"
	  . " INSERT INTO ign VALUES (1); UPDATE ign SET id = 2");
AshTest::poll($dst, "SELECT string_agg(id::text, ',') FROM narrow_or", '2');
is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM narrow_or"),
	$src->safe_psql($DB, "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM narrow"),
	'deletes arrive through the wider set');
AshTest::stop_sink($dst, 'pgl_or');

# a set's column list that leaves columns out, or its row filter, on a mapped
# table: refused as a publication's
$src->safe_psql($DB, q{
CREATE TABLE colt (id int PRIMARY KEY, a text, b text);
CREATE TABLE rowt (id int PRIMARY KEY, a text);
GRANT SELECT ON colt, rowt TO mirror;
SELECT pglogical.create_replication_set('cols_set');
SELECT pglogical.replication_set_add_table('cols_set', 'colt', columns := ARRAY['id', 'a']);
SELECT pglogical.create_replication_set('rowf_set');
SELECT pglogical.replication_set_add_table('rowf_set', 'rowt', row_filter := 'id > 10');
});
$dst->safe_psql($DB, "CREATE TABLE colt (id int PRIMARY KEY, a text, b text);"
	  . " CREATE TABLE rowt (id int PRIMARY KEY, a text)");
for my $case ([ 'pgl_cols', 'cols_set', 'colt' ], [ 'pgl_rowf', 'rowf_set', 'rowt' ])
{
	my ($sink, $set, $table) = @$case;
	AshTest::setup_pipeline($src, $dst,
		sink => $sink, decoder => 'pglogical', replication_sets => [$set],
		connection => $conn, marker => 0, maps => [ [$table] ]);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'publication_contract_incompatible',
		src => $src, name => "$set: refused as a narrowed contract");
	AshTest::stop_sink($dst, $sink);
}

# a mapped table out of its replication set and back: pglogical_output, like
# pgoutput, never decodes its changes in between (docs/reasons.md#publication_gap).
# Without a snapshot the next start halts publication_gap (preflight fails
# first); with one the table is copied again.
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('gap_set');
CREATE TABLE gapt (id int PRIMARY KEY, v text);
SELECT pglogical.replication_set_add_table('gap_set', 'gapt');
GRANT SELECT ON gapt TO mirror;
INSERT INTO gapt SELECT g, 'pre' FROM generate_series(1, 20) g;
});
$dst->safe_psql($DB, "CREATE TABLE gapt (id int PRIMARY KEY, v text)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_gap', decoder => 'pglogical', replication_sets => ['gap_set'],
	connection => $conn, marker => 0, maps => [ ['gapt'] ]);
AshTest::wait_status($dst, 'pgl_gap', 'healthy', undef, src => $src);
like($dst->safe_psql($DB, "SELECT published FROM ash_replicant.publication_members WHERE slot_name = 'pgl_gap'"),
	qr/^col:6964:1,col:76:2,def:set:\d+:\d+,def:tbl:\d+,def:trg:\d+:\d+,set:\d+:\d+,typ:6964:23\.-1,typ:76:25\.-1$/, 'the start records how the replication set holds the table');
$src->safe_psql($DB, "INSERT INTO gapt VALUES (100, 'streamed')");
AshTest::poll($dst, "SELECT count(*) FROM gapt WHERE id = 100", '1');
AshTest::stop_settled($src, $dst, 'pgl_gap');
$src->safe_psql($DB, "SELECT pglogical.replication_set_remove_table('gap_set', 'gapt')");
$src->safe_psql($DB, "UPDATE gapt SET v = 'while out' WHERE id = 100");
$src->safe_psql($DB, "SELECT pglogical.replication_set_add_table('gap_set', 'gapt')");
is($dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_preflight('pgl_gap')"
	  . " WHERE check_name = 'publication'"),
	'fail/publication_gap', 'out of the set and back: preflight fails publication_gap');
AshTest::start_sink($dst, 'pgl_gap');
AshTest::wait_status($dst, 'pgl_gap', 'halted', 'publication_gap', src => $src,
	name => 'out of the set and back: the start halts publication_gap');
is($dst->safe_psql($DB, "SELECT v FROM gapt WHERE id = 100"), 'streamed', 'nothing applied on top of the gap');
# re-seed: a v1 snapshot copies the table again
AshTest::stop_settled($src, $dst, 'pgl_gap');
$dst->safe_psql($DB, "SELECT ash_replicant_configure_pipeline('pgl_gap', connection => " . AshTest::lit($conn)
	  . ", decoder => 'pglogical', replication_sets => ARRAY['gap_set'], source_system_identifier => "
	  . AshTest::lit($sysid) . ", source_database => 'postgres', go_forward_only => false, snapshot => 'v1')");
AshTest::start_sink($dst, 'pgl_gap');
AshTest::wait_status($dst, 'pgl_gap', 'healthy', undef, src => $src, name => 're-seeded with v1: healthy');
AshTest::poll($dst, "SELECT v FROM gapt WHERE id = 100", 'while out');
AshTest::assert_mirror_equal($src, $dst, ['gapt'], name => 're-seeded under pglogical');
like($dst->safe_psql($DB, "SELECT published FROM ash_replicant.snapshot_tables WHERE slot_name = 'pgl_gap'"),
	qr/^col:6964:1,col:76:2,def:set:\d+:\d+,def:tbl:\d+,def:trg:\d+:\d+,set:\d+:\d+,typ:6964:23\.-1,typ:76:25\.-1$/, 'the snapshot records how the set holds the table');
# with the snapshot configured: out and back while streaming, copied again
$src->safe_psql($DB, "SELECT pglogical.replication_set_remove_table('gap_set', 'gapt')");
$src->safe_psql($DB, "UPDATE gapt SET v = 'out, streaming' WHERE id <= 5");
$src->safe_psql($DB, "SELECT pglogical.replication_set_add_table('gap_set', 'gapt')");
ok(AshTest::wait_until(sub {
			scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.publication_gap sink=pgl_gap table=public\.gapt/)) >= 2;
		}),
	'the census finds the table back in its set and the next session copies it');
AshTest::poll($dst, "SELECT count(*) FROM gapt WHERE v = 'out, streaming'", '5');
AshTest::assert_mirror_equal($src, $dst, ['gapt'], name => 'copied again under pglogical');
# a mapped column replaced under its name: the census finds it by its number
# (docs/reasons.md#publication_gap) and the table is copied again
my $gaps = () = AshTest::log_lines_like($dst, qr/event=snapshot\.publication_gap sink=pgl_gap table=public\.gapt/);
$src->safe_psql($DB, "BEGIN; ALTER TABLE gapt DROP COLUMN v; ALTER TABLE gapt ADD COLUMN v text DEFAULT 'new v'; COMMIT");
ok(AshTest::wait_until(sub {
			scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.publication_gap sink=pgl_gap table=public\.gapt/)) > $gaps;
		}),
	'a mapped column replaced: the census finds it and the next session copies the table');
AshTest::poll($dst, "SELECT count(*) FILTER (WHERE v = 'new v') = count(*) FROM gapt", 't');
AshTest::assert_mirror_equal($src, $dst, ['gapt'], name => 'copied again under pglogical after a column was replaced');
AshTest::stop_sink($dst, 'pgl_gap');

# a partitioned table in a replication set: pglogical decodes its partitions
# under their own names, and a copy FROM ONLY it reads nothing -- refused
# before anything is copied (it stayed healthy with an empty mirror)
$src->safe_psql($DB, q{
SELECT pglogical.create_replication_set('part_set');
CREATE TABLE ppart (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE ppart1 PARTITION OF ppart FOR VALUES FROM (0) TO (100);
INSERT INTO ppart SELECT g, 'p' || g FROM generate_series(1, 5) g;
SELECT pglogical.replication_set_add_table('part_set', 'ppart');
GRANT SELECT ON ppart, ppart1 TO mirror;
});
$dst->safe_psql($DB, "CREATE TABLE ppart (id int PRIMARY KEY, v text)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_part', decoder => 'pglogical', replication_sets => ['part_set'],
	connection => $conn, marker => 0, maps => [ ['ppart'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'pgl_part', 'misconfigured', 'decoder_capability_unsupported', src => $src,
	name => 'a partitioned table in a replication set: misconfigured decoder_capability_unsupported');
is($dst->safe_psql($DB, "SELECT count(*) FROM ppart"), '0', 'nothing copied');
AshTest::stop_sink($dst, 'pgl_part');

# a source database of another encoding than the destination's: pglogical
# refuses to convert (0A000 at every start) -- the pipeline reconnected for
# ever, catching_up without a reason
$src->safe_psql($DB, "CREATE DATABASE lat ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
$src->safe_psql('lat', q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'lat', dsn := 'dbname=lat');
CREATE TABLE enc (id int PRIMARY KEY, t text);
SELECT pglogical.create_replication_set('lat_set');
SELECT pglogical.replication_set_add_table('lat_set', 'enc');
});
$dst->safe_psql($DB, "CREATE TABLE enc (id int PRIMARY KEY, t text)");
AshTest::setup_pipeline($src, $dst, sink => 'pgl_lat', decoder => 'pglogical', replication_sets => ['lat_set'],
	connection => AshTest::conninfo($src, dbname => 'lat'), source_database => 'lat', marker => 0,
	maps => [ ['enc'] ]);
AshTest::wait_status($dst, 'pgl_lat', 'misconfigured', 'decoder_capability_unsupported', src => $src,
	name => 'pglogical from a LATIN1 source database: misconfigured decoder_capability_unsupported');
AshTest::stop_sink($dst, 'pgl_lat');

# a source database without pglogical
$src->safe_psql($DB, "CREATE DATABASE nopgl");
$src->safe_psql('nopgl', "CREATE TABLE narrow2 (id int PRIMARY KEY)");
$dst->safe_psql($DB, "CREATE TABLE narrow2 (id int PRIMARY KEY)");
AshTest::setup_pipeline($src, $dst,
	sink => 'pgl_noext', decoder => 'pglogical', replication_sets => ['mirror_set'], marker => 0,
	connection => "host=127.0.0.1 port=" . $src->port . " dbname=nopgl",
	source_database => 'nopgl', maps => [ ['narrow2'] ]);
AshTest::wait_status($dst, 'pgl_noext', 'halted',
	'decoder_extension_missing', src => $src);


done_testing();
