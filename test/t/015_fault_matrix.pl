# Streaming mirror core: a matrix of faults under a continuous mixed workload.
#
# The workload (~32,000 row changes: inserts, updates, key changes, deletes in
# transactions of 1 to ~2,000 rows) is cut into one segment (~4,000 changes) per fault.  While
# a segment runs on the source, one fault is injected at a seeded random
# point and then repaired:
#   source_restart  the source stops (immediate) and starts again;
#   network_cut     the pipeline reaches the source through a TCP proxy on
#                   127.0.0.1 (a forked Perl forwarder); the proxy is killed
#                   (every connection drops) and started again on the same
#                   port after a while;
#   apply_error     a trigger on the destination target raises while a control
#                   table on the destination says so; either briefly (the
#                   pipeline retries and recovers, or halts apply_failed if the
#                   retries run out first) or until it halts apply_failed; then
#                   the failure is switched off and a halted pipeline is
#                   started again with ash_replicant_start;
#   worker_kill     the pipeline worker gets SIGKILL (the destination
#                   postmaster crash-restarts every backend);
#   conn_exhaust    the destination runs out of connections and of worker
#                   processes: idle client sessions of a non-superuser role
#                   fill every non-reserved max_connections slot, the
#                   source's walsender is terminated (the worker reconnects
#                   while no client slot is free), the worker is terminated
#                   (halted owner_lost), a parallel query takes every free
#                   max_worker_processes slot, and ash_replicant_start cannot
#                   get the restarted worker a slot (the launcher logs
#                   worker_register_failed and retries) until, after a while,
#                   the sessions and the query are released.
#
# After each fault, once the segment is done:
#   - the destination watermark equals the exact commit LSN of the last source
#     transaction (read from the source WAL);
#   - the mirror's content hash equals the source's;
#   - effect-once: an AFTER INSERT OR UPDATE OR DELETE trigger on BOTH ends
#     logs one audit row per row event; per key, the destination's event count
#     equals the source's (no change applied twice, none lost);
#   - the pipeline reports healthy again.
#
# The source workload runs in a forked runner that tolerates a source that is
# down (a failed chunk is skipped; the source itself is the oracle).
#
# Every fault runs twice (ASH_LONG=1: four times, larger segments), in a
# seeded order.  Seed: ASH_SEED (default: time), printed.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IO::Select;
use IO::Socket::INET;
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
note "seed $seed (rerun with ASH_SEED=$seed)";
diag "015_fault_matrix seed $seed";

my $sink = 'fm';
my @kinds = qw(source_restart network_cut apply_error worker_kill conn_exhaust);
@kinds = (@kinds) x ($ENV{ASH_LONG} ? 4 : 2);
# seeded order
for (my $i = $#kinds; $i > 0; $i--)
{
	my $j = int(rand($i + 1));
	@kinds[ $i, $j ] = @kinds[ $j, $i ];
}
my $per_segment = $ENV{ASH_LONG} ? 8_000 : 4_000;   # row changes per fault segment

# the TCP proxy between the pipeline and the source: AshTest::start_proxy

##############################################################################
# Workload runner: a forked child running chunk files with psql; a chunk that
# fails (source down) is skipped after a short pause.
##############################################################################

sub start_runner
{
	my ($node, $chunks, $tag) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my @files;
	for my $i (0 .. $#$chunks)
	{
		my $f = "$dir/$tag-$i.sql";
		open my $fh, '>', $f or die "$f: $!";
		print $fh $chunks->[$i];
		close $fh;
		push @files, $f;
	}
	my $result = "$dir/$tag.result";
	my ($host, $port) = ($node->host, $node->port);
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open STDOUT, '>', '/dev/null';
		open STDERR, '>', '/dev/null';
		my ($ok, $failed) = (0, 0);
		eval {
			$ENV{PGHOST} = $host;
			$ENV{PGPORT} = $port;
			for my $f (@files)
			{
				my $rc = system("psql -X -q -v ON_ERROR_STOP=1 -d postgres -f '$f' >/dev/null 2>&1");
				if ($rc == 0) { $ok++; next; }
				$failed++;

				# the source is down: go on once it is back, so a segment of
				# few chunks still commits some after the fault
				for (1 .. 600)
				{
					last if system("pg_isready -q -d postgres >/dev/null 2>&1") == 0;
					usleep(100_000);
				}
			}
			open my $r, '>', $result or die;
			print $r "$ok $failed\n";
			close $r;
		};
		POSIX::_exit(0);
	}
	return { pid => $pid, result => $result };
}

sub runner_running
{
	my ($r) = @_;
	return waitpid($r->{pid}, POSIX::WNOHANG()) == 0;
}

sub finish_runner
{
	my ($r) = @_;
	waitpid($r->{pid}, 0) if kill 0, $r->{pid};
	open my $fh, '<', $r->{result} or return (0, 0);
	my $l = <$fh>;
	close $fh;
	my ($ok, $failed) = split ' ', $l;
	return ($ok, $failed);
}

##############################################################################
# Nodes, tables, pipeline
##############################################################################

# the cluster module turns restart_after_crash off; the worker_kill fault
# needs the destination postmaster to crash-restart as in production
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "restart_after_crash = on\n");

AshTest::both($src, $dst, q{
CREATE TABLE items (id bigint PRIMARY KEY, grp integer NOT NULL, val text, n bigint NOT NULL DEFAULT 0);
CREATE TABLE items_audit (id bigint NOT NULL, op text NOT NULL, x xid8 NOT NULL DEFAULT pg_current_xact_id());
CREATE FUNCTION items_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO items_audit (id, op) VALUES (OLD.id, TG_OP);
	ELSE
		INSERT INTO items_audit (id, op) VALUES (NEW.id, TG_OP);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER items_audit AFTER INSERT OR UPDATE OR DELETE ON items
	FOR EACH ROW EXECUTE FUNCTION items_audit_fn();
});
# destination only: an injectable apply failure
$dst->safe_psql('postgres', q{
CREATE TABLE fault_ctl (fail boolean NOT NULL);
INSERT INTO fault_ctl VALUES (false);
CREATE FUNCTION items_fault_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT fail FROM fault_ctl) THEN
		RAISE EXCEPTION 'injected apply failure';
	END IF;
	IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER items_fault BEFORE INSERT OR UPDATE OR DELETE ON items
	FOR EACH ROW EXECUTE FUNCTION items_fault_fn();
});
# destination only: a client role that exhausts the connections, and a table
# whose parallel scan takes every free worker process
$dst->safe_psql('postgres', q{
CREATE ROLE hog LOGIN;
CREATE TABLE filler (id integer, pad text) WITH (parallel_workers = 64, fillfactor = 10);
INSERT INTO filler SELECT g, repeat('x', 600) FROM generate_series(1, 2000) g;
CREATE FUNCTION slow(integer) RETURNS boolean LANGUAGE plpgsql PARALLEL SAFE AS $$
BEGIN PERFORM pg_sleep(0.1); RETURN true; END $$;
});
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_fm FOR TABLE items');

my $proxy_port = PostgreSQL::Test::Cluster::get_free_port();
my $proxy = AshTest::start_proxy($proxy_port, $src->port);
my @runners;
my @hogs;
END
{
	# a forked helper must not outlive the test (it would hold the TAP pipe)
	kill 'KILL', grep { $_ } ($proxy, map { $_->{pid} } @runners);
	eval { $_->kill_kill } for @hogs;
}
my $user = $src->safe_psql('postgres', 'SELECT current_user');
note "proxy 127.0.0.1:$proxy_port -> source port " . $src->port;

my $batch = (1000, 50, 5)[ int(rand(3)) ];
note "batch_max_transactions $batch";
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_fm', maps => [ ['items'] ],
	batch_max_transactions => $batch,
	connection => "host=127.0.0.1 port=$proxy_port dbname=postgres user=$user");
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams through the proxy')
  or BAIL_OUT('pipeline never streamed');

##############################################################################
# Workload segments (deterministic from the seed).  Ids 1.. are inserted in
# order; key changes move a row by +100,000,000 (a moved row is never moved
# again: its id is above every insert range).
##############################################################################

my $next_id = 1;
my $total_changes = 0;

sub segment_chunks
{
	my ($target) = @_;
	my ($changes, $cur, $in_chunk) = (0, '', 0);
	my @chunks;

	# at least four chunks: the fault lands while some are still to run
	while ($changes < $target || @chunks < 4)
	{
		my $r = rand();
		my $size = $r < 0.4 ? 1 : $r < 0.7 ? 2 + int(rand(20)) : $r < 0.93 ? 20 + int(rand(300)) : 300 + int(rand(1700));
		my @stmts;
		my $in_xact = 0;
		while ($in_xact < $size)
		{
			my $k = rand();
			my $live_hi = $next_id - 1;
			my $left = $size - $in_xact;
			if ($k < 0.55 || $live_hi < 100)
			{
				my $m = 1 + int(rand($left));
				my $to = $next_id + $m - 1;
				push @stmts, "INSERT INTO items SELECT g, g % 97, md5(g::text), 0 FROM generate_series($next_id, $to) g";
				$next_id = $to + 1;
				$in_xact += $m;
			}
			elsif ($k < 0.8)
			{
				my $m = 1 + int(rand($left < 400 ? $left : 400));
				my $lo = 1 + int(rand($live_hi));
				push @stmts, "UPDATE items SET n = n + 1, val = md5(val || n) WHERE id BETWEEN $lo AND " . ($lo + $m - 1);
				$in_xact += $m;
			}
			elsif ($k < 0.87)
			{
				my $id = 1 + int(rand($live_hi));
				push @stmts, "UPDATE items SET id = id + 100000000, grp = grp + 1 WHERE id = $id";
				$in_xact += 1;
			}
			else
			{
				my $m = 1 + int(rand($left < 50 ? $left : 50));
				my $lo = 1 + int(rand($live_hi));
				push @stmts, "DELETE FROM items WHERE id BETWEEN $lo AND " . ($lo + $m - 1);
				$in_xact += $m;
			}
		}
		$changes += $in_xact;
		$cur .= "BEGIN;\n" . join(";\n", @stmts) . ";\nCOMMIT;\n";
		$cur .= "SELECT pg_sleep(0.03);\n" if rand() < 0.3;
		if (++$in_chunk >= 3)
		{
			push @chunks, $cur . "SELECT pg_sleep(0.05);\n";
			($cur, $in_chunk) = ('', 0);
		}
	}
	push @chunks, $cur if $cur ne '';
	$total_changes += $changes;
	return \@chunks;
}

##############################################################################
# Faults
##############################################################################

sub worker_pid
{
	my $p = eval { $dst->safe_psql('postgres', "SELECT worker_pid FROM ash_replicant_status('$sink')") };
	return (defined $p && $p =~ /^\d+$/) ? $p : undef;
}

sub apply_error_lines
{
	return scalar AshTest::log_lines_like($dst, qr/event=apply\.error sink=$sink /);
}

my %halted_and_resumed;

my %inject = (
	source_restart => sub {
		note "  source: stop immediate";
		$src->stop('immediate');
		usleep(int(rand(1.5) * 1_000_000));    # fault duration, not synchronization
		$src->start;
		note "  source: started";
	},
	network_cut => sub {
		AshTest::stop_proxy($proxy);
		my $d = 0.5 + rand(2.5);
		note sprintf("  proxy killed, restoring after %.1fs", $d);
		usleep(int($d * 1_000_000));    # fault duration, not synchronization
		$proxy = AshTest::start_proxy($proxy_port, $src->port);
		note "  proxy restarted";
	},
	apply_error => sub {
		my $persistent = rand() < 0.5;
		my $before = apply_error_lines();
		$dst->safe_psql('postgres', 'UPDATE fault_ctl SET fail = true');
		# make sure a change arrives while the failure is on
		my ($failing) = AshTest::commit_tracked($src,
			"UPDATE items SET n = n + 1 WHERE id = (SELECT max(id) FROM items WHERE id < 100000000)");
		if ($persistent)
		{
			note "  trigger failing until the pipeline halts";
			AshTest::wait_status($dst, $sink, 'halted', 'apply_failed', src => $src,
				name => 'persistent apply failure halts apply_failed');
		}
		else
		{
			# a bounded wait on the log: the first failed attempt
			my $deadline = time + 30;
			usleep(50_000) while apply_error_lines() <= $before && time < $deadline;
			note "  trigger failed " . (apply_error_lines() - $before) . " time(s), switching it off";
		}
		$dst->safe_psql('postgres', 'UPDATE fault_ctl SET fail = false');
		ok(apply_error_lines() > $before, 'injected apply failure was retried/logged');
		unless ($persistent)
		{
			# an attempt begun before the switch-off may still exhaust the
			# retries: wait until the failing transaction is applied or the
			# pipeline halted
			my $cp = AshTest::checkpoint_sql($sink, "c.commit_lsn >= '$failing'::pg_lsn");
			AshTest::poll($dst, "SELECT coalesce(($cp), false) OR EXISTS (SELECT 1 FROM ash_replicant_status('$sink')"
				  . " WHERE state = 'halted' AND reason = 'apply_failed')", 't', timeout => 60);
			my $st = AshTest::status_row($dst, $sink) // {};
			if (($st->{state} // '') eq 'halted')
			{
				note "  halted apply_failed before the failure stopped";
				$persistent = 1;
			}
			else
			{
				note "  recovered by retrying";
			}
		}
		if ($persistent)
		{
			AshTest::start_sink($dst, $sink);
			$halted_and_resumed{$sink}++;
			note "  ash_replicant_start after apply_failed";
		}
	},
	worker_kill => sub {
		my $pid;
		poll_until(sub { $pid = worker_pid() });
		ok(defined $pid, 'worker pid known');
		return unless $pid;
		note "  kill -9 worker $pid";
		kill 'KILL', $pid;
		# the postmaster crash-restarts (a query sent meanwhile dies with the
		# other backends: retry); the pipeline comes back with a new worker
		ok(poll_until(sub {
				my ($rc, $out) = $dst->psql('postgres',
					"SELECT coalesce(worker_pid <> $pid, false) FROM ash_replicant_status('$sink')");
				return $rc == 0 && $out eq 't';
			}, 60),
			'a new worker runs after the SIGKILL');
	},
);

# Can the hog role still connect to the destination?
sub hog_can_connect
{
	return IPC::Run::run(
		[ 'psql', '-X', '-q', '-h', $dst->host, '-p', $dst->port, '-U', 'hog', '-d', 'postgres', '-c', 'SELECT 1' ],
		'>', '/dev/null', '2>', '/dev/null') ? 1 : 0;
}

$inject{conn_exhaust} = sub {
	# idle client sessions in every non-reserved connection slot
	for (1 .. 60)
	{
		my $in = '';
		push @hogs, IPC::Run::start(
			[ 'psql', '-X', '-q', '-h', $dst->host, '-p', $dst->port, '-U', 'hog', '-d', 'postgres' ],
			'<', \$in, '>', '/dev/null', '2>', '/dev/null');
	}
	ok(poll_until(sub { !hog_can_connect() }), 'destination connections exhausted');
	note "  " . $dst->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE usename = 'hog'")
	  . " idle client sessions hold the destination's connections";

	# the worker reconnects to the source while no client slot is free
	AshTest::terminate_walsender($src, $sink);

	# the worker dies: halted owner_lost
	my $pid;
	poll_until(sub { $pid = worker_pid() });
	ok(defined $pid, 'worker pid known');
	$dst->safe_psql('postgres', "SELECT pg_terminate_backend($pid)") if $pid;
	AshTest::wait_status($dst, $sink, 'halted', 'owner_lost', src => $src,
		name => 'terminated worker: halted owner_lost');

	# a parallel scan takes every free worker process
	my $in = '';
	my $par = IPC::Run::start(
		[ 'psql', '-X', '-q', '-h', $dst->host, '-p', $dst->port, '-d', 'postgres', '-c',
		  "SET max_parallel_workers = 64; SET max_parallel_workers_per_gather = 64;"
			. " SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;"
			. " SELECT count(*) FROM filler WHERE slow(id)" ],
		'<', \$in, '>', '/dev/null', '2>', '/dev/null');
	push @hogs, $par;
	my $free = $dst->safe_psql('postgres', "SELECT current_setting('max_worker_processes')::int"
		  . " - count(*) FROM pg_stat_activity WHERE backend_type IN ('ash_replicant launcher', 'logical replication launcher')");
	ok(AshTest::poll($dst, "SELECT count(*) >= $free FROM pg_stat_activity WHERE backend_type = 'parallel worker'",
			't', timeout => 30), "worker processes exhausted ($free parallel workers)");

	# the restarted pipeline cannot get a worker process
	my $off = -s $dst->logfile;
	AshTest::start_sink($dst, $sink);
	$halted_and_resumed{$sink}++;
	ok($dst->wait_for_log(qr/event=launcher\.worker_register_failed sink=$sink/, $off),
		'restarted worker cannot register (launcher retries)');
	my $hold = 1 + rand(3);
	usleep(int($hold * 1_000_000));    # fault duration, not synchronization
	my $st = AshTest::status_row($dst, $sink) // {};
	is(($st->{state} // '') . '/' . ($st->{worker_pid} // 'none') . '/' . ($st->{reason} // 'none'),
		'catching_up/none/worker_processes_exhausted',
		'no worker while exhausted: catching_up, and status says why (worker_processes_exhausted)');

	note sprintf("  releasing after %.1fs", $hold);
	$dst->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%FROM filler WHERE slow%' AND pid <> pg_backend_pid() AND backend_type = 'client backend'");
	eval { $_->kill_kill } for @hogs;
	@hogs = ();
	ok(poll_until(sub { hog_can_connect() }), 'destination connections released');
};

# bounded loop for conditions the harness cannot express as one query
sub poll_until
{
	my ($cond, $t) = @_;
	my $deadline = time + ($t // 30);
	while (time < $deadline)
	{
		return 1 if $cond->();
		usleep(100_000);
	}
	return 0;
}

##############################################################################
# Matrix
##############################################################################

my $t0 = time;
my $injected = 0;
my $seg = 0;
for my $kind (@kinds)
{
	$seg++;
	my $chunks = segment_chunks($per_segment);
	note sprintf("segment %d (%s): %d chunks, ids up to %d, at %.1fs", $seg, $kind, scalar(@$chunks), $next_id - 1, time - $t0);
	my $run = start_runner($src, $chunks, "seg$seg");
	push @runners, $run;
	usleep(int((0.1 + rand(0.7)) * 1_000_000));    # fault timing, not synchronization
	note sprintf("fault %d: %s (workload %s, watermark %s)", $seg, $kind,
		runner_running($run) ? 'running' : 'done', eval { AshTest::checkpoint_lsn($dst, $sink) } // '?');
	$inject{$kind}->();
	$injected++;

	my ($ok, $failed) = finish_runner($run);
	note "  workload segment: $ok chunks committed, $failed skipped (source down)";
	cmp_ok($ok, '>', 0, "$kind: workload ran");

	# the last source transaction touching the table: its exact commit LSN
	my ($last) = AshTest::commit_tracked($src,
		"UPDATE items SET n = n + 1 WHERE id = (SELECT min(id) FROM items)");
	my $reached = AshTest::wait_lsn($src, $dst, $sink, $last, timeout => 120);
	ok($reached, "$kind: watermark reached the last source commit $last");
	is(AshTest::checkpoint_lsn($dst, $sink), $last, "$kind: checkpoint commit_lsn equals the last source commit");
	AshTest::assert_mirror_equal($src, $dst, ['items'], name => "$kind: mirror equals source");
	my $audit_sql = 'SELECT id, count(*) AS events, count(*) FILTER (WHERE op = \'DELETE\') AS deletes FROM items_audit GROUP BY id';
	AshTest::assert_mirror_equal($src, $dst, ["($audit_sql)"], order_by => 'id',
		name => "$kind: per-key row events (effect-once)");
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$kind: pipeline healthy again");
	note sprintf("  checked at %.1fs", time - $t0);
	last unless $reached;
}

my $xacts = $src->safe_psql('postgres', 'SELECT count(DISTINCT x) FROM items_audit');
my $events = $src->safe_psql('postgres', 'SELECT count(*) FROM items_audit');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM items_audit'), $events, 'total row events equal');
note "~$total_changes row changes generated, $events row events committed at the source";
diag "faults injected: $injected, transactions checked: $xacts";
diag "ash-proof: faults_injected=$injected checks=" . Test::More->builder->current_test;

AshTest::stop_proxy($proxy);
$proxy = undef;
done_testing();
