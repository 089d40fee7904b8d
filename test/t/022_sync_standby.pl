# Prompt acknowledgement (docs/operations.md "Acknowledgement and synchronous
# standby"): the worker reports a durably applied commit to the source as soon
# as the stream goes quiet, not when the WAL writer and the next wake-up get to
# it.  As the source's synchronous standby (synchronous_standby_names lists the
# worker's application_name "ash_replicant <sink>"):
#   - every source commit returns only once the mirror has applied it: the
#     rows are there the moment the commit returns, without waiting;
#   - 50 sequential commits take well under the ~1 s each a late
#     acknowledgement costs (bound generous: 0.4 s a commit on average).
# The worker learns whether the source waits for it from
# synchronous_standby_names (at session start, then at every census) and
# logs its acknowledgement mode: per_commit when listed, else grouped (a
# flush at most every 20 ms); the setting's syntax variants are checked.
# Without a census, a pipeline listed after its start switches on evidence:
# its deferred acknowledgements keep being answered at once.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $DB = $AshTest::DB;

AshTest::both($src, $dst, "CREATE TABLE acks (id int PRIMARY KEY, at timestamptz)");
$src->safe_psql($DB, "CREATE PUBLICATION pub_ack FOR TABLE acks");
AshTest::setup_pipeline($src, $dst, sink => 'ack', publication => 'pub_ack', maps => [ ['acks'] ]);
ok(AshTest::wait_caught_up($src, $dst, 'ack'), 'streams');

# Nobody waits for the worker: it groups its acknowledgement flushes.
ok($dst->wait_for_log(qr/event=pipeline\.acknowledgement sink=ack mode=grouped/, 0),
	'without synchronous_standby_names acknowledgements are grouped');

# The mode follows synchronous_standby_names as the source's parser reads it
# (names case-insensitive, quoted or not, in FIRST/ANY lists, "*"), picked up
# by the next census.  No source commit happens meanwhile: a standby named
# here but absent would hold it.
my @modes = (
	[ q{'"ash_replicant ack"'},                                     'per_commit' ],
	[ q{'other_standby, "ash_replicant ackx"'},                     'grouped' ],
	[ q{'ANY 1 (x, "ASH_Replicant ACK")'},                          'per_commit' ],
	[ q{'FIRST 2 ("xash_replicant ack", "ash_replicant ack ")'},    'grouped' ],
	[ q{'*'},                                                       'per_commit' ],
	[ q{''},                                                        'grouped' ],
	[ q{'2 (a, "ash_replicant ack")'},                              'per_commit' ]);
for my $m (@modes)
{
	my ($setting, $mode) = @$m;
	my $offset = -s $dst->logfile;
	$src->safe_psql($DB, "ALTER SYSTEM SET synchronous_standby_names = $setting");
	$src->safe_psql($DB, "SELECT pg_reload_conf()");
	ok($dst->wait_for_log(qr/event=pipeline\.acknowledgement sink=ack mode=\Q$mode\E/, $offset),
		"synchronous_standby_names = $setting: acknowledgements $mode");
}

# $sink becomes the source's (only) synchronous standby
sub list_as_synchronous
{
	my ($sink) = @_;
	$src->safe_psql($DB, qq{ALTER SYSTEM SET synchronous_standby_names = '"ash_replicant $sink"'});
	$src->safe_psql($DB, "SELECT pg_reload_conf()");
	return AshTest::poll($src,
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'ash_replicant $sink'");
}

# one psql session committing each statement of $sql in turn; seconds taken
sub commit_one_by_one
{
	my ($sql, $what) = @_;
	my ($out, $err) = ('', '');
	my $t0 = time;
	my $ok = eval {
		IPC::Run::run([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $src->host, '-p', $src->port, '-d', $DB ],
			'<', \$sql, '>', \$out, '2>', \$err, IPC::Run::timeout(180));
	};
	my $elapsed = time - $t0;
	ok($ok, "$what returned") or diag $err;
	diag sprintf("%s in %.2f s", $what, $elapsed);
	return $elapsed;
}

ok(list_as_synchronous('ack'), 'the worker is the synchronous standby');

my $n = 50;
my $elapsed = commit_one_by_one(join('', map { "INSERT INTO acks VALUES ($_, now());\n" } 1 .. $n),
	"$n synchronous commits");
# no poll: an acknowledged commit is applied and durable at the destination
is($dst->safe_psql($DB, "SELECT count(*) FROM acks"), $n, 'every acknowledged commit is already visible');
cmp_ok($elapsed, '<', 0.4 * $n, 'acknowledged promptly (a late acknowledgement costs about a second each)');

$src->safe_psql($DB, q{ALTER SYSTEM RESET synchronous_standby_names});
$src->safe_psql($DB, "SELECT pg_reload_conf()");

# Evidence instead of the setting: a pipeline without census reads the
# setting only at its start.  Listed afterwards, its deferred
# acknowledgements (across a silent stream) are answered by a new
# transaction at once, again and again: it switches to per_commit.
AshTest::both($src, $dst, "CREATE TABLE acks2 (id int PRIMARY KEY)");
$src->safe_psql($DB, "CREATE PUBLICATION pub_ack2 FOR TABLE acks2");
AshTest::setup_pipeline($src, $dst, sink => 'ack2', publication => 'pub_ack2',
	maps => [ ['acks2'] ], census => '{"enabled": false}');
ok(AshTest::wait_caught_up($src, $dst, 'ack2'), 'the second pipeline streams');
ok($dst->wait_for_log(qr/event=pipeline\.acknowledgement sink=ack2 mode=grouped by=setting/, 0),
	'not listed at its start: grouped');
my $offset2 = -s $dst->logfile;
ok(list_as_synchronous('ack2'), 'the second pipeline is the synchronous standby');
my $m = 300;
commit_one_by_one(join('', map { "INSERT INTO acks2 VALUES ($_);\n" } 1 .. $m), "$m synchronous commits");
is($dst->safe_psql($DB, "SELECT count(*) FROM acks2"), $m, 'every acknowledged commit is visible');
ok($dst->log_contains(qr/event=pipeline\.acknowledgement sink=ack2 mode=per_commit by=replies/, $offset2),
	'held commits answered at once: acknowledgements per commit');
ok(!$dst->log_contains(qr/sink=ack mode=per_commit by=replies/, 0),
	'the pipeline nobody waited for never guessed so');

$src->safe_psql($DB, q{ALTER SYSTEM RESET synchronous_standby_names});
$src->safe_psql($DB, "SELECT pg_reload_conf()");
done_testing();
