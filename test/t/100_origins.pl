# Loop-safe replication origins (docs/operations.md#replication-origins):
#   - every transaction a pipeline commits carries the origin named for its
#     sink, created on first use: a logical decoding consumer of the
#     destination filtering by origin (test_decoding's only-local) sees none
#     of the mirrored rows, but sees the destination's local writes;
#   - the origin's progress is the source end of the last batch (informational);
#   - a cascade source -> A -> B with a pipeline on each hop (origin => 'any',
#     the default) mirrors the source exactly into B;
#   - two servers mirroring each other's tables (both publish both tables,
#     both sinks map both, origin => 'none') converge and never loop: neither
#     sink re-applies a change that came from its own server (per-table
#     counters stay 0 there) although the echoes arrive and are skipped;
#   - a snapshot under origin => 'none' (docs/snapshots.md#origins) copies
#     from a server that holds no replication origin (v1 and incremental);
#     from one that holds an origin (P: its sink from Q writes there) it
#     copies an empty table, but cannot tell mirrored rows from local ones
#     in a table with rows: preflight fails existing_rows, and the worker
#     halts snapshot_unsupported with nothing copied -- v1 before its first
#     table, incremental at its first chunk;
#   - origin is validated; dropping a sink drops its origin.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;

# a destination that is also a source: logical WAL, reachable over TCP
my $as_source = qq{
wal_level = logical
listen_addresses = '127.0.0.1'
max_wal_senders = 10
max_replication_slots = 10
};
# a source that is also a destination: the library preloaded
my $as_destination = qq{
shared_preload_libraries = 'ash_replicant'
ash_replicant.database = 'postgres'
ash_replicant.naptime = '500ms'
ash_replicant.reconnect_min_delay = '200ms'
ash_replicant.reconnect_max_delay = '2s'
ash_replicant.receive_timeout = '10s'
max_worker_processes = 24
};

sub open_as_source
{
	my ($node) = @_;
	$node->append_conf('pg_hba.conf', qq{
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
});
	$node->reload;
	$node->safe_psql($DB, 'CREATE EXTENSION IF NOT EXISTS pg_walinspect');
	return;
}

sub origin_count
{
	my ($node, $name) = @_;
	return $node->safe_psql($DB,
		"SELECT count(*) FROM pg_replication_origin WHERE roname = " . AshTest::lit($name));
}

sub table_stat
{
	my ($node, $sink, $target, $col) = @_;
	return $node->safe_psql($DB,
		"SELECT coalesce(sum($col), 0) FROM ash_replicant.stat_tables WHERE sink_name = "
		  . AshTest::lit($sink) . " AND target = " . AshTest::lit($target) . " AND tenant IS NULL");
}

##############################################################################
# Cascade: source -> A -> B.
##############################################################################

my ($src, $a) = AshTest::start_pair(name_prefix => 'c_', dst_conf => $as_source);
open_as_source($a);
my ($p, $q) = AshTest::start_pair(name_prefix => 'm_', src_conf => $as_destination,
	dst_conf => $as_source);
open_as_source($q);
$p->safe_psql($DB, 'CREATE EXTENSION ash_replicant');
my $b = $q;    # B of the cascade is also one server of the mirrored pair

my $t_sql = 'CREATE TABLE casc (id bigint PRIMARY KEY, v text NOT NULL)';
$_->safe_psql($DB, $t_sql) for ($src, $a, $b);
$src->safe_psql($DB, 'CREATE PUBLICATION pub_c FOR TABLE casc');
$src->safe_psql($DB, "INSERT INTO casc SELECT g, 'first ' || g FROM generate_series(1, 10) g");

# a consumer of A that keeps only local changes, as a PostgreSQL 16
# subscription with origin = none does
$a->safe_psql($DB,
	"SELECT pg_create_logical_replication_slot('watch_a', 'test_decoding')");

AshTest::setup_pipeline($src, $a, sink => 'hop1', publication => 'pub_c',
	maps => [ ['casc'] ], pipeline_extra => "snapshot => 'v1'");
AshTest::wait_status($a, 'hop1', 'healthy', undef, src => $src);

# A publishes the mirrored table on to B
$a->safe_psql($DB, 'CREATE PUBLICATION pub_a FOR TABLE casc');
AshTest::setup_pipeline($a, $b, sink => 'hop2', publication => 'pub_a',
	maps => [ ['casc'] ], pipeline_extra => "snapshot => 'v1'");
AshTest::wait_status($b, 'hop2', 'healthy', undef, src => $a);

$src->safe_psql($DB, "INSERT INTO casc SELECT g, 'second ' || g FROM generate_series(11, 60) g");
$src->safe_psql($DB, "UPDATE casc SET v = v || ' changed' WHERE id % 3 = 0");
$src->safe_psql($DB, "DELETE FROM casc WHERE id % 7 = 0");
AshTest::wait_caught_up($src, $a, 'hop1');
AshTest::wait_caught_up($a, $b, 'hop2');
AshTest::assert_mirror_equal($src, $a, ['casc'], name => 'first hop');
AshTest::assert_mirror_equal($src, $b, ['casc'], name => 'cascade: B equals the source');

is(origin_count($a, 'ash_replicant_hop1'), '1', 'the first hop created the origin named for its sink');
is(origin_count($b, 'ash_replicant_hop2'), '1', 'the second hop created its origin');
# its progress is the source end position of the last batch it committed
my ($end) = $a->safe_psql($DB,
	"SELECT end_lsn FROM ash_replicant.checkpoints WHERE slot_name = 'hop1'");
is($a->safe_psql($DB,
		"SELECT remote_lsn FROM pg_replication_origin_status s JOIN pg_replication_origin o"
		  . " ON o.roident = s.local_id WHERE o.roname = 'ash_replicant_hop1'"),
	$end, 'the origin\'s progress is the checkpoint\'s end position');

# a local write on A: the only change an origin filter lets through
$a->safe_psql($DB, "CREATE TABLE local_only (id int PRIMARY KEY)");
$a->safe_psql($DB, "INSERT INTO local_only VALUES (1)");
my $all = $a->safe_psql($DB,
	"SELECT count(*) FROM pg_logical_slot_peek_changes('watch_a', NULL, NULL)"
	  . " WHERE data LIKE 'table public.casc:%'");
my $local_casc = $a->safe_psql($DB,
	"SELECT count(*) FROM pg_logical_slot_peek_changes('watch_a', NULL, NULL, 'only-local', '1')"
	  . " WHERE data LIKE 'table public.casc:%'");
my $local_other = $a->safe_psql($DB,
	"SELECT count(*) FROM pg_logical_slot_peek_changes('watch_a', NULL, NULL, 'only-local', '1')"
	  . " WHERE data LIKE 'table public.local_only:%'");
cmp_ok($all, '>=', 60, "a consumer of A sees the mirrored changes ($all)");
is($local_casc, '0', 'filtering by origin, it sees none of them: every mirrored write is tagged');
is($local_other, '1', 'filtering by origin, it still sees A\'s own writes');
$a->safe_psql($DB, "SELECT pg_drop_replication_slot('watch_a')");

##############################################################################
# A pair mirroring each other's tables: P owns t1, Q owns t2; both publish
# both tables, both sinks map both, origin => 'none'.
##############################################################################

for my $n ($p, $q)
{
	$n->safe_psql($DB, 'CREATE TABLE t1 (id bigint PRIMARY KEY, v text NOT NULL)');
	$n->safe_psql($DB, 'CREATE TABLE t2 (id bigint PRIMARY KEY, v text NOT NULL)');
	$n->safe_psql($DB, 'CREATE PUBLICATION pub_pair FOR TABLE t1, t2');
}
# origin is validated
my ($rc, $out, $err) = $q->psql($DB,
	"SELECT ash_replicant_create_sink('bad_origin');"
	  . " SELECT ash_replicant_configure_pipeline('bad_origin', 'host=127.0.0.1', origin => 'some')");
like($err, qr/config_invalid/, 'an unknown origin setting is refused with config_invalid');

AshTest::setup_pipeline($p, $q, sink => 'from_p', publication => 'pub_pair',
	maps => [ ['t1'], ['t2'] ], pipeline_extra => "origin => 'none'");
AshTest::setup_pipeline($q, $p, sink => 'from_q', publication => 'pub_pair',
	maps => [ ['t1'], ['t2'] ], pipeline_extra => "origin => 'none'");
AshTest::wait_status($q, 'from_p', 'healthy', undef, src => $p);
AshTest::wait_status($p, 'from_q', 'healthy', undef, src => $q);
AshTest::wait_slot_consistent($p, $q, 'from_p');
AshTest::wait_slot_consistent($q, $p, 'from_q');

for my $round (1 .. 3)
{
	my $lo = ($round - 1) * 100 + 1;
	my $hi = $round * 100;
	$p->safe_psql($DB, "INSERT INTO t1 SELECT g, 'p ' || g FROM generate_series($lo, $hi) g");
	$q->safe_psql($DB, "INSERT INTO t2 SELECT g, 'q ' || g FROM generate_series($lo, $hi) g");
	$p->safe_psql($DB, "UPDATE t1 SET v = v || ' r$round' WHERE id % 5 = 0");
	$q->safe_psql($DB, "DELETE FROM t2 WHERE id % 9 = $round");
}
# twice each way: an echo committed before the first marker has arrived by
# the second one (each pipeline applies in commit order)
for (1 .. 2)
{
	AshTest::wait_caught_up($p, $q, 'from_p');
	AshTest::wait_caught_up($q, $p, 'from_q');
}
AshTest::assert_mirror_equal($p, $q, [ 't1', 't2' ], name => 'the pair converged');

is(table_stat($q, 'from_p', 'public.t1', 'inserted'), '300', 'Q applied P\'s 300 inserts of t1');
is(table_stat($q, 'from_p', 'public.t1', 'updated'), '120', 'and its 120 updates');
is(table_stat($p, 'from_q', 'public.t1', 'inserted + updated + deleted'), '0',
	'P never re-applied its own t1 rows coming back from Q');
is(table_stat($q, 'from_p', 'public.t2', 'inserted + updated + deleted'), '0',
	'Q never re-applied its own t2 rows coming back from P');
cmp_ok(AshTest::stat_row($p, 'from_q')->{skipped_changes}, '>=', 300,
	'the echoes of P\'s changes arrived at P and were skipped');
cmp_ok(AshTest::stat_row($q, 'from_p')->{skipped_changes}, '>=', 300,
	'the echoes of Q\'s changes arrived at Q and were skipped');

##############################################################################
# A snapshot under origin => 'none'.  The stream skips transactions that
# carry an origin; a table read cannot.  Copying from P, which holds the
# origin of its sink from Q, would copy Q's rows echoed back over Q's newer
# local changes: refused.  The cascade's source holds none: copied.
##############################################################################

my $keyring = "snapshot_provenance 1 " . AshTenancy::key_hex(5);
for my $n ($a, $q)
{
	AshTenancy::write_keyring($n, 'keyring', $keyring);
	$n->append_conf('postgresql.conf', "ash_replicant.keyring_file = 'keyring'\n");
	$n->reload;
}
my $prov_cols = 'replica_fingerprint bytea, replica_seen_attempt bytea';

# from the cascade's source (no origin there): both modes copy
$src->safe_psql($DB, 'CREATE PUBLICATION pub_n1 FOR TABLE casc');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_n2 FOR TABLE casc');
$a->safe_psql($DB, 'CREATE TABLE casc_n1 (id bigint PRIMARY KEY, v text NOT NULL)');
$a->safe_psql($DB, "CREATE TABLE casc_n2 (id bigint PRIMARY KEY, v text NOT NULL, $prov_cols)");
is($src->safe_psql($DB, 'SELECT count(*) FROM pg_replication_origin'), '0',
	'the cascade\'s source holds no replication origin');
AshTest::setup_pipeline($src, $a, sink => 'none_v1', publication => 'pub_n1',
	maps => [ [ 'casc_n1', source_table => 'casc' ] ],
	pipeline_extra => "origin => 'none', go_forward_only => false, snapshot => 'v1'", start => 0);
is($a->safe_psql($DB,
		"SELECT verdict FROM ash_replicant_preflight('none_v1') WHERE check_name = 'existing_rows'"),
	'pass', 'origin none, v1, a source without origins: preflight passes existing_rows');
AshTest::start_sink($a, 'none_v1');
AshTest::setup_pipeline($src, $a, sink => 'none_incr', publication => 'pub_n2', marker => 0,
	maps => [ [ 'casc_n2', source_table => 'casc', snapshot_provenance => 'true' ] ],
	pipeline_extra => "origin => 'none', go_forward_only => false, snapshot => 'incremental'");
AshTest::wait_slot_consistent($src, $a, 'none_incr');
my ($after) = AshTest::commit_tracked($src, "INSERT INTO casc VALUES (1001, 'after the snapshots started')");
AshTest::wait_caught_up($src, $a, 'none_v1', name => 'origin none, v1 from a source without origins: caught up');
ok(AshTest::wait_lsn($src, $a, 'none_incr', $after), 'origin none, incremental from it: caught up');
is($a->safe_psql($DB, q{
	SELECT string_agg(slot_name || ':' || snapshot_phase, ',' ORDER BY slot_name)
	  FROM ash_replicant.checkpoints WHERE slot_name IN ('none_v1', 'none_incr')}),
	'none_incr:complete,none_v1:complete', 'both snapshots completed');
my $casc_src = $src->safe_psql($DB, 'SELECT md5(string_agg(id || v, \',\' ORDER BY id)) FROM casc');
for my $t (qw(casc_n1 casc_n2))
{
	is($a->safe_psql($DB, "SELECT md5(string_agg(id || v, ',' ORDER BY id)) FROM $t"), $casc_src,
		"$t: the copy and the stream equal the source");
}

# from P, which holds the origin ash_replicant_from_q
is(origin_count($p, 'ash_replicant_from_q'), '1', 'P holds the origin of its sink from Q');
$p->safe_psql($DB, q{
	CREATE TABLE t3 (id bigint PRIMARY KEY, v text NOT NULL);
	INSERT INTO t3 SELECT g, 'p ' || g FROM generate_series(1, 50) g;
	CREATE TABLE t4 (id bigint PRIMARY KEY, v text NOT NULL);
	CREATE TABLE t5 (id bigint PRIMARY KEY, v text NOT NULL);
	CREATE PUBLICATION pub_t3 FOR TABLE t3, t5;
	CREATE PUBLICATION pub_t3i FOR TABLE t3;
	CREATE PUBLICATION pub_t4 FOR TABLE t4;
	CREATE PUBLICATION pub_t4i FOR TABLE t4;
});
$q->safe_psql($DB, qq{
	CREATE TABLE t3 (id bigint PRIMARY KEY, v text NOT NULL);
	CREATE TABLE t5 (id bigint PRIMARY KEY, v text NOT NULL);
	CREATE TABLE t3i (id bigint PRIMARY KEY, v text NOT NULL, $prov_cols);
	CREATE TABLE t4e (id bigint PRIMARY KEY, v text NOT NULL);
	CREATE TABLE t4i (id bigint PRIMARY KEY, v text NOT NULL, $prov_cols);
});

# an empty table holds nothing to tell apart: copied under either mode
AshTest::setup_pipeline($p, $q, sink => 'empty_p', publication => 'pub_t4',
	maps => [ [ 't4e', source_table => 't4' ] ],
	pipeline_extra => "origin => 'none', go_forward_only => false, snapshot => 'v1'", start => 0);
is($q->safe_psql($DB,
		"SELECT verdict FROM ash_replicant_preflight('empty_p') WHERE check_name = 'existing_rows'"),
	'pass', 'origin none, a source holding an origin, its table empty: preflight passes existing_rows');
AshTest::start_sink($q, 'empty_p');
AshTest::setup_pipeline($p, $q, sink => 'empty_pi', publication => 'pub_t4i', marker => 0,
	maps => [ [ 't4i', source_table => 't4', snapshot_provenance => 'true' ] ],
	pipeline_extra => "origin => 'none', go_forward_only => false, snapshot => 'incremental'");
AshTest::wait_slot_consistent($p, $q, 'empty_pi');
# an incremental snapshot reads its chunks while it streams: the row below
# must come after t4 was read empty (before, the snapshot would find a row
# it cannot tell from an origin's and rightly refuse, snapshot_unsupported)
ok(AshTest::poll($q, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines WHERE sink_name = 'empty_pi'"),
	'incremental of an empty table from P: complete before the next write');
($after) = AshTest::commit_tracked($p, "INSERT INTO t4 VALUES (1, 'written on P after the copies')");
AshTest::wait_caught_up($p, $q, 'empty_p', name => 'v1 of an empty table from P: caught up');
ok(AshTest::wait_lsn($p, $q, 'empty_pi', $after), 'incremental of an empty table from P: caught up');
is($q->safe_psql($DB, "SELECT (SELECT string_agg(v, ',') FROM t4e) || '|' || (SELECT string_agg(v, ',') FROM t4i)"),
	'written on P after the copies|written on P after the copies', 'both streamed the row written after');

# a table with rows: refused
AshTest::setup_pipeline($p, $q, sink => 'snap_p', publication => 'pub_t3', maps => [ ['t3'], ['t5'] ],
	pipeline_extra => "origin => 'none', go_forward_only => false, snapshot => 'v1'", start => 0);
my $pf = $q->safe_psql($DB,
	"SELECT verdict || ':' || coalesce(reason, '') || ':' || coalesce(detail, '')"
	  . " FROM ash_replicant_preflight('snap_p') WHERE check_name = 'existing_rows'");
like($pf, qr/^fail:snapshot_unsupported:.*replication origins.* in public\.t3 \(/,
	'origin none, a snapshot, a source holding an origin: preflight fails existing_rows, naming the table with rows');
unlike($pf, qr/t5/, 'and not the table that has none');
AshTest::start_sink($q, 'snap_p');
AshTest::wait_status($q, 'snap_p', 'halted', 'snapshot_unsupported', src => $p,
	name => 'v1: the worker halts snapshot_unsupported');
is($q->safe_psql($DB, 'SELECT count(*) FROM t3'), '0', 'v1: nothing copied');
is($q->safe_psql($DB,
		"SELECT count(*) FROM ash_replicant.snapshot_tables WHERE slot_name = 'snap_p' AND state = 'copied'"),
	'0', 'v1: no table recorded copied');
ok(scalar(AshTest::log_lines_like($q, qr/ash_replicant event=pipeline\.halt sink=snap_p reason=snapshot_unsupported/)),
	'v1: the halt line names the reason');

AshTest::setup_pipeline($p, $q, sink => 'incr_p', publication => 'pub_t3i', marker => 0,
	maps => [ [ 't3i', source_table => 't3', snapshot_provenance => 'true' ] ],
	pipeline_extra => "origin => 'none', go_forward_only => false, snapshot => 'incremental'");
AshTest::wait_status($q, 'incr_p', 'halted', 'snapshot_unsupported', src => $p,
	name => 'incremental: the worker halts snapshot_unsupported at its first chunk');
is($q->safe_psql($DB, 'SELECT count(*) FROM t3i'), '0', 'incremental: nothing copied');
is($q->safe_psql($DB,
		"SELECT coalesce(sum(chunks_copied), 0) FROM ash_replicant.snapshot_tables WHERE slot_name = 'incr_p'"),
	'0', 'incremental: no chunk recorded');

##############################################################################
# Dropping a sink drops its origin.
##############################################################################

AshTest::stop_sink($b, 'hop2');
AshTest::poll($b, "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'ash_replicant hop2'");
$b->safe_psql($DB, "SELECT ash_replicant_drop_sink('hop2')");
is(origin_count($b, 'ash_replicant_hop2'), '0', 'dropping the sink dropped its origin');
is(origin_count($a, 'ash_replicant_hop1'), '1', 'other sinks keep theirs');

##############################################################################
# DROP EXTENSION (which runs no code of ours) leaves the sinks' origins,
# each holding a replication state slot: the launcher drops them once it
# finds the extension gone (before: kept for good).
##############################################################################

ok(AshTest::poll($a, "SELECT count(*) > 0 FROM pg_replication_origin WHERE roname LIKE 'ash\\_replicant\\_%'"),
	'the first hop holds origins of its sinks');
for my $s (@{ AshTest::json_rows($a, 'SELECT sink_name FROM ash_replicant.sinks') })
{
	AshTest::stop_sink($a, $s->{sink_name});
}
$a->safe_psql($DB, "SELECT pg_replication_origin_create('not_ours')");
$a->safe_psql($DB, 'DROP EXTENSION ash_replicant CASCADE');
ok(AshTest::poll($a, "SELECT count(*) = 0 FROM pg_replication_origin WHERE roname LIKE 'ash\\_replicant\\_%'"),
	'the launcher dropped every origin of the dropped extension');
is(origin_count($a, 'not_ours'), '1', 'an origin of another name stays');
ok(scalar(AshTest::log_lines_like($a, qr/event=launcher\.origins_dropped count=\d+ held=0/)),
	'the launcher says how many it dropped');

done_testing();
