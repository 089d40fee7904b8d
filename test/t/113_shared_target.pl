# Sinks sharing a target (docs/sql-api-mapping.md, "Identity of a mapping"):
# several sinks may write one target -- each source its own tenant -- but a
# mapping that acts on rows its own sink did not write must have its target
# to itself: snapshot_provenance (a snapshot retires the rows it did not
# see) and on_truncate mirror/close (a TRUNCATE deletes or closes every row).
#
#   1  ash_replicant_map_table refuses such a mapping of a target another
#      sink maps (snapshot_provenance_invalid; config_invalid for
#      on_truncate), and any mapping of a target another sink maps so;
#      nothing is stored.  Plain sharing is accepted: sinks b and a copy
#      their tenants' rows into one target with v1 snapshots, and verify
#      counts each sink's tenant's rows of it (a row of one tenant the
#      source lacks is that sink's mismatch only).
#   2  registrations made before the refusal (planted in the catalog): sink
#      c's v1 snapshot with provenance (which doctor's destination_mappings
#      reports first) halts snapshot_provenance_invalid before it copies
#      anything, sink b's on_truncate mirror halts
#      mapping_unsupported at the source's TRUNCATE; both leave
#      the other sinks' rows in place (before: the TRUNCATE deleted every
#      row of the target, the snapshot's retirement every row of the other
#      sinks).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(31));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

my %base = (a => 0, b => 100, c => 200);
for my $s (sort keys %base)
{
	q_src(qq{
CREATE TABLE s$s (id integer PRIMARY KEY, tenant text NOT NULL, val text);
ALTER TABLE s$s REPLICA IDENTITY FULL;
INSERT INTO s$s SELECT $base{$s} + g, '$s', 'row ' || g FROM generate_series(1, 20) g;
CREATE PUBLICATION pub_$s FOR TABLE s$s;
});
}
q_dst(q{
CREATE TABLE shared (id integer PRIMARY KEY, tenant text NOT NULL, val text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE own_c (LIKE shared INCLUDING ALL);
});

my @tenancy = (tenant_column => 'tenant', tenant_strategy => 'attribute');
my $v1 = "go_forward_only => false, snapshot => 'v1'";

# per tenant: the rows of the shared target
sub counts
{
	return q_dst("SELECT string_agg(tenant || ':' || n, ',' ORDER BY tenant)"
		  . " FROM (SELECT tenant, count(*) AS n FROM shared GROUP BY tenant) x");
}

# map_table(sink, target, source, extra options): its error ('' when accepted)
sub try_map
{
	my ($sink, $target, $source, $extra) = @_;
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT ash_replicant_map_table(sink_name => '$sink', target => '$target'::regclass,"
		  . " source_table => '$source', tenant_column => 'tenant', tenant_strategy => 'attribute'"
		  . ($extra ? ", $extra" : '') . ")");
	return $rc == 0 ? '' : $err;
}

sub stored
{
	my ($sink) = @_;
	return q_dst("SELECT coalesce(string_agg(target::text || '/' || snapshot_provenance || '/' || on_truncate, ','"
		  . " ORDER BY target::text), '') FROM ash_replicant.resources"
		  . " WHERE sink_name = '$sink' AND target::text NOT LIKE 'ash_marker%'");
}

# ---------------------------------------------------------------------------
# 1: refusals at registration; plain sharing
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'b', publication => 'pub_b',
	maps => [ [ 'shared', source_table => 'sb', @tenancy ] ], pipeline_extra => $v1);
AshTest::wait_caught_up($src, $dst, 'b', name => 'b copies its rows and streams')
  or BAIL_OUT('sink b never streamed');
is(counts(), 'b:20', "b's rows are in the shared target");

AshTest::setup_pipeline($src, $dst, sink => 'a', publication => 'pub_a', start => 0,
	maps => [], pipeline_extra => $v1);
like(try_map('a', 'shared', 'sa', "snapshot_provenance => true"),
	qr/mapping rejected: snapshot_provenance_invalid \("public"\."shared" is mapped by sink "b" too, and this mapping's snapshot_provenance acts on rows the other sink wrote\)/,
	'a second sink mapping the target with provenance: refused');
like(try_map('a', 'shared', 'sa', "on_truncate => 'mirror'"),
	qr/mapping rejected: config_invalid \(.*this mapping's on_truncate/,
	'a second sink mapping the target with on_truncate mirror: refused');
is(stored('a'), '', 'nothing stored for a');
is(try_map('a', 'shared', 'sa', ''), '', 'a plain second mapping of the target is accepted');
like(try_map('b', 'shared', 'sb', "on_truncate => 'mirror'"), qr/config_invalid/,
	'the first sink cannot now take on_truncate on the shared target either');
like(try_map('b', 'shared', 'sb', "snapshot_provenance => true"), qr/snapshot_provenance_invalid/,
	'nor provenance');
is(stored('b'), 'shared/false/halt', "b's mapping unchanged");

AshTest::setup_pipeline($src, $dst, sink => 'c', publication => 'pub_c', start => 0,
	maps => [ [ 'own_c', source_table => 'sc', @tenancy, on_truncate => 'mirror' ] ], pipeline_extra => $v1);
like(try_map('a', 'own_c', 'sb', ''),
	qr/mapping rejected: config_invalid \("public"\."own_c" is mapped by sink "c" too, and that mapping's on_truncate/,
	"mapping a target another sink's on_truncate mirror acts on: refused");
is(stored('a'), 'shared/false/halt', 'nothing more stored for a');

AshTest::start_sink($dst, 'a');
AshTest::wait_caught_up($src, $dst, 'a', name => 'a copies its rows and streams')
  or BAIL_OUT('sink a never streamed');
is(counts(), 'a:20,b:20', 'both sinks\' rows are in the shared target');

# verify counts each sink's tenants' rows of the shared target
sub verdict
{
	my ($sink) = @_;
	return q_dst("SELECT source_rows || '/' || mirror_rows || '/' || verdict || '/' || coalesce(reason, '-')"
		  . " FROM ash_replicant_verify('$sink') WHERE source_table = 's$sink'");
}
is(verdict('a'), '20/20/match/-', "verify a: its tenant's rows of the shared target match");
is(verdict('b'), '20/20/match/-', "verify b: likewise, the other sink's rows not counted");
q_dst("INSERT INTO shared (id, tenant, val) VALUES (999, 'b', 'stale')");
is(verdict('b'), '20/21/mismatch/verify_rows_differ', 'a row of b\'s tenant the source lacks: b mismatches');
is(verdict('a'), '20/20/match/-', '... a still matches');
q_dst("DELETE FROM shared WHERE id = 999");

# ---------------------------------------------------------------------------
# 2: registrations from before the refusal
# ---------------------------------------------------------------------------
q_dst(q{
SELECT ash_replicant_unmap_table('c', 'own_c'::regclass);
SELECT ash_replicant_map_table(sink_name => 'c', target => 'shared'::regclass, source_table => 'sc',
	tenant_column => 'tenant', tenant_strategy => 'attribute');
UPDATE ash_replicant.resources SET snapshot_provenance = true WHERE sink_name = 'c' AND target = 'shared'::regclass;
});
like(q_dst("SELECT verdict || '/' || reason FROM ash_replicant_doctor('c') WHERE check_name = 'destination_mappings'"),
	qr{^fail/snapshot_provenance_invalid$}, 'doctor names it before the start');
AshTest::start_sink($dst, 'c');
AshTest::wait_status($dst, 'c', 'halted', 'snapshot_provenance_invalid',
	name => 'a provenance snapshot into a shared target halts snapshot_provenance_invalid');
is(counts(), 'a:20,b:20', 'nothing copied, nothing retired');
ok(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=c reason=snapshot_provenance_invalid class=\w+ context="[^"]*the target of "?public"?\.sc is mapped by another sink too/) >= 1,
	'the halt names the mapping');

AshTest::stop_settled($src, $dst, 'b');
q_dst("UPDATE ash_replicant.resources SET on_truncate = 'mirror' WHERE sink_name = 'b' AND target = 'shared'::regclass");
AshTest::start_sink($dst, 'b');
AshTest::wait_caught_up($src, $dst, 'b', name => 'b streams with its planted on_truncate');
my ($b_before) = AshTest::checkpoint_lsn($dst, 'b');
q_src('TRUNCATE sb');
AshTest::wait_status($dst, 'b', 'misconfigured', 'mapping_unsupported',
	name => 'a TRUNCATE under on_truncate mirror of a shared target halts mapping_unsupported');
is(counts(), 'a:20,b:20', 'no row of the shared target deleted');
is(AshTest::checkpoint_lsn($dst, 'b'), $b_before, "b's watermark unchanged");

done_testing();
