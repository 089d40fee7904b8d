# Row-level security on a target (docs/sql-api-mapping.md, "Privileges of
# the sink owner"): the worker writes as the sink owner, and the owner's
# writes are not re-gated by row-level security policies -- a policy that
# hid rows from them would make a DELETE, a TRUNCATE's delete or a
# snapshot's retirement pass over rows without a word, and verify count
# fewer rows than the target holds.
#
#   1  a target whose policies apply to the sink owner (row-level security
#      enabled, the owner neither owns the table nor bypasses it) is
#      refused at registration, config_invalid 42501; doctor fails
#      destination_mappings for one enabled after registration.
#   2  a target the sink owner owns, with FORCE ROW LEVEL SECURITY and a
#      policy hiding rows: the owner is not re-gated -- a v1 snapshot with
#      provenance retires a stale row the policy hides, an update and a
#      delete of rows it hides are applied, a TRUNCATE (on_truncate mirror)
#      deletes them; verify counts them.
#   3  row-level security enabled on a running pipeline's target: the
#      first write it would filter fails (apply_failed, 42501) instead of
#      passing over the hidden row; nothing of that transaction is
#      committed; with the policy gone a restart applies it once.
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
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(33));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_dst(q{
CREATE ROLE mirror_writer NOLOGIN;
GRANT USAGE ON SCHEMA public TO mirror_writer;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO mirror_writer;
});
for my $t (qw(t_rls t_own t_late))
{
	q_src(qq{
CREATE TABLE $t (id integer PRIMARY KEY, val text);
INSERT INTO $t SELECT g, 'row ' || g FROM generate_series(1, 10) g;
});
}
q_src(q{
INSERT INTO t_own VALUES (11, 'hidden at the source');
CREATE PUBLICATION pub_own FOR TABLE t_own;
CREATE PUBLICATION pub_r;
CREATE PUBLICATION pub_late FOR TABLE t_late;
});
q_dst(q{
CREATE TABLE t_rls (id integer PRIMARY KEY, val text);
CREATE TABLE t_own (id integer PRIMARY KEY, val text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE t_late (id integer PRIMARY KEY, val text);
ALTER TABLE t_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON t_rls FOR ALL TO mirror_writer
	USING (val NOT LIKE 'hidden%') WITH CHECK (true);
});

# ---------------------------------------------------------------------------
# 1: refused at registration; doctor
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'r', publication => 'pub_r', start => 0,
	owner => 'mirror_writer', maps => []);
my ($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_map_table(sink_name => 'r', target => 't_rls'::regclass)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($rc, 0, 'a target whose row-level security applies to the sink owner: refused');
like($err, qr/ERROR:  42501: ash_replicant: mapping rejected: config_invalid \(row-level security of target "public"\."t_rls" applies to sink owner "mirror_writer"/,
	'... config_invalid, 42501, naming the target and the owner');
is(q_dst("SELECT count(*) FROM ash_replicant.resources WHERE target = 't_rls'::regclass"), '0',
	'nothing stored');

q_dst(q{
ALTER TABLE t_rls DISABLE ROW LEVEL SECURITY;
SELECT ash_replicant_map_table(sink_name => 'r', target => 't_rls'::regclass);
ALTER TABLE t_rls ENABLE ROW LEVEL SECURITY;
});
like(q_dst("SELECT verdict || '/' || reason FROM ash_replicant_doctor('r') WHERE check_name = 'destination_mappings'"),
	qr{^fail/config_invalid$}, 'enabled after registration: doctor fails destination_mappings');
q_dst("SELECT ash_replicant_unmap_table('r', 't_rls'::regclass)");

# ---------------------------------------------------------------------------
# 2: a target the owner owns, FORCE ROW LEVEL SECURITY: not re-gated
# ---------------------------------------------------------------------------
q_dst(q{
INSERT INTO t_own (id, val) VALUES (3, 'row 3'), (99, 'hidden and stale');
ALTER TABLE t_own OWNER TO mirror_writer;
ALTER TABLE t_own ENABLE ROW LEVEL SECURITY;
ALTER TABLE t_own FORCE ROW LEVEL SECURITY;
CREATE POLICY visible ON t_own FOR ALL USING (val NOT LIKE 'hidden%') WITH CHECK (true);
});
AshTest::setup_pipeline($src, $dst, sink => 'o', publication => 'pub_own',
	owner => 'mirror_writer', maps => [ [ 't_own', snapshot_provenance => 'true', on_truncate => 'mirror' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_caught_up($src, $dst, 'o', name => 'o copies and streams')
  or BAIL_OUT('sink o never streamed');
sub own_rows
{
	my ($node) = @_;
	return $node->safe_psql($DB, "SELECT string_agg(id || ':' || val, ',' ORDER BY id) FROM t_own");
}
is(own_rows($dst), own_rows($src), 'the snapshot retired the stale row the policy hides, copied the hidden source row');
is(q_dst("SELECT mirror_rows || '/' || verdict FROM ash_replicant_verify('o') WHERE source_table = 't_own'"),
	'11/match', 'verify counts every row');

q_src(q{
UPDATE t_own SET val = 'hidden now' WHERE id = 4;
UPDATE t_own SET val = 'hidden, updated' WHERE id = 11;
DELETE FROM t_own WHERE id = 4;
UPDATE t_own SET val = 'hidden 5' WHERE id = 5;
});
AshTest::wait_caught_up($src, $dst, 'o', name => 'o applies updates and deletes of hidden rows');
is(own_rows($dst), own_rows($src), 'updates and deletes of rows the policy hides are applied');
is(AshTest::stat_row($dst, 'o')->{missing_row_deletes} // 0, 0, 'no delete missed its row');
q_src('TRUNCATE t_own');
AshTest::wait_caught_up($src, $dst, 'o', name => 'o applies the truncate');
is(q_dst('SELECT count(*) FROM t_own'), '0', 'the TRUNCATE deleted the rows the policy hides too');
is(AshTest::status_row($dst, 'o')->{state}, 'healthy', 'o healthy');

# ---------------------------------------------------------------------------
# 3: enabled on a running pipeline's target the owner does not own
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'l', publication => 'pub_late',
	owner => 'mirror_writer', maps => [ [ 't_late' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1', max_command_retries => 0");
AshTest::wait_caught_up($src, $dst, 'l', name => 'l copies and streams')
  or BAIL_OUT('sink l never streamed');
q_dst(q{
ALTER TABLE t_late ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON t_late FOR ALL TO mirror_writer USING (id <> 5) WITH CHECK (true);
});
my $before = AshTest::checkpoint_lsn($dst, 'l');
q_src(q{
BEGIN;
INSERT INTO t_late VALUES (20, 'new');
DELETE FROM t_late WHERE id = 5;
COMMIT;
});
AshTest::wait_status($dst, 'l', 'halted', 'apply_failed',
	name => 'a delete the policy would filter halts apply_failed');
is(AshTest::status_row($dst, 'l')->{halt_sqlstate}, '42501', '... with 42501');
is(q_dst('SELECT count(*) FROM t_late WHERE id IN (5, 20)'), '1',
	'nothing of the transaction committed: row 5 there, row 20 not');
is(AshTest::checkpoint_lsn($dst, 'l'), $before, 'the watermark did not move');

q_dst('DROP POLICY visible ON t_late; ALTER TABLE t_late DISABLE ROW LEVEL SECURITY');
AshTest::start_sink($dst, 'l');
AshTest::wait_caught_up($src, $dst, 'l', name => 'l applies it after the policy is gone');
AshTest::assert_mirror_equal($src, $dst, ['t_late']);

done_testing();
