# Streaming mirror core: source identity and checkpoint binding (README.md#how-apply-works).
#
#  (last, separately) a wrong source_system_identifier (and, separately, a wrong source_database)
#    halts source_identity_mismatch before any checkpoint or slot exists; no
#    identity value appears in status, catalog text of status, or any
#    destination log line of the extension
#  - a checkpoint row whose timeline differs from the source's:
#    misconfigured/source_timeline_changed
#  - a checkpoint watermark beyond the source's WAL ('1000/0'):
#    misconfigured/checkpoint_ahead_of_source
#  - the checkpoint of the slot name owned by another source identity:
#    misconfigured/checkpoint_identity_conflict, and the foreign row is not
#    overwritten
#  Each conflict emits one checkpoint.conflict event; every rejected binding
#  leaves the checkpoint and the mirror unchanged; after the operator restores
#  the row the pipeline resumes and the mirror converges.
#
# Checkpoint rows are edited directly on the destination as superuser while
# the pipeline is stopped (ash_replicant_stop, worker gone).
# log_statement is 'none' on both nodes: the configuration calls carry the
# identity values and must not be what the log greps find.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my ($sysid, $db) = AshTest::source_identity($src);
my $tli = AshTest::source_timeline($src);
# a well-formed identifier that is not the source's
my $wrong = ($sysid =~ /^7/ ? '6' : '7') . substr($sysid, 1);
note "source identity $sysid/$db timeline $tli; wrong identifier $wrong";

AshTest::both($src, $dst, 'CREATE TABLE t (id integer PRIMARY KEY, v text)');
$src->safe_psql('postgres', q{
CREATE PUBLICATION pub_t FOR TABLE t;
CREATE PUBLICATION pub_idm FOR TABLE t;
CREATE PUBLICATION pub_dbm FOR TABLE t;
});

########################################################################
# a good pipeline with a checkpoint
########################################################################
my $sink = 'tl';
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_t', maps => [ ['t'] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams')
  or BAIL_OUT('pipeline never streamed');
$src->safe_psql('postgres', q{INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g});
AshTest::wait_caught_up($src, $dst, $sink);
AshTest::assert_mirror_equal($src, $dst, ['t']);
my $cp = AshTest::checkpoint_row($dst, $sink) // {};
is($cp->{timeline_id}, $tli, 'checkpoint records the source timeline');
is($cp->{source_system_id}, $sysid, 'checkpoint keyed by the source system identifier');
is($cp->{source_database}, $db, 'checkpoint keyed by the source database');

my $key = "slot_name = '$sink'";

# stop, wait for the worker to be gone, then run $sql on the checkpoint
sub stopped_edit
{
	my ($sql) = @_;
	AshTest::stop_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'not_started', undef, no_early_exit => 1, name => 'stopped');
	AshTest::poll($dst, "SELECT count(*) = 0 FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink' AND worker_pid IS NOT NULL");
	$dst->safe_psql('postgres', $sql);
}

sub conflict_events
{
	my ($reason) = @_;
	return scalar(AshTest::log_lines_like($dst, qr/event=checkpoint\.conflict\b.*\breason=\Q$reason\E\b/));
}

# identity, timeline and watermark of every checkpoint row of the slot name
sub cp_rows
{
	return $dst->safe_psql('postgres',
		"SELECT string_agg(concat_ws('|', source_system_id, source_database, timeline_id, commit_lsn, end_lsn), ';' ORDER BY source_system_id) FROM ash_replicant.checkpoints WHERE $key");
}

# One rejected binding: edit, start, expect $reason, mirror/checkpoint as they were.
sub rejected_binding
{
	my (%c) = @_;
	my $before_events = conflict_events($c{reason});
	stopped_edit($c{edit});
	my $rows_before = cp_rows();
	$src->safe_psql('postgres', "INSERT INTO t VALUES ($c{id}, 'while rejected')");
	my $h0 = AshTest::table_hash($dst, 't');
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', $c{reason}, src => $src);
	is(AshTest::table_hash($dst, 't'), $h0, "$c{reason}: nothing applied");
	is(cp_rows(), $rows_before, "$c{reason}: checkpoint rows (identity, timeline, watermark) unchanged");
	is(conflict_events($c{reason}) - $before_events, 1, "$c{reason}: one checkpoint.conflict event");
	my @leak = grep { index($_, $sysid) >= 0 } AshTest::log_lines_like($dst, qr/checkpoint\.conflict|\Q$c{reason}\E/);
	is(scalar(@leak), 0, "$c{reason}: no identity value in its log lines");
	stopped_edit($c{restore});
}

my $saved = $dst->safe_psql('postgres', "SELECT commit_lsn || '|' || end_lsn FROM ash_replicant.checkpoints WHERE $key");
my ($saved_commit, $saved_end) = split /\|/, $saved;

rejected_binding(
	reason  => 'source_timeline_changed',
	id      => 1001,
	edit    => "UPDATE ash_replicant.checkpoints SET timeline_id = timeline_id + 6 WHERE $key",
	restore => "UPDATE ash_replicant.checkpoints SET timeline_id = $tli WHERE $key");

rejected_binding(
	reason  => 'checkpoint_ahead_of_source',
	id      => 1002,
	edit    => "UPDATE ash_replicant.checkpoints SET commit_lsn = '1000/0', end_lsn = '1000/0' WHERE $key",
	# the halt stays until a reset or adoption clears its tombstone (test 148):
	# the hand-made restore clears it as the adoption would
	restore => "UPDATE ash_replicant.checkpoints SET commit_lsn = '$saved_commit', end_lsn = '$saved_end',"
	  . " terminal_cause = NULL, terminal_class = NULL WHERE $key");

# the slot name's checkpoint now belongs to another source
rejected_binding(
	reason  => 'checkpoint_identity_conflict',
	id      => 1003,
	edit    => "UPDATE ash_replicant.checkpoints SET source_system_id = '$wrong' WHERE $key",
	restore => "UPDATE ash_replicant.checkpoints SET source_system_id = '$sysid' WHERE $key");

########################################################################
# restored: resumes from the preserved watermark, converges
########################################################################
AshTest::start_sink($dst, $sink);
$src->safe_psql('postgres', q{UPDATE t SET v = 'after' WHERE id <= 10});
AshTest::wait_caught_up($src, $dst, $sink, name => 'resumes after the operator restored the checkpoint');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'converged after the rejected bindings');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id IN (1001, 1002, 1003)'), '3',
	'rows committed while the binding was rejected applied once resumed');
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src);

########################################################################
# wrong identity: system identifier, then database
########################################################################
AshTest::setup_pipeline($src, $dst, sink => 'idm', publication => 'pub_idm',
	maps => [ ['t'] ], source_system_identifier => $wrong);
AshTest::wait_status($dst, 'idm', 'halted', 'source_identity_mismatch', src => $src);
AshTest::setup_pipeline($src, $dst, sink => 'dbm', publication => 'pub_dbm',
	maps => [ ['t'] ], source_database => 'not_the_source_db');
AshTest::wait_status($dst, 'dbm', 'halted', 'source_identity_mismatch', src => $src);

for my $s (qw(idm dbm))
{
	is($dst->safe_psql('postgres', "SELECT count(*) FROM ash_replicant.checkpoints WHERE slot_name = '$s'"),
		'0', "$s: no checkpoint row bound");
	is($src->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$s'"),
		'0', "$s: no slot created at the source");
}
my $status_text = $dst->safe_psql('postgres',
	"SELECT row_to_json(x)::text FROM ash_replicant_status() x")
  . $dst->safe_psql('postgres', "SELECT row_to_json(x)::text FROM ash_replicant.stat_pipelines x");
for my $v ([ $sysid, 'source identifier' ], [ $wrong, 'configured identifier' ], [ 'not_the_source_db', 'configured database' ])
{
	ok(index($status_text, $v->[0]) < 0, "$v->[1] not in status or stat_pipelines");
	my @lines = AshTest::log_lines_like($dst, qr/ash_replicant|source_identity_mismatch/);
	my @leaks = grep { index($_, $v->[0]) >= 0 } @lines;
	is(scalar(@leaks), 0, "$v->[1] not in any ash_replicant log line of the destination")
	  or diag join("\n", @leaks[ 0 .. ($#leaks < 4 ? $#leaks : 4) ]);
}
ok(scalar(AshTest::log_lines_like($dst, qr/source_identity_mismatch/)) >= 1,
	'the mismatch is logged with its reason code');
AshTest::stop_sink($dst, $_) for qw(idm dbm);

done_testing();
