# Many pipelines into one destination, isolated (docs/operations.md#many-pipelines):
#   six pipelines from two source servers run at once (max_pipelines = 6);
#   four are put in trouble at the same time --
#     halted     a TRUNCATE its mapping halts on (source_truncate)
#     gone       its source server is stopped (reconnects with back-off)
#     locked     a session holds an EXCLUSIVE lock on its target (writes wait)
#     backlog    catching up 300,000 rows committed in one go
#   -- and the two healthy ones keep catching up to markers committed after
#   all of that, while the trouble is still there (the locked worker is still
#   waiting on the lock -- and its status says catching_up/destination_lock_wait,
#   not healthy -- the halted one halted, the gone one's source down).
#   Their catch-up times before and during the trouble are printed, not
#   asserted (tests never fail on timing).  Then each troubled pipeline
#   recovers on its own once its cause is removed.  A seventh pipeline finds
#   every slot taken: catching_up / pipeline_slots_exhausted (not a silent
#   wait), and starts once the halted one is stopped.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(dst_conf => "ash_replicant.max_pipelines = 6\n");
my ($src2) = AshTest::start_pair(name_prefix => 'b_');

my @sinks = qw(h1 h2 halted locked backlog);
for my $s (@sinks, 'extra')
{
	AshTest::both($src, $dst, "CREATE TABLE t_$s (id bigint PRIMARY KEY, v text NOT NULL)");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$s FOR TABLE t_$s");
}
AshTest::both($src2, $dst, "CREATE TABLE t_gone (id bigint PRIMARY KEY, v text NOT NULL)");
$src2->safe_psql($DB, "CREATE PUBLICATION pub_gone FOR TABLE t_gone");

for my $s (@sinks)
{
	AshTest::setup_pipeline($src, $dst, sink => $s, publication => "pub_$s", maps => [ ["t_$s"] ]);
}
AshTest::setup_pipeline($src2, $dst, sink => 'gone', publication => 'pub_gone', maps => [ ['t_gone'] ]);
for my $s (@sinks)
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s streams");
}
AshTest::wait_caught_up($src2, $dst, 'gone', name => 'gone streams');

# the normal lag of the healthy ones: one round of writes and a marker each
sub healthy_round
{
	my ($label, $base) = @_;
	my %took;
	for my $s (qw(h1 h2))
	{
		$src->safe_psql($DB, "INSERT INTO t_$s SELECT g, 'v' || g FROM generate_series($base, $base + 999) g");
	}
	for my $s (qw(h1 h2))
	{
		my $t0 = time;
		AshTest::wait_caught_up($src, $dst, $s, name => "$label: $s caught up");
		$took{$s} = time - $t0;
	}
	note sprintf("%s: h1 caught up in %.2f s, h2 in %.2f s", $label, $took{h1}, $took{h2});
	return;
}
healthy_round('before', 1);

##############################################################################
# Trouble, all at once.
##############################################################################

# halted: its mapping halts on a TRUNCATE (on_truncate = halt, the default)
$src->safe_psql($DB, 'TRUNCATE t_halted');
# gone: its source server is down
$src2->safe_psql($DB, "INSERT INTO t_gone SELECT g, 'v' FROM generate_series(1, 100) g");
AshTest::wait_caught_up($src2, $dst, 'gone');
$src2->stop('immediate');
AshTest::poll($dst, "SELECT state <> 'healthy' FROM ash_replicant_status('gone')");
# locked: a session holds its target
my $gate = $dst->background_psql($DB, on_error_stop => 1);
# EXCLUSIVE: writers wait, readers (this test) do not
$gate->query_safe('BEGIN; LOCK TABLE t_locked IN EXCLUSIVE MODE');
$src->safe_psql($DB, "INSERT INTO t_locked SELECT g, 'v' FROM generate_series(1, 100) g");
# backlog: a large transaction to catch up
$src->safe_psql($DB, "INSERT INTO t_backlog SELECT g, repeat('x', 40) FROM generate_series(1, 300000) g");

AshTest::wait_status($dst, 'halted', 'halted', 'source_truncate');
ok(AshTest::poll($dst,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'ash_replicant locked'"
		  . " AND wait_event_type = 'Lock'"),
	'the locked pipeline waits on the lock of its target');

healthy_round('during', 2001);
note "backlog rows applied when the healthy ones had caught up: "
  . $dst->safe_psql($DB, 'SELECT count(*) FROM t_backlog') . " of 300000";

# the trouble is still there: the healthy ones did not wait for it to end
is($dst->safe_psql($DB,
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ash_replicant locked'"
		  . " AND wait_event_type = 'Lock'"),
	'1', 'while the healthy ones caught up, the locked pipeline was still waiting on its lock');
is(AshTest::status_row($dst, 'halted')->{state}, 'halted', 'the halted pipeline is still halted');
isnt(AshTest::status_row($dst, 'gone')->{state}, 'healthy', 'the gone pipeline is not healthy (its source is down)');
is($dst->safe_psql($DB, "SELECT count(*) FROM t_locked"), '0', 'nothing of the locked table was applied');
AshTest::wait_status($dst, 'locked', 'catching_up', 'destination_lock_wait',
	name => 'the locked pipeline says so: catching_up/destination_lock_wait');

##############################################################################
# Every slot taken: a seventh pipeline says so.
##############################################################################

AshTest::setup_pipeline($src, $dst, sink => 'extra', publication => 'pub_extra', maps => [ ['t_extra'] ]);
AshTest::wait_status($dst, 'extra', 'catching_up', 'pipeline_slots_exhausted');
ok(scalar(AshTest::log_lines_like($dst, qr/event=launcher\.no_free_slot sink=extra reason=pipeline_slots_exhausted/)),
	'the launcher logs the limit it hit');

##############################################################################
# Each recovers on its own once its cause is gone.
##############################################################################

$gate->query_safe('COMMIT');
$gate->quit;
AshTest::wait_caught_up($src, $dst, 'locked', name => 'the locked pipeline catches up once the lock is gone');
AshTest::assert_mirror_equal($src, $dst, ['t_locked']);
AshTest::wait_status($dst, 'locked', 'healthy', undef, name => '... and is healthy again');

$src2->start;
AshTest::wait_caught_up($src2, $dst, 'gone', name => 'the gone pipeline reconnects once its source is back');

AshTest::wait_caught_up($src, $dst, 'backlog', name => 'the backlog is applied');
AshTest::assert_mirror_equal($src, $dst, ['t_backlog']);

# stopping the halted pipeline frees its slot: the seventh starts
AshTest::stop_sink($dst, 'halted');
AshTest::wait_caught_up($src, $dst, 'extra', name => 'the seventh pipeline starts in the freed slot');
AshTest::wait_status($dst, 'extra', 'healthy', undef);
is(AshTest::status_row($dst, 'extra')->{reason}, undef, 'and its reason is gone');

AshTest::assert_mirror_equal($src, $dst, [ 't_h1', 't_h2' ]);

done_testing();
