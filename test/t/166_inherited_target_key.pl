# A target with an inheritance child that holds a row under a key the mirror
# also holds (docs/scale-out.md, Inheritance children): the mirror's update
# or delete by that key meets two rows.  Before: an internal error
# (XX000, "update affected more than one row") retried and halted as
# apply_failed/internal_error, the docs saying the child's row is updated
# with it.  Now: apply_failed with cardinality_violation (21000) naming the
# target, nothing of the transaction applied, no value in any log line; the
# child's row moved out of the tree, a restart applies it once.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_src("CREATE TABLE ev (id int PRIMARY KEY, v text); CREATE PUBLICATION pub_i FOR TABLE ev");
q_dst("CREATE TABLE ev (id int PRIMARY KEY, v text); CREATE TABLE ev_old (PRIMARY KEY (id)) INHERITS (ev)");
AshTest::setup_pipeline($src, $dst, sink => 'i', publication => 'pub_i', maps => [ ['ev'] ],
	pipeline_extra => "max_command_retries => 0");
AshTest::wait_slot_consistent($src, $dst, 'i');
q_src("INSERT INTO ev VALUES (1, 'one'), (2, 'two')");
AshTest::wait_caught_up($src, $dst, 'i', name => 'streamed');
q_dst("INSERT INTO ev_old VALUES (1, 'sentinel_inh_7f3a')");

for my $case (['update', "UPDATE ev SET v = 'sentinel_upd_9c2e' WHERE id = 1"],
	['delete', "DELETE FROM ev WHERE id = 1"])
{
	my ($what, $sql) = @$case;
	my $before = q_dst("SELECT string_agg(id || ':' || v, ' ' ORDER BY id, v) FROM ONLY ev");
	my $cp = AshTest::checkpoint_facts($dst, 'i');
	q_src("BEGIN; INSERT INTO ev VALUES (10, 'sentinel_new_$what'); $sql; COMMIT");
	AshTest::wait_status($dst, 'i', 'halted', 'apply_failed', src => $src, name => "$what: halted apply_failed");
	my $row = AshTest::status_row($dst, 'i');
	is(($row->{halt_sqlstate} // '') . '/' . ($row->{halt_condition} // ''), '21000/cardinality_violation',
		"$what: the halt says cardinality_violation");
	is($row->{halt_target} // '', 'public.ev', "$what: and names the target");
	is(q_dst("SELECT string_agg(id || ':' || v, ' ' ORDER BY id, v) FROM ONLY ev"), $before,
		"$what: nothing of the transaction applied");
	is(AshTest::checkpoint_facts($dst, 'i'), $cp, "$what: checkpoint unchanged");
	AshTest::stop_settled($src, $dst, 'i');
	AshTest::start_sink($dst, 'i');
	AshTest::wait_status($dst, 'i', 'halted', 'apply_failed', src => $src, name => "$what: a restart halts again");
	AshTest::stop_settled($src, $dst, 'i');

	# the child out of the tree: the transaction applies once
	q_dst("ALTER TABLE ev_old NO INHERIT ev");
	AshTest::start_sink($dst, 'i');
	AshTest::wait_caught_up($src, $dst, 'i', name => "$what: applied after the child left the tree");
	AshTest::assert_mirror_equal($src, $dst, ['ev'], name => "$what: mirror equals source");
	is(q_dst("SELECT v FROM ev_old WHERE id = 1"), 'sentinel_inh_7f3a', "$what: the child's own row untouched");
	AshTest::stop_settled($src, $dst, 'i');
	q_dst("ALTER TABLE ev_old INHERIT ev");
	q_src("DELETE FROM ev WHERE id = 10");
	AshTest::start_sink($dst, 'i');
	AshTest::wait_caught_up($src, $dst, 'i', name => "$what: streams on");
}

my @leaks = AshTest::grep_logs_for('sentinel_', $dst);
is(scalar(@leaks), 0, 'no value in the destination log') or diag join("\n", @leaks);

done_testing();
