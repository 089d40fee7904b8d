# A pipeline with snapshot => 'incremental' whose session ends on an error
# starts the next session in the same worker process (reconnect with
# back-off).  Every session opens the chunk connection again; the previous
# one must still be valid to be closed.  Here the walsender is terminated
# twice: while the copy runs and after it completed.  Each time the same
# worker reconnects (no process crash, which would make the postmaster
# restart every session of the destination server), the copy completes, and
# the mirror equals the source.  The session that copied the table's first
# chunk into its empty target ended before its last: the next one cannot
# know the target held only the attempt's rows, and scans it for unseen
# rows.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $sink = 'increc';
my $DB   = $AshTest::DB;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(31));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_src(q{
CREATE TABLE t (id bigint PRIMARY KEY, val text NOT NULL);
CREATE VIEW t_v AS SELECT id, val FROM t;
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 200) g;
CREATE PUBLICATION pub_increc FOR TABLE t;
});
q_dst(q{
CREATE TABLE t (id bigint PRIMARY KEY, val text NOT NULL,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE VIEW t_v AS SELECT id, val FROM t;
});
# a gate the test closes to hold the copy (key 50) before its commit
my $gate = AshTest::close_gate($dst, 't', 50, 4343);

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_increc', marker => 0,
	maps => [ [ 't', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 20");
ok(AshTest::gate_waiting($dst, 4343), 'the copy waits at the gate, a chunk uncommitted');
my $pid = q_dst("SELECT worker_pid FROM ash_replicant_status('$sink')");
ok($pid =~ /^\d+$/, 'the worker runs');

# The source ends the session while the copy runs; the chunk at the gate
# commits, then the worker finds its stream gone and starts a new session.
is(AshTest::terminate_walsender($src, $sink), '1', 'the walsender is terminated during the copy');
AshTest::open_gate($gate, 4343);
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints WHERE slot_name = '$sink'"),
	'the copy completes');
my ($c1) = AshTest::commit_tracked($src, "UPDATE t SET val = val || '!' WHERE id = 7");
ok(AshTest::wait_lsn($src, $dst, $sink, $c1), 'the pipeline streams after the reconnect');
is(q_dst("SELECT worker_pid FROM ash_replicant_status('$sink')"), $pid,
	'the same worker process reconnected');
my @retired = AshTest::log_lines_like($dst, qr/event=snapshot\.retired sink=\Q$sink\E table=public\.t /);
is(scalar(@retired), 1, 'one retired line');
like($retired[0] // '', qr/ rows=0$/, 'a table copied across two sessions is scanned for unseen rows');

# And once the copy is complete.
q_src("UPDATE t SET val = val || '+' WHERE id % 3 = 0; DELETE FROM t WHERE id > 190");
is(AshTest::terminate_walsender($src, $sink), '1', 'the walsender is terminated after the copy');
my ($c2) = AshTest::commit_tracked($src, "UPDATE t SET val = val || '!' WHERE id = 8");
ok(AshTest::wait_lsn($src, $dst, $sink, $c2), 'the pipeline streams after the second reconnect');
is(q_dst("SELECT worker_pid FROM ash_replicant_status('$sink')"), $pid,
	'the same worker process reconnected again');
my @crash = AshTest::log_lines_like($dst, qr/terminated by signal|server process .* was terminated/);
is(join("\n", @crash), '', 'no process of the destination crashed');
AshTest::assert_mirror_equal($src, $dst, ['t_v'], order_by => 'id', name => 'after two reconnects');

done_testing();
