# SCD2 under attribute tenancy (docs/sql-api-mapping.md, docs/history-and-events.md): a relocation followed by
# another change of the same key in ONE source transaction, first delivery
# and forced re-delivery; a genuine tenant conflict still halts.
#
# A tenant change is the driver's relocation: close the version under the old
# tenant at the commit LSN L, open one under the new tenant at L.  A later
# change of the same key in the same source transaction then finds the old
# tenant's version closed at L beside the new tenant's version opened at L.
# That closed version is history, not a conflict (050 with ASH_SEED=968914
# halted tenant_conflict on "relocate, then delete" before the fix).
#
# Sink "tr", table tacct (business key id, tenant attribute), one source
# transaction per case:
#   T1 relocate a->b, then delete                  (the seed 968914 sequence)
#   T2 relocate a->b, then update under b
#   T3 relocate a->b, then back b->a
#   T4 relocate a->b, then b->c
#   T5 insert under a, relocate a->b, delete       (nothing at any boundary)
#   T6 insert under a, relocate a->b
#   T7 050's upsert that relocates, then delete
#   T8/T9 plain relocations and a delete across transactions
# Checks: exact history (windows contiguous, one version per transaction that
# leaves the key present), then a forced re-delivery of all of it (slot copy
# taken before, watermark moved back) changes no row.
#
# Genuine conflicts (source key (tenant, id), target business key id: two
# tenants may hold the same id at the source), each on its own sink because a
# halt is terminal:
#   "to"  another tenant's version opened by an EARLIER transaction
#   "tt"  another tenant's version opened earlier in the SAME transaction
# Both halt tenant_conflict; mirror and checkpoint stay unchanged.
#
# Two sinks into one target (xa and xb on x_hist, xa and yb on y_hist), each
# its own tenant: a change meeting the other sink's tenant's version past its
# LSN (open, or opened and closed) halts tenant_conflict instead of being
# skipped as a re-delivery (both went healthy without their row before).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $sink = 'tr';

$src->safe_psql('postgres', q{
CREATE TABLE tacct (id integer PRIMARY KEY, tenant text NOT NULL, val text);
ALTER TABLE tacct REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_tr FOR TABLE tacct;
CREATE TABLE tpo (tenant text NOT NULL, id integer NOT NULL, val text, PRIMARY KEY (tenant, id));
ALTER TABLE tpo REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_to FOR TABLE tpo;
CREATE TABLE tpt (tenant text NOT NULL, id integer NOT NULL, val text, PRIMARY KEY (tenant, id));
ALTER TABLE tpt REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_tt FOR TABLE tpt;
});
$dst->safe_psql('postgres', q{
CREATE TABLE tacct_hist (
	vid bigserial PRIMARY KEY, id integer NOT NULL, tenant text NOT NULL, val text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX tacct_hist_open ON tacct_hist (id) WHERE valid_to_lsn IS NULL;
CREATE TABLE tpo_hist (LIKE tacct_hist INCLUDING ALL);
CREATE TABLE tpt_hist (LIKE tacct_hist INCLUDING ALL);
});

my @hist = (history_strategy => 'scd2', history_business_key => ['id'],
	tenant_column => 'tenant', tenant_strategy => 'attribute');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_tr',
	maps => [ [ 'tacct_hist', source_table => 'tacct', @hist ] ]);
AshTest::setup_pipeline($src, $dst, sink => 'to', publication => 'pub_to',
	maps => [ [ 'tpo_hist', source_table => 'tpo', @hist ] ]);
AshTest::setup_pipeline($src, $dst, sink => 'tt', publication => 'pub_tt',
	maps => [ [ 'tpt_hist', source_table => 'tpt', @hist ] ]);
for my $s ($sink, 'to', 'tt')
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s streams")
	  or BAIL_OUT("pipeline $s never streamed");
}

# a copy of the slot from before the cases, for the forced re-delivery
$src->safe_psql('postgres', "SELECT pg_copy_logical_replication_slot('$sink', 'tr_backup')");

# ---------------------------------------------------------------------------
# Relocation, then another change of the key, in one source transaction
# ---------------------------------------------------------------------------
my %L;
($L{0}) = AshTest::commit_tracked($src,
	"INSERT INTO tacct SELECT i, 'a', 'v' FROM generate_series(1, 6) i;\n"
	  . "INSERT INTO tacct VALUES (9, 'a', 'v')");
($L{1}) = AshTest::commit_tracked($src,
	"UPDATE tacct SET tenant = 'b', val = val || '1' WHERE id = 1;\nDELETE FROM tacct WHERE id = 1");
($L{2}) = AshTest::commit_tracked($src,
	"UPDATE tacct SET tenant = 'b', val = val || '1' WHERE id = 2;\nUPDATE tacct SET val = val || '2' WHERE id = 2");
($L{3}) = AshTest::commit_tracked($src,
	"UPDATE tacct SET tenant = 'b', val = val || '1' WHERE id = 3;\nUPDATE tacct SET tenant = 'a', val = val || '2' WHERE id = 3");
($L{4}) = AshTest::commit_tracked($src,
	"UPDATE tacct SET tenant = 'b', val = val || '1' WHERE id = 4;\nUPDATE tacct SET tenant = 'c', val = val || '2' WHERE id = 4");
($L{5}) = AshTest::commit_tracked($src,
	"INSERT INTO tacct VALUES (7, 'a', 'v');\nUPDATE tacct SET tenant = 'b' WHERE id = 7;\nDELETE FROM tacct WHERE id = 7");
($L{6}) = AshTest::commit_tracked($src,
	"INSERT INTO tacct VALUES (8, 'a', 'v');\nUPDATE tacct SET tenant = 'b', val = val || '1' WHERE id = 8");
($L{7}) = AshTest::commit_tracked($src,
	"INSERT INTO tacct VALUES (9, 'c', 'v') ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, val = tacct.val || '.';\n"
	  . "DELETE FROM tacct WHERE id = 9");
($L{8}) = AshTest::commit_tracked($src,
	"UPDATE tacct SET tenant = 'b', val = val || '1' WHERE id IN (5, 6)");
($L{9}) = AshTest::commit_tracked($src,
	"DELETE FROM tacct WHERE id = 5;\nUPDATE tacct SET tenant = 'c', val = val || '2' WHERE id = 6");
AshTest::wait_caught_up($src, $dst, $sink, name => 'relocations followed by a change of the key in the same transaction apply');

my $status = AshTest::status_row($dst, $sink) // {};
like($status->{state} // '', qr/^(healthy|catching_up)$/, 'no tenant_conflict: the pipeline runs')
  or diag explain $status;

# id|tenant|val|from|to, T<n> standing for the commit LSN of Tn
my @expected = (
	'1|a|v|T0|T1',
	'2|a|v|T0|T2', '2|b|v12|T2|-',
	'3|a|v|T0|T3', '3|a|v12|T3|-',
	'4|a|v|T0|T4', '4|c|v12|T4|-',
	'5|a|v|T0|T8', '5|b|v1|T8|T9',
	'6|a|v|T0|T8', '6|b|v1|T8|T9', '6|c|v12|T9|-',
	'8|b|v1|T6|-',
	'9|a|v|T0|T7');
my %lsn_of = map { ("T$_" => $src->safe_psql('postgres', "SELECT '$L{$_}'::pg_lsn - '0/0'")) } keys %L;
my $expected = join("\n", map { s/\b(T\d)\b/$lsn_of{$1}/gr } @expected);
my $history_sql = q{SELECT id || '|' || tenant || '|' || val || '|' || valid_from_lsn || '|' || coalesce(valid_to_lsn::text, '-')
	FROM tacct_hist ORDER BY id, valid_from_lsn};
is($dst->safe_psql('postgres', $history_sql), $expected,
	'history: one version per transaction that leaves the key present, windows contiguous across tenants');

# ---------------------------------------------------------------------------
# Forced re-delivery of every case
# ---------------------------------------------------------------------------
my $rows_sql = q{SELECT md5(string_agg(row(h.*)::text, E'\n' ORDER BY vid)) || count(*) FROM tacct_hist h};
my $before = $dst->safe_psql('postgres', $rows_sql);
AshTest::redeliver($src, $dst, $sink, 'tr_backup');
AshTest::wait_caught_up($src, $dst, $sink, name => 'caught up after re-delivering every case');
ok(AshTest::log_lines_like($dst, qr/event=pipeline\.streaming sink=tr start_lsn=0\/0/) >= 1,
	're-delivery started from the beginning');
$status = AshTest::status_row($dst, $sink) // {};
like($status->{state} // '', qr/^(healthy|catching_up)$/, 're-delivery: the pipeline runs')
  or diag explain $status;
is($dst->safe_psql('postgres', $rows_sql), $before, 're-delivery changed no version row');
is($dst->safe_psql('postgres', $history_sql), $expected, 're-delivery: history unchanged');

# ---------------------------------------------------------------------------
# Genuine conflicts still halt
# ---------------------------------------------------------------------------
sub genuine_conflict
{
	my ($s, $tbl, $first, $second, $label) = @_;
	my ($ok_lsn) = AshTest::commit_tracked($src, $first);
	ok(AshTest::wait_lsn($src, $dst, $s, $ok_lsn), "$label: the first tenant's row applies");
	my $rows = qq{SELECT md5(string_agg(row(h.*)::text, E'\\n' ORDER BY vid)) || count(*) FROM ${tbl}_hist h};
	my $mirror = $dst->safe_psql('postgres', $rows);
	AshTest::commit_tracked($src, $second);
	AshTest::wait_status($dst, $s, 'halted', 'tenant_conflict', name => "$label: halts tenant_conflict");
	is($dst->safe_psql('postgres', $rows), $mirror, "$label: mirror unchanged");
	is(AshTest::checkpoint_row($dst, $s)->{commit_lsn}, $ok_lsn, "$label: watermark unchanged");
}

genuine_conflict('to', 'tpo',
	"INSERT INTO tpo VALUES ('acme', 7, 'x')",
	"INSERT INTO tpo VALUES ('globex', 8, 'ok');\nINSERT INTO tpo VALUES ('globex', 7, 'y')",
	'version of another tenant from an earlier transaction');
genuine_conflict('tt', 'tpt',
	"INSERT INTO tpt VALUES ('acme', 1, 'x')",
	"INSERT INTO tpt VALUES ('globex', 7, 'y');\nUPDATE tpt SET val = 'z' WHERE tenant = 'globex' AND id = 7;\n"
	  . "INSERT INTO tpt VALUES ('acme', 7, 'w')",
	'version of another tenant opened in the same transaction');

# ---------------------------------------------------------------------------
# Two sinks into one target: another tenant's history past the change
# ---------------------------------------------------------------------------
# Sinks xa, xb and yb write the targets x_hist and y_hist (xa both), each sink
# its own tenant.  xb and yb are stopped while their source commits a key at
# L1; xa then writes the same key under its tenant at L2 > L1 (x: an open
# version; y: a version opened and closed).  Started again, xb and yb meet
# another tenant's history past their change: no re-delivery of theirs (their
# own tenant has no version there), no order between the two tenants'
# versions -- a tenant conflict, not a change to skip (before: both went
# healthy without their row); the mirror and their watermarks stay unchanged.
$src->safe_psql('postgres', q{
CREATE TABLE xa_src (tenant text NOT NULL, id integer NOT NULL, val text, PRIMARY KEY (tenant, id));
ALTER TABLE xa_src REPLICA IDENTITY FULL;
CREATE TABLE ya_src (LIKE xa_src INCLUDING ALL);
ALTER TABLE ya_src REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_xa FOR TABLE xa_src, ya_src;
CREATE TABLE xb_src (LIKE xa_src INCLUDING ALL);
ALTER TABLE xb_src REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_xb FOR TABLE xb_src;
CREATE TABLE yb_src (LIKE xa_src INCLUDING ALL);
ALTER TABLE yb_src REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_yb FOR TABLE yb_src;
});
$dst->safe_psql('postgres', q{
CREATE TABLE x_hist (LIKE tacct_hist INCLUDING ALL);
CREATE TABLE y_hist (LIKE tacct_hist INCLUDING ALL);
});
AshTest::setup_pipeline($src, $dst, sink => 'xa', publication => 'pub_xa',
	maps => [ [ 'x_hist', source_table => 'xa_src', @hist ],
		[ 'y_hist', source_table => 'ya_src', @hist ] ]);
AshTest::setup_pipeline($src, $dst, sink => 'xb', publication => 'pub_xb',
	maps => [ [ 'x_hist', source_table => 'xb_src', @hist ] ]);
AshTest::setup_pipeline($src, $dst, sink => 'yb', publication => 'pub_yb',
	maps => [ [ 'y_hist', source_table => 'yb_src', @hist ] ]);
for my $s ('xa', 'xb', 'yb')
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s streams")
	  or BAIL_OUT("pipeline $s never streamed");
}
my ($xb_ok) = AshTest::commit_tracked($src, "INSERT INTO xb_src VALUES ('globex', 20, 'own')");
my ($yb_ok) = AshTest::commit_tracked($src, "INSERT INTO yb_src VALUES ('globex', 30, 'own')");
ok(AshTest::wait_lsn($src, $dst, 'xb', $xb_ok) && AshTest::wait_lsn($src, $dst, 'yb', $yb_ok),
	'a key of their own applies beside the other sink\'s tenant');
AshTest::stop_settled($src, $dst, $_) for ('xb', 'yb');

AshTest::commit_tracked($src, "INSERT INTO xb_src VALUES ('globex', 21, 'b')");
AshTest::commit_tracked($src, "INSERT INTO yb_src VALUES ('globex', 31, 'b')");
AshTest::commit_tracked($src, "INSERT INTO xa_src VALUES ('acme', 21, 'a')");
AshTest::commit_tracked($src, "INSERT INTO ya_src VALUES ('acme', 31, 'a')");
my ($xa_last) = AshTest::commit_tracked($src, "DELETE FROM ya_src WHERE id = 31");
ok(AshTest::wait_lsn($src, $dst, 'xa', $xa_last), 'xa writes the key past the other sinks\' changes');
# tenant:id:open|closed of one tenant's versions in a target, in order
sub versions
{
	my ($t, $tenant) = @_;
	return $dst->safe_psql('postgres',
		"SELECT string_agg(tenant || ':' || id || ':' || CASE WHEN valid_to_lsn IS NULL THEN 'open' ELSE 'closed' END,"
		  . " ',' ORDER BY vid) FROM ${t}_hist WHERE tenant = '$tenant'");
}
is(versions('x', 'acme'), 'acme:21:open', 'x_hist: the other tenant\'s open version');
is(versions('y', 'acme'), 'acme:31:closed', 'y_hist: the other tenant\'s closed version');

for my $case ([ 'xb', 'x', $xb_ok, 'globex:20:open', 'acme:21:open', 'an open version' ],
	[ 'yb', 'y', $yb_ok, 'globex:30:open', 'acme:31:closed', 'a closed version' ])
{
	my ($s, $t, $ok_lsn, $own, $other, $what) = @$case;
	AshTest::start_sink($dst, $s);
	AshTest::wait_status($dst, $s, 'halted', 'tenant_conflict',
		name => "$s: $what of another tenant past its change halts tenant_conflict");
	is(AshTest::checkpoint_row($dst, $s)->{commit_lsn}, $ok_lsn, "$s: watermark unchanged");
	is(versions($t, 'globex'), $own, "$s: the conflicting key not applied");
	is(versions($t, 'acme'), $other, "$s: the other tenant's history untouched");
}

done_testing();
