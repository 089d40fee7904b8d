# DROP EXTENSION while pipelines stream (docs/operations.md says to stop
# them first; a skipped step must not take the server down).  The launcher
# drops the replication origins the extension leaves; one still held by an
# exiting worker is tried again at its next round.  That list lived in
# memory SPI_finish freed: the next round crashed the launcher (SIGSEGV in
# lappend), and the postmaster restarted every backend (found by an
# exploratory test, 3 of 3 runs).
#
#   drop     two sinks under load, DROP EXTENSION ... CASCADE: no process
#            crashes, the launcher lives on, every origin of ours is dropped
#   again    the extension and the sinks created again (same slot names):
#            both stream, mirrors equal
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

sub setup
{
	for my $s (qw(a b))
	{
		AshTest::setup_pipeline($src, $dst, sink => $s, publication => "pub_$s", maps => [ ["t$s"] ]);
	}
	AshTest::wait_caught_up($src, $dst, $_, name => "$_ streams") for qw(a b);
}

for my $s (qw(a b))
{
	AshTest::both($src, $dst, "CREATE TABLE t$s (id int PRIMARY KEY, v text, n int)");
	q_src("CREATE PUBLICATION pub_$s FOR TABLE t$s");
}
setup();

my $w = AshTest::start_workload($src, q{
DO $$
BEGIN
  FOR i IN 1..3000 LOOP
    INSERT INTO ta VALUES (i, 'v' || i, 0);
    INSERT INTO tb VALUES (i, 'v' || i, 0);
    UPDATE ta SET n = n + 1 WHERE id = i / 2;
    COMMIT;
  END LOOP;
END $$;
}, timeout => 600);
AshTest::poll($dst, "SELECT count(*) > 300 FROM tb", 't');
my $launcher = q_dst("SELECT pid FROM pg_stat_activity WHERE backend_type = 'ash_replicant launcher'");
q_dst('DROP EXTENSION ash_replicant CASCADE');
ok(AshTest::finish_workload($w), 'drop: the source workload ran to its end');
ok(AshTest::poll($dst, "SELECT count(*) = 0 FROM pg_replication_origin WHERE roname LIKE 'ash\\_replicant\\_%'"),
	'drop: every origin of ours is dropped');
is(q_dst("SELECT pid FROM pg_stat_activity WHERE backend_type = 'ash_replicant launcher'"), $launcher,
	'drop: the launcher lives on');
my @crashes = grep { /terminated by signal|was terminated by exception|PANIC/ } split /\n/, slurp_file($dst->logfile);
is(scalar(@crashes), 0, 'drop: no process crashed') or diag join("\n", @crashes);

# the extension and its sinks again, under the same slot names
q_dst('CREATE EXTENSION ash_replicant');
for my $s (qw(a b))
{
	q_dst("DROP TABLE ash_marker_$s");
	q_src("ALTER PUBLICATION pub_$s DROP TABLE ash_marker_$s; DROP TABLE ash_marker_$s");
}
setup();
AshTest::assert_mirror_equal($src, $dst, [qw(ta tb)]);

done_testing();
