# event=apply.streamed says a streamed transaction was applied: it is
# logged once its batch has committed, not at STREAM COMMIT, where the
# batch may still fail (a deferred constraint, a key version gone, the
# commit itself) and be rolled back.
#
#   deferred  a streamed transaction (logical_decoding_work_mem 64kB at the
#             source) into a target with a DEFERRABLE INITIALLY DEFERRED
#             unique constraint that two of its rows violate: it fails at
#             the batch's commit and halts apply_failed; no apply.streamed
#             line for it, before or at the halt; nothing committed.  The
#             constraint dropped, a restart streams it again and applies it:
#             one apply.streamed line, with its changes, and the rows.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "logical_decoding_work_mem = '64kB'\n");
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, "CREATE TABLE big (id integer PRIMARY KEY, v text)");
q_dst("ALTER TABLE big ADD CONSTRAINT big_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED");
q_src("CREATE PUBLICATION pub_big FOR TABLE big");
AshTest::setup_pipeline($src, $dst, sink => 'st', publication => 'pub_big', maps => [ ['big'] ],
	pipeline_extra => 'streaming => true');
ok(AshTest::wait_caught_up($src, $dst, 'st'), 'the pipeline streams');
my $ckpt = AshTest::checkpoint_lsn($dst, 'st');

sub streamed_lines { return AshTest::log_lines_like($dst, qr/event=apply\.streamed sink=st /); }

q_src("INSERT INTO big SELECT g, CASE WHEN g IN (1, 3000) THEN 'dup' ELSE 'v' || g END"
	  . " FROM generate_series(1, 3000) g");
AshTest::wait_status($dst, 'st', 'halted', 'apply_failed', src => $src,
	name => 'deferred: the violation at the batch commit halts apply_failed');
is(AshTest::status_row($dst, 'st')->{halt_sqlstate}, '23505', 'deferred: halt_sqlstate 23505');
ok(scalar(AshTest::log_lines_like($dst, qr/event=apply\.stream_fallback sink=st /)) == 0,
	'deferred: the transaction was applied as it streamed (no fallback)');
is(scalar(streamed_lines()), 0, 'deferred: no apply.streamed line for the transaction the halt rolled back')
  or diag join("\n", streamed_lines());
is(q_dst('SELECT count(*) FROM big'), '0', 'deferred: nothing of the transaction committed');
is(AshTest::checkpoint_lsn($dst, 'st'), $ckpt, 'deferred: the checkpoint unchanged');

AshTest::stop_settled($src, $dst, 'st');
q_dst("ALTER TABLE big DROP CONSTRAINT big_v");
AshTest::start_sink($dst, 'st');
ok(AshTest::wait_caught_up($src, $dst, 'st'), 'deferred: the constraint dropped, the transaction applied');
is(q_dst('SELECT count(*) FROM big'), '3000', 'deferred: every row');
my @lines = streamed_lines();
is(scalar(@lines), 1, 'deferred: one apply.streamed line, for the commit')
  or diag join("\n", @lines);
like($lines[0] // '', qr/changes=3000\b/, 'deferred: it counts the transaction\'s changes');
done_testing();
