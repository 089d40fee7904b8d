# The crash-loop guard's caution after a worker died inside a streamed
# transaction (docs/operations.md, "The crash-loop guard"): the next worker
# applies one source transaction per destination transaction, without
# streaming, until that transaction has arrived whole.  One the source rolls
# back never arrives: the census asks the source (pg_xact_status), and the
# caution ends once it aborted (before: careful until the next
# ash_replicant_start, every batch one transaction, nothing streamed,
# healthy).
#
#  1  streaming => true, a streamed transaction being written when the
#     worker is killed with SIGKILL (the destination crash-restarts), then
#     rolled back at the source: event=pipeline.careful until_xid=X, then
#     event=pipeline.crash_passed xid=X outcome=aborted; afterwards a large
#     transaction streams again (the careful worker withholds streaming);
#     the mirror equals the source, each row written once
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "logical_decoding_work_mem = '64kB'\n",
	dst_conf => "restart_after_crash = on\n");

AshTest::both($src, $dst, 'CREATE TABLE big (id bigint PRIMARY KEY, grp int NOT NULL, val text)'
	  . ';' . AshTest::write_audit_sql('big', 'bigint'));
$src->safe_psql($DB, 'CREATE PUBLICATION pub_big FOR TABLE big');
AshTest::setup_pipeline($src, $dst, sink => 's', publication => 'pub_big', maps => [ ['big'] ],
	pipeline_extra => 'streaming => true');
AshTest::wait_slot_consistent($src, $dst, 's');

sub streamed { return scalar(AshTest::log_lines_like($dst, qr/event=apply\.streamed sink=s /)); }

sub streams_again
{
	my ($label, $grp) = @_;
	my $before = streamed();
	ok(AshTest::wait_until(sub {
		$src->safe_psql($DB, "DELETE FROM big WHERE grp = $grp;"
			  . " INSERT INTO big SELECT g, $grp, 'large' FROM generate_series($grp * 100000, $grp * 100000 + 7999) g");
		AshTest::wait_caught_up($src, $dst, 's', quiet => 1);
		streamed() > $before;
	}, timeout => 60), "$label: a large transaction streams");
}

streams_again('before', 1);

my $s = $src->background_psql($DB, on_error_stop => 1);
$s->query_safe("BEGIN; INSERT INTO big SELECT g, 3, 'rolled back' FROM generate_series(500001, 520000) g;");
ok(AshTest::poll($dst, q{SELECT count(*) > 0 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
	JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE c.relname = 'big' AND l.mode = 'RowExclusiveLock' AND l.granted
	  AND a.backend_type = 'ash_replicant pipeline'}), 'the worker writes the streamed transaction');
my $wpid = $dst->safe_psql($DB, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'");
kill 'KILL', $wpid;
$s->query_safe('ROLLBACK');
$s->quit;
AshTest::poll($dst, 'SELECT true');
AshTest::wait_caught_up($src, $dst, 's', name => 'caught up after the worker died');
my @careful = AshTest::log_lines_like($dst, qr/event=pipeline\.careful sink=s until_xid=\d+/);
ok(@careful >= 1, 'the next worker is careful until the streamed transaction');
my ($xid) = ($careful[-1] // '') =~ /until_xid=(\d+)/;
$xid //= 'none';
ok(AshTest::wait_until(sub {
	scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.crash_passed sink=s xid=$xid outcome=aborted/)) >= 1 }),
	'the census finds it rolled back: careful no more');
streams_again('after', 2);
AshTest::assert_mirror_equal($src, $dst, ['big'], name => 'mirror = source');
is($dst->safe_psql($DB, "SELECT count(*) FROM big WHERE val = 'rolled back'"), '0', 'nothing of the rolled-back transaction');
my $audit = 'SELECT id, count(*) AS writes FROM big_audit GROUP BY id';
AshTest::assert_mirror_equal($src, $dst, ["($audit)"], order_by => 'id', name => 'each row written once');
is((AshTest::status_row($dst, 's') // {})->{state}, 'healthy', 'healthy');

done_testing();
