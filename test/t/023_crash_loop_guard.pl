# The crash-loop guard catches a poisoned change and nothing else.
#
# (a) Poisoned change.  A prepared transaction on the destination holds the
#     row a source transaction L updates, so the pipeline worker blocks while
#     applying L, every time it comes back (a prepared transaction and its
#     locks survive a crash restart).
#     - Deaths that are not the worker's, at L: another backend killed with
#       SIGKILL (the postmaster crash-restarts and tells the worker to quit),
#       the whole destination killed with SIGKILL and started again, an
#       immediate stop.  Each is one more than the guard would need to trip,
#       were it counted: nothing is counted, nothing halts.
#     - The worker itself killed with SIGKILL while blocked at L: each death
#       is counted at L (pipelines.crash_lsn, start_attempts); the third halts
#       apply_crash_loop, halt_lsn = L, doctor names L, nothing of L applied.
#     - Released and started again, L is applied and the record cleared.
# (b) Fault storm.  A continuous workload of 250-row transactions (inserts,
#     updates, deletes) while, every few seconds, the walsender is terminated,
#     the network path (a loopback proxy) is cut, the destination is killed
#     with SIGKILL and started or restarted, or the source is stopped
#     immediate and started.  The pipeline never halts; after the last fault it streams
#     again within the capped back-off (the time is printed: recovery), and
#     the mirror equals the source by content hash.
#
# Seed: ASH_SEED (default: time), printed.  ASH_LONG=1 runs a longer storm.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
diag "023_crash_loop_guard seed $seed";

my $MAX = 3;    # deaths in a row at one change that halt (pipeline.c)

# the cluster module turns restart_after_crash off; the guard is about the
# crash restarts of production
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "restart_after_crash = on\nmax_prepared_transactions = 4\n");

my @helpers;       # pids of forked helpers (proxy, workload)
my @sessions;      # IPC::Run handles of background psql sessions
END
{
	kill 'KILL', grep { $_ } @helpers;
	eval { $_->kill_kill } for @sessions;
}

# bounded loop for conditions the harness cannot express as one query
sub poll_until
{
	my ($cond, $t) = @_;
	my $deadline = time + ($t // 60);
	while (time < $deadline)
	{
		my $r = eval { $cond->() };
		return $r if $r;
		usleep(100_000);
	}
	return undef;
}

sub guard_state
{
	my ($sink) = @_;
	return $dst->safe_psql('postgres',
		"SELECT coalesce(crash_lsn::text, 'none') || '/' || start_attempts FROM ash_replicant.pipelines WHERE sink_name = '$sink'");
}

sub log_count
{
	my ($re) = @_;
	return scalar AshTest::log_lines_like($dst, $re);
}

##############################################################################
# (a) A poisoned change
##############################################################################

my $sink = 'poison';
AshTest::both($src, $dst, 'CREATE TABLE poison (id integer PRIMARY KEY, v integer NOT NULL)');
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_poison FOR TABLE poison');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_poison', maps => [ ['poison'] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'poison: streaming');
$src->safe_psql('postgres', 'INSERT INTO poison SELECT g, 0 FROM generate_series(1, 10) g');
AshTest::wait_caught_up($src, $dst, $sink, name => 'poison: rows 1-10 applied');

# the row L will update is held on the destination by a prepared transaction
$dst->safe_psql('postgres', "BEGIN; UPDATE poison SET v = -1 WHERE id = 5; PREPARE TRANSACTION 'hold5'");
my ($L) = AshTest::commit_tracked($src, 'UPDATE poison SET v = v + 1 WHERE id = 5');
note "L (the poisoned change) commits at $L";

# the worker of the sink, blocked on a lock while applying L; not $old
sub blocked_worker
{
	my ($old) = @_;
	return poll_until(sub {
		my $p = $dst->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'"
			  . " AND wait_event_type = 'Lock'" . ($old ? " AND pid <> $old" : ''));
		return $p =~ /^\d+$/ ? $p : undef;
	}, 90);
}

my $pid = blocked_worker();
ok($pid, 'the worker blocks applying L');
is($dst->safe_psql('postgres', AshTest::checkpoint_sql($sink, "c.commit_lsn < '$L'::pg_lsn")), 't',
	'the watermark is below L while it blocks');

my $crash_lines = log_count(qr/event=pipeline\.crash_at_change sink=$sink /);
my $deaths = 0;

# deaths that are not the worker's: as many of each as would trip the guard
for my $i (1 .. $MAX)
{
	my $in = '';
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-h', $dst->host, '-p', $dst->port, '-d', 'postgres', '-c', 'SELECT pg_sleep(300)' ],
		'<', \$in, '>', '/dev/null', '2>', '/dev/null');
	push @sessions, $h;
	my $victim = poll_until(sub {
		my $p = $dst->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(300)' AND pid <> pg_backend_pid()");
		return $p =~ /^\d+$/ ? $p : undef;
	});
	ok($victim, "bystander $i: a client backend to kill");
	kill 'KILL', $victim if $victim;
	$deaths++;
	eval { $h->kill_kill };
	$pid = blocked_worker($pid);
	ok($pid, "bystander $i killed: the server crash-restarted, a new worker blocks at L again");
	is(guard_state($sink), 'none/0', "bystander $i killed: nothing counted");
}
for my $i (1 .. $MAX)
{
	if ($i % 2)
	{
		AshTest::crash_restart($dst);
		note "destination killed with SIGKILL and started";
	}
	else
	{
		$dst->stop('immediate');
		$dst->start;
		note "destination stopped immediate and started";
	}
	$deaths++;
	$pid = blocked_worker($pid);
	ok($pid, "server death $i: a new worker blocks at L again");
	is(guard_state($sink), 'none/0', "server death $i: nothing counted");
}
is(log_count(qr/event=pipeline\.crash_at_change sink=$sink /), $crash_lines,
	'no death so far was charged to the worker');
like(AshTest::status_row($dst, $sink)->{state}, qr/^(healthy|catching_up)$/, 'still running, not halted');

# the worker itself dies at L
for my $i (1 .. $MAX)
{
	note "kill -9 worker $pid";
	kill 'KILL', $pid;
	$deaths++;
	last if $i == $MAX;
	$pid = blocked_worker($pid);
	ok($pid, "worker death $i: a new worker blocks at L again");
	is(guard_state($sink), "$L/$i", "worker death $i: counted at L ($i of $MAX)");
	ok(log_count(qr/event=pipeline\.crash_at_change sink=$sink commit_lsn=$L crashes=$i\/$MAX/) == 1,
		"worker death $i: logged crash_at_change");
	ok(log_count(qr/event=pipeline\.worker_crashed sink=$sink commit_lsn=$L in_a_row=$i /) == 1,
		"worker death $i: the next worker knows it is death $i in a row");
}
AshTest::wait_status($dst, $sink, 'halted', 'apply_crash_loop', src => $src,
	name => "the $MAX-th death at L halts apply_crash_loop");
is(guard_state($sink), "$L/$MAX", "the record holds L and $MAX deaths");
is($dst->safe_psql('postgres', "SELECT halt_lsn FROM ash_replicant.pipelines WHERE sink_name = '$sink'"),
	$L, 'halt_lsn is L');
is($dst->safe_psql('postgres', AshTest::checkpoint_sql($sink, 'c.terminal_cause')), 'apply_crash_loop',
	'the checkpoint tombstone names apply_crash_loop');
{
	my ($rc, $out, $err) = $dst->psql('postgres', "SELECT * FROM ash_replicant_doctor('$sink')");
	like($out, qr/checkpoint_state\|fail\|apply_crash_loop/, 'doctor: checkpoint_state fails apply_crash_loop');
	like("$out\n$err", qr/\Q$L\E/, 'doctor names the commit LSN the pipeline stopped at');
}
is($dst->safe_psql('postgres', AshTest::checkpoint_sql($sink, "c.commit_lsn < '$L'::pg_lsn")), 't',
	'nothing of L was applied: the watermark is below it');
ok(poll_until(sub {
	$dst->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'") eq '0' }),
	'halted: no worker runs');

# the cause goes away; the operator starts the pipeline again
$dst->safe_psql('postgres', "ROLLBACK PREPARED 'hold5'");
AshTest::start_sink($dst, $sink);
ok(AshTest::wait_lsn($src, $dst, $sink, $L), 'started again: L is applied');
ok(poll_until(sub { guard_state($sink) eq 'none/0' }), 'the record is cleared once the watermark passed L');
AshTest::wait_caught_up($src, $dst, $sink, name => 'poison: caught up');
AshTest::assert_mirror_equal($src, $dst, ['poison'], name => 'poison: mirror equals source');
AshTest::stop_settled($src, $dst, $sink);

##############################################################################
# (b) A storm of ordinary faults
##############################################################################

$sink = 'storm';
AshTest::both($src, $dst,
	'CREATE TABLE storm (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0)');
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_storm FOR TABLE storm');
my $proxy_port = PostgreSQL::Test::Cluster::get_free_port();
my $proxy = AshTest::start_proxy($proxy_port, $src->port);
push @helpers, $proxy;
my $user = $src->safe_psql('postgres', 'SELECT current_user');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_storm', maps => [ ['storm'] ],
	connection => "host=127.0.0.1 port=$proxy_port dbname=postgres user=$user");
AshTest::wait_caught_up($src, $dst, $sink, name => 'storm: streaming through the proxy')
  or BAIL_OUT('the storm pipeline never streamed');

# The workload: a forked runner commits chunks of four 250-row transactions
# (150 inserts, up to 70 updates, up to 30 deletes) until told to stop; a
# chunk that fails (the source is down) is skipped after a pause.
my $dir = PostgreSQL::Test::Utils::tempdir();
my $stop_file = "$dir/stop";
my $result_file = "$dir/result";
my $runner = fork();
die "fork: $!" unless defined $runner;
if ($runner == 0)
{
	open STDOUT, '>', '/dev/null';
	open STDERR, '>', '/dev/null';
	my ($ok, $failed, $next) = (0, 0, 1);
	eval {
		$ENV{PGHOST} = $src->host;
		$ENV{PGPORT} = $src->port;
		until (-e $stop_file)
		{
			my $sql = '';
			for (1 .. 4)
			{
				my $to = $next + 149;
				my $u = 1 + int(rand($next));
				my $d = 1 + int(rand($next));
				$sql .= "BEGIN;\n"
				  . "INSERT INTO storm SELECT g, g % 97, md5(g::text), 0 FROM generate_series($next, $to) g;\n"
				  . "UPDATE storm SET n = n + 1, val = md5(val || n) WHERE id BETWEEN $u AND " . ($u + 69) . ";\n"
				  . "DELETE FROM storm WHERE id BETWEEN $d AND " . ($d + 29) . ";\n"
				  . "COMMIT;\n";
				$next = $to + 1;
			}
			open my $fh, '>', "$dir/chunk.sql" or die;
			print $fh $sql;
			close $fh;
			if (system("psql -X -q -v ON_ERROR_STOP=1 -d postgres -f '$dir/chunk.sql' >/dev/null 2>&1") == 0)
			{
				$ok++;
			}
			else
			{
				$failed++;
				usleep(300_000);
			}
		}
		open my $r, '>', $result_file or die;
		print $r "$ok $failed\n";
		close $r;
	};
	POSIX::_exit(0);
}
push @helpers, $runner;

my %inject = (
	walsender => sub {
		return AshTest::terminate_walsender($src, $sink) . ' walsender(s) terminated';
	},
	network_cut => sub {
		AshTest::stop_proxy($proxy);
		my $d = 0.5 + rand(1.5);
		usleep(int($d * 1_000_000));    # fault duration, not synchronization
		$proxy = AshTest::start_proxy($proxy_port, $src->port);
		push @helpers, $proxy;
		return sprintf('proxy down %.1fs', $d);
	},
	destination_kill9 => sub {
		AshTest::crash_restart($dst);
		return 'destination killed with SIGKILL and started';
	},
	destination_restart => sub {
		$dst->restart;
		return 'destination restarted (fast)';
	},
	source_immediate => sub {
		$src->stop('immediate');
		my $d = rand(1.5);
		usleep(int($d * 1_000_000));    # fault duration, not synchronization
		$src->start;
		return sprintf('source down %.1fs', $d);
	},
);
my @kinds = (sort keys %inject) x ($ENV{ASH_LONG} ? 15 : 5);
for (my $i = $#kinds; $i > 0; $i--)
{
	my $j = int(rand($i + 1));
	@kinds[ $i, $j ] = @kinds[ $j, $i ];
}

my $t0 = time;
my %injected;
my $halted_seen = 0;
for my $kind (@kinds)
{
	usleep(int((2 + rand(2)) * 1_000_000));    # fault spacing, not synchronization
	my $what = $inject{$kind}->();
	$injected{$kind}++;
	note sprintf("%.1fs %s: %s", time - $t0, $kind, $what);
	my $st = eval { AshTest::status_row($dst, $sink) } // {};
	$halted_seen++ if ($st->{state} // '') =~ /^(halted|misconfigured)$/;
}

# the last fault: the source away long enough for the back-off to reach its
# cap; recovery is measured from its return
usleep(2_000_000);
my $stream_re = qr/event=pipeline\.streaming sink=$sink /;
$src->stop('immediate');
usleep(6_000_000);    # fault duration, not synchronization
my $streams_before = log_count($stream_re);
$src->start;
my $t_back = time;
$injected{source_immediate}++;
note sprintf("%.1fs last fault: source down 6s, back", time - $t0);
my $streaming = poll_until(sub { log_count($stream_re) > $streams_before }, 150);
my $t_stream = time - $t_back;
my $healthy = poll_until(sub {
	(AshTest::status_row($dst, $sink)->{state} // '') eq 'healthy' }, 150);
my $t_healthy = time - $t_back;
ok($streaming, 'streaming again after the last fault');
ok($healthy, 'healthy again after the last fault');
diag sprintf('recovery after the last fault: streaming after %.1fs, healthy after %.1fs'
	  . ' (reconnect_max_delay 2s in this test)', $t_stream, $t_healthy);
cmp_ok($t_stream, '<=', 120, 'streaming again within 120 s of the last fault');

open my $sf, '>', $stop_file or die;
close $sf;
waitpid($runner, 0);
my ($chunks_ok, $chunks_failed) = (0, 0);
if (open my $rf, '<', $result_file)
{
	($chunks_ok, $chunks_failed) = split ' ', scalar <$rf>;
	close $rf;
}
note "workload: $chunks_ok chunks of 4 transactions committed, $chunks_failed failed (source down)";
cmp_ok($chunks_ok, '>', 20, 'the workload ran through the storm');

AshTest::wait_caught_up($src, $dst, $sink, name => 'storm: caught up after the storm', timeout => 180);
AshTest::assert_mirror_equal($src, $dst, ['storm'], name => 'storm: mirror equals source');
is($halted_seen, 0, 'never halted while the faults went on');
is(scalar AshTest::grep_logs_for("event=pipeline.halt sink=$sink ", $dst), 0, 'no halt in the log');
is(AshTest::status_row($dst, $sink)->{state}, 'healthy', 'healthy at the end');
is(guard_state($sink), 'none/0', 'no death was charged to the worker');
cmp_ok(log_count(qr/event=source\.fault sink=$sink /), '>', 0, 'the source faults reached the worker');
my $faults = 0;
$faults += $_ for values %injected;
diag 'storm: ' . join(', ', map { "$_=$injected{$_}" } sort keys %injected) . sprintf(' in %.0fs', time - $t0);

AshTest::stop_proxy($proxy);
diag "ash-proof: faults_injected=" . ($deaths + $faults) . " checks=" . Test::More->builder->current_test;
done_testing();
