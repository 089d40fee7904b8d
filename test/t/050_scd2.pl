# SCD2 history mirrors (docs/history-and-events.md): exact history under a mixed workload, a
# destination crash and a forced re-delivery.
#
# Two source tables feed SCD2 mirrors of one sink:
#   acct    business key = primary key (REPLICA IDENTITY DEFAULT); an
#           out-of-line TOAST column ("big", STORAGE EXTERNAL) that most
#           updates leave unchanged ('u': the new version takes it from the
#           version it closes); timestamp and current columns; on_truncate
#           'close'; primary-key changes
#   people  business key = email, not the primary key (REPLICA IDENTITY FULL);
#           email changes close one key's version and open the other's
# The workload mixes inserts, updates, deletes, re-inserts, key changes, a
# TRUNCATE, and several changes of one key inside one transaction.  An audit
# trigger on the SOURCE records, per source transaction, the last state of
# every key it touched; with each transaction's commit LSN (pg_walinspect)
# that gives the exact expected history: one version per (key, transaction
# that leaves the key present), valid from that commit to the key's next
# commit.  The destination is killed (-9) mid-workload.  Checks:
#   - the history equals the expected one exactly (no lost, doubled or
#     overlapping version; every closed window ends where the key's next
#     change starts);
#   - open versions equal the source rows; current/timestamp columns agree
#     with the window;
#   - forced re-delivery of the whole workload (the slot restored from a copy
#     taken before it, the watermark moved back) changes nothing.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# Seed: ASH_SEED (default: time), printed.  Seed 968914 relocates a tacct key
# and deletes it in one transaction (053 covers that sequence deterministically).
my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
note "seed $seed (rerun with ASH_SEED=$seed)";

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $sink = 'hist';

$src->safe_psql('postgres', q{
CREATE TABLE acct (id integer PRIMARY KEY, grp integer, val text, big text);
ALTER TABLE acct ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE people (pid integer PRIMARY KEY, email text NOT NULL UNIQUE, name text);
ALTER TABLE people REPLICA IDENTITY FULL;
CREATE TABLE tacct (id integer PRIMARY KEY, tenant text NOT NULL, val text);
ALTER TABLE tacct REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_hist FOR TABLE acct, people, tacct;

CREATE TABLE audit (seq bigserial PRIMARY KEY, tbl text, key text, xid text, op text, img text);
CREATE FUNCTION audit_acct() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.id <> NEW.id) THEN
		INSERT INTO audit (tbl, key, xid, op) VALUES ('acct', OLD.id::text, pg_current_xact_id()::text, 'D');
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO audit (tbl, key, xid, op, img)
		VALUES ('acct', NEW.id::text, pg_current_xact_id()::text, 'U', md5(row(NEW.grp, NEW.val, NEW.big)::text));
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER audit_acct AFTER INSERT OR UPDATE OR DELETE ON acct
	FOR EACH ROW EXECUTE FUNCTION audit_acct();
CREATE FUNCTION audit_acct_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO audit (tbl, key, xid, op) SELECT 'acct', id::text, pg_current_xact_id()::text, 'D' FROM acct;
	RETURN NULL;
END $$;
CREATE TRIGGER audit_acct_truncate BEFORE TRUNCATE ON acct
	FOR EACH STATEMENT EXECUTE FUNCTION audit_acct_truncate();
CREATE FUNCTION audit_people() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.email <> NEW.email) THEN
		INSERT INTO audit (tbl, key, xid, op) VALUES ('people', OLD.email, pg_current_xact_id()::text, 'D');
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO audit (tbl, key, xid, op, img)
		VALUES ('people', NEW.email, pg_current_xact_id()::text, 'U', md5(row(NEW.pid, NEW.name)::text));
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER audit_people AFTER INSERT OR UPDATE OR DELETE ON people
	FOR EACH ROW EXECUTE FUNCTION audit_people();
CREATE FUNCTION audit_tacct() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO audit (tbl, key, xid, op) VALUES ('tacct', OLD.id::text, pg_current_xact_id()::text, 'D');
	ELSE
		INSERT INTO audit (tbl, key, xid, op, img)
		VALUES ('tacct', NEW.id::text, pg_current_xact_id()::text, 'U', md5(row(NEW.tenant, NEW.val)::text));
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER audit_tacct AFTER INSERT OR UPDATE OR DELETE ON tacct
	FOR EACH ROW EXECUTE FUNCTION audit_tacct();
});

$dst->safe_psql('postgres', q{
CREATE TABLE acct_hist (
	version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id integer NOT NULL, grp integer, val text, big text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	valid_from_ts timestamptz, valid_to_ts timestamptz, is_current boolean,
	UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX acct_hist_open ON acct_hist (id) WHERE valid_to_lsn IS NULL;
CREATE TABLE people_hist (
	vid bigserial PRIMARY KEY,
	pid integer, email text NOT NULL, name text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	UNIQUE (email, valid_from_lsn));
CREATE UNIQUE INDEX people_hist_open ON people_hist (email) WHERE valid_to_lsn IS NULL;
CREATE TABLE tacct_hist (
	vid bigserial PRIMARY KEY, id integer NOT NULL, tenant text NOT NULL, val text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX tacct_hist_open ON tacct_hist (id) WHERE valid_to_lsn IS NULL;
});

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_hist',
	maps => [
		[ 'acct_hist', source_table => 'acct', history_strategy => 'scd2',
		  history_business_key => ['id'], history_valid_from_ts_column => 'valid_from_ts',
		  history_valid_to_ts_column => 'valid_to_ts', history_current_column => 'is_current',
		  on_truncate => 'close' ],
		[ 'people_hist', source_table => 'people', history_strategy => 'scd2',
		  history_business_key => ['email'] ],
		[ 'tacct_hist', source_table => 'tacct', history_strategy => 'scd2',
		  history_business_key => ['id'], tenant_column => 'tenant', tenant_strategy => 'attribute' ] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'SCD2 pipeline streams')
  or BAIL_OUT('pipeline never streamed');

# a copy of the slot from before the workload, for the forced re-delivery
$src->safe_psql('postgres', "SELECT pg_copy_logical_replication_slot('$sink', 'hist_backup')");
my $wal_from = $src->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# ---------------------------------------------------------------------------
# Workload (deterministic from the seed)
# ---------------------------------------------------------------------------
my $big = sub { my ($i) = @_; "repeat(md5('$i' || random()::text), 80)" };    # 2560 chars, out of line
my (%acct, %people);
my ($next_acct, $next_pid) = (1, 1);
my @xacts;
for my $x (1 .. 260)
{
	my @s;
	if ($x == 90)
	{
		push @s, 'TRUNCATE acct';
		%acct = ();
	}
	my $n = 1 + int(rand(6));
	for (1 .. $n)
	{
		my $r = rand();
		my @live = sort { $a <=> $b } keys %acct;
		my $pick = @live ? $live[ int(rand(@live)) ] : undef;
		if ($r < 0.25 || !defined $pick)
		{
			my $id = $next_acct++;
			push @s, "INSERT INTO acct VALUES ($id, $id % 7, 'v$id', " . $big->($id) . ")";
			$acct{$id} = 1;
			# same key again in the same transaction
			push @s, "UPDATE acct SET val = val || '+' WHERE id = $id" if rand() < 0.3;
			if (rand() < 0.1) { push @s, "DELETE FROM acct WHERE id = $id"; delete $acct{$id}; }
		}
		elsif ($r < 0.55)
		{
			push @s, "UPDATE acct SET val = md5(val), grp = grp + 1 WHERE id = $pick";    # big unchanged
			push @s, "UPDATE acct SET grp = grp + 10 WHERE id = $pick" if rand() < 0.2;
		}
		elsif ($r < 0.65)
		{
			push @s, "UPDATE acct SET big = " . $big->($pick) . " WHERE id = $pick";
		}
		elsif ($r < 0.75)
		{
			push @s, "UPDATE acct SET val = 'gone soon' WHERE id = $pick" if rand() < 0.5;
			push @s, "DELETE FROM acct WHERE id = $pick";
			delete $acct{$pick};
		}
		elsif ($r < 0.8)
		{
			my $to = $next_acct++;
			push @s, "UPDATE acct SET id = $to WHERE id = $pick";    # key change, big unchanged
			delete $acct{$pick};
			$acct{$to} = 1;
		}
		elsif ($r < 0.85)
		{
			# a deleted key comes back
			my $id = 1 + int(rand($next_acct - 1));
			push @s, "INSERT INTO acct VALUES ($id, 0, 'back', " . $big->($id) . ") ON CONFLICT (id) DO UPDATE SET val = 'back again'";
			$acct{$id} = 1;
		}
		elsif ($r < 0.9)
		{
			# attribute tenancy: a tenant change closes under the old tenant
			# and opens under the new one
			my $id = 1 + int(rand(40));
			my $t = 't' . int(rand(3));
			push @s, "INSERT INTO tacct VALUES ($id, '$t', 'v') ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, val = tacct.val || '.'";
			push @s, "DELETE FROM tacct WHERE id = " . (1 + int(rand(40))) if rand() < 0.15;
		}
		else
		{
			my @pl = sort { $a <=> $b } keys %people;
			my $p = @pl ? $pl[ int(rand(@pl)) ] : undef;
			my $q = rand();
			if ($q < 0.4 || !defined $p)
			{
				my $pid = $next_pid++;
				push @s, "INSERT INTO people VALUES ($pid, 'p$pid\@example.org', 'name $pid')";
				$people{$pid} = 1;
			}
			elsif ($q < 0.65) { push @s, "UPDATE people SET name = name || '.' WHERE pid = $p"; }
			elsif ($q < 0.85) { push @s, "UPDATE people SET email = 'm' || email WHERE pid = $p"; }
			else { push @s, "DELETE FROM people WHERE pid = $p"; delete $people{$p}; }
		}
	}
	push @xacts, "BEGIN;\n" . join(";\n", @s) . ";\nCOMMIT;\n" . (rand() < 0.5 ? "SELECT pg_sleep(0.01);\n" : '');
}

my $w = AshTest::start_workload($src, join('', @xacts), timeout => 300);
# kill the destination once history is being written
AshTest::poll($dst, 'SELECT count(*) > 30 FROM acct_hist', 't', timeout => 60);
note 'kill -9 destination mid-workload';
AshTest::crash_restart($dst);
ok(AshTest::finish_workload($w), 'source workload completed');
AshTest::wait_caught_up($src, $dst, $sink, name => 'caught up after the crash', timeout => 120);

# ---------------------------------------------------------------------------
# Expected history from the source audit and commit LSNs
# ---------------------------------------------------------------------------
sub expected_history
{
	my ($tbl) = @_;
	return $src->safe_psql('postgres', qq{
WITH c AS (SELECT xid::text AS xid, (start_lsn - '0/0'::pg_lsn)::bigint AS lsn
           FROM pg_get_wal_records_info('$wal_from', pg_current_wal_flush_lsn())
           WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'),
     a AS (SELECT DISTINCT ON (key, xid) key, xid, op, img FROM audit WHERE tbl = '$tbl'
           ORDER BY key, xid, seq DESC),
     t AS (SELECT a.key, c.lsn, a.op, a.img FROM a JOIN c USING (xid)),
     v AS (SELECT key, lsn AS vf, lead(lsn) OVER (PARTITION BY key ORDER BY lsn) AS vt, op, img FROM t)
SELECT key || '|' || vf || '|' || coalesce(vt::text, '-') || '|' || img FROM v WHERE op = 'U'
ORDER BY key COLLATE "C", vf});
}

sub actual_history
{
	my ($tbl) = @_;
	my $sql = $tbl eq 'acct'
	  ? q{SELECT id::text || '|' || valid_from_lsn || '|' || coalesce(valid_to_lsn::text, '-') || '|' || md5(row(grp, val, big)::text)
	      FROM acct_hist ORDER BY id::text COLLATE "C", valid_from_lsn}
	  : $tbl eq 'tacct'
	  ? q{SELECT id::text || '|' || valid_from_lsn || '|' || coalesce(valid_to_lsn::text, '-') || '|' || md5(row(tenant, val)::text)
	      FROM tacct_hist ORDER BY id::text COLLATE "C", valid_from_lsn}
	  : q{SELECT email || '|' || valid_from_lsn || '|' || coalesce(valid_to_lsn::text, '-') || '|' || md5(row(pid, name)::text)
	      FROM people_hist ORDER BY email COLLATE "C", valid_from_lsn};
	return $dst->safe_psql('postgres', $sql);
}

sub check_history
{
	my ($label) = @_;
	for my $tbl (qw(acct people tacct))
	{
		my @exp = split /\n/, expected_history($tbl);
		my @act = split /\n/, actual_history($tbl);
		my $ok = is(scalar(@act), scalar(@exp), "$label: $tbl has one version per committed change of a present key");
		my %e = map { $_ => 1 } @exp;
		my %a = map { $_ => 1 } @act;
		my @missing = grep { !$a{$_} } @exp;
		my @extra = grep { !$e{$_} } @act;
		ok(!@missing && !@extra, "$label: $tbl history (keys, windows, contents) equals the source's")
		  or diag "missing: @missing[0 .. ($#missing < 5 ? $#missing : 5)]\nextra: @extra[0 .. ($#extra < 5 ? $#extra : 5)]";
	}

	# open versions are the source rows
	is($dst->safe_psql('postgres', q{SELECT md5(coalesce(string_agg(row(id, grp, val, big)::text, E'\n' ORDER BY id), '')) || count(*)
		FROM acct_hist WHERE valid_to_lsn IS NULL}),
	   $src->safe_psql('postgres', q{SELECT md5(coalesce(string_agg(row(id, grp, val, big)::text, E'\n' ORDER BY id), '')) || count(*) FROM acct}),
	   "$label: open acct versions equal the source rows");
	is($dst->safe_psql('postgres', q{SELECT md5(coalesce(string_agg(row(pid, email, name)::text, E'\n' ORDER BY email), '')) || count(*)
		FROM people_hist WHERE valid_to_lsn IS NULL}),
	   $src->safe_psql('postgres', q{SELECT md5(coalesce(string_agg(row(pid, email, name)::text, E'\n' ORDER BY email), '')) || count(*) FROM people}),
	   "$label: open people versions equal the source rows");

	# contiguity and the side columns
	is($dst->safe_psql('postgres', q{
		SELECT count(*) FROM (
			SELECT valid_from_lsn, valid_to_lsn,
			       lead(valid_from_lsn) OVER (PARTITION BY id ORDER BY valid_from_lsn) AS next_from
			FROM acct_hist) v
		WHERE valid_to_lsn IS NOT NULL AND (valid_to_lsn <= valid_from_lsn OR valid_to_lsn > next_from)
		   OR valid_to_lsn IS NULL AND next_from IS NOT NULL}),
	   '0', "$label: windows are non-empty, ordered and never overlap");
	is($dst->safe_psql('postgres', q{
		SELECT count(*) FROM acct_hist
		WHERE is_current IS DISTINCT FROM (valid_to_lsn IS NULL)
		   OR (valid_to_ts IS NULL) <> (valid_to_lsn IS NULL)
		   OR valid_from_ts IS NULL OR valid_to_ts < valid_from_ts}),
	   '0', "$label: current flag and commit times agree with the windows");
}

check_history('after crash');
ok($dst->safe_psql('postgres', q{SELECT count(*) FROM (SELECT id, tenant, lag(tenant) OVER (PARTITION BY id ORDER BY valid_from_lsn) AS prev,
	lag(valid_to_lsn) OVER (PARTITION BY id ORDER BY valid_from_lsn) AS prev_to, valid_from_lsn FROM tacct_hist) x
	WHERE prev <> tenant AND prev_to = valid_from_lsn}) > 0, 'tenant changes closed one version and opened the next at the same commit');
ok($dst->safe_psql('postgres', q{SELECT max(c) FROM (SELECT count(*) c FROM acct_hist GROUP BY valid_to_lsn) x}) > 5,
	'the TRUNCATE closed many versions at one commit');
my $st = AshTest::status_row($dst, $sink) // {};
like($st->{state} // '', qr/^(healthy|catching_up)$/, 'pipeline running after the crash');

# ---------------------------------------------------------------------------
# Forced re-delivery: the whole workload again from a slot copy
# ---------------------------------------------------------------------------
my $before = $dst->safe_psql('postgres', q{SELECT md5(string_agg(row(a.*)::text, E'\n' ORDER BY version_id)) FROM acct_hist a})
  . $dst->safe_psql('postgres', q{SELECT md5(string_agg(row(p.*)::text, E'\n' ORDER BY vid)) FROM people_hist p})
  . $dst->safe_psql('postgres', q{SELECT md5(string_agg(row(t.*)::text, E'\n' ORDER BY vid)) FROM tacct_hist t});
AshTest::redeliver($src, $dst, $sink, 'hist_backup');
AshTest::wait_caught_up($src, $dst, $sink, name => 'caught up after re-delivering the workload', timeout => 120);
ok(AshTest::log_lines_like($dst, qr/event=pipeline\.streaming sink=hist start_lsn=0\/0/) >= 1,
	're-delivery started from the beginning');
my $after = $dst->safe_psql('postgres', q{SELECT md5(string_agg(row(a.*)::text, E'\n' ORDER BY version_id)) FROM acct_hist a})
  . $dst->safe_psql('postgres', q{SELECT md5(string_agg(row(p.*)::text, E'\n' ORDER BY vid)) FROM people_hist p})
  . $dst->safe_psql('postgres', q{SELECT md5(string_agg(row(t.*)::text, E'\n' ORDER BY vid)) FROM tacct_hist t});
is($after, $before, 're-delivery changed no version (no double open, no double close)');
check_history('after re-delivery');

done_testing();
