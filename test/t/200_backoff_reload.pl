# Back-off settings changed by a reload while the worker backs off
# (docs/operations.md, settings): ash_replicant.reconnect_min_delay and
# reconnect_max_delay are reloadable, and a worker waiting on an
# unreachable source must use the new ones at its next retry.  Before, it
# read a reload only in its receive loop: lowered from 20 s / 60 s to
# 100 ms / 1 s, it went on waiting 40 s, 60 s, and came back about a
# minute after the source did.
#
#   the source stopped, the worker backs off 20 s; the bounds lowered and
#   reloaded: every wait logged after the reload is at most 1 s, several
#   retries follow within seconds, and the pipeline is healthy again soon
#   after the source returns; mirror = source.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(
	dst_conf => "ash_replicant.reconnect_min_delay = '20s'\nash_replicant.reconnect_max_delay = '60s'\n");
sub faults { return AshTest::grep_logs_for('event=source.fault sink=g', $dst); }

AshTest::both($src, $dst, 'CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub FOR TABLE t');
AshTest::setup_pipeline($src, $dst, sink => 'g', publication => 'pub', maps => [ ['t'] ]);
AshTest::wait_status($dst, 'g', 'healthy', undef, src => $src);
AshTest::wait_caught_up($src, $dst, 'g');

$src->stop('fast');
ok(AshTest::wait_until(sub { scalar(faults()) >= 1 }, timeout => 60), 'the source gone: a fault logged');
like((faults())[-1], qr/retry_in_ms=(?:[2-9]\d{4}|\d{6,})/, 'the worker backs off 20 s or more');

$dst->safe_psql($DB, "ALTER SYSTEM SET ash_replicant.reconnect_min_delay = '100ms';"
	  . " ALTER SYSTEM SET ash_replicant.reconnect_max_delay = '1s'");
my $before = scalar(faults());
$dst->safe_psql($DB, 'SELECT pg_reload_conf()');
ok(AshTest::wait_until(sub { scalar(faults()) >= $before + 4 }, timeout => 30),
	'after the reload the worker retries every second or so (before: next in 40 s)');
my @after = (faults())[ $before .. scalar(faults()) - 1 ];
my @waits = map { /retry_in_ms=(\d+)/ ? $1 : () } @after;
ok(@waits && !grep({ $_ > 1000 } @waits), 'every wait after the reload within the new 1 s cap')
  or diag "retry_in_ms: @waits";

$src->start;
AshTest::wait_status($dst, 'g', 'healthy', undef, src => $src, timeout => 30,
	name => 'healthy again soon after the source returns (before: about a minute)');
$src->safe_psql($DB, "INSERT INTO t SELECT g, 'x' FROM generate_series(1, 50) g");
ok(AshTest::wait_caught_up($src, $dst, 'g', quiet => 1), 'streaming again');
AshTest::assert_mirror_equal($src, $dst, ['t']);
done_testing();
