# Attribute tenancy, a row a BEFORE trigger of the target kept out: the
# write was suppressed, no other tenant holds the identity
# (docs/reasons.md#destination_write_suppressed, #tenant_conflict).  The
# upsert's count cannot tell the two apart; the worker counts the rows of
# the run's identities under any tenant and under the run's own.  Before, a
# gathered upsert over a row of the same tenant (a row the mirror held
# already, as after a redelivery) whose update the trigger kept out halted
# tenant_conflict.
#
#  ins     an insert the trigger keeps out: destination_write_suppressed
#  upd     an update of the same tenant's row kept out: the same
#  held    an insert meeting the same tenant's row (there before), the
#          trigger keeping its update out: the same
#  ten     another tenant's row under an identity (the trigger there):
#          tenant_conflict
# Each halt commits nothing of its transaction (a valid row written before
# it in the same transaction is absent, the checkpoint unchanged).
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

q_dst(q{
CREATE FUNCTION keep_out() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN
    IF NEW.note = 'keep out' OR (TG_OP = 'UPDATE' AND OLD.note = 'frozen') THEN RETURN NULL; END IF;
    RETURN NEW;
  END$$;
});

# case($name, $setup, $failing, $reason): a table of its own, its own sink;
# $setup is streamed and applied, $failing's transaction (a valid row 100
# first) halts $reason
sub case
{
	my ($name, $setup, $failing, $reason) = @_;
	my $t = "t_$name";
	q_src("CREATE TABLE $t (tenant text NOT NULL, id int NOT NULL, note text, PRIMARY KEY (tenant, id));"
		  . " ALTER TABLE $t REPLICA IDENTITY FULL; CREATE PUBLICATION pub_$t FOR TABLE $t");
	q_dst("CREATE TABLE $t (id int PRIMARY KEY, tenant text NOT NULL, note text);"
		  . " CREATE TRIGGER keep_out BEFORE INSERT OR UPDATE ON $t FOR EACH ROW EXECUTE FUNCTION keep_out()");
	AshTest::setup_pipeline($src, $dst, sink => $t, publication => "pub_$t",
		maps => [ [ $t, tenant_column => 'tenant', tenant_strategy => 'attribute' ] ]);
	AshTest::wait_slot_consistent($src, $dst, $t);
	q_dst("INSERT INTO $t VALUES (1, 'a', 'frozen')") if $name eq 'held';
	q_src($setup);
	AshTest::wait_caught_up($src, $dst, $t, name => "$name: set up");
	my $cp = AshTest::checkpoint_facts($dst, $t);
	q_src("BEGIN; INSERT INTO $t VALUES ('a', 100, 'valid'); $failing; COMMIT");
	AshTest::wait_status($dst, $t, 'halted', $reason, src => $src, name => "$name: halted $reason");
	is(q_dst("SELECT count(*) FROM $t WHERE id = 100"), '0', "$name: nothing of the transaction committed");
	is(AshTest::checkpoint_facts($dst, $t), $cp, "$name: checkpoint unchanged");
	AshTest::stop_sink($dst, $t);
}

case('ins', "INSERT INTO t_ins VALUES ('a', 1, 'ok')",
	"INSERT INTO t_ins VALUES ('a', 2, 'keep out'), ('a', 3, 'ok')", 'destination_write_suppressed');
case('upd', "INSERT INTO t_upd VALUES ('a', 1, 'ok'), ('a', 2, 'ok')",
	"UPDATE t_upd SET note = CASE id WHEN 1 THEN 'keep out' ELSE 'fine' END", 'destination_write_suppressed');
case('held', "SELECT 1",
	"INSERT INTO t_held VALUES ('a', 1, 'new value'), ('a', 3, 'new')", 'destination_write_suppressed');
case('ten', "INSERT INTO t_ten VALUES ('a', 1, 'ok'), ('a', 2, 'ok')",
	"INSERT INTO t_ten VALUES ('a', 3, 'new'), ('b', 1, 'other tenant')", 'tenant_conflict');

done_testing();
