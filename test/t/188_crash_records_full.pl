# The crash-loop guard's records (docs/reasons.md#apply_crash_loop) are
# carried by the postmaster across crash restarts, one entry per pipeline
# slot, and taken by the dead worker's sink's next worker.  A sink whose
# worker died and that then waited for a pipeline slot, and was stopped
# there, kept its entry pending for good; with every entry so held,
# another sink's deaths were not recorded at all: a change that killed its
# worker would have crash-restarted the server for ever, healthy between.
#
# max_pipelines = 1.  p1 runs alone, its worker is killed (kill -9: the
# server restarts), a_x takes the slot, p1 waits for one and is stopped.
# Then a_x dies three times applying one change: apply_crash_loop.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(
	dst_conf => "restart_after_crash = on\nash_replicant.max_pipelines = 1\n");
for my $s ('a_x', 'p1')
{
	AshTest::both($src, $dst, "CREATE TABLE t_$s (id int PRIMARY KEY, v text)");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$s FOR TABLE t_$s");
	AshTest::setup_pipeline($src, $dst, sink => $s, publication => "pub_$s", maps => [ ["t_$s"] ],
		start => 0);
}
$dst->safe_psql($DB, q{
CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.id = 777 THEN PERFORM pg_sleep(30); END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER slow BEFORE INSERT ON t_a_x FOR EACH ROW EXECUTE FUNCTION slow();
});

sub worker_pid
{
	my ($s) = @_;
	for (1 .. 300)
	{
		my ($rc, $out) = $dst->psql($DB,
			"SELECT worker_pid FROM ash_replicant_status('$s') WHERE worker_pid IS NOT NULL");
		return $out if $rc == 0 && $out ne '';
		usleep(100_000);
	}
	return undef;
}

sub server_back
{
	for (1 .. 300)
	{
		my ($rc) = $dst->psql($DB, 'SELECT 1');
		return 1 if $rc == 0;
		usleep(100_000);
	}
	return 0;
}

# p1 dies by itself, then waits for the slot a_x took, and is stopped there
AshTest::start_sink($dst, 'p1');
ok(AshTest::wait_caught_up($src, $dst, 'p1'), 'p1 streams');
AshTest::start_sink($dst, 'a_x');
AshTest::wait_status($dst, 'a_x', 'catching_up', 'pipeline_slots_exhausted',
	name => 'a_x waits for the one slot');
kill 'KILL', worker_pid('p1');
ok(server_back(), 'the server restarted after the death of p1');
ok(AshTest::wait_caught_up($src, $dst, 'a_x'), 'a_x has the slot after the restart');
AshTest::wait_status($dst, 'p1', 'catching_up', 'pipeline_slots_exhausted',
	name => 'p1 waits for a slot, its record pending');
AshTest::stop_sink($dst, 'p1');

# a_x dies three times applying one change
$src->safe_psql($DB, "INSERT INTO t_a_x VALUES (777, 'poison')");
for my $round (1 .. 3)
{
	ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
			  . " AND application_name = 'ash_replicant a_x'", 't', timeout => 60),
		"round $round: a_x applies the change")
	  or last;
	kill 'KILL', worker_pid('a_x');
	usleep(300_000);
	server_back();
}
AshTest::wait_status($dst, 'a_x', 'halted', 'apply_crash_loop', timeout => 60,
	name => 'a_x halts apply_crash_loop (before: its deaths were not recorded, healthy)');
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.worker_crashed sink=a_x\b/)),
	'the deaths of a_x were recorded');
is($dst->safe_psql($DB, 'SELECT count(*) FROM t_a_x WHERE id = 777'), '0',
	'nothing of the change that killed it was applied');

done_testing();
