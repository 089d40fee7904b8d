# Doctor's slot check judges a missing slot as a session's start does
# (docs/reasons.md#source_slot_missing): a v1 snapshot recorded unfinished
# (snapshot_phase copying, no watermark yet) owes the mirror every commit
# since its slot's snapshot, so a start with the slot gone halts
# source_slot_missing ("a snapshot attempt is recorded").  Doctor passed
# there -- it looked only at the watermark and a go-forward acknowledgement
# -- while the worker halted (found by QA).
#
#  copying   a copy stopped half way, its slot dropped: doctor fails
#            source_slot_missing before the start and after the halt
#  complete  the same after the copy completed (a watermark): unchanged
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
sub doctor_slot
{
	my ($sink) = @_;
	return q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('$sink') WHERE check_name = 'slot'");
}

AshTest::both($src, $dst, 'CREATE TABLE a (id bigint PRIMARY KEY, v text); CREATE TABLE b (id bigint PRIMARY KEY, v text);'
	  . ' CREATE TABLE c (id bigint PRIMARY KEY, v text)');
q_src("INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 200) g;"
	  . " INSERT INTO b SELECT g, 'v' || g FROM generate_series(1, 200) g;"
	  . " INSERT INTO c SELECT g, 'v' || g FROM generate_series(1, 500) g");
q_src('CREATE PUBLICATION pub_a FOR TABLE a; CREATE PUBLICATION pub_bc FOR TABLE b, c');

# copying
AshTest::create_brake($dst, 50);
q_dst('CREATE TRIGGER brake AFTER INSERT ON c FOR EACH ROW EXECUTE FUNCTION public.brake_fn()');
AshTest::setup_pipeline($src, $dst, sink => 'sc', publication => 'pub_bc', maps => [ ['b'], ['c'] ], marker => 0,
	pipeline_extra => "snapshot => 'v1'");
ok(AshTest::poll($dst, "SELECT count(*) > 0 FROM ash_replicant.snapshot_tables WHERE slot_name = 'sc' AND state = 'copied'"),
	'copying: one table copied');
AshTest::stop_settled($src, $dst, 'sc');
q_dst('UPDATE public.brake SET ms = 0');
is(q_dst("SELECT snapshot_phase || '/' || coalesce(commit_lsn, '0/0') FROM ash_replicant.checkpoints WHERE slot_name = 'sc'"),
	'copying/0/0', 'copying: the copy is recorded unfinished, no watermark');
is(doctor_slot('sc'), 'pass/', 'copying: doctor passes while the slot exists');
q_src("SELECT pg_drop_replication_slot('sc')");
q_src("INSERT INTO c VALUES (5001, 'committed while the slot was gone')");
is(doctor_slot('sc'), 'fail/source_slot_missing', 'copying: doctor (stopped) says source_slot_missing');
AshTest::start_sink($dst, 'sc');
AshTest::wait_status($dst, 'sc', 'halted', 'source_slot_missing', src => $src, name => 'copying: the worker halts source_slot_missing');
like(AshTest::halt_line($dst, 'sc', 'source_slot_missing'), qr/a snapshot attempt is recorded/, 'copying: the halt says why');
is(doctor_slot('sc'), 'fail/source_slot_missing', 'copying: doctor (halted) says the same');

# complete
AshTest::setup_pipeline($src, $dst, sink => 'sd', publication => 'pub_a', maps => [ ['a'] ], marker => 0,
	pipeline_extra => "snapshot => 'v1'");
AshTest::wait_status($dst, 'sd', 'healthy', undef, src => $src, name => 'complete: healthy');
AshTest::assert_mirror_equal($src, $dst, ['a'], name => 'complete: copied');
AshTest::stop_settled($src, $dst, 'sd');
is(doctor_slot('sd'), 'pass/', 'complete: doctor passes while the slot exists');
q_src("SELECT pg_drop_replication_slot('sd')");
is(doctor_slot('sd'), 'fail/source_slot_missing', 'complete: doctor says source_slot_missing');

done_testing();
