# Append-log sinks (docs/history-and-events.md): one immutable event per source change.
#
# An append-log sink maps a source table (REPLICA IDENTITY FULL, an
# out-of-line TOAST column updates mostly leave unchanged) and routes a
# message prefix into the same log.  A mixed workload -- inserts, updates,
# deletes, a TRUNCATE (on_truncate 'append'), transactional messages inside
# transactions and non-transactional ones between them -- runs while the
# destination is killed (-9).  An audit trigger on the SOURCE records every
# change in order; with each transaction's commit LSN (pg_walinspect) it
# gives the exact expected log:
#   - exactly one event per change: commit_lsn, ordinal (shared by row
#     changes, truncates and transactional messages, from 1), operation, the
#     complete new row (insert/update), the complete OLD row (delete),
#     structural-only truncate rows, message prefix/content; a
#     non-transactional message at its own LSN with ordinal 0;
#   - the identity axes and origin of every event;
#   - re-delivery after the crash appended nothing twice (same log);
#   - quiet WAL is acknowledged once recorded (acknowledged_lsn);
#   - a checkpoint moved back below stored events halts
#     append_frontier_divergent; a slot created anew for a log with an origin
#     floor halts append_origin_gap;
#   - a source column named like a structural column halts
#     delivery_config_invalid (second sink).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $seed = $ENV{ASH_SEED} // (time() ^ $$) % 1_000_000;
srand($seed);
note "seed $seed (rerun with ASH_SEED=$seed)";

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $sink = 'evlog';
my $marker = AshTest::marker_table($sink);

my $structural = AshTest::append_log_columns();
my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';

$src->safe_psql('postgres', qq{
CREATE TABLE ev (id integer PRIMARY KEY, grp integer, val text, big text);
ALTER TABLE ev ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE ev REPLICA IDENTITY FULL;
CREATE TABLE $marker (id bigint PRIMARY KEY, note text);
ALTER TABLE $marker REPLICA IDENTITY FULL;
CREATE TABLE quiet (id integer);
CREATE PUBLICATION pub_ev FOR TABLE ev, $marker;

CREATE TABLE audit (seq bigserial PRIMARY KEY, xid text, op text, id integer, img text, lsn pg_lsn);
CREATE FUNCTION audit_ev() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO audit (xid, op, id, img) VALUES (pg_current_xact_id()::text, 'delete', OLD.id, md5(row(OLD.grp, OLD.val, OLD.big)::text));
	ELSE
		INSERT INTO audit (xid, op, id, img) VALUES (pg_current_xact_id()::text, lower(TG_OP), NEW.id, md5(row(NEW.grp, NEW.val, NEW.big)::text));
	END IF;
	RETURN NULL;
END \$\$;
CREATE TRIGGER audit_ev AFTER INSERT OR UPDATE OR DELETE ON ev FOR EACH ROW EXECUTE FUNCTION audit_ev();
CREATE FUNCTION audit_ev_truncate() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	INSERT INTO audit (xid, op) VALUES (pg_current_xact_id()::text, 'truncate');
	RETURN NULL;
END \$\$;
CREATE TRIGGER audit_ev_truncate BEFORE TRUNCATE ON ev FOR EACH STATEMENT EXECUTE FUNCTION audit_ev_truncate();
});
$dst->safe_psql('postgres', qq{
CREATE TABLE ev_log ($structural, id integer, grp integer, val text, big text, $axes);
CREATE TABLE $marker ($structural, id bigint, note text, $axes);
});

my ($sysid, $db) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
for my $stmt (
	"SELECT ash_replicant_create_sink('$sink', sink_kind => 'append_log', initial_state => 'go_forward')",
	"SELECT ash_replicant_map_table('$sink', 'ev_log'::regclass, source_table => 'ev', append_log => true, on_truncate => 'append')",
	"SELECT ash_replicant_map_table('$sink', '$marker'::regclass, append_log => true)",
	"SELECT ash_replicant_add_message_route('$sink', 'evmsg', 'ev_log'::regclass, '1 day'::interval)",
	"SELECT ash_replicant_configure_pipeline('$sink', '$conn', publication => 'pub_ev',"
	  . " source_system_identifier => '$sysid', source_database => '$db', census => '{\"interval_ms\": 1000}')",
	"SELECT ash_replicant_start('$sink')")
{
	my ($rc, $out, $err) = $dst->psql('postgres', $stmt);
	die "setup failed: " . substr($stmt, 0, 60) . ": $err" if $rc;
}
AshTest::wait_caught_up($src, $dst, $sink, name => 'append-log pipeline streams')
  or BAIL_OUT('pipeline never streamed');
is($dst->safe_psql('postgres', "SELECT origin_floor IS NOT NULL FROM ash_replicant.checkpoints WHERE slot_name = '$sink'"),
	't', 'the first activation wrote the origin floor');
my $floor = $dst->safe_psql('postgres', "SELECT origin_floor FROM ash_replicant.checkpoints WHERE slot_name = '$sink'");
my $wal_from = $src->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# ---------------------------------------------------------------------------
# Workload
# ---------------------------------------------------------------------------
my $big = sub { my ($i) = @_; "repeat(md5('$i' || random()::text), 80)" };
my %live;
my $next = 1;
my $script = '';
for my $x (1 .. 200)
{
	my @s;
	if ($x == 70)
	{
		push @s, 'TRUNCATE ev';
		%live = ();
	}
	for (1 .. 1 + int(rand(5)))
	{
		my $r = rand();
		my @ids = sort { $a <=> $b } keys %live;
		my $pick = @ids ? $ids[ int(rand(@ids)) ] : undef;
		if ($r < 0.35 || !defined $pick)
		{
			my $m = 1 + int(rand(3));
			push @s, "INSERT INTO ev SELECT g, g % 5, 'v' || g, " . $big->('g') . " FROM generate_series($next, " . ($next + $m - 1) . ") g";
			$live{$_} = 1 for $next .. $next + $m - 1;
			$next += $m;
		}
		elsif ($r < 0.6) { push @s, "UPDATE ev SET val = md5(val), grp = grp + 1 WHERE id = $pick"; }    # big unchanged
		elsif ($r < 0.68) { push @s, "UPDATE ev SET big = " . $big->($pick) . " WHERE id = $pick"; }
		elsif ($r < 0.8) { push @s, "DELETE FROM ev WHERE id = $pick"; delete $live{$pick}; }
		else
		{
			push @s, "SELECT pg_logical_emit_message(true, 'evmsg', 't$x-$r')",
			  "INSERT INTO audit (xid, op, img) VALUES (pg_current_xact_id()::text, 'message', md5('evmsg:t$x-$r'))";
		}
	}
	$script .= "BEGIN;\n" . join(";\n", @s) . ";\nCOMMIT;\n";
	$script .= "INSERT INTO audit (op, img, lsn) SELECT 'nontx', md5('evmsg:n$x'), pg_logical_emit_message(false, 'evmsg', 'n$x');\n"
	  if rand() < 0.1;
	$script .= "SELECT pg_sleep(0.01);\n" if rand() < 0.4;
}
my $w = AshTest::start_workload($src, $script, timeout => 300);
AshTest::poll($dst, 'SELECT count(*) > 40 FROM ev_log', 't', timeout => 60);
note 'kill -9 destination mid-workload';
AshTest::crash_restart($dst);
ok(AshTest::finish_workload($w), 'source workload completed');
AshTest::wait_caught_up($src, $dst, $sink, name => 'caught up after the crash', timeout => 120);

# ---------------------------------------------------------------------------
# The log equals the source's changes, one event each
# ---------------------------------------------------------------------------
my @expected = split /\n/, $src->safe_psql('postgres', qq{
WITH c AS (SELECT xid::text AS xid, (start_lsn - '0/0'::pg_lsn)::bigint AS lsn
           FROM pg_get_wal_records_info('$wal_from', pg_current_wal_flush_lsn())
           WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'),
     t AS (SELECT c.lsn, row_number() OVER (PARTITION BY a.xid ORDER BY a.seq) AS ordinal, a.op, a.id, a.img
           FROM audit a JOIN c USING (xid) WHERE a.op <> 'nontx')
SELECT lsn || '|' || ordinal || '|' || op || '|' || coalesce(id::text, '-') || '|' || coalesce(img, '-') FROM t
UNION ALL
SELECT (lsn - '0/0'::pg_lsn)::bigint || '|0|message|-|' || img FROM audit WHERE op = 'nontx'
ORDER BY 1});
my @actual = split /\n/, $dst->safe_psql('postgres', q{
SELECT commit_lsn || '|' || ordinal || '|' || operation || '|' || coalesce(id::text, '-') || '|' ||
       CASE operation WHEN 'truncate' THEN '-'
                      WHEN 'message' THEN md5(message_prefix || ':' || convert_from(message_content, 'UTF8'))
                      ELSE md5(row(grp, val, big)::text) END
FROM ev_log ORDER BY 1});
is(scalar(@actual), scalar(@expected), 'one event per source change (count)');
my %e = map { $_ => 1 } @expected;
my %a = map { $_ => 1 } @actual;
my @missing = grep { !$a{$_} } @expected;
my @extra = grep { !$e{$_} } @actual;
ok(!@missing && !@extra, 'events (position, operation, complete row images, messages) equal the source changes')
  or diag "missing: @missing[0 .. ($#missing < 5 ? $#missing : 5)]\nextra: @extra[0 .. ($#extra < 5 ? $#extra : 5)]";
my %ops;
$ops{ (split /\|/)[2] }++ for @actual;
note join ', ', map { "$_=$ops{$_}" } sort keys %ops;
ok(($ops{delete} // 0) > 0 && ($ops{truncate} // 0) == 1 && ($ops{message} // 0) > 0 && ($ops{update} // 0) > 0,
	'the log holds inserts, updates, deletes, one truncate and messages');
is($dst->safe_psql('postgres', qq{
	SELECT count(*) FROM ev_log
	WHERE source_system_id <> '$sysid' OR source_database <> '$db' OR slot_name <> '$sink'
	   OR origin <> 'stream' OR snapshot_attempt IS NOT NULL
	   OR (operation = 'message') <> (message_prefix IS NOT NULL AND message_content IS NOT NULL)
	   OR (operation IN ('truncate', 'message')) <> (id IS NULL AND val IS NULL AND big IS NULL)
	   OR (operation IN ('insert', 'update', 'delete') AND big IS NULL)}),
	'0', 'identity axes, origin and operation shapes of every event');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM ev_log WHERE operation = 'message' AND ordinal = 0}),
	$src->safe_psql('postgres', q{SELECT count(*) FROM audit WHERE op = 'nontx'}),
	'non-transactional messages at their own LSN with ordinal 0');

# ---------------------------------------------------------------------------
# Never acknowledged past the durable watermark while idle
# ---------------------------------------------------------------------------
$src->safe_psql('postgres', 'INSERT INTO quiet SELECT generate_series(1, 1000)') for 1 .. 3;
my $src_lsn = $src->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
# the walsender has read past the quiet WAL (its keepalives carry that
# position): the log acknowledges it once it has recorded it
# (checkpoints.acknowledged_lsn), so its slot follows the source's WAL and
# never gets past what the destination remembers
AshTest::poll($src, "SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 'ash_replicant $sink' AND sent_lsn >= '$src_lsn'", 't');
my $end = $dst->safe_psql('postgres', "SELECT end_lsn FROM ash_replicant.checkpoints WHERE slot_name = '$sink'");
ok(AshTest::poll($src, "SELECT confirmed_flush_lsn >= '$src_lsn'::pg_lsn AND '$src_lsn'::pg_lsn > '$end'::pg_lsn"
		  . " FROM pg_replication_slots WHERE slot_name = '$sink'", 't')
	  && $dst->safe_psql('postgres', "SELECT acknowledged_lsn >= '"
		  . $src->safe_psql('postgres', "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$sink'")
		  . "'::pg_lsn FROM ash_replicant.checkpoints WHERE slot_name = '$sink'") eq 't',
	'quiet WAL is acknowledged past the last event once recorded');

# ---------------------------------------------------------------------------
# Frontier and origin checks at activation
# ---------------------------------------------------------------------------
my $events_before = $dst->safe_psql('postgres', 'SELECT count(*) FROM ev_log');
AshTest::stop_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'not_started', undef, name => 'stopped');
my $mid = $dst->safe_psql('postgres', "SELECT ('0/0'::pg_lsn + min(commit_lsn)::numeric)::text FROM ev_log");
$dst->safe_psql('postgres', "UPDATE ash_replicant.checkpoints SET commit_lsn = '$mid', end_lsn = '$mid' WHERE slot_name = '$sink'");
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'halted', 'append_frontier_divergent',
	name => 'a watermark below stored events halts append_frontier_divergent');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM ev_log'), $events_before, 'nothing appended');

AshTest::stop_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'not_started', undef, name => 'stopped again');
AshTest::poll($src, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$sink'", 't');
$src->safe_psql('postgres', "SELECT pg_drop_replication_slot('$sink')");
# the operator purges the log and resets the watermark: the frontier is
# clean, but the new slot starts after the history the log had (the
# acknowledged position reset too: a checkpoint that acknowledged a slot
# halts source_slot_missing before that, test 147)
$dst->safe_psql('postgres', qq{DELETE FROM ev_log; DELETE FROM $marker;
	UPDATE ash_replicant.checkpoints SET commit_lsn = '0/0', end_lsn = '0/0', acknowledged_lsn = NULL
	 WHERE slot_name = '$sink'});
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'halted', 'append_origin_gap',
	name => 'a slot created anew for a log with an origin floor halts append_origin_gap');
is($dst->safe_psql('postgres', "SELECT origin_floor FROM ash_replicant.checkpoints WHERE slot_name = '$sink'"),
	$floor, 'the origin floor is written once');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM ev_log'), '0', 'nothing appended after the gap');

# ---------------------------------------------------------------------------
# A source column named like a structural column
# ---------------------------------------------------------------------------
$src->safe_psql('postgres', q{
CREATE TABLE evbad (id integer PRIMARY KEY, operation text);
ALTER TABLE evbad REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_bad FOR TABLE evbad;});
$dst->safe_psql('postgres', qq{CREATE TABLE evbad_log ($structural, id integer, $axes)});
for my $stmt (
	"SELECT ash_replicant_create_sink('evbad', sink_kind => 'append_log', initial_state => 'go_forward')",
	"SELECT ash_replicant_map_table('evbad', 'evbad_log'::regclass, source_table => 'evbad', append_log => true)",
	"SELECT ash_replicant_configure_pipeline('evbad', '$conn', publication => 'pub_bad',"
	  . " source_system_identifier => '$sysid', source_database => '$db')",
	"SELECT ash_replicant_start('evbad')")
{
	my ($rc, $out, $err) = $dst->psql('postgres', $stmt);
	die "setup failed: " . substr($stmt, 0, 60) . ": $err" if $rc;
}
AshTest::wait_slot_consistent($src, $dst, 'evbad');
$src->safe_psql('postgres', "INSERT INTO evbad VALUES (1, 'x')");
AshTest::wait_status($dst, 'evbad', 'halted', 'delivery_config_invalid',
	name => 'a source column named like a structural column halts delivery_config_invalid');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM evbad_log'), '0', 'nothing appended');

done_testing();
