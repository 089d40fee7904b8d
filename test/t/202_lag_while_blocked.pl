# Lag while a transaction waits for a locked target: the worker has received
# it but cannot apply it.  lag_bytes and last_received_lsn must show it
# (before: both frozen, lag_bytes 0 and lag_seconds 0 for as long as the lock
# was held, while the source's slot fell further behind), lag_seconds must
# count from the waiting transaction's commit -- not from the last applied
# one, which an idle pipeline applied long before -- and both must fall back
# to 0 once it is applied.  Also for a transaction whose first change comes
# before the commit of one applied and acknowledged ahead of it: its BEGIN
# arrives at a position below what is acknowledged, its commit above.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
AshTest::both($src, $dst, "CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL)");
AshTest::both($src, $dst, "CREATE TABLE u (id bigint PRIMARY KEY, v text NOT NULL)");
$src->safe_psql($DB, "CREATE PUBLICATION pub FOR TABLE t, u");
# one census, at the start: a census that comes while the target is locked
# waits for the lock itself, before the stream is read (known, not judged here)
AshTest::setup_pipeline($src, $dst, sink => 'l', publication => 'pub', maps => [ ['t'], ['u'] ],
	census => '{"interval_ms": 3600000}');
AshTest::wait_status($dst, 'l', 'healthy', undef, src => $src);
$src->safe_psql($DB, "INSERT INTO t VALUES (1, 'a')");
AshTest::wait_caught_up($src, $dst, 'l');

my $of = "FROM ash_replicant.stat_pipelines WHERE sink_name = 'l'";
my $row = "SELECT row_to_json(s) FROM ash_replicant.stat_pipelines s WHERE sink_name = 'l'";
ok(AshTest::poll($dst, "SELECT lag_bytes = 0 AND lag_seconds = 0 $of"), 'caught up: lag 0');

# idle a while: the last applied transaction is old by then
sleep 3;

my $h = $dst->background_psql($DB, on_error_stop => 1);
$h->query_safe("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE");
my $t0 = $src->safe_psql($DB, "SELECT clock_timestamp()");
my ($commit) = AshTest::commit_tracked($src, "INSERT INTO t VALUES (2, 'b')");
note "waiting transaction's commit: $commit";

ok(AshTest::poll($dst, "SELECT lag_bytes > 0 $of", undef, timeout => 30), 'lag_bytes > 0 while the transaction waits for the lock')
  or diag $dst->safe_psql($DB, $row);
my ($ls1, $since_t0) = split /\|/, $dst->safe_psql($DB,
	"SELECT lag_seconds || '|' || extract(epoch FROM clock_timestamp() - '$t0'::timestamptz) $of");
note "lag_seconds $ls1, $since_t0 s since just before the waiting commit";
cmp_ok($ls1, '<', $since_t0 + 1.5,
	'lag_seconds counts from the waiting transaction, not the last applied one');
is($dst->safe_psql($DB, "SELECT last_received_lsn >= '$commit' AND applied_lsn < '$commit' $of"), 't',
	'last_received_lsn covers the waiting transaction, applied_lsn does not');
AshTest::wait_status($dst, 'l', 'catching_up', 'destination_lock_wait', src => $src);

# more commits behind it: a trickle, as a live source goes on committing
$src->safe_psql($DB, "INSERT INTO t VALUES ($_, 'c')") for 3 .. 5;
ok(AshTest::poll($dst, "SELECT lag_seconds > $ls1 + 2 AND lag_bytes > 0 $of"),
	'lag_seconds grows while the lock is held');
is($dst->safe_psql($DB, "SELECT state || '/' || reason || ' ' || (lag_bytes >= 0 AND lag_seconds >= 0)::text $of"),
	'catching_up/destination_lock_wait true', 'still waiting, lag never negative');

$h->query_safe("COMMIT");
$h->quit;
AshTest::wait_caught_up($src, $dst, 'l');
ok(AshTest::poll($dst, "SELECT lag_bytes = 0 AND lag_seconds = 0 AND state = 'healthy' $of"),
	'after the lock: lag back to 0, healthy')
  or diag $dst->safe_psql($DB, $row);

# interleaved: a's first change, then another transaction committed and
# applied (and the marker after it), then a's commit, held by the lock
my $a = $src->background_psql($DB, on_error_stop => 1);
$a->query_safe("BEGIN; INSERT INTO t VALUES (10, 'early')");
$src->safe_psql($DB, "INSERT INTO u VALUES (1, 'x')");
AshTest::wait_caught_up($src, $dst, 'l');
ok(AshTest::poll($dst, "SELECT lag_bytes = 0 $of"), 'interleaved: caught up first');
$h = $dst->background_psql($DB, on_error_stop => 1);
$h->query_safe("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE");
$a->query_safe("COMMIT");
$a->quit;
ok(AshTest::poll($dst, "SELECT lag_bytes > 0 AND last_received_lsn > applied_lsn $of", undef, timeout => 30),
	'interleaved: lag_bytes > 0 while it waits for the lock')
  or diag $dst->safe_psql($DB, $row);
AshTest::wait_status($dst, 'l', 'catching_up', 'destination_lock_wait', src => $src,
	name => 'interleaved: waiting for the lock');
$h->query_safe("COMMIT");
$h->quit;
AshTest::wait_caught_up($src, $dst, 'l');
ok(AshTest::poll($dst, "SELECT lag_bytes = 0 AND lag_seconds = 0 AND state = 'healthy' $of"),
	'interleaved: lag back to 0')
  or diag $dst->safe_psql($DB, $row);
AshTest::assert_mirror_equal($src, $dst, ['t', 'u']);
done_testing();
