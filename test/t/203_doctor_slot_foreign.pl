# Doctor while another consumer (pg_recvlogical) holds the pipeline's slot
# and the pipeline is enabled: check slot warns source_slot_in_use for as
# long as the worker cannot get its slot (before: every check passed while
# the worker failed 55006 on every try, as soon as a worker process
# existed), and status reads catching_up/source_slot_busy until the halt
# source_slot_in_use (before: catching_up with no reason).  The pipeline's
# own walsender holding the slot is no other consumer: doctor passes while
# it streams, before and after.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
AshTest::both($src, $dst, "CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL)");
$src->safe_psql($DB, "CREATE PUBLICATION pub FOR TABLE t");
AshTest::setup_pipeline($src, $dst, sink => 'q', publication => 'pub', maps => [ ['t'] ]);
AshTest::wait_status($dst, 'q', 'healthy', undef, src => $src);
AshTest::wait_caught_up($src, $dst, 'q');

sub doc
{
	return $dst->safe_psql($DB,
		"SELECT coalesce(string_agg(check_name || ':' || verdict || ':' || coalesce(reason, ''), ' ; '), '')"
		  . " FROM ash_replicant_doctor('q') WHERE verdict <> 'pass'");
}
is(doc(), '', 'doctor all pass while the pipeline streams from its slot');

AshTest::stop_settled($src, $dst, 'q');
# -s 0 -F 0: no status packets, so it never moves the slot
my $bindir = $src->config_data('--bindir');
my $rl = IPC::Run::start(
	[ "$bindir/pg_recvlogical", '-h', '127.0.0.1', '-p', $src->port, '-d', $DB, '-S', 'q',
	  '--start', '--no-loop', '-s', '0', '-F', '0', '-o', 'proto_version=1',
	  '-o', 'publication_names=pub', '-f', '/dev/null' ],
	'>', \my $o, '2>', \my $e);
ok(AshTest::poll($src, "SELECT active FROM pg_replication_slots WHERE slot_name = 'q'"), 'pg_recvlogical holds the slot');
is(doc(), 'slot:warn:source_slot_in_use', 'stopped, slot held elsewhere: doctor warns');

my $log_at = -s $dst->logfile;
AshTest::start_sink($dst, 'q');
ok($dst->wait_for_log(qr/event=source\.fault sink=q step=(?:slot|start) source_sqlstate=55006/, $log_at),
	'the worker fails 55006 and retries');
my $d = doc();
my $st = AshTest::status_row($dst, 'q') // {};
note "enabled, slot held elsewhere: status $st->{state}/" . ($st->{reason} // '') . ", doctor [$d]";
is($d, 'slot:warn:source_slot_in_use', 'running, slot held elsewhere: doctor warns source_slot_in_use');
ok(defined $st->{worker_pid}, 'while a worker runs');
AshTest::wait_status($dst, 'q', 'catching_up', 'source_slot_busy', src => $src,
	name => 'status says why the worker retries: catching_up/source_slot_busy');
AshTest::wait_status($dst, 'q', 'misconfigured', 'source_slot_in_use', src => $src, timeout => 90);

$rl->kill_kill;
$rl->finish;
AshTest::poll($src, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'q'");
AshTest::stop_settled($src, $dst, 'q');
AshTest::start_sink($dst, 'q');
AshTest::wait_status($dst, 'q', 'healthy', undef, src => $src);
$src->safe_psql($DB, "INSERT INTO t VALUES (1, 'a')");
AshTest::wait_caught_up($src, $dst, 'q');
ok(AshTest::poll($src, "SELECT active FROM pg_replication_slots WHERE slot_name = 'q'"), 'the pipeline holds its slot again');
is(doc(), '', 'doctor all pass again while the pipeline streams');
AshTest::assert_mirror_equal($src, $dst, ['t']);
done_testing();
