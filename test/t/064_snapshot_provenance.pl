# Snapshot provenance (snapshot_provenance => true with snapshot => 'v1'):
# a snapshot fingerprints every copied row of a provenance mapping with the
# active snapshot_provenance key, leaves rows whose fingerprint is unchanged
# unwritten (only marked seen), rewrites the others once, and retires what it
# did not see -- SCD1 rows deleted, SCD2 open versions closed -- in the
# transaction that copies the table (docs/snapshots.md#provenance).
#
#   1  first snapshot of an SCD1 table (stock) whose destination already holds
#      stale rows, rows identical to the source but without a fingerprint and
#      rows the source lacks, with source writes (updates, deletes, inserts)
#      running while the pipeline starts; plus an SCD2 table (ledger ->
#      ledger_hist) with an open version the source lacks and an old closed
#      version.  Checks: content equals the source (provenance columns
#      excluded), audit triggers on the targets (insert/update/delete) show
#      each effect exactly once, retired rows are deleted (SCD1) or closed
#      (SCD2) in the table's copy transaction, fingerprints are 21 bytes
#      \x02 || key version || 16 bytes of HMAC, replica_seen_attempt is the attempt,
#      event=snapshot.retired is logged with the counts.
#   2  refusals and halts: snapshot 'off' with a provenance mapping (start
#      refused, snapshot_provenance_invalid); no snapshot_provenance key
#      (misconfigured/keyring_missing_family, nothing written); a tampered
#      snapshot_state, of a completed attempt and of one in progress
#      (halted/snapshot_state_invalid, mirror and checkpoint unchanged; the
#      byte flipped back, it resumes); a target fingerprint
#      naming an absent key version (halted/keyring_version_missing, the table
#      unchanged).
#   3  a second snapshot after ash_replicant_reset_checkpoint: unchanged rows
#      are not written (no audit event, same fingerprint, new attempt), rows
#      changed at the source are rewritten once, rows deleted at the source
#      (and a destination-only row) are retired; in the SCD2 table a key
#      deleted at the source has its open version closed, not deleted.
#   4  no row value (sentinels planted in source rows, one of them in the row
#      that halts keyring_version_missing) appears in either server's log.
use strict;
use warnings;

use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nlog_error_verbosity = verbose\n");
my $sink = 'p1';
my ($sysid, $sdb) = AshTest::source_identity($src);

# At first the keyring has no snapshot_provenance family.
my %key = (md => AshTenancy::key_hex(13), sp2 => AshTenancy::key_hex(11), sp3 => AshTenancy::key_hex(12));
AshTenancy::write_keyring($dst, 'keyring', "message_digest 1 $key{md}");

my @sent = map { AshTenancy::sentinel() } 1 .. 3;

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

# md5 of every column of every row (provenance columns included), ordered
sub thash
{
	my ($t) = @_;
	return q_dst("SET extra_float_digits = 3; SELECT md5(coalesce(string_agg(x::text, E'\\n' ORDER BY x::text), ''))"
		  . " || ' ' || count(*) FROM $t x");
}

# Per-id check against an audit table: $ids is SQL yielding ids (column g);
# $cond a boolean over n_all, n_ins, n_upd, n_del that must hold for each id.
# Returns the ids that break it ('' when none).
sub bad_ids
{
	my ($audit, $ids, $cond) = @_;
	my $out = q_dst("SELECT coalesce(string_agg(g::text, ',' ORDER BY g), '') FROM ("
		  . "SELECT s.g, count(a.id) AS n_all,"
		  . " count(a.id) FILTER (WHERE a.op = 'INSERT') AS n_ins,"
		  . " count(a.id) FILTER (WHERE a.op = 'UPDATE') AS n_upd,"
		  . " count(a.id) FILTER (WHERE a.op = 'DELETE') AS n_del"
		  . " FROM ($ids) s(g) LEFT JOIN $audit a ON a.id = s.g GROUP BY s.g) x WHERE NOT ($cond)");
	return length($out) > 200 ? substr($out, 0, 200) . '...' : $out;
}

sub attempt_hex
{
	return q_dst(AshTest::checkpoint_sql($sink, "coalesce(encode(c.snapshot_attempt, 'hex'), '')"));
}

# (table => rows) of every event=snapshot.retired line of the sink, in order;
# the table is normalised (quotes and schema dropped; ledger_hist -> ledger).
sub retired_events
{
	my ($sk) = @_;
	$sk //= $sink;
	my @ev;
	for my $l (AshTest::log_lines_like($dst, qr/event=snapshot\.retired sink=\Q$sk\E /))
	{
		next unless $l =~ /table=(\S+) rows=(\d+)/;
		my ($t, $n) = ($1, $2);
		$t =~ s/"//g;
		$t =~ s/^.*\.//;
		$t = 'ledger' if $t eq 'ledger_hist';
		push @ev, [ $t, $n ];
	}
	return @ev;
}

sub retired_counts
{
	my ($table, $sk) = @_;
	return join(',', map { $_->[1] } grep { $_->[0] eq $table } retired_events($sk));
}

# The retirement's transactions ($retired_sql: xids) must be the one that
# copied the table ($cx: the transaction that marked it copied); on failure,
# name the transaction that completed the attempt, for the report.
sub retired_in
{
	my ($cx, $retired_sql, $copy_sql, $name) = @_;
	my $got = q_dst("SELECT string_agg(DISTINCT xid, ',') FROM ($retired_sql) r");
	is($got, $cx, $name) or diag "retired in xid $got; the table was copied in xid $cx; attempts completed in xids "
	  . q_dst("SELECT string_agg(xid, ',') FROM complete_xids");
	return;
}

# The transaction that marked source table $t copied, the last time.
sub copied_xid
{
	my ($t) = @_;
	return q_dst("SELECT xid FROM copied_xids WHERE source_table = '$t' ORDER BY seq DESC LIMIT 1");
}

sub wait_no_worker
{
	my ($sk) = @_;
	$sk //= $sink;
	AshTest::poll($dst, "SELECT coalesce(bool_and(worker_pid IS NULL), true) FROM ash_replicant.stat_pipelines"
		  . " WHERE sink_name = " . AshTest::lit($sk));
}

##############################################################################
# Tables
##############################################################################

q_src(qq{
CREATE TABLE stock (id integer PRIMARY KEY, name text, qty integer, note text);
CREATE TABLE ledger (id integer PRIMARY KEY, v text);
INSERT INTO stock SELECT g, 'item ' || g, g % 7,
	CASE g WHEN 7 THEN '$sent[0]' WHEN 400 THEN '$sent[2]' ELSE 'n' || g END
  FROM generate_series(1, 3000) g;
INSERT INTO ledger SELECT g, 'v' || g FROM generate_series(1, 50) g;
CREATE TABLE plain (id integer PRIMARY KEY, v text, d timestamptz);
INSERT INTO plain SELECT g, 'p' || g, '2026-01-01'::timestamptz + g * interval '1 minute' FROM generate_series(1, 2500) g;
CREATE VIEW plain_v AS SELECT id, v, d FROM plain;
CREATE PUBLICATION pub FOR TABLE stock, ledger, plain;
CREATE VIEW stock_v AS SELECT id, name, qty, note FROM stock;
CREATE VIEW ledger_v AS SELECT id, v FROM ledger;
CREATE TABLE aux (id integer PRIMARY KEY, v text);
CREATE PUBLICATION pub_off FOR TABLE aux;
});

q_dst(q{
CREATE TABLE stock (id integer PRIMARY KEY, name text, qty integer, note text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE ledger_hist (
	vid bigserial PRIMARY KEY, id integer NOT NULL, v text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	replica_fingerprint bytea, replica_seen_attempt bytea,
	UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX ledger_hist_open ON ledger_hist (id) WHERE valid_to_lsn IS NULL;
CREATE VIEW stock_v AS SELECT id, name, qty, note FROM stock;
CREATE VIEW ledger_v AS SELECT id, v FROM ledger_hist WHERE valid_to_lsn IS NULL;
CREATE TABLE aux (id integer PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea);
-- empty, no trigger: the copy writes its rows straight into it, stamped
CREATE TABLE plain (id integer PRIMARY KEY, v text, d timestamptz,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE VIEW plain_v AS SELECT id, v, d FROM plain;

-- rows the destination holds before the first snapshot
--   1..20       stale values (the source has these ids)
--   21..40      the source's values, but no fingerprint
--   90001..90010  ids the source lacks
INSERT INTO stock (id, name, qty, note) SELECT g, 'stale', -1, 'old' FROM generate_series(1, 20) g;
INSERT INTO stock (id, name, qty, note) SELECT g, 'item ' || g, g % 7, 'n' || g FROM generate_series(21, 40) g;
INSERT INTO stock (id, name, qty, note) SELECT g, 'dest only', 0, NULL FROM generate_series(90001, 90010) g;
-- 900: an open version of a key the source lacks; 901: a version closed long ago
INSERT INTO ledger_hist (id, v, valid_from_lsn, valid_to_lsn) VALUES (900, 'gone', 100, NULL), (901, 'closed', 50, 80);

-- audit: every row effect on the targets, with its transaction
CREATE TABLE stock_audit (seq bigserial, id integer NOT NULL, op text NOT NULL, xid text NOT NULL);
CREATE FUNCTION stock_audit_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	INSERT INTO public.stock_audit (id, op, xid)
	VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END, TG_OP, pg_current_xact_id()::text);
	RETURN NULL;
END $$;
CREATE TRIGGER stock_audit AFTER INSERT OR UPDATE OR DELETE ON stock
	FOR EACH ROW EXECUTE FUNCTION stock_audit_fn();
CREATE TABLE ledger_audit (seq bigserial, id integer NOT NULL, op text NOT NULL, closed boolean, xid text NOT NULL);
CREATE FUNCTION ledger_audit_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO public.ledger_audit (id, op, closed, xid) VALUES (OLD.id, TG_OP, NULL, pg_current_xact_id()::text);
	ELSE
		INSERT INTO public.ledger_audit (id, op, closed, xid)
		VALUES (NEW.id, TG_OP, NEW.valid_to_lsn IS NOT NULL, pg_current_xact_id()::text);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER ledger_audit AFTER INSERT OR UPDATE OR DELETE ON ledger_hist
	FOR EACH ROW EXECUTE FUNCTION ledger_audit_fn();

-- the transaction that completes an attempt (test-only trigger on the catalog)
CREATE TABLE complete_xids (seq bigserial, slot text NOT NULL, xid text NOT NULL, attempt bytea);
CREATE FUNCTION note_complete() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	INSERT INTO public.complete_xids (slot, xid, attempt) VALUES (NEW.slot_name, pg_current_xact_id()::text, NEW.snapshot_attempt);
	RETURN NULL;
END $$;
CREATE TRIGGER note_complete AFTER UPDATE ON ash_replicant.checkpoints FOR EACH ROW
	WHEN (NEW.snapshot_phase = 'complete' AND OLD.snapshot_phase IS DISTINCT FROM 'complete')
	EXECUTE FUNCTION note_complete();
-- the transaction that copies a table (test-only trigger on the catalog)
CREATE TABLE copied_xids (seq bigserial, source_table text NOT NULL, xid text NOT NULL);
CREATE FUNCTION note_copied() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	INSERT INTO public.copied_xids (source_table, xid) VALUES (NEW.source_table, pg_current_xact_id()::text);
	RETURN NULL;
END $$;
CREATE TRIGGER note_copied AFTER UPDATE ON ash_replicant.snapshot_tables FOR EACH ROW
	WHEN (NEW.state = 'copied' AND OLD.state = 'pending')
	EXECUTE FUNCTION note_copied();
});

##############################################################################
# 2b. no snapshot_provenance key: misconfigured/keyring_missing_family,
#     nothing written
##############################################################################

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub',
	maps => [
		[ 'stock', snapshot_provenance => 'true' ],
		[ 'ledger_hist', source_table => 'ledger', history_strategy => 'scd2',
		  history_business_key => ['id'], snapshot_provenance => 'true' ],
		[ 'plain', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'", start => 0);
my %before = (stock => thash('stock'), ledger_hist => thash('ledger_hist'));
{
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_start('$sink')");
	is($rc, 0, 'no key family: ash_replicant_start itself accepts the sink (the worker halts)')
	  or diag "start: $err";
}
AshTest::wait_status($dst, $sink, 'misconfigured', 'keyring_missing_family', src => $src,
	name => 'no snapshot_provenance key: misconfigured/keyring_missing_family');
is(thash('stock'), $before{stock}, 'keyring_missing_family: stock unchanged');
is(thash('ledger_hist'), $before{ledger_hist}, 'keyring_missing_family: ledger_hist unchanged');
is(q_dst("SELECT (SELECT count(*) FROM stock_audit) + (SELECT count(*) FROM ledger_audit)"), '0',
	'keyring_missing_family: no trigger fired');

# the family appears: versions 2 and 3, 3 is active
AshTenancy::write_keyring($dst, 'keyring', "message_digest 1 $key{md}",
	"snapshot_provenance 2 $key{sp2}", "snapshot_provenance 3 $key{sp3}");

##############################################################################
# 2a. snapshot 'off' with a provenance mapping: start refused
##############################################################################

AshTest::setup_pipeline($src, $dst, sink => 'poff', publication => 'pub_off', marker => 0,
	maps => [ [ 'aux', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => true, snapshot => 'off'", start => 0);
{
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_start('poff')");
	isnt($rc, 0, "snapshot 'off' with a provenance mapping: ash_replicant_start fails");
	like($err, qr/snapshot_provenance_invalid/, "snapshot 'off': refused with snapshot_provenance_invalid");
	is((AshTest::status_row($dst, 'poff') // {})->{state} // '(none)', 'not_started', "snapshot 'off': the sink is not started");
}

##############################################################################
# 1. first snapshot, with source writes while the pipeline starts
##############################################################################

AshTest::start_sink($dst, $sink);
my $wl = '';
for my $r (0 .. 5)
{
	my ($u0, $u1) = (101 + 5 * $r, 105 + 5 * $r);
	$wl .= "UPDATE stock SET qty = qty + 1000 WHERE id BETWEEN $u0 AND $u1;\n";
	if ($r < 5)
	{
		my ($d0, $d1) = (131 + 4 * $r, 134 + 4 * $r);
		my ($i0, $i1) = (5001 + 10 * $r, 5010 + 10 * $r);
		$wl .= "DELETE FROM stock WHERE id BETWEEN $d0 AND $d1;\n";
		$wl .= "INSERT INTO stock SELECT g, 'late ' || g, 1, 'late' FROM generate_series($i0, $i1) g;\n";
	}
	$wl .= "SELECT pg_sleep(0.25);\n";
}
my $w = AshTest::start_workload($src, $wl, timeout => 60);
ok(AshTest::finish_workload($w), 'source writes during the start ran');
ok(AshTest::wait_caught_up($src, $dst, $sink), 'first snapshot complete and caught up');
is(AshTest::stat_row($dst, $sink)->{snapshot_phase}, 'complete', 'snapshot phase complete');
AshTest::assert_mirror_equal($src, $dst, ['stock_v'], order_by => 'id', name => 'first snapshot');
AshTest::assert_mirror_equal($src, $dst, ['ledger_v'], order_by => 'id',
	name => 'first snapshot: open versions equal the source');

my $att1 = attempt_hex();
like($att1, qr/^[0-9a-f]{2,}$/, 'the checkpoint names the attempt');

# audit: each effect exactly once
is(bad_ids('stock_audit', 'SELECT generate_series(1, 20)', 'n_all = 1 AND n_del = 0'), '',
	'stale rows: rewritten exactly once (one insert/update event, no delete)');
is(bad_ids('stock_audit', "SELECT g FROM generate_series(41, 3000) g WHERE g NOT BETWEEN 101 AND 150",
		"n_all = 1 AND n_ins = 1"), '', 'rows new to the target: inserted exactly once');
is(bad_ids('stock_audit', 'SELECT generate_series(90001, 90010)', "n_all = 1 AND n_del = 1"), '',
	'rows the source lacks: retired by exactly one DELETE');
is(bad_ids('stock_audit', 'SELECT generate_series(21, 40)', "n_all <= 1 AND n_del = 0"), '',
	'rows identical but without a fingerprint: written at most once, never deleted');
{
	my $n = q_dst("SELECT count(*) FROM stock_audit WHERE id BETWEEN 21 AND 40");
	note "rows identical to the source without a fingerprint: $n of 20 were written";
}
is(bad_ids('stock_audit', 'SELECT DISTINCT id FROM stock_audit', "n_ins <= 1 AND n_upd <= 1 AND n_del <= 1"), '',
	'no row effect happened twice (copy and stream of concurrent writes)');
is(q_dst("SELECT count(*) FROM stock WHERE id > 90000"), '0', 'retired SCD1 rows are gone');

# retired in the transaction that copies the table
my $cx1 = q_dst("SELECT string_agg(xid, ',') FROM complete_xids WHERE slot = '$sink'");
like($cx1, qr/^\d+$/, 'one transaction completed the attempt');
retired_in(copied_xid('stock'), "SELECT xid FROM stock_audit WHERE op = 'DELETE' AND id > 90000",
	"SELECT xid FROM stock_audit WHERE op = 'INSERT' AND id BETWEEN 41 AND 100",
	'SCD1 rows retired in the table\'s copy transaction');
is(q_dst("SELECT string_agg(DISTINCT xid, ',') FROM stock_audit WHERE op = 'INSERT' AND id BETWEEN 41 AND 100"),
	copied_xid('stock'), 'the copy writes its rows in that transaction too');
is(q_dst("SELECT encode(attempt, 'hex') FROM complete_xids WHERE slot = '$sink'"), $att1, 'the completed attempt is the checkpoint\'s');

# SCD2: the open version the source lacks is closed, not deleted
is(q_dst("SELECT count(*) FROM ledger_audit WHERE op = 'DELETE'"), '0', 'SCD2: nothing deleted');
is(q_dst("SELECT count(*) || ':' || count(*) FILTER (WHERE valid_to_lsn IS NOT NULL AND valid_to_lsn >= valid_from_lsn)"
		  . " FROM ledger_hist WHERE id = 900"), '1:1', 'SCD2: the version the source lacks is kept and closed');
retired_in(copied_xid('ledger'), "SELECT xid FROM ledger_audit WHERE id = 900 AND closed",
	"SELECT xid FROM ledger_audit WHERE op = 'INSERT'", 'SCD2: closed in the table\'s copy transaction');
is(q_dst("SELECT v || ':' || valid_from_lsn || ':' || valid_to_lsn FROM ledger_hist WHERE id = 901"), 'closed:50:80',
	'SCD2: a version closed before is left as it was');
is(q_dst("SELECT count(*) FROM ledger_audit WHERE id = 901"), '0', 'SCD2: no effect on the old closed version');
is(bad_ids('ledger_audit', 'SELECT generate_series(1, 50)', "n_all = 1 AND n_ins = 1"), '',
	'SCD2: each source key opened once');

# fingerprints and attempt stamps
my $fp_ok = "(length(replica_fingerprint) = 21 AND substring(replica_fingerprint from 1 for 5) = '\\x0200000003'::bytea)";
for my $t ('stock', 'ledger_hist')
{
	is(q_dst("SELECT count(*) FROM $t WHERE replica_fingerprint IS NOT NULL AND NOT $fp_ok"), '0',
		"$t: every fingerprint is 21 bytes, format 2, key version 3 (the active one)");
	is(q_dst("SELECT count(*) FROM $t WHERE replica_seen_attempt IS NOT NULL AND encode(replica_seen_attempt, 'hex') <> '$att1'"),
		'0', "$t: every seen mark is the attempt");
}
is(q_dst("SELECT count(*) FROM stock WHERE (id BETWEEN 1 AND 20 OR id BETWEEN 41 AND 3000) AND id NOT BETWEEN 101 AND 150"
		  . " AND replica_fingerprint IS NOT NULL AND encode(replica_seen_attempt, 'hex') = '$att1'"),
	2960 - 50 + 20, 'every row written by the copy carries its fingerprint and the attempt');
is(q_dst("SELECT count(*) FROM stock WHERE id BETWEEN 21 AND 40 AND encode(replica_seen_attempt, 'hex') = '$att1'"),
	'20', 'identical rows are marked seen by the attempt');
is(q_dst("SELECT count(*) FROM ledger_hist WHERE valid_to_lsn IS NULL AND id <= 50"
		  . " AND replica_fingerprint IS NOT NULL AND encode(replica_seen_attempt, 'hex') = '$att1'"),
	'50', 'SCD2: every opened version carries its fingerprint and the attempt');
is(q_dst("SELECT count(DISTINCT replica_fingerprint) = count(replica_fingerprint) FROM stock"), 't',
	'fingerprints differ between rows');

# plain: empty and trigger-less, so its rows went straight into the table
# with their stamps (no stamp UPDATE afterwards)
AshTest::assert_mirror_equal($src, $dst, ['plain_v'], order_by => 'id', name => 'first snapshot: plain');
is(q_dst("SELECT count(*) FROM plain WHERE $fp_ok AND encode(replica_seen_attempt, 'hex') = '$att1'"), '2500',
	'plain: every row carries a fingerprint of key version 3 and the attempt');
is(q_dst("SELECT count(DISTINCT replica_fingerprint) FROM plain"), '2500', 'plain: fingerprints differ between rows');

# the log
is(retired_counts('stock'), '10', 'event=snapshot.retired for stock: rows=10');
is(retired_counts('ledger'), '1', 'event=snapshot.retired for ledger_hist: rows=1');

##############################################################################
# 2c. tampered snapshot_state: halted/snapshot_state_invalid, nothing changes
##############################################################################

AshTest::stop_settled($src, $dst, $sink);
wait_no_worker();
ok(q_dst(AshTest::checkpoint_sql($sink, "coalesce(length(c.snapshot_state), 0)")) > 10,
	'the checkpoint carries a snapshot_state');
sub tamper_sql
{
	my ($sk) = @_;
	return "UPDATE ash_replicant.checkpoints SET snapshot_state = set_byte(snapshot_state, 10, get_byte(snapshot_state, 10) # 1)"
	  . " WHERE slot_name = '$sk'";
}
my $tamper = tamper_sql($sink);
is($dst->safe_psql($DB, "WITH u AS ($tamper RETURNING 1) SELECT count(*) FROM u"), '1', 'snapshot_state tampered');
q_src("UPDATE stock SET qty = qty + 1 WHERE id = 500");
my $facts = AshTest::checkpoint_facts($dst, $sink);
%before = (stock => thash('stock'), ledger_hist => thash('ledger_hist'));
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'halted', 'snapshot_state_invalid', src => $src,
	name => 'tampered snapshot_state of a completed attempt: halted/snapshot_state_invalid');
is(thash('stock'), $before{stock}, 'snapshot_state_invalid: stock unchanged');
is(thash('ledger_hist'), $before{ledger_hist}, 'snapshot_state_invalid: ledger_hist unchanged');
is(AshTest::checkpoint_facts($dst, $sink), $facts, 'snapshot_state_invalid: checkpoint unchanged');
# the byte flipped back: it resumes
AshTest::stop_settled($src, $dst, $sink);
wait_no_worker();
q_dst($tamper);
AshTest::start_sink($dst, $sink);
ok(AshTest::wait_caught_up($src, $dst, $sink), 'snapshot_state restored: caught up');
AshTest::assert_mirror_equal($src, $dst, ['stock_v'], order_by => 'id', name => 'after the restored snapshot_state');
is(q_dst("SELECT count(*) FROM complete_xids WHERE slot = '$sink'"), '1', 'no second attempt after the restored snapshot_state');

# The same with an attempt in progress: sink pt copies "slow", whose target
# trigger sleeps on every row, and is stopped while the copy runs.
q_src(q{
CREATE TABLE slow (id integer PRIMARY KEY, v text);
INSERT INTO slow SELECT g, 's' || g FROM generate_series(1, 60) g;
CREATE PUBLICATION pub_slow FOR TABLE slow;
CREATE VIEW slow_v AS SELECT id, v FROM slow;
});
q_dst(q{
CREATE TABLE slow (id integer PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea);
INSERT INTO slow (id, v) VALUES (9999, 'dest only');
CREATE VIEW slow_v AS SELECT id, v FROM slow;
CREATE FUNCTION slow_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.pg_sleep(0.25); RETURN NULL; END $$;
CREATE TRIGGER slow_down AFTER INSERT ON slow FOR EACH ROW EXECUTE FUNCTION slow_fn();
});
AshTest::setup_pipeline($src, $dst, sink => 'pt', publication => 'pub_slow', marker => 0,
	maps => [ [ 'slow', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.stat_snapshot_tables WHERE sink_name = 'pt' AND state = 'copying'"),
	'pt: the copy is under way');
AshTest::stop_settled($src, $dst, 'pt');
wait_no_worker('pt');
is(q_dst(AshTest::checkpoint_sql('pt', "coalesce(c.snapshot_phase, '-') || ':' || (coalesce(length(c.snapshot_state), 0) > 10)")),
	'copying:true', 'pt: stopped with the attempt in progress, its snapshot_state recorded');
is($dst->safe_psql($DB, "WITH u AS (" . tamper_sql('pt') . " RETURNING 1) SELECT count(*) FROM u"), '1',
	'pt: snapshot_state tampered');
q_src("UPDATE slow SET v = 'changed' WHERE id = 1");
$facts = AshTest::checkpoint_facts($dst, 'pt');
my $slow_before = thash('slow');
AshTest::start_sink($dst, 'pt');
AshTest::wait_status($dst, 'pt', 'halted', 'snapshot_state_invalid', src => $src,
	name => 'tampered snapshot_state of an attempt in progress: halted/snapshot_state_invalid');
is(thash('slow'), $slow_before, 'pt snapshot_state_invalid: slow unchanged');
is(AshTest::checkpoint_facts($dst, 'pt'), $facts, 'pt snapshot_state_invalid: checkpoint unchanged');
AshTest::stop_settled($src, $dst, 'pt');
wait_no_worker('pt');
q_dst(tamper_sql('pt') . "; DROP TRIGGER slow_down ON slow");
AshTest::start_sink($dst, 'pt');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines WHERE sink_name = 'pt'"),
	'pt: snapshot_state restored, the attempt completes');
AshTest::assert_mirror_equal($src, $dst, ['slow_v'], order_by => 'id', name => 'pt after the restored snapshot_state');
is(retired_counts('slow', 'pt'), '1', 'pt: event=snapshot.retired for slow: rows=1');
AshTest::stop_settled($src, $dst, 'pt');

##############################################################################
# 3. a second snapshot after reset_checkpoint (with 2d on the way)
##############################################################################

AshTest::stop_settled($src, $dst, $sink);
wait_no_worker();

# the worker's statistics, sent as it exited: plain's rows were inserted
# with their stamps, none updated afterwards
ok(AshTest::poll($dst, "SELECT n_tup_ins >= 2500 FROM pg_stat_user_tables WHERE relid = 'plain'::regclass"),
	'plain: the statistics count its inserted rows');
is(q_dst("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'plain'::regclass"), '0',
	'plain: no row was updated (each row written once, with its stamps)');

# rows not touched since their copy
my $unchanged = "SELECT g FROM generate_series(1, 3000) g WHERE g NOT BETWEEN 21 AND 40 AND g NOT BETWEEN 101 AND 150"
  . " AND g NOT BETWEEN 201 AND 220 AND g NOT BETWEEN 301 AND 310 AND g <> 500";
my $fp_unchanged_sql = "SELECT md5(string_agg(s.id || ':' || coalesce(encode(s.replica_fingerprint, 'hex'), '-'), ',' ORDER BY s.id))"
  . " || ' ' || count(*) FROM stock s WHERE s.id IN ($unchanged)";
my $fp_unchanged = q_dst($fp_unchanged_sql);
my $ledger_rows = q_dst("SELECT count(*) FROM ledger_hist");

q_src(qq{
UPDATE stock SET name = name || ' v2' WHERE id BETWEEN 201 AND 220;
UPDATE stock SET note = '$sent[1]' WHERE id = 201;
DELETE FROM stock WHERE id BETWEEN 301 AND 310;
INSERT INTO stock SELECT g, 'new ' || g, 2, 'new' FROM generate_series(6001, 6005) g;
DELETE FROM ledger WHERE id = 10;
UPDATE plain SET v = v || ' v2' WHERE id BETWEEN 11 AND 15;
});
my $fp400 = q_dst("SELECT encode(replica_fingerprint, 'hex') FROM stock WHERE id = 400");
like($fp400, qr/^0200000003[0-9a-f]{32}$/, 'row 400 has a fingerprint of key version 3');
q_dst(q{
INSERT INTO stock (id, name, qty, note) VALUES (90100, 'dest only again', 0, NULL);
UPDATE stock SET replica_fingerprint = '\x01000000ff'::bytea || sha256('x') WHERE id = 400;
TRUNCATE stock_audit, ledger_audit;
CREATE TABLE plain_audit (seq bigserial, id integer NOT NULL, op text NOT NULL);
CREATE FUNCTION plain_audit_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	INSERT INTO public.plain_audit (id, op) VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END, TG_OP);
	RETURN NULL;
END $$;
CREATE TRIGGER plain_audit AFTER INSERT OR UPDATE OR DELETE ON plain
	FOR EACH ROW EXECUTE FUNCTION plain_audit_fn();
});
is(q_dst("SELECT length(replica_fingerprint) FROM stock WHERE id = 400"), '37', 'row 400 names key version 255');

is(q_dst("SELECT ash_replicant_reset_checkpoint('$sink', '$sysid', '$sdb')"), 't', 'checkpoint reset');
%before = (stock => thash('stock'));
AshTest::start_sink($dst, $sink);

# 2d. a fingerprint naming a key version the keyring lacks
AshTest::wait_status($dst, $sink, 'halted', 'keyring_version_missing', src => $src,
	name => 'a target fingerprint of an absent key version: halted/keyring_version_missing');
is(thash('stock'), $before{stock}, 'keyring_version_missing: stock unchanged');
is(q_dst("SELECT count(*) FROM stock_audit"), '0', 'keyring_version_missing: no trigger fired on stock');
is(q_dst("SELECT count(*) FROM ledger_hist WHERE id = 10 AND valid_to_lsn IS NULL"), '1',
	'keyring_version_missing: the unfinished attempt retired nothing (ledger key 10, gone at the source, still open)');

AshTest::stop_settled($src, $dst, $sink);
wait_no_worker();
q_dst("SET session_replication_role = replica; UPDATE stock SET replica_fingerprint = '\\x$fp400'::bytea WHERE id = 400");
AshTest::start_sink($dst, $sink);
ok(AshTest::wait_caught_up($src, $dst, $sink), 'second snapshot complete and caught up');
is(AshTest::stat_row($dst, $sink)->{snapshot_phase}, 'complete', 'second snapshot phase complete');
AshTest::assert_mirror_equal($src, $dst, ['stock_v'], order_by => 'id', name => 'second snapshot');
AshTest::assert_mirror_equal($src, $dst, ['ledger_v'], order_by => 'id',
	name => 'second snapshot: open versions equal the source');

my $att2 = attempt_hex();
like($att2, qr/^[0-9a-f]{2,}$/, 'the second attempt is named');
isnt($att2, $att1, 'the second attempt is a new one');

is(bad_ids('stock_audit', $unchanged, 'n_all = 0'), '',
	'unchanged rows: not written (no audit event), row 400 included');
is(q_dst($fp_unchanged_sql), $fp_unchanged, 'unchanged rows keep their fingerprints');
is(bad_ids('stock_audit', 'SELECT generate_series(201, 220)', 'n_all = 1 AND n_del = 0'), '',
	'rows changed at the source: rewritten exactly once');
is(bad_ids('stock_audit', 'SELECT generate_series(301, 310) UNION ALL SELECT 90100', 'n_all = 1 AND n_del = 1'), '',
	'rows deleted at the source, and a destination-only row: retired by one DELETE');
is(bad_ids('stock_audit', 'SELECT generate_series(6001, 6005)', 'n_all = 1 AND n_ins = 1'), '',
	'rows new at the source: inserted once');
is(bad_ids('stock_audit', 'SELECT DISTINCT id FROM stock_audit', 'n_all <= 1'), '',
	'no row written twice by the second snapshot');
retired_in(copied_xid('stock'), "SELECT xid FROM stock_audit WHERE op = 'DELETE'",
	"SELECT xid FROM stock_audit WHERE id BETWEEN 201 AND 220", 'second snapshot: retired in the table\'s copy transaction');
is(q_dst("SELECT count(*) FROM stock WHERE replica_seen_attempt IS NULL OR encode(replica_seen_attempt, 'hex') <> '$att2'"),
	'0', 'every row is marked seen by the second attempt');
is(q_dst("SELECT count(*) FROM stock WHERE id NOT BETWEEN 21 AND 40 AND NOT coalesce($fp_ok, false)"), '0',
	'every copied row carries a well-formed fingerprint');
is(q_dst("SELECT encode(replica_fingerprint, 'hex') FROM stock WHERE id = 201") ne
	  q_dst("SELECT encode(replica_fingerprint, 'hex') FROM stock WHERE id = 202") ? 1 : 0, 1,
	'rewritten rows carry fingerprints of their own');

# SCD2: the key deleted at the source is closed, nothing else is touched
is(q_dst("SELECT count(*) || ':' || count(*) FILTER (WHERE valid_to_lsn IS NOT NULL) FROM ledger_hist WHERE id = 10"),
	'1:1', 'SCD2: the key deleted at the source has its version closed, not deleted');
is(q_dst("SELECT count(*) FROM ledger_hist"), $ledger_rows, 'SCD2: no version added or removed');
is(bad_ids('ledger_audit', 'SELECT generate_series(1, 50) UNION ALL SELECT 900 UNION ALL SELECT 901',
		"CASE WHEN g = 10 THEN n_all = 1 AND n_upd = 1 ELSE n_all = 0 END"), '',
	'SCD2: only the retired key had an effect (one update), unchanged keys none');
retired_in(copied_xid('ledger'), "SELECT xid FROM ledger_audit", undef,
	'SCD2: closed in the table\'s copy transaction (second snapshot)');
is(q_dst("SELECT count(*) FROM ledger_hist WHERE valid_to_lsn IS NULL"
		  . " AND (replica_seen_attempt IS NULL OR encode(replica_seen_attempt, 'hex') <> '$att2')"),
	'0', 'SCD2: every open version is marked seen by the second attempt');

# plain: the fingerprints its first copy wrote with the rows match the
# second snapshot's, so only the rows changed at the source are written
AshTest::assert_mirror_equal($src, $dst, ['plain_v'], order_by => 'id', name => 'second snapshot: plain');
is(bad_ids('plain_audit', 'SELECT generate_series(1, 2500)',
		"CASE WHEN g BETWEEN 11 AND 15 THEN n_all = 1 AND n_upd = 1 ELSE n_all = 0 END"), '',
	'plain: unchanged rows not written (no trigger call), changed rows rewritten by exactly one update');
is(q_dst("SELECT count(*) FROM plain WHERE encode(replica_seen_attempt, 'hex') = '$att2' AND $fp_ok"), '2500',
	'plain: every row marked seen by the second attempt, with its fingerprint');

is(retired_counts('stock'), '10,11', 'second event=snapshot.retired for stock: rows=11');
is(retired_counts('ledger'), '1,1', 'second event=snapshot.retired for ledger_hist: rows=1');

##############################################################################
# 5. context tenancy: every scope tenant_scope_function returns is retired
#    in; a scope function that raises halts snapshot_scope_incomplete
##############################################################################

q_src(qq{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text);
ALTER TABLE orgdocs REPLICA IDENTITY FULL;
INSERT INTO orgdocs SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, 'v' || g FROM generate_series(1, 200) g;
UPDATE orgdocs SET v = '$sent[2]-ctx' WHERE id = 7;
CREATE PUBLICATION pub_ctx FOR TABLE orgdocs;
});
q_dst(q{
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE SCHEMA pa;
CREATE SCHEMA pb;
CREATE TABLE pa.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE pb.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE ctx_audit (tbl text, id integer, op text);
CREATE FUNCTION ctx_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ctx_audit VALUES (TG_TABLE_SCHEMA, CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END, TG_OP);
	RETURN NULL;
END $$;
CREATE TRIGGER a AFTER INSERT OR UPDATE OR DELETE ON pa.orgdocs FOR EACH ROW EXECUTE FUNCTION ctx_audit_fn();
CREATE TRIGGER a AFTER INSERT OR UPDATE OR DELETE ON pb.orgdocs FOR EACH ROW EXECUTE FUNCTION ctx_audit_fn();
CREATE FUNCTION org_scopes() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('a'), ('b') $$;
SET session_replication_role = replica;
INSERT INTO pa.orgdocs (id, tenant, v) VALUES (998, 'a', 'only here'), (2, 'a', 'stale');
INSERT INTO pb.orgdocs (id, tenant, v) VALUES (999, 'b', 'only here too');
});
AshTest::setup_pipeline($src, $dst, sink => 'pc', publication => 'pub_ctx', marker => 0,
	maps => [ [ 'orgdocs', tenant_column => 'tenant', tenant_strategy => 'context',
			tenant_schema_format => 'p%s', snapshot_provenance => 'true',
			tenant_scope_function => 'public.org_scopes()' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines WHERE sink_name = 'pc'"),
	'context tenancy: the snapshot completes');
for my $t ('a', 'b')
{
	my $h = "SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) || ' ' || count(*)";
	is(q_dst("$h FROM p$t.orgdocs"), q_src("$h FROM orgdocs WHERE tenant = '$t'"),
		"context tenancy: scope $t equals the source's rows of tenant $t");
}
is(q_dst("SELECT count(*) FROM pa.orgdocs WHERE id = 998") . q_dst("SELECT count(*) FROM pb.orgdocs WHERE id = 999"),
	'00', 'context tenancy: rows of each scope the source lacks are retired');
is(q_dst("SELECT string_agg(tbl || ':' || op || ':' || n, ',' ORDER BY tbl, op) FROM"
		  . " (SELECT tbl, op, count(*) n FROM ctx_audit GROUP BY tbl, op) x"),
	'pa:DELETE:1,pa:INSERT:99,pa:UPDATE:1,pb:DELETE:1,pb:INSERT:100',
	'context tenancy: each effect once (a stale row updated, retired rows deleted)');
is(q_dst("SELECT count(*) FROM public.orgdocs"), '0', 'context tenancy: the template receives nothing');

# a raising scope function: nothing of the next attempt moves
AshTest::stop_settled($src, $dst, 'pc');
q_dst(q{CREATE OR REPLACE FUNCTION org_scopes() RETURNS SETOF text LANGUAGE plpgsql STABLE AS $$
BEGIN RAISE EXCEPTION 'no scopes today'; END $$;
TRUNCATE ctx_audit});
q_dst("SELECT ash_replicant_reset_checkpoint('pc', '$sysid', '$sdb')");
q_src("SELECT pg_drop_replication_slot('pc')");
my $before_ctx = q_dst("SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM pa.orgdocs");
AshTest::start_sink($dst, 'pc');
AshTest::wait_status($dst, 'pc', 'halted', 'snapshot_scope_incomplete', src => $src,
	name => 'a raising tenant_scope_function: halted/snapshot_scope_incomplete');
is(q_dst("SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM pa.orgdocs"), $before_ctx,
	'snapshot_scope_incomplete: the scope is unchanged');
is(q_dst("SELECT count(*) FROM ctx_audit"), '0', 'snapshot_scope_incomplete: no trigger fired');
ok(!AshTest::log_lines_like($dst, qr/no scopes today/), 'the scope function\'s error text is not logged');
AshTest::stop_sink($dst, 'pc');

##############################################################################
# 4. no row value in any server log
##############################################################################

ok(scalar(AshTest::grep_logs_for('event=snapshot.retired', $dst)) > 0, '(the log grep finds what is there)');
for my $i (0 .. $#sent)
{
	my @hits = AshTest::grep_logs_for($sent[$i], $src, $dst);
	is(scalar(@hits), 0, "sentinel " . ($i + 1) . " appears in no server log")
	  or diag join("\n", @hits[ 0 .. ($#hits < 4 ? $#hits : 4) ]);
}

done_testing();
