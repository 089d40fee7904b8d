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
# Without a census, a pipeline listed after its start notices from the
# stream: a deferred acknowledgement answered at once by a new transaction
# has it read the setting again on a probe connection (at most every 30 s);
# where the probe is refused, eight such answers in a row decide.
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

# A pipeline without census reads the setting only at its start.  Listed
# afterwards, its first deferred acknowledgement (across a silent stream)
# answered by a new transaction at once has it read the setting again: it
# switches to per_commit after a commit or two held, not eight.
sub listed_later
{
	my ($sink, $table, %o) = @_;
	AshTest::both($src, $dst, "CREATE TABLE $table (id int PRIMARY KEY)");
	$src->safe_psql($DB, "GRANT SELECT ON $table TO $o{source_role}") if $o{source_role};
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$sink FOR TABLE $table");
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink",
		maps => [ [$table] ], census => '{"enabled": false}', %o);
	ok(AshTest::wait_caught_up($src, $dst, $sink), "$sink streams");
	ok($dst->wait_for_log(qr/event=pipeline\.acknowledgement sink=$sink mode=grouped by=setting/, 0),
		"$sink not listed at its start: grouped");
	$o{before_listing}->() if $o{before_listing};
	my $offset = -s $dst->logfile;
	ok(list_as_synchronous($sink), "$sink is the synchronous standby");
	my $m = 300;
	commit_one_by_one(join('', map { "INSERT INTO $table VALUES ($_);\n" } 1 .. $m), "$m synchronous commits");
	is($dst->safe_psql($DB, "SELECT count(*) FROM $table"), $m, 'every acknowledged commit is visible');
	$src->safe_psql($DB, q{ALTER SYSTEM RESET synchronous_standby_names});
	$src->safe_psql($DB, "SELECT pg_reload_conf()");
	return $offset;
}

my $offset2 = listed_later('ack2', 'acks2');
ok($dst->log_contains(qr/event=pipeline\.acknowledgement sink=ack2 mode=per_commit by=setting/, $offset2),
	'a held commit answered at once: the setting read again, acknowledgements per commit');
ok(!$dst->log_contains(qr/sink=ack2 mode=per_commit by=replies/, $offset2), 'without waiting for eight');

# The same where the source refuses the probe (pg_hba rejects the role's
# ordinary connections, not its replication connection): the replies
# decide, after eight, and the refusal is logged value-free.
$src->safe_psql($DB, "CREATE ROLE mirror3 LOGIN REPLICATION; GRANT pg_read_all_settings TO mirror3");
my $offset3 = listed_later('ack3', 'acks3', source_role => 'mirror3',
	connection => AshTest::conninfo($src) =~ s/user=\S+/user=mirror3/r,
	before_listing => sub {
		my $hba = $src->data_dir . '/pg_hba.conf';
		my $text = PostgreSQL::Test::Utils::slurp_file($hba);
		open(my $fh, '>', $hba) or die $!;
		print $fh "host all mirror3 127.0.0.1/32 reject\n" . $text;
		close($fh);
		$src->reload;
	});
ok($dst->log_contains(qr/event=pipeline\.acknowledgement_probe sink=ack3 result=failed/, $offset3),
	'the refused probe is logged');
ok($dst->log_contains(qr/event=pipeline\.acknowledgement sink=ack3 mode=per_commit by=replies/, $offset3),
	'held commits answered at once eight times: acknowledgements per commit');
ok(!$dst->log_contains(qr/sink=ack mode=per_commit by=(replies|setting)/, $offset2),
	'the pipeline nobody waited for never guessed so');
done_testing();
