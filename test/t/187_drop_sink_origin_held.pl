# ash_replicant_drop_sink while a process still holds one of the sink's
# replication origins: a v1 snapshot's helper copier (or the pipeline
# worker itself) still exiting after ash_replicant_stop, its slot already
# left.  drop_sink failed with PostgreSQL's own "could not drop replication
# origin with ID n, in use by PID p"; it now refuses with the documented
# pipeline_running, changes nothing, and a retry once the process is gone
# drops the sink and its origins.  A helper slow to exit is simulated by
# stopping it (SIGSTOP) while it waits for a lock on its target.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.snapshot_workers = 4\n");

# --- an origin held by a session: as a helper copier still exiting holds it -----------
$src->safe_psql($DB, "CREATE PUBLICATION p_d");
AshTest::setup_pipeline($src, $dst, sink => 'd', publication => 'p_d', start => 0);
$dst->safe_psql($DB, "SELECT pg_replication_origin_create('ash_replicant_d');"
	  . " SELECT pg_replication_origin_create('ash_replicant_d_copier1')");
my $holder = $dst->background_psql($DB, on_error_stop => 1);
$holder->query_safe("SELECT pg_replication_origin_session_setup('ash_replicant_d_copier1')");
my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_drop_sink('d')");
isnt($rc, 0, 'drop_sink refused while a process holds one of its origins');
like($err, qr/ERROR:  ash_replicant: sink rejected: pipeline_running \(sink "d": /,
	'... with pipeline_running in the documented format');
unlike($err, qr/replication origin with ID|in use by PID/, '... not the raw replication-origin error');
is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.sinks WHERE sink_name = 'd'"), '1',
	'the sink is still there');
is($dst->safe_psql($DB, "SELECT string_agg(roname, ',' ORDER BY roname) FROM pg_replication_origin"
	  . " WHERE roname LIKE 'ash_replicant_d%'"), 'ash_replicant_d,ash_replicant_d_copier1',
	'its origins are all still there (the one not held too)');
$holder->query_safe("SELECT pg_replication_origin_session_reset()");
$holder->quit;
($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_drop_sink('d')");
is($rc, 0, 'released, the retry drops the sink') or diag $err;
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'ash_replicant_d%'"),
	'0', '... and its origins');

# --- a v1 helper copier still alive after its pipeline worker left ----------------------
for my $t (qw(c1 c2 c3 c4))
{
	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, v text)");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 100000) g");
}
$src->safe_psql($DB, "CREATE PUBLICATION p_c FOR TABLE c1, c2, c3, c4");
AshTest::setup_pipeline($src, $dst, sink => 'c', publication => 'p_c', maps => [ ['c1'], ['c2'], ['c3'], ['c4'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'", start => 0);
# the targets locked at the destination against writes: each copier waits
# for its table
my $locker = $dst->background_psql($DB, on_error_stop => 1);
$locker->query_safe("BEGIN; LOCK TABLE c1, c2, c3, c4 IN SHARE MODE");
AshTest::start_sink($dst, 'c');
my $helpers_waiting = "FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
  . " WHERE NOT l.granted AND a.backend_type = 'ash_replicant snapshot'";
ok(AshTest::poll($dst, "SELECT count(*) > 0 $helpers_waiting", 't'), 'a helper copier waits for its target');
# a helper slow to exit, frozen until it is let go
our $frozen = $dst->safe_psql($DB, "SELECT min(a.pid) $helpers_waiting");
END { kill 'CONT', $frozen if $frozen; }
kill 'STOP', $frozen;
AshTest::stop_sink($dst, 'c');
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ash_replicant pipeline'", '0'),
	'the pipeline worker is gone');
($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_drop_sink('c')");
isnt($rc, 0, 'drop_sink refused while a helper copier of the sink is alive');
like($err, qr/ERROR:  ash_replicant: sink rejected: pipeline_running \(sink "c": /,
	'... with pipeline_running in the documented format');
unlike($err, qr/replication origin with ID|in use by PID/, '... not the raw replication-origin error');
is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.sinks WHERE sink_name = 'c'"), '1',
	'the sink is still there');
ok($dst->safe_psql($DB, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'ash_replicant\\_c\\_copier%'") > 0,
	"the helper's origin is still there");
kill 'CONT', $frozen;
my $helper = $frozen;
$frozen = undef;
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_stat_activity WHERE pid = $helper", '0'), 'let go, the helper exits');
($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_drop_sink('c')");
is($rc, 0, 'the retry drops the sink') or diag $err;
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'ash_replicant_c%'"),
	'0', '... and its origins');
$locker->query_safe('COMMIT');
$locker->quit;

# --- stop a v1 copy with helpers and drop at once, until it succeeds ---------------------
# slowed at the destination: a fast copy (0.4 s for the four tables) ended
# before it was seen copying
$dst->safe_psql($DB, q{CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_catalog.pg_sleep(0.0002); RETURN NULL; END $$;});
$dst->safe_psql($DB, "CREATE TRIGGER slow_$_ AFTER INSERT ON $_ FOR EACH ROW EXECUTE FUNCTION slow_row()")
  for qw(c1 c2 c3 c4);
$src->safe_psql($DB, "CREATE PUBLICATION p_e FOR TABLE c1, c2, c3, c4");
AshTest::setup_pipeline($src, $dst, sink => 'e', publication => 'p_e', maps => [ ['c1'], ['c2'], ['c3'], ['c4'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::poll($dst, "SELECT count(*) >= 3 FROM ash_replicant.stat_snapshot_tables"
	  . " WHERE sink_name = 'e' AND state = 'copying' AND rows_copied > 0", 't'),
	'e copies with its helpers');
# in one session (no connection between attempts): each refusal as a NOTICE
($rc, $out, $err) = $dst->psql($DB, q{
SELECT ash_replicant_stop('e');
DO $$
DECLARE
	deadline timestamptz := clock_timestamp() + interval '60 s';
	refused int := 0;
BEGIN
	LOOP
		BEGIN
			PERFORM ash_replicant_drop_sink('e');
			RAISE NOTICE 'dropped after % refusals', refused;
			RETURN;
		EXCEPTION WHEN OTHERS THEN
			refused := refused + 1;
			RAISE NOTICE 'refused: % %', SQLSTATE, SQLERRM;
		END;
		EXIT WHEN clock_timestamp() > deadline;
		PERFORM pg_sleep(0.01);
	END LOOP;
END $$;});
my @refusals = ($err =~ /NOTICE:  refused: (.*)/g);
my %seen;
note scalar(@refusals) . " refusals:\n" . join("\n", grep { !$seen{$_}++ } @refusals);
like($err, qr/NOTICE:  dropped after \d+ refusals/, 'e dropped once its processes are gone');
is(scalar(grep { !/^55006 ash_replicant: sink rejected: pipeline_running \(sink "e": / } @refusals), 0,
	'every refusal was pipeline_running (55006) in the documented format');
ok(AshTest::poll($dst, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'ash_replicant_e%'", '0'),
	"e's origins gone");

done_testing();
