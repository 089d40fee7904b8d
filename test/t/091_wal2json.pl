# What only the wal2json decoder judges (docs/sql-api-sinks.md#decoders,
# docs/reasons.md), against wal2json 2.5 on a non-superuser replication
# role's source:
#  1. pgoutput-only capabilities (streaming, failover, binary_transfer) are
#     refused at configuration, message routes at start, by preflight and by
#     the worker: decoder_capability_unsupported;
#  2. a configured table the source does not have: preflight and the worker
#     say decoder_table_missing;
#  3. a table without replica identity: decoder_table_keyless, unless
#     allow_keyless_tables (then its inserts stream, and the keyed table of
#     the set is mirrored);
#  4. a source whose output_plugin_libraries leaves wal2json out: preflight
#     says decoder_plugin_not_allowed before a start, and the worker halts
#     with it; listed again, the pipeline streams; a source that cannot load
#     the library halts decoder_extension_missing;
#  5. a decoder switch and a table-set change on an existing checkpoint:
#     decoder_contract_incompatible;
#  6. source columns (no Relation messages): a column added at both ends is
#     mirrored; one added at the source only halts source_column_unmapped
#     as pgoutput's path does; a dropped column halts source_column_missing
#     at the next change; the schema check (schema_check_interval_ms) sees
#     a drop with no change at all; a change written before an ALTER (a
#     column added; a column's type changed, told by its type OID alone) and
#     decoded after it halts decoder_schema_drift;
#     a generated column (wal2json sends it) is skipped by the mapping, in
#     the snapshot and in the stream;
#  7. a NaN (written as null by wal2json) halts decoder_value_ambiguous;
#  8. origin => 'none' skips source transactions written under a
#     replication origin (include-origin), 'any' mirrors them;
#  throughout: no row value in the destination's log or status.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "output_plugin_libraries = 'pgoutput, wal2json'\n"
	  . "max_replication_slots = 20\nmax_wal_senders = 20\n");
my $sentinel = 'SENTINEL_w2j_value';

$src->safe_psql('postgres', q{
CREATE ROLE mirror LOGIN REPLICATION;
GRANT pg_read_all_settings TO mirror;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO mirror;
});
my $conn = "host=127.0.0.1 port=" . $src->port . " dbname=postgres user=mirror";
my ($sysid, $db) = AshTest::source_identity($src);

# a wal2json sink over @tables (created at both ends by the caller)
sub w2j_sink
{
	my ($sink, $tables, %o) = @_;
	AshTest::setup_pipeline($src, $dst, sink => $sink, connection => $conn,
		decoder => 'wal2json', tables => [ map { "public.$_" } @$tables ],
		source_role => 'mirror', %o);
	return;
}

sub preflight
{
	my ($sink, $check) = @_;
	return $dst->safe_psql('postgres',
		"SELECT verdict || ':' || coalesce(reason, '') FROM ash_replicant_preflight('$sink')"
		  . " WHERE check_name = '$check'");
}

# ---------------------------------------------------------------------------
# 1. capabilities only pgoutput has
# ---------------------------------------------------------------------------
$dst->safe_psql('postgres', "SELECT ash_replicant_create_sink('w_caps')");
for my $cap (qw(streaming failover binary_transfer))
{
	my ($rc, $out, $err) = $dst->psql('postgres',
		"SELECT ash_replicant_configure_pipeline('w_caps', " . AshTest::lit($conn)
		  . ", decoder => 'wal2json', tables => '{public.t}', $cap => true,"
		  . " source_system_identifier => '$sysid', source_database => '$db')");
	like($err, qr/decoder_capability_unsupported/, "$cap with wal2json: refused at configuration");
}

# ---------------------------------------------------------------------------
# 1b. message routes: wal2json 2.5 writes a logical message's content up to
#     its first zero byte, with no length, so no route can be told whole
#     content from cut content: a route is refused at start, by preflight,
#     and by the worker when one is added to a running pipeline
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, 'CREATE TABLE t_msg (id integer PRIMARY KEY)');
$dst->safe_psql('postgres',
	'CREATE TABLE msg_out (content text, operation_key bytea, content_digest bytea)');
w2j_sink('w_msg', ['t_msg'], maps => [ ['t_msg'] ], start => 0);
$dst->safe_psql('postgres', qq{
SELECT ash_replicant_alter_sink('w_msg', recovery_horizon => '1 hour');
SELECT ash_replicant_add_message_route('w_msg', 'note', 'msg_out'::regclass, '1 hour'::interval);
});
{
	my ($rc, $out, $err) = $dst->psql('postgres', "SELECT ash_replicant_start('w_msg')");
	like($err, qr/decoder_capability_unsupported/,
		'a message route (text target) under wal2json: refused at start');
}
is(preflight('w_msg', 'configuration_complete'), 'fail:decoder_capability_unsupported',
	'preflight: a message route under wal2json is decoder_capability_unsupported');
$dst->safe_psql('postgres', qq{
SELECT ash_replicant_drop_message_route('w_msg', 'note');
SELECT ash_replicant_alter_sink('w_msg', reset_recovery_horizon => true);
});
AshTest::start_sink($dst, 'w_msg');
AshTest::wait_caught_up($src, $dst, 'w_msg', name => 'without the route, the wal2json sink streams');
# a route added while it runs restarts the worker, which refuses it
$dst->safe_psql('postgres', qq{
SELECT ash_replicant_alter_sink('w_msg', recovery_horizon => '1 hour');
SELECT ash_replicant_add_message_route('w_msg', 'note', 'msg_out'::regclass, '1 hour'::interval);
});
$src->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'note', '\\x61620063'::bytea)");
AshTest::wait_status($dst, 'w_msg', 'misconfigured', 'decoder_capability_unsupported',
	name => 'a route added to a running wal2json pipeline: the worker halts');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM msg_out'), '0',
	'no message content was stored');
AshTest::stop_sink($dst, 'w_msg');

# ---------------------------------------------------------------------------
# 2. a configured table the source does not have
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, 'CREATE TABLE t_a (id integer PRIMARY KEY, v text)');
$dst->safe_psql('postgres', 'CREATE TABLE nosuch (id integer PRIMARY KEY)');
w2j_sink('w_missing', [qw(t_a nosuch)], maps => [ ['t_a'], ['nosuch'] ], start => 0);
is(preflight('w_missing', 'publication'), 'fail:decoder_table_missing',
	'preflight: a configured table the source lacks is decoder_table_missing');
AshTest::start_sink($dst, 'w_missing');
AshTest::wait_status($dst, 'w_missing', 'halted', 'decoder_table_missing',
	name => 'the worker halts decoder_table_missing');

# ---------------------------------------------------------------------------
# 3. keyless tables
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, q{
CREATE TABLE t_keyed (id integer PRIMARY KEY, v text);
CREATE TABLE t_keyless (a integer, b text);
});
w2j_sink('w_keyless', [qw(t_keyed t_keyless)], maps => [ ['t_keyed'] ],
	ignored_sources => ['public.t_keyless'], start => 0);
is(preflight('w_keyless', 'publication'), 'fail:decoder_table_keyless',
	'preflight: a table without replica identity is decoder_table_keyless');
AshTest::start_sink($dst, 'w_keyless');
AshTest::wait_status($dst, 'w_keyless', 'halted', 'decoder_table_keyless',
	name => 'the worker halts decoder_table_keyless');

w2j_sink('w_keyless_ok', [qw(t_keyed t_keyless)], maps => [ ['t_keyed'] ],
	ignored_sources => ['public.t_keyless'], pipeline_extra => 'allow_keyless_tables => true');
AshTest::wait_caught_up($src, $dst, 'w_keyless_ok', name => 'allow_keyless_tables: the pipeline streams');
$src->safe_psql('postgres', q{
INSERT INTO t_keyed SELECT g, 'k' || g FROM generate_series(1, 5) g;
INSERT INTO t_keyless VALUES (1, 'x');
UPDATE t_keyless SET b = 'y';
DELETE FROM t_keyless;
UPDATE t_keyed SET v = v || '!' WHERE id < 3;
});
AshTest::wait_caught_up($src, $dst, 'w_keyless_ok');
AshTest::assert_mirror_equal($src, $dst, ['t_keyed'], name => 'allow_keyless_tables: keyed table mirrored');
AshTest::stop_settled($src, $dst, 'w_keyless_ok');

# ---------------------------------------------------------------------------
# 4. output_plugin_libraries without wal2json
# ---------------------------------------------------------------------------
$src->safe_psql('postgres', "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput'; SELECT pg_reload_conf()");
AshTest::poll($src, "SELECT current_setting('output_plugin_libraries') = 'pgoutput'", 't');
AshTest::both($src, $dst, 'CREATE TABLE t_p (id integer PRIMARY KEY, v text)');
w2j_sink('w_plugin', ['t_p'], maps => [ ['t_p'] ], start => 0);
is(preflight('w_plugin', 'output_plugin'), 'fail:decoder_plugin_not_allowed',
	'preflight: a plugin missing from output_plugin_libraries is decoder_plugin_not_allowed');
AshTest::start_sink($dst, 'w_plugin');
AshTest::wait_status($dst, 'w_plugin', 'misconfigured', 'decoder_plugin_not_allowed',
	name => 'the worker halts decoder_plugin_not_allowed when the source refuses the slot');
$src->safe_psql('postgres', "ALTER SYSTEM RESET output_plugin_libraries; SELECT pg_reload_conf()");
AshTest::poll($src, "SELECT current_setting('output_plugin_libraries') LIKE '%wal2json%'", 't');
is(preflight('w_plugin', 'output_plugin'), 'pass:', 'preflight: wal2json listed again');
AshTest::stop_sink($dst, 'w_plugin');
AshTest::start_sink($dst, 'w_plugin');
AshTest::wait_caught_up($src, $dst, 'w_plugin', name => 'listed again, the pipeline streams');
AshTest::stop_settled($src, $dst, 'w_plugin');

# the source cannot load the plugin's library (here: not on its library path)
AshTest::both($src, $dst, 'CREATE TABLE t_lib (id integer PRIMARY KEY)');
w2j_sink('w_lib', ['t_lib'], maps => [ ['t_lib'] ], start => 0);
$src->safe_psql('postgres', "ALTER SYSTEM SET dynamic_library_path = '/nonexistent'; SELECT pg_reload_conf()");
AshTest::poll($src, "SELECT current_setting('dynamic_library_path') = '/nonexistent'", 't');
AshTest::start_sink($dst, 'w_lib');
AshTest::wait_status($dst, 'w_lib', 'halted', 'decoder_extension_missing',
	name => 'a source without the wal2json library halts decoder_extension_missing');
$src->safe_psql('postgres', "ALTER SYSTEM RESET dynamic_library_path; SELECT pg_reload_conf()");
AshTest::poll($src, "SELECT current_setting('dynamic_library_path') = '\$libdir'", 't');
AshTest::stop_sink($dst, 'w_lib');
AshTest::start_sink($dst, 'w_lib');
AshTest::wait_caught_up($src, $dst, 'w_lib', name => 'the library back, the pipeline streams');
AshTest::stop_settled($src, $dst, 'w_lib');

# ---------------------------------------------------------------------------
# 5. decoder or table set changed under an existing checkpoint
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, 'CREATE TABLE t_sw (id integer PRIMARY KEY, v text)');
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_sw FOR TABLE t_sw');
AshTest::setup_pipeline($src, $dst, sink => 'w_switch', connection => $conn, publication => 'pub_sw',
	maps => [ ['t_sw'] ]);
AshTest::wait_caught_up($src, $dst, 'w_switch', name => 'pgoutput pipeline streams before the switch');
AshTest::stop_settled($src, $dst, 'w_switch');
my $facts = AshTest::checkpoint_facts($dst, 'w_switch');
$dst->safe_psql('postgres', "SELECT ash_replicant_configure_pipeline('w_switch', " . AshTest::lit($conn)
	  . ", decoder => 'wal2json', tables => '{public.t_sw, public.ash_marker_w_switch}',"
	  . " source_system_identifier => '$sysid', source_database => '$db')");
AshTest::start_sink($dst, 'w_switch');
AshTest::wait_status($dst, 'w_switch', 'misconfigured', 'decoder_contract_incompatible',
	name => 'switching pgoutput to wal2json on a checkpoint halts decoder_contract_incompatible');
is(AshTest::checkpoint_facts($dst, 'w_switch'), $facts, 'the checkpoint is unchanged');

AshTest::both($src, $dst, q{
CREATE TABLE t_ts1 (id integer PRIMARY KEY);
CREATE TABLE t_ts2 (id integer PRIMARY KEY);
});
w2j_sink('w_tables', ['t_ts1'], maps => [ ['t_ts1'], ['t_ts2'] ]);
AshTest::wait_caught_up($src, $dst, 'w_tables', name => 'wal2json pipeline streams before the table-set change');
AshTest::stop_settled($src, $dst, 'w_tables');
$dst->safe_psql('postgres', "SELECT ash_replicant_configure_pipeline('w_tables', " . AshTest::lit($conn)
	  . ", decoder => 'wal2json', tables => '{public.t_ts1, public.t_ts2, public.ash_marker_w_tables}',"
	  . " source_system_identifier => '$sysid', source_database => '$db')");
AshTest::start_sink($dst, 'w_tables');
AshTest::wait_status($dst, 'w_tables', 'misconfigured', 'decoder_contract_incompatible',
	name => 'another table set on a checkpoint halts decoder_contract_incompatible');

# ---------------------------------------------------------------------------
# 6. source columns
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, q{
CREATE TABLE s_add (id integer PRIMARY KEY, a text, n integer);
CREATE TABLE s_src (id integer PRIMARY KEY, a text);
CREATE TABLE s_drop (id integer PRIMARY KEY, a text, n integer);
CREATE TABLE s_check (id integer PRIMARY KEY, a text, t text);
CREATE TABLE s_lag (id integer PRIMARY KEY, a text);
});
w2j_sink('w_add', ['s_add'], maps => [ ['s_add'] ]);
w2j_sink('w_src', ['s_src'], maps => [ ['s_src'] ]);
w2j_sink('w_drop', ['s_drop'], maps => [ ['s_drop'] ]);
w2j_sink('w_check', ['s_check'], maps => [ ['s_check'] ], pipeline_extra => 'schema_check_interval_ms => 200');
w2j_sink('w_lag', ['s_lag'], maps => [ ['s_lag'] ]);
for my $s (qw(w_add w_src w_drop w_check w_lag))
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s streams");
}
$src->safe_psql('postgres', q{
INSERT INTO s_add VALUES (1, 'a', 1);
INSERT INTO s_src VALUES (1, 'a');
INSERT INTO s_drop VALUES (1, 'a', 1);
INSERT INTO s_check VALUES (1, 'a', 't');
INSERT INTO s_lag VALUES (1, 'a');
});
# applied before what follows halts: a halt rolls back the whole open batch
for my $s (qw(w_add w_src w_drop w_check w_lag))
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s: first rows applied");
}

# a column added at both ends, the target first (an operator's order: the
# census, every second here, halts source_column_unmapped if it sees the
# source's column before the target has it): described again, halted
# source_column_added (the target held a row), acknowledged, mirrored
AshTest::both($dst, $src, 'ALTER TABLE s_add ADD COLUMN c text');
$src->safe_psql('postgres', "INSERT INTO s_add VALUES (2, 'b', 2, 'c'); UPDATE s_add SET c = 'cc' WHERE id = 1");
AshTest::acknowledge_column_added($src, $dst, 'w_add', 's_add', 'a column added at both ends');
AshTest::wait_caught_up($src, $dst, 'w_add', name => 'a column added at both ends: streams on');
AshTest::assert_mirror_equal($src, $dst, ['s_add'], name => 'a column added at both ends');

# added at the source only: the judgement of pgoutput's Relation message
$src->safe_psql('postgres', "ALTER TABLE s_src ADD COLUMN extra text; INSERT INTO s_src VALUES (2, 'b', '$sentinel')");
AshTest::wait_status($dst, 'w_src', 'misconfigured', 'source_column_unmapped',
	name => 'a column added at the source only halts source_column_unmapped');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM s_src'), '1', 'nothing of that change applied');
$dst->safe_psql('postgres', 'ALTER TABLE s_src ADD COLUMN extra text');
AshTest::stop_sink($dst, 'w_src');
AshTest::start_sink($dst, 'w_src');
AshTest::acknowledge_column_added($src, $dst, 'w_src', 's_src', 'the target column added');
AshTest::wait_caught_up($src, $dst, 'w_src', name => 'the target column added: streams on');
AshTest::assert_mirror_equal($src, $dst, ['s_src'], name => 'after the column was added');

# a mapped column dropped, then an update: halts at that change
$src->safe_psql('postgres', "ALTER TABLE s_drop DROP COLUMN n; UPDATE s_drop SET a = '$sentinel'");
AshTest::wait_status($dst, 'w_drop', 'misconfigured', 'source_column_missing',
	name => 'a dropped mapped column halts source_column_missing at the next change');
is($dst->safe_psql('postgres', 'SELECT a FROM s_drop'), 'a', 'the update is not applied');

# the schema check: a dropped text column (wal2json leaves unchanged TOAST
# out the same way) is seen with no change at all, then the next change halts
my $described = scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.schema_described sink=w_check .*changed=1/));
$src->safe_psql('postgres', 'ALTER TABLE s_check DROP COLUMN t');
ok(AshTest::poll($dst, "SELECT true", 't') && poll_log($dst, qr/event=pipeline\.schema_described sink=w_check .*changed=1/, $described),
	'the schema check describes the table again without any change');
$src->safe_psql('postgres', "UPDATE s_check SET a = '$sentinel'");
AshTest::wait_status($dst, 'w_check', 'misconfigured', 'source_column_missing',
	name => 'then the next change halts source_column_missing');
is($dst->safe_psql('postgres', 'SELECT t FROM s_check'), 't', 'the mirrored value is kept');

# a change written before an ALTER, decoded after it
AshTest::stop_settled($src, $dst, 'w_lag');
$src->safe_psql('postgres', "INSERT INTO s_lag VALUES (2, '$sentinel')");
AshTest::both($src, $dst, 'ALTER TABLE s_lag ADD COLUMN late text');
AshTest::start_sink($dst, 'w_lag');
AshTest::wait_status($dst, 'w_lag', 'halted', 'decoder_schema_drift',
	name => 'a change older than the table\'s columns halts decoder_schema_drift');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM s_lag'), '1', 'nothing of it applied');

# a change written before a type change, decoded after it: the type OID
# alone tells the types apart (the worker asks for no type names), here
# two types whose values are both JSON strings (the target is already of
# the new type: a changed target would be a contract change), and a retype
# that keeps every value (one that rewrote them is a publication_gap at
# the start, test 145)
$src->safe_psql('postgres', 'CREATE TABLE s_type (id integer PRIMARY KEY, ts varchar(20))');
$dst->safe_psql('postgres', 'CREATE TABLE s_type (id integer PRIMARY KEY, ts text)');
w2j_sink('w_type', ['s_type'], maps => [ ['s_type'] ]);
AshTest::wait_caught_up($src, $dst, 'w_type', name => 'w_type streams');
$src->safe_psql('postgres', "INSERT INTO s_type VALUES (1, '2026-01-01')");
AshTest::wait_caught_up($src, $dst, 'w_type', name => 'w_type: first row applied');
AshTest::stop_settled($src, $dst, 'w_type');
$src->safe_psql('postgres', "INSERT INTO s_type VALUES (2, '2026-01-02')");
$src->safe_psql('postgres', 'ALTER TABLE s_type ALTER COLUMN ts TYPE text');
AshTest::start_sink($dst, 'w_type');
AshTest::wait_status($dst, 'w_type', 'halted', 'decoder_schema_drift',
	name => 'a change older than its column\'s type halts decoder_schema_drift');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM s_type'), '1', 'nothing of it applied');

# generated columns: wal2json sends them (pgoutput does not), so the mapping
# skips them; the snapshot describes the table the same way
AshTest::both($src, $dst,
	'CREATE TABLE s_gen (id integer PRIMARY KEY, a integer, b integer GENERATED ALWAYS AS (a * 2) STORED)');
$src->safe_psql('postgres', 'INSERT INTO s_gen (id, a) SELECT g, g FROM generate_series(1, 10) g');
w2j_sink('w_gen', ['s_gen'], maps => [ [ 's_gen', skip => ['b'] ] ], pipeline_extra => "snapshot => 'v1'");
AshTest::wait_caught_up($src, $dst, 'w_gen', name => 'generated column skipped: snapshot and stream');
$src->safe_psql('postgres', 'INSERT INTO s_gen (id, a) VALUES (11, 11); UPDATE s_gen SET a = a + 100 WHERE id <= 3');
AshTest::wait_caught_up($src, $dst, 'w_gen');
AshTest::assert_mirror_equal($src, $dst, ['s_gen'], name => 'a generated column, computed at the destination');

# a partitioned table listed itself: wal2json decodes its partitions under
# their own names, and a copy FROM ONLY it reads nothing -- refused before
# anything is copied (it stayed healthy with an empty mirror)
$src->safe_psql('postgres', q{
CREATE TABLE s_part (id integer PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE s_part1 PARTITION OF s_part FOR VALUES FROM (0) TO (100);
INSERT INTO s_part SELECT g, 'p' || g FROM generate_series(1, 5) g;
GRANT SELECT ON s_part, s_part1 TO mirror;
});
$dst->safe_psql('postgres', 'CREATE TABLE s_part (id integer PRIMARY KEY, v text)');
w2j_sink('w_part', ['s_part'], maps => [ ['s_part'] ], pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'w_part', 'misconfigured', 'decoder_capability_unsupported',
	name => 'a partitioned table in the tables: misconfigured decoder_capability_unsupported');
is(preflight('w_part', 'publication'), 'fail:decoder_capability_unsupported', 'preflight names it');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM s_part'), '0', 'nothing copied');
AshTest::stop_sink($dst, 'w_part');

# ---------------------------------------------------------------------------
# 7. NaN
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, 'CREATE TABLE s_nan (id integer PRIMARY KEY, f double precision NOT NULL, note text)');
w2j_sink('w_nan', ['s_nan'], maps => [ ['s_nan'] ]);
AshTest::wait_caught_up($src, $dst, 'w_nan', name => 'w_nan streams');
$src->safe_psql('postgres', "INSERT INTO s_nan VALUES (1, 1.5, 'one')");
AshTest::wait_caught_up($src, $dst, 'w_nan', name => 'w_nan: the first row applied');
$src->safe_psql('postgres', "INSERT INTO s_nan VALUES (2, 'NaN', '$sentinel')");
AshTest::wait_status($dst, 'w_nan', 'halted', 'decoder_value_ambiguous',
	name => 'NaN, written as null by wal2json, halts decoder_value_ambiguous');
is($dst->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM s_nan'), '1',
	'the NaN transaction is not applied');

# ---------------------------------------------------------------------------
# 8. origin => 'none': wal2json says a transaction's origin only when asked
#    (include-origin); a transaction written under a replication origin at
#    the source is skipped, a local one mirrored; origin => 'any' mirrors
#    both.
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, 'CREATE TABLE s_orig (id int PRIMARY KEY, v text NOT NULL)');
$dst->safe_psql('postgres', 'CREATE TABLE s_orig_any (id int PRIMARY KEY, v text NOT NULL)');
$src->safe_psql('postgres', 'GRANT SELECT ON s_orig TO mirror');
w2j_sink('w_none', ['s_orig'], maps => [ ['s_orig'] ], pipeline_extra => "origin => 'none'");
w2j_sink('w_any', ['s_orig'], maps => [ [ 's_orig_any', source_table => 's_orig' ] ]);
AshTest::wait_caught_up($src, $dst, $_, name => "$_ streams") for qw(w_none w_any);
$src->safe_psql('postgres', q{
INSERT INTO s_orig VALUES (1, 'local');
SELECT pg_replication_origin_create('another_mirror');
SELECT pg_replication_origin_session_setup('another_mirror');
INSERT INTO s_orig VALUES (2, 'mirrored here');
UPDATE s_orig SET v = 'changed by a mirror' WHERE id = 1;
SELECT pg_replication_origin_session_reset();
INSERT INTO s_orig VALUES (3, 'local again');
});
AshTest::wait_caught_up($src, $dst, $_, name => "$_ caught up") for qw(w_none w_any);
is($dst->safe_psql('postgres', "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM s_orig"),
	'1:local,3:local again', "origin none: the transactions of another origin are skipped");
is($dst->safe_psql('postgres', "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM s_orig_any"),
	'1:changed by a mirror,2:mirrored here,3:local again', 'origin any: every transaction mirrored');
cmp_ok(AshTest::stat_row($dst, 'w_none')->{skipped_changes}, '>=', 2,
	'origin none: the skipped changes are counted');
is(AshTest::status_row($dst, 'w_none')->{state}, 'healthy', 'origin none: healthy');

# ---------------------------------------------------------------------------
# no values out
# ---------------------------------------------------------------------------
my @leaks = AshTest::grep_logs_for($sentinel, $dst);
is(scalar(@leaks), 0, 'no row value in the destination log') or diag join("\n", @leaks[0 .. 4]);
unlike(AshTest::catalog_text($dst), qr/\Q$sentinel\E/, 'no row value in status or catalogs');

done_testing();

# poll_log($node, $re, $before): a log line matching $re beyond the first
# $before ones appears (bounded wait)
sub poll_log
{
	my ($node, $re, $before) = @_;
	for (1 .. 300)
	{
		return 1 if scalar(AshTest::log_lines_like($node, $re)) > $before;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}
