# A deferred constraint that fails at the commit names its table in the
# halt (docs/operations.md, "Reading a halt").  Its error comes when no
# change is in hand (the batch's commit), and the halt's halt_target and
# the apply.error lines' table= were empty; the constraint's error names
# its table, which is one of the sink's targets.
#
#   unique    a DEFERRABLE INITIALLY DEFERRED unique constraint on a target
#             the source does not have, two rows of one transaction sharing
#             a value (a sentinel): halted apply_failed 23505, halt_target
#             and every apply.error line name public.du, nothing of the
#             transaction committed, no sentinel in any log or status; the
#             constraint dropped, a restart applies it once
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_deferred_unique_51c9';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, "CREATE TABLE du (id integer PRIMARY KEY, v text)");
q_dst("ALTER TABLE du ADD CONSTRAINT du_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED");
q_src("CREATE PUBLICATION pub_du FOR TABLE du");
AshTest::setup_pipeline($src, $dst, sink => 'du', publication => 'pub_du', maps => [ ['du'] ]);
q_dst("SELECT ash_replicant_wait_for_slot('du', '60s')");
q_src("INSERT INTO du VALUES (1, 'one')");
ok(AshTest::wait_caught_up($src, $dst, 'du'), 'a first row applied');
my $ckpt = AshTest::checkpoint_lsn($dst, 'du');

q_src("BEGIN; INSERT INTO du VALUES (2, '$SENTINEL'); INSERT INTO du VALUES (3, '$SENTINEL'); COMMIT");
AshTest::wait_status($dst, 'du', 'halted', 'apply_failed', src => $src,
	name => 'unique: a deferred unique violation at commit halts apply_failed');
my $st = AshTest::status_row($dst, 'du');
is($st->{halt_sqlstate}, '23505', 'unique: halt_sqlstate 23505');
is($st->{halt_target} // '', 'public.du', 'unique: halt_target names the constraint\'s table');
my @errs = AshTest::log_lines_like($dst, qr/event=apply\.error sink=du /);
ok(@errs > 0, 'unique: apply.error lines logged');
is(scalar(grep { !/ table=public\.du / } @errs), 0, 'unique: every apply.error line names public.du')
  or diag(join("\n", @errs));
like(AshTest::halt_line($dst, 'du', 'apply_failed'), qr/ table=public\.du/, 'unique: the halt line names public.du');
is(q_dst('SELECT count(*) FROM du'), '1', 'unique: nothing of the transaction committed');
is(AshTest::checkpoint_lsn($dst, 'du'), $ckpt, 'unique: the checkpoint unchanged');
is(scalar(AshTest::grep_logs_for($SENTINEL, $dst)), 0, 'unique: the value is in no destination log');
unlike(q_dst("SELECT row_to_json(s)::text FROM ash_replicant_status('du') s"), qr/$SENTINEL/,
	'unique: nor in the status');

AshTest::stop_settled($src, $dst, 'du');
q_dst("ALTER TABLE du DROP CONSTRAINT du_v");
AshTest::start_sink($dst, 'du');
ok(AshTest::wait_caught_up($src, $dst, 'du'), 'unique: the constraint dropped, the transaction applied');
AshTest::assert_mirror_equal($src, $dst, ['du'], name => 'unique: mirror after the restart');
done_testing();
