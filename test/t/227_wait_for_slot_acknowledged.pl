# ash_replicant_wait_for_slot promises that every source transaction
# committed after it returns is mirrored.  What keeps that promise across a
# worker's end is the acknowledgement the worker commits on its checkpoint
# when it creates the slot: a later start that finds the slot gone halts
# source_slot_missing rather than creating a new one past the commits it
# owes (test 147).  wait_for_slot returned as soon as the slot was created,
# before that acknowledgement was committed: a worker ending in between (held
# here by a lock on its checkpoint row, as a crash at that point would) left
# nothing owed, and with the slot dropped while the pipeline was stopped the
# next start created a new slot healthy, the row committed after
# wait_for_slot returned lost (found by QA).  Now wait_for_slot returns only
# once the acknowledgement is committed and flushed.
#
#  gap       the acknowledgement is held back: wait_for_slot does not return;
#            a worker ending there promised nothing (a new slot is lawful)
#  promise   once it is committed wait_for_slot returns with the record in
#            place; the slot dropped while stopped halts source_slot_missing
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, 'CREATE TABLE t (id bigint PRIMARY KEY, v text); CREATE TABLE u (id bigint PRIMARY KEY, v text)');
q_src('CREATE PUBLICATION pub_t FOR TABLE t; CREATE PUBLICATION pub_u FOR TABLE u');

sub wait_for_slot
{
	my ($sink, $timeout) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_wait_for_slot('$sink', '$timeout')");
	return ($rc, $err);
}

sub acknowledged
{
	my ($sink) = @_;
	return q_dst("SELECT acknowledged_lsn IS NOT NULL FROM ash_replicant.checkpoints WHERE slot_name = '$sink'");
}

# Start $sink with its slot's creation held by an open source transaction,
# then hold its checkpoint row before the slot can be created: the worker
# stops between the slot's creation and the acknowledgement.  Returns the
# session holding the row.
sub start_held
{
	my ($sink) = @_;
	my $sx = $src->background_psql($DB, on_error_stop => 1);
	$sx->query_safe('BEGIN; SELECT pg_current_xact_id()');
	AshTest::start_sink($dst, $sink);
	AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.checkpoints WHERE slot_name = '$sink'");
	AshTest::poll($src, "SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = '$sink'");
	my $dx = $dst->background_psql($DB, on_error_stop => 1);
	$dx->query_safe("BEGIN; SELECT 1 FROM ash_replicant.checkpoints WHERE slot_name = '$sink' FOR UPDATE");
	$sx->query_safe('COMMIT');
	$sx->quit;
	# the slot is created; the worker waits for the row
	AshTest::poll($src, "SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = '$sink'"
		  . " AND confirmed_flush_lsn IS NOT NULL");
	AshTest::poll($dst, "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'ash_replicant $sink'"
		  . " AND wait_event_type = 'Lock'");
	return $dx;
}

# gap
AshTest::setup_pipeline($src, $dst, sink => 'wg', publication => 'pub_t', maps => [ ['t'] ], marker => 0, start => 0);
my $dx = start_held('wg');
my ($rc, $err) = wait_for_slot('wg', '3 s');
isnt($rc, 0, 'gap: wait_for_slot does not return before the acknowledgement is committed');
like($err, qr/did not reach its replication slot within the timeout/, 'gap: it raises the timeout');
is(acknowledged('wg'), 'f', 'gap: nothing acknowledged yet');
q_src("INSERT INTO t VALUES (1, 'committed while the worker had no acknowledgement')");
AshTest::stop_sink($dst, 'wg');
ok(AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'ash_replicant wg'"),
	'gap: the worker ended before its acknowledgement');
$dx->query_safe('ROLLBACK');
$dx->quit;
AshTest::poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'wg' AND active");
q_src("SELECT pg_drop_replication_slot('wg')");
AshTest::start_sink($dst, 'wg');
AshTest::poll($dst, "SELECT state IN ('healthy','halted','misconfigured') FROM ash_replicant_status('wg')", 't', timeout => 60);
my $st = AshTest::status_row($dst, 'wg');
my $row1 = q_dst('SELECT count(*) FROM t WHERE id = 1');
# with wait_for_slot returned the row was owed: mirrored, or the halt
ok($rc == 0 ? ($row1 eq '1' || ($st->{reason} // '') eq 'source_slot_missing') : $st->{state} eq 'healthy',
	'gap: a row committed after wait_for_slot returned is never lost; without its return a new slot is lawful')
  or diag "state $st->{state}/" . ($st->{reason} // '') . " row $row1 rc $rc";
AshTest::stop_sink($dst, 'wg');

# promise
AshTest::setup_pipeline($src, $dst, sink => 'wp', publication => 'pub_u', maps => [ ['u'] ], marker => 0, start => 0);
$dx = start_held('wp');
($rc, $err) = wait_for_slot('wp', '2 s');
isnt($rc, 0, 'promise: wait_for_slot waits while the acknowledgement is held back');
$dx->query_safe('ROLLBACK');
$dx->quit;
($rc, $err) = wait_for_slot('wp', '60 s');
is($rc, 0, 'promise: wait_for_slot returns once it is committed') or diag $err;
is(acknowledged('wp'), 't', 'promise: the acknowledgement is recorded when it returns');
q_src("INSERT INTO u VALUES (1, 'committed after wait_for_slot returned')");
AshTest::stop_sink($dst, 'wp');
AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'ash_replicant wp'");
AshTest::poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'wp' AND active");
q_src("SELECT pg_drop_replication_slot('wp')");
AshTest::start_sink($dst, 'wp');
AshTest::wait_status($dst, 'wp', 'halted', 'source_slot_missing', src => $src,
	name => 'promise: the slot gone halts source_slot_missing');
is(q_src("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'wp'"), '0', 'promise: no slot created');
is(q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('wp') WHERE check_name = 'slot'"),
	'fail/source_slot_missing', 'promise: doctor says the same');

done_testing();
