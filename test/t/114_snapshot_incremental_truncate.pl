# A TRUNCATE of a table while snapshot => 'incremental' copies it
# (docs/snapshots.md, "A TRUNCATE during the copy").  The truncate commits
# with a large insert, which the walsender decodes for a while before it
# sends the transaction; the pipeline keeps copying chunks meanwhile, read
# after the truncate committed: they hold rows written after it, which the
# truncate must leave (on the previous build the pipeline halted
# snapshot_state_invalid, and only a reset of the checkpoint -- a copy of
# every table again -- went on).
#
#   mirror  big (120,000 rows, 500-row chunks, provenance, a stale and a
#           destination-only row, an audit trigger) is truncated at the
#           source after 20,000 rows were copied and written again in the
#           same transaction (old keys back with new values, new keys);
#           another table of the attempt (side) is copied meanwhile by the
#           helper.  No halt (event=snapshot.truncate_kept_chunks), the copy
#           goes on from where it was.
#   twice   a second truncate later in the copy: the same.
#   kill    a third truncate, the destination killed (SIGKILL) at a seeded
#           moment after it: the truncate and the checkpoint are one
#           transaction; the pipeline ends exact.
#   after   the mirror equals the source; the audit shows every row
#           inserted at most once and deleted at most once (no row a chunk
#           copied after a truncate removed and written again, no row of
#           before a truncate written after it); nothing of before the last
#           truncate is left.
#   composite  the same for a (text, integer) key.
#   close   an SCD2 target with on_truncate 'close': closing cannot keep a
#           chunk's version apart from the history it closed: halts
#           snapshot_state_invalid, history and checkpoint unchanged.
#
# Seed: ASH_SEED (default: time), printed.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
note "seed $seed (rerun with ASH_SEED=$seed)";
diag "114_snapshot_incremental_truncate seed $seed";

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nrestart_after_crash = on\n"
	  . "ash_replicant.snapshot_workers = 2\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

my $prov = 'replica_fingerprint bytea, replica_seen_attempt bytea';

sub kept
{
	my ($sink) = @_;
	return scalar(AshTest::log_lines_like($dst,
		qr/event=snapshot\.truncate_kept_chunks sink=$sink table=public\.big/));
}

sub big_row
{
	my ($sink) = @_;
	return q_dst("SELECT state || '/' || chunks_copied || '/' || rows_copied FROM ash_replicant.snapshot_tables"
		  . " WHERE slot_name = '$sink' AND source_table = 'big'");
}

# Truncate big and write it again in one transaction, once rows_copied
# passed $after.  One transaction: a chunk read waits for its lock and then
# reads under a snapshot that shows it.  The transaction first writes a
# million rows of a table no publication holds: the walsender goes through
# them before it sends the truncate, and chunks read after the commit
# commit meanwhile.  (A TRUNCATE committed on its own leaves the next chunk an
# empty table under a snapshot that may not show it -- TRUNCATE is not
# MVCC-safe -- and the truncate is then applied as any change is.)
sub truncate_during_copy
{
	my ($sink, $after, $label, $rows) = @_;
	ok(AshTest::poll($dst, "SELECT state = 'pending' AND rows_copied > $after FROM ash_replicant.snapshot_tables"
			  . " WHERE slot_name = '$sink' AND source_table = 'big'"), "$label: big is being copied");
	return padded_commit(
		"TRUNCATE big; INSERT INTO big SELECT g, '$label ' || g, 1 FROM generate_series(1, $rows) g");
}

# Commit $sql after a million rows of pad (which no publication holds) in
# the same transaction; returns the commit's LSN.  $after (optional) runs as
# soon as it committed.
sub padded_commit
{
	my ($sql, $after) = @_;
	my ($commit) = AshTest::commit_tracked($src,
		"TRUNCATE pad; INSERT INTO pad SELECT generate_series(1, 1000000); $sql", $after);
	return $commit;
}

# ---------------------------------------------------------------------------
# mirror, twice, kill
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE big (id bigint PRIMARY KEY, v text NOT NULL, n integer NOT NULL DEFAULT 0);
INSERT INTO big SELECT g, md5(g::text), 0 FROM generate_series(1, 600000) g;
CREATE TABLE side (id bigint PRIMARY KEY, v text NOT NULL);
INSERT INTO side SELECT g, 's' || g FROM generate_series(1, 40000) g;
CREATE PUBLICATION pub FOR TABLE big, side;
CREATE TABLE pad (id integer);
});
q_dst(qq{
CREATE TABLE big (id bigint PRIMARY KEY, v text NOT NULL, n integer NOT NULL DEFAULT 0, $prov);
CREATE TABLE side (id bigint PRIMARY KEY, v text NOT NULL, $prov);
INSERT INTO big (id, v, n) VALUES (7, 'stale', -1), (9000000, 'the source never had it', -1);
CREATE TABLE audit (seq bigserial, k bigint NOT NULL, op text NOT NULL, v text);
CREATE FUNCTION audit_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS \$\$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO public.audit (k, op, v) VALUES (OLD.id, TG_OP, OLD.v);
	ELSE
		INSERT INTO public.audit (k, op, v) VALUES (NEW.id, TG_OP, NEW.v);
	END IF;
	RETURN NULL;
END \$\$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON big FOR EACH ROW EXECUTE FUNCTION audit_fn();
});
AshTest::setup_pipeline($src, $dst, sink => 'tr', publication => 'pub', marker => 0,
	maps => [ [ 'big', snapshot_provenance => 'true', on_truncate => 'mirror' ],
		[ 'side', snapshot_provenance => 'true', on_truncate => 'mirror' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 500");

# big starts with 600,000 rows and each truncate writes 800,000: the copy
# (chunks whose windows close at once on a quiet source) goes on long
# enough to truncate again during it, also once a truncate's transaction, a
# million rows of pad before it, is streamed and applied
my $first = truncate_during_copy('tr', 20000, 'first', 800000);
ok(AshTest::wait_lsn($src, $dst, 'tr', $first), 'first: the truncate is applied');
is(kept('tr'), 1, 'first: it kept what chunks copied after it (event=snapshot.truncate_kept_chunks)');
is(AshTest::status_row($dst, 'tr')->{state}, 'catching_up', 'first: no halt, still copying');
is(q_dst("SELECT count(*) FROM big WHERE v NOT LIKE 'first %'"), '0',
	'first: nothing of before it left (the stale and the destination-only row included)');

my $second = truncate_during_copy('tr', 60000, 'second', 800000);
ok(AshTest::wait_lsn($src, $dst, 'tr', $second), 'second: the truncate is applied');
is(kept('tr'), 2, 'twice: the same');

my $third = truncate_during_copy('tr', 100000, 'third', 800000);
AshTest::wait_sent($src, $third);
usleep(int(rand(1_500_000)));
AshTest::crash_restart($dst);
my ($last) = AshTest::commit_tracked($src,
	"UPDATE big SET n = n + 1 WHERE id % 1000 = 0; DELETE FROM big WHERE id % 777 = 0;"
	  . " UPDATE side SET v = 'late' WHERE id % 100 = 0");
ok(AshTest::wait_lsn($src, $dst, 'tr', $last), 'kill: the pipeline catches up after the crash');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'tr'"),
	'the attempt completes');
AshTest::wait_status($dst, 'tr', 'healthy', undef, src => $src);
AshTest::assert_mirror_equal($src, $dst, [ '(SELECT id, v, n FROM big)', '(SELECT id, v FROM side)' ],
	order_by => 'id', name => 'mirror = source after three truncates and a kill');
is(q_dst("SELECT count(*) FROM big WHERE v NOT LIKE 'third %'"), '0',
	'nothing of before the last truncate left (stale and destination-only rows included)');
is(q_dst("SELECT count(*) FROM (SELECT 1 FROM audit WHERE op IN ('INSERT', 'DELETE')"
		  . " GROUP BY k, v, op HAVING count(*) > 1) d"), '0',
	'every row inserted at most once and deleted at most once (effect-once across the truncates)')
  or diag q_dst("SELECT string_agg(x, E'\n' ORDER BY m) FROM (SELECT min(seq) AS m, op || ' ' || lbl || ' seq ' || min(seq) || '..' || max(seq) || ' keys ' || min(k) || '..' || max(k) || ' n=' || count(*) AS x"
	  . " FROM (SELECT *, CASE WHEN v LIKE '% %' THEN split_part(v, ' ', 1) ELSE 'orig' END AS lbl,"
	  . " seq - row_number() OVER (PARTITION BY op, CASE WHEN v LIKE '% %' THEN split_part(v, ' ', 1) ELSE 'orig' END ORDER BY seq) AS grp FROM audit) s"
	  . " GROUP BY op, lbl, grp) t");
cmp_ok(kept('tr'), '>=', 2, 'truncates that kept chunks\' rows: ' . kept('tr'));
like(big_row('tr'), qr{^copied/}, 'big recorded copied');

# ---------------------------------------------------------------------------
# composite  a two-column key, text (under "C", as incremental requires)
#            and integer: the kept ranges compare as the chunks ordered
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE pair (a text COLLATE "C", b integer, v text NOT NULL, PRIMARY KEY (a, b));
INSERT INTO pair SELECT 'k' || lpad((g % 997)::text, 4, '0'), g / 997, 'orig' FROM generate_series(1, 120000) g;
CREATE PUBLICATION pub_k FOR TABLE pair;
});
q_dst(qq{
CREATE TABLE pair (a text, b integer, v text NOT NULL, $prov, PRIMARY KEY (a, b));
INSERT INTO pair (a, b, v) VALUES ('k0000', 999999, 'the source never had it');
});
# A copy of a table this small can end between two looks at its progress,
# or before the walsender has gone through the pad: the chunk of key
# (k0200, 5) -- about 24,000 rows in -- is held at a gate until the truncate
# committed, and each of the hundred rows (k0201..k0300, 5) written again
# takes 50 ms to write (chunks and stream alike).
my $pgate = AshTest::close_gate($dst, 'pair', 0, 4141,
	where => "NEW.a = 'k0200' AND NEW.b = 5 AND NEW.v = 'orig'");
q_dst(q{
CREATE FUNCTION pair_brake() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
	IF NEW.v = 'after' AND NEW.b = 5 AND NEW.a > 'k0200' AND NEW.a <= 'k0300' THEN
		PERFORM pg_sleep(0.05);
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER pair_brake BEFORE INSERT ON pair FOR EACH ROW EXECUTE FUNCTION pair_brake();
});
AshTest::setup_pipeline($src, $dst, sink => 'tk', publication => 'pub_k', marker => 0,
	maps => [ [ 'pair', snapshot_provenance => 'true', on_truncate => 'mirror' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 500");
ok(AshTest::gate_waiting($dst, 4141), 'composite: a chunk of pair waits at the gate');
ok(AshTest::poll($dst, "SELECT state = 'pending' AND rows_copied > 20000 FROM ash_replicant.snapshot_tables"
		  . " WHERE slot_name = 'tk'"), 'composite: pair is being copied');
my $pair_commit = padded_commit(
	"TRUNCATE pair; INSERT INTO pair SELECT 'k' || lpad((g % 991)::text, 4, '0'), g / 991, 'after'"
	  . " FROM generate_series(1, 200000) g", sub { AshTest::open_gate($pgate, 4141); });
ok(AshTest::wait_lsn($src, $dst, 'tk', $pair_commit), 'composite: the truncate is applied');
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.truncate_kept_chunks sink=tk table=public\.pair/)) >= 1,
	'composite: it kept what chunks copied after it');
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = 'tk'"),
	'composite: the attempt completes');
AshTest::assert_mirror_equal($src, $dst, ['(SELECT a, b, v FROM pair)'], order_by => 'a, b',
	name => 'composite: mirror = source');

# ---------------------------------------------------------------------------
# close
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE acct (id bigint PRIMARY KEY, bal integer NOT NULL);
INSERT INTO acct SELECT g, g FROM generate_series(1, 200000) g;
CREATE PUBLICATION pub_c FOR TABLE acct;
});
q_dst(qq{
CREATE TABLE acct_hist (
	version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id bigint NOT NULL, bal integer NOT NULL,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, is_current boolean,
	valid_from_ts timestamptz, valid_to_ts timestamptz, $prov,
	UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX acct_hist_open ON acct_hist (id) WHERE valid_to_lsn IS NULL;
});
AshTest::setup_pipeline($src, $dst, sink => 'cl', publication => 'pub_c', marker => 0,
	maps => [ [ 'acct_hist', source_table => 'acct', history_strategy => 'scd2',
		history_business_key => ['id'], snapshot_provenance => 'true', on_truncate => 'close' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 500");
ok(AshTest::poll($dst, "SELECT rows_copied > 5000 FROM ash_replicant.snapshot_tables WHERE slot_name = 'cl'"),
	'close: acct is being copied');
padded_commit("TRUNCATE acct; INSERT INTO acct SELECT g, -g FROM generate_series(1, 100000) g");
AshTest::wait_status($dst, 'cl', 'halted', 'snapshot_state_invalid', src => $src,
	name => 'close: halts snapshot_state_invalid');
is(q_dst("SELECT count(*) FROM acct_hist WHERE valid_to_lsn IS NOT NULL"), '0',
	'close: no version closed (nothing of the truncate applied)');
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=cl reason=snapshot_state_invalid/)),
	'close: the halt line names the reason');

done_testing();
