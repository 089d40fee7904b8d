# A fault soak: every fault the pipeline must survive by waiting, injected
# over and over under a continuous workload, and nothing lost or applied
# twice (docs/operations.md, "The fault soak").
#
# Kinds, in a seeded random order, each as often as the others:
#   dst_kill9        the destination postmaster killed with SIGKILL, started
#                    again (crash recovery);
#   src_immediate    the source stopped immediate, started after 0-1 s;
#   walsender        the walsender streaming the pipeline's slot terminated;
#   network_cut      the pipeline reaches the source through a loopback TCP
#                    proxy (AshTest::start_proxy); the proxy is killed, every
#                    connection drops, and it comes back after 0.3-1.5 s;
#   dst_connections  idle client sessions of a non-superuser role fill every
#                    non-reserved max_connections slot of the destination, the
#                    walsender is terminated meanwhile, released after 0.5-2 s;
#   src_wal_senders  idle replication connections take every max_wal_senders
#                    slot of the source (the pipeline's walsender terminated
#                    so that it must reconnect): the worker's connection is
#                    refused 53300 until they are released after 0.5-2 s;
#   slot_held        another consumer (pg_recvlogical, sending no feedback so
#                    it cannot move the slot) holds the pipeline's slot while
#                    the worker is disconnected: the slot step (the slot is
#                    active) or START_REPLICATION refuses it 55006 until it is
#                    killed after 0.5-2 s;
#   trigger_transient  a BEFORE trigger on the destination target fails a
#                    fraction of its rows with a transient SQLSTATE (40001,
#                    40P01, 55P03) for 1-3 s: the worker must retry with
#                    back-off, never halt apply_failed.
#
# The workload: a forked runner commits, until told to stop, chunks of four
# ~250-row transactions (100 inserts, 50 updates, up to 100 deletes of the
# oldest rows, so the table stays near 20,000 rows); a chunk that fails (the
# source is down) is skipped.
#
# Before every fault the pipeline must stream again (its worker holds the
# slot) and must never halt; the time it took is the fault's recovery time.
# A fault that did not take effect (it missed its moment: the worker between
# two sessions, a hog slower than the worker's reconnect) is injected once
# more; one that misses twice fails the soak.
# Faults run in rounds; after each round the workload stops and:
#   - the watermark reaches a marker committed after it (wait_caught_up);
#   - the mirror's content hash equals the source's;
#   - effect-once: an AFTER INSERT OR UPDATE OR DELETE trigger on BOTH ends
#     logs one audit row per row event; per key and operation the
#     destination's count equals the source's (no change applied twice,
#     none lost); the audits are then emptied for the next round.
#
# Default: 3 faults of each kind (24) in two rounds.  ASH_LONG=1: 125 of each
# (1,000) in rounds of 100.  ASH_SOAK_FAULTS=N overrides the total.
# Seed: ASH_SEED (default: time), printed.  Prints faults_injected=N per kind.
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
diag "025_fault_soak seed $seed (rerun with ASH_SEED=$seed)";

my $LONG = $ENV{ASH_LONG} ? 1 : 0;
my @kind_names = qw(dst_kill9 src_immediate walsender network_cut dst_connections
  src_wal_senders slot_held trigger_transient);
my $total = (defined $ENV{ASH_SOAK_FAULTS} && $ENV{ASH_SOAK_FAULTS} =~ /^\d+$/)
  ? $ENV{ASH_SOAK_FAULTS} : ($LONG ? 1000 : 24);
my $per_kind = int(($total + @kind_names - 1) / @kind_names);
my $per_round = $LONG ? 100 : 12;
my @plan = (@kind_names) x $per_kind;
for (my $i = $#plan; $i > 0; $i--)
{
	my $j = int(rand($i + 1));
	@plan[ $i, $j ] = @plan[ $j, $i ];
}
my $WINDOW = 20_000;    # rows the workload keeps live
my $MAX_WAL_SENDERS = 4;

my $DB = 'postgres';
my $sink = 'soak';

# the destination: few connection slots (20, 3 reserved for the superuser
# this test connects as); the source: few walsender slots
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "max_wal_senders = $MAX_WAL_SENDERS\nwal_sender_timeout = 60s\n",
	dst_conf => "max_connections = 20\n");

my @helpers;     # pids of forked helpers (proxy, runner, slot holder)
my @sessions;    # IPC::Run handles of idle sessions
END
{
	kill 'KILL', grep { $_ } @helpers;
	eval { $_->kill_kill } for @sessions;
}

AshTest::both($src, $dst, q{
CREATE TABLE soak (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0);
CREATE TABLE soak_audit (id bigint NOT NULL, op text NOT NULL);
CREATE FUNCTION soak_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO soak_audit VALUES (OLD.id, TG_OP);
	ELSE
		INSERT INTO soak_audit VALUES (NEW.id, TG_OP);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER soak_audit AFTER INSERT OR UPDATE OR DELETE ON soak
	FOR EACH ROW EXECUTE FUNCTION soak_audit_fn();
});
# destination only: a trigger failing a fraction of its rows with a
# transient SQLSTATE while fault_ctl.rate > 0; a client role for the
# connection hogs
$dst->safe_psql($DB, q{
CREATE TABLE fault_ctl (rate float8 NOT NULL);
INSERT INTO fault_ctl VALUES (0);
CREATE FUNCTION soak_fault_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF random() < (SELECT rate FROM fault_ctl) THEN
		RAISE EXCEPTION 'injected transient failure'
			USING ERRCODE = (ARRAY['40001', '40P01', '55P03'])[1 + floor(random() * 3)::int];
	END IF;
	IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER soak_fault BEFORE INSERT OR UPDATE OR DELETE ON soak
	FOR EACH ROW EXECUTE FUNCTION soak_fault_fn();
CREATE ROLE hog LOGIN;
});
$src->safe_psql($DB, 'CREATE PUBLICATION pub_soak FOR TABLE soak');

my $proxy_port = PostgreSQL::Test::Cluster::get_free_port();
my $proxy = AshTest::start_proxy($proxy_port, $src->port);
push @helpers, $proxy;
my $user = $src->safe_psql($DB, 'SELECT current_user');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_soak', maps => [ ['soak'] ],
	connection => "host=127.0.0.1 port=$proxy_port dbname=$DB user=$user");
AshTest::wait_caught_up($src, $dst, $sink, name => 'streaming through the proxy')
  or BAIL_OUT('the pipeline never streamed');

##############################################################################
# Helpers
##############################################################################

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

sub q_src { my ($sql) = @_; return $src->safe_psql($DB, $sql); }
sub q_dst { my ($sql) = @_; return $dst->safe_psql($DB, $sql); }

# who holds the slot: 'worker', 'other', or '' (inactive).  Only the worker
# and the slot_held fault's consumer (application_name soak_holder) ever
# stream it; the worker's own application_name is "ash_replicant <sink>".
sub slot_holder
{
	my $r = q_src("SELECT CASE WHEN a.application_name = 'soak_holder' THEN 'other' ELSE 'worker' END"
		  . " FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid"
		  . " WHERE s.slot_name = '$sink'");
	return $r;
}

sub pipeline_state
{
	my $st = eval { AshTest::status_row($dst, $sink) } // {};
	return $st->{state} // '';
}

# the destination log from byte offset $off
sub log_from
{
	my ($off) = @_;
	open my $fh, '<', $dst->logfile or return '';
	seek $fh, $off, 0;
	local $/;
	my $s = <$fh> // '';
	close $fh;
	return $s;
}

sub log_size { return -s $dst->logfile; }

sub count_in_log
{
	my ($off, $re) = @_;
	my $n = () = log_from($off) =~ /$re/g;
	return $n;
}

# the pid of the walsender streaming the slot ('' when inactive)
sub slot_pid
{
	return q_src("SELECT coalesce(active_pid::text, '') FROM pg_replication_slots WHERE slot_name = '$sink'");
}

# wait until the worker of the sink streams again -- holds its slot through
# a walsender other than $old_pid: every fault breaks the session it hit --
# or the pipeline halted; returns 'streaming', 'halted:<state>/<reason>' or
# 'timeout'
sub wait_streaming
{
	my ($old_pid, $t) = @_;
	my $r = poll_until(sub {
		my $st = eval { AshTest::status_row($dst, $sink) } // {};
		return "halted:$st->{state}/" . ($st->{reason} // '')
		  if ($st->{state} // '') =~ /^(halted|misconfigured)$/;
		return undef unless slot_holder() eq 'worker';
		return (!defined $old_pid || slot_pid() ne $old_pid) ? 'streaming' : undef;
	}, $t // 120);
	return $r // 'timeout';
}

# an idle psql session (kept open by an empty stdin)
sub idle_session
{
	my (@conn) = @_;
	my $in = '';
	local $ENV{PGAPPNAME} = 'soak_hog';
	my $h = IPC::Run::start([ 'psql', '-X', '-q', @conn ], '<', \$in, '>', '/dev/null', '2>', '/dev/null');
	push @sessions, $h;
	return $h;
}

sub release_sessions
{
	my ($list) = @_;
	for my $h (@$list)
	{
		eval { $h->kill_kill(grace => 2) };
		@sessions = grep { $_ != $h } @sessions;
	}
	@$list = ();
}

sub hog_can_connect
{
	return IPC::Run::run(
		[ 'psql', '-X', '-q', '-h', $dst->host, '-p', $dst->port, '-U', 'hog', '-d', $DB, '-c', 'SELECT 1' ],
		'>', '/dev/null', '2>', '/dev/null') ? 1 : 0;
}

##############################################################################
# The workload runner
##############################################################################

my $dir = PostgreSQL::Test::Utils::tempdir();
my $next_id = 1;
my ($chunks_ok, $chunks_failed) = (0, 0);

sub start_runner
{
	my ($round) = @_;
	my $stop = "$dir/stop$round";
	my $result = "$dir/result$round";
	my $from = $next_id;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open STDOUT, '>', '/dev/null';
		open STDERR, '>', '/dev/null';
		my ($ok, $failed, $next) = (0, 0, $from);
		eval {
			$ENV{PGHOST} = $src->host;
			$ENV{PGPORT} = $src->port;
			until (-e $stop)
			{
				my $sql = '';
				for (1 .. 4)
				{
					my $to = $next + 99;
					my $lo = $next > $WINDOW ? $next - $WINDOW : 1;
					my $u = $lo + int(rand($next - $lo + 1));
					$sql .= "BEGIN;\n"
					  . "INSERT INTO soak SELECT g, g % 97, md5(g::text), 0 FROM generate_series($next, $to) g;\n"
					  . "UPDATE soak SET n = n + 1, val = md5(val || n) WHERE id BETWEEN $u AND " . ($u + 49) . ";\n"
					  . "DELETE FROM soak WHERE id < $lo;\n"
					  . "COMMIT;\n";
					$next = $to + 1;
				}
				open my $fh, '>', "$dir/chunk.sql" or die;
				print $fh $sql;
				close $fh;
				if (system("psql -X -q -v ON_ERROR_STOP=1 -d postgres -f '$dir/chunk.sql' >/dev/null 2>&1") == 0)
				{
					$ok++;
					usleep(150_000);    # pacing: the machine is shared
				}
				else
				{
					$failed++;
					usleep(300_000);
				}
			}
			open my $r, '>', $result or die;
			print $r "$ok $failed $next\n";
			close $r;
		};
		POSIX::_exit(0);
	}
	push @helpers, $pid;
	return { pid => $pid, stop => $stop, result => $result };
}

sub stop_runner
{
	my ($r) = @_;
	open my $sf, '>', $r->{stop} or die;
	close $sf;
	waitpid($r->{pid}, 0);
	@helpers = grep { $_ != $r->{pid} } @helpers;
	open my $rf, '<', $r->{result} or return 0;
	my ($ok, $failed, $next) = split ' ', scalar <$rf>;
	close $rf;
	$chunks_ok += $ok;
	$chunks_failed += $failed;
	$next_id = $next;
	return $ok;
}

##############################################################################
# Faults: each returns (effective, what)
##############################################################################

my %inject;

$inject{dst_kill9} = sub {
	AshTest::crash_restart($dst);
	return (1, 'destination killed with SIGKILL and started');
};

$inject{src_immediate} = sub {
	$src->stop('immediate');
	my $d = rand(1.0);
	usleep(int($d * 1_000_000));    # fault duration, not synchronization
	$src->start;
	return (1, sprintf('source down %.1fs', $d));
};

$inject{walsender} = sub {
	my $n = AshTest::terminate_walsender($src, $sink);
	return ($n == 1, "$n walsender(s) terminated");
};

$inject{network_cut} = sub {
	AshTest::stop_proxy($proxy);
	@helpers = grep { $_ != $proxy } @helpers;
	my $d = 0.3 + rand(1.2);
	usleep(int($d * 1_000_000));    # fault duration, not synchronization
	$proxy = AshTest::start_proxy($proxy_port, $src->port);
	push @helpers, $proxy;
	return (1, sprintf('proxy down %.1fs', $d));
};

$inject{dst_connections} = sub {
	my @hogs;
	for (1 .. 20)
	{
		push @hogs, idle_session('-h', $dst->host, '-p', $dst->port, '-U', 'hog', '-d', $DB);
	}
	my $full = poll_until(sub { !hog_can_connect() }, 30);
	# the worker reconnects to the source while no client slot is free
	my $n = AshTest::terminate_walsender($src, $sink);
	my $d = 0.5 + rand(1.5);
	usleep(int($d * 1_000_000));    # fault duration, not synchronization
	my $still = !hog_can_connect();
	release_sessions(\@hogs);
	my $back = poll_until(sub { hog_can_connect() }, 30);
	return ($full && $still && $back,
		sprintf('destination connections full %.1fs (%s), walsender terminated %d', $d,
			$full && $still ? 'verified' : 'NOT exhausted', $n));
};

$inject{src_wal_senders} = sub {
	my @hogs;
	my $conn = "host=127.0.0.1 port=" . $src->port . " dbname=$DB replication=database";
	my $count_hogs = sub {
		q_src("SELECT count(*) FROM pg_stat_replication WHERE application_name = 'soak_hog'");
	};
	my $off = log_size();
	my $full = 0;
	for my $try (1 .. 20)
	{
		# take every free walsender slot, then free the worker's
		push @hogs, idle_session($conn) for 1 .. ($MAX_WAL_SENDERS - $count_hogs->());
		poll_until(sub { q_src('SELECT count(*) FROM pg_stat_replication') == $MAX_WAL_SENDERS
			  || $count_hogs->() == $MAX_WAL_SENDERS }, 10);
		if ($count_hogs->() == $MAX_WAL_SENDERS)
		{
			$full = 1;
			last;
		}
		AshTest::terminate_walsender($src, $sink);
		# the worker's walsender slot is taken over by a hog, or the worker won
		push @hogs, idle_session($conn);
		if (poll_until(sub { $count_hogs->() == $MAX_WAL_SENDERS }, 3))
		{
			$full = 1;
			last;
		}
	}
	my $refused = $full ? poll_until(sub {
		count_in_log($off, qr/event=source\.fault sink=$sink step=connect source_sqlstate=53300/) }, 15) : 0;
	my $d = 0.5 + rand(1.5);
	usleep(int($d * 1_000_000));    # fault duration, not synchronization
	release_sessions(\@hogs);
	poll_until(sub { $count_hogs->() == 0 }, 30);
	return ($full && $refused,
		sprintf('every walsender slot taken (%s), worker refused 53300 %d time(s), released after %.1fs',
			$full ? 'verified' : 'NOT verified', $refused // 0, $d));
};

$inject{slot_held} = sub {
	my $off = log_size();
	my ($holder, $held);
	for my $try (1 .. 20)
	{
		AshTest::terminate_walsender($src, $sink);
		unless ($holder && kill 0, $holder)
		{
			$holder = fork();
			die "fork: $!" unless defined $holder;
			if ($holder == 0)
			{
				open STDOUT, '>', '/dev/null';
				open STDERR, '>', '/dev/null';
				$ENV{PGAPPNAME} = 'soak_holder';
				# -s 0: no status packets, so it never confirms (moves) the slot
				exec('pg_recvlogical', '-h', '127.0.0.1', '-p', $src->port, '-d', $DB, '-S', $sink,
					'--start', '--no-loop', '-s', '0', '-F', '0', '-o', 'proto_version=1',
					'-o', "publication_names=pub_soak", '-f', '/dev/null')
				  or POSIX::_exit(127);
			}
			push @helpers, $holder;
		}
		my $who = poll_until(sub { my $h = slot_holder(); $h ne '' ? $h : undef }, 10) // '';
		if ($who eq 'other')
		{
			$held = 1;
			last;
		}
		# the worker got there first (or the holder gave up): again
		if (waitpid($holder, POSIX::WNOHANG()) != 0)
		{
			@helpers = grep { $_ != $holder } @helpers;
			$holder = undef;
		}
	}
	my $flush_before = q_src("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$sink'");
	my $refused = $held ? poll_until(sub {
		count_in_log($off, qr/event=source\.fault sink=$sink step=(?:slot|start) source_sqlstate=55006/) }, 15) : 0;
	my $d = 0.5 + rand(1.5);
	usleep(int($d * 1_000_000));    # fault duration, not synchronization
	my $flush_after = q_src("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$sink'");
	# SIGKILL: a clean exit would send a last status packet
	if ($holder)
	{
		kill 'KILL', $holder;
		waitpid($holder, 0);
		@helpers = grep { $_ != $holder } @helpers;
	}
	return ($held && $refused && $flush_before eq $flush_after,
		sprintf('slot held by another consumer %.1fs (%s), worker refused 55006 %d time(s), slot %s',
			$d, $held ? 'verified' : 'NOT held', $refused // 0,
			$flush_before eq $flush_after ? 'not moved' : "MOVED $flush_before -> $flush_after"));
};

$inject{trigger_transient} = sub {
	my $off = log_size();
	my $rate = (0.004, 0.02, 0.1)[ int(rand(3)) ];
	q_dst("UPDATE fault_ctl SET rate = $rate");
	my $t0 = time;
	my $transient = qr/event=apply\.error sink=$sink sqlstate=(?:40001|40P01|55P03) /;
	# at least one failed attempt, then 1-3 s of failing
	my $seen = poll_until(sub { count_in_log($off, $transient) }, 30);
	my $d = 1 + rand(2);
	usleep(int($d * 1_000_000));    # fault duration, not synchronization
	q_dst('UPDATE fault_ctl SET rate = 0');
	my $n = count_in_log($off, $transient);
	return ($seen ? 1 : 0,
		sprintf('trigger failing %.0f%% of rows for %.1fs: %d failed attempt(s)', $rate * 100, time - $t0, $n));
};

##############################################################################
# The soak
##############################################################################

my $t0 = time;
my (%injected, %ineffective, %halts, %unrecovered, %recovery_max, %recovery_sum);
my ($rows_checked, $rounds) = (0, 0);
my $last_kind;
my $last_end = time;
my $last_pid;

sub settle
{
	my $r = wait_streaming($last_pid);
	my $dt = time - $last_end;
	if ($r eq 'streaming')
	{
		if (defined $last_kind)
		{
			$recovery_sum{$last_kind} += $dt;
			$recovery_max{$last_kind} = $dt if $dt > ($recovery_max{$last_kind} // 0);
		}
		return 1;
	}
	my $k = $last_kind // 'setup';
	diag sprintf('after %s: %s (%.1fs)', $k, $r, $dt);
	AshTest::diag_pipeline($src, $dst, $sink);
	if ($r =~ /^halted/)
	{
		$halts{$k}++;
		# go on, to see everything the soak finds; the final checks fail
		eval { AshTest::start_sink($dst, $sink) };
	}
	else
	{
		$unrecovered{$k}++;
	}
	return 0;
}

my @queue = @plan;
while (@queue)
{
	$rounds++;
	my @round = splice(@queue, 0, $per_round);
	my $runner = start_runner($rounds);
	note sprintf('round %d: %d faults at %.0fs', $rounds, scalar(@round), time - $t0);
	for my $kind (@round)
	{
		settle();
		usleep(int((0.2 + rand(0.8)) * 1_000_000));    # fault spacing, not synchronization
		$last_pid = eval { slot_pid() };
		my ($effective, $what) = $inject{$kind}->();
		# a fault can miss its moment (the worker between two sessions, a
		# hog slower than the worker's reconnect): once more, settled first
		unless ($effective)
		{
			note "  $kind missed its moment ($what): again";
			$last_end = time;
			$last_kind = $kind;
			settle();
			$last_pid = eval { slot_pid() };
			($effective, my $again) = $inject{$kind}->();
			$what .= "; again: $again";
		}
		$last_end = time;
		$last_kind = $kind;
		$injected{$kind}++;
		push @{ $ineffective{$kind} }, $what unless $effective;
		note sprintf('%.1fs %s: %s', time - $t0, $kind, $what);
		diag "  $kind did not take effect: $what" unless $effective;
	}
	settle();
	$last_pid = $last_kind = undef;

	my $ok = stop_runner($runner);
	note "round $rounds: workload committed $ok chunks";
	cmp_ok($ok, '>', 0, "round $rounds: the workload ran");
	AshTest::wait_caught_up($src, $dst, $sink, name => "round $rounds: caught up", timeout => 300);
	AshTest::assert_mirror_equal($src, $dst, ['soak'], name => "round $rounds: mirror equals source");
	my $audit = 'SELECT id, op, count(*) AS events FROM soak_audit GROUP BY id, op';
	AshTest::assert_mirror_equal($src, $dst, ["($audit)"], order_by => 'id, op',
		name => "round $rounds: per key and operation, the destination's row events equal the source's (effect-once)");
	my $events = q_src('SELECT count(*) FROM soak_audit');
	is(q_dst('SELECT count(*) FROM soak_audit'), $events, "round $rounds: $events row events at both ends");
	cmp_ok($events, '>', 0, "round $rounds: rows changed");
	$rows_checked += $events;
	# the next round's audit starts empty (no workload runs now; the marker
	# table has no audit)
	q_src('TRUNCATE soak_audit');
	q_dst('TRUNCATE soak_audit');
}

my $elapsed = time - $t0;
is(AshTest::status_row($dst, $sink)->{state}, 'healthy', 'healthy at the end');
is(scalar AshTest::grep_logs_for("event=pipeline.halt sink=$sink ", $dst), 0, 'no halt in the log');
is(join(',', map { "$_=$halts{$_}" } sort keys %halts), '', 'no fault ended in a halt');
is(join(',', map { "$_=$unrecovered{$_}" } sort keys %unrecovered), '', 'the pipeline streamed again after every fault');
# what an ineffective fault saw, in the failure's "got"
is(join('; ', map { "$_: @{ $ineffective{$_} }" } sort keys %ineffective), '', 'every fault took effect');
# the trigger's failures were retried as transient, never counted towards
# max_command_retries (a counted one reads attempt=N/M)
my $transient_re = "event=apply\\.error sink=$sink sqlstate=(?:40001|40P01|55P03) .*attempt=";
is(scalar AshTest::log_lines_like($dst, qr/${transient_re}\d/), 0,
	'no transient apply error was counted towards max_command_retries');
cmp_ok(scalar AshTest::log_lines_like($dst, qr/${transient_re}transient\//), '>=', $injected{trigger_transient} // 1,
	'the trigger failures were retried as transient');
my $n = 0;
for my $k (@kind_names)
{
	is($injected{$k} // 0, $per_kind, "$k injected $per_kind times");
	$n += $injected{$k} // 0;
	diag sprintf('faults_injected=%d kind=%s recovery_avg=%.1fs recovery_max=%.1fs',
		$injected{$k} // 0, $k, ($recovery_sum{$k} // 0) / ($injected{$k} || 1), $recovery_max{$k} // 0);
}
diag sprintf('faults_injected=%d total, rounds=%d, row_events=%d, transactions=%d, seconds=%.0f, seed=%d',
	$n, $rounds, $rows_checked, $chunks_ok * 4, $elapsed, $seed);

AshTest::stop_proxy($proxy);
@helpers = grep { $_ != $proxy } @helpers;
diag "ash-proof: faults_injected=$n checks=" . Test::More->builder->current_test;
done_testing();
