# A target locked by another session while lock_timeout is set for the
# worker's role: every event=apply.error line names the target waited for
# (docs/reasons.md#destination_apply_retrying), whichever step waited --
# the stream's write, or the coverage judgement of the restarted worker
# (which said command=checkpoint table=none), and every change lands once
# after the release.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
AshTest::both($src, $dst, "CREATE TABLE t (id integer PRIMARY KEY, v text)");
q_dst(AshTest::write_audit_sql('t', 'integer'));
$src->safe_psql($DB, "CREATE PUBLICATION pub FOR TABLE t");
AshTest::setup_pipeline($src, $dst, sink => 'lk', publication => 'pub', maps => [ ['t'] ], start => 0);
q_dst("ALTER ROLE postgres SET lock_timeout = '200ms'");
AshTest::start_sink($dst, 'lk');
q_dst("SELECT ash_replicant_wait_for_slot('lk', '60s')");
$src->safe_psql($DB, "INSERT INTO t VALUES (1, 'a')");
ok(AshTest::wait_caught_up($src, $dst, 'lk'), 'streams');

my $h = IPC::Run::start([ 'psql', '-X', '-q', '-d', $dst->connstr($DB), '-c',
	"SET lock_timeout = 0; BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(8); COMMIT;" ],
	'>', '/dev/null', '2>', '/dev/null');
ok(AshTest::poll($dst, "SELECT count(*) > 0 FROM pg_locks WHERE relation = 't'::regclass AND mode = 'AccessExclusiveLock' AND granted", 't'),
	'another session holds the target');
# the census (every second) meets the lock first, as the worker idles
sleep 2;
$src->safe_psql($DB, "INSERT INTO t VALUES (2, 'b'); UPDATE t SET v = 'c' WHERE id = 1");
ok(AshTest::poll($dst, "SELECT reason = 'destination_apply_retrying' FROM ash_replicant_status('lk')", 't', timeout => 6),
	'status says destination_apply_retrying while the lock is held');
$h->finish;
ok(AshTest::wait_caught_up($src, $dst, 'lk'), 'caught up after the release');
AshTest::assert_mirror_equal($src, $dst, ['t']);
is(q_dst("SELECT string_agg(id || op, ',' ORDER BY id, op) FROM t_audit"), '1INSERT,1UPDATE,2INSERT', 'each change once');

my @l = AshTest::log_lines_like($dst, qr/event=apply\.error sink=lk .*sqlstate=55P03/);
cmp_ok(scalar(@l), '>', 0, 'the lock waits were logged');
my %steps = map { /step=(\w+)/ ? ($1 => 1) : () } @l;
diag 'steps: ' . join(',', sort keys %steps);
my @unnamed = grep { !/ table=public\.t / } @l;
is(scalar(@unnamed), 0, 'every apply.error line names the locked target');
diag $_ for @unnamed[ 0 .. ($#unnamed < 3 ? $#unnamed : 3) ];
# and says what waited, not what apply did last (a stale insert, checkpoint)
my @stale = grep { / step=coverage / && !/ command=coverage / } @l;
is(scalar(@stale), 0, 'the coverage step\'s lines say command=coverage');
diag $_ for @stale[ 0 .. ($#stale < 3 ? $#stale : 3) ];
ok((grep { / command=census / } @l), 'the census met the lock') or diag join("\n", @l[0 .. ($#l < 4 ? $#l : 4)]);
done_testing();
