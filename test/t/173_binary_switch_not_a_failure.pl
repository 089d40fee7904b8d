# binary_transfer => true and a value of a type that is not built in (an
# enum): the session starts over in text (docs/operations.md) -- a mode
# switch, not an apply failure.  Before: the switch's error counted as an
# attempt of the transaction that showed it; with max_command_retries => 0
# the pipeline halted apply_failed (0A000) at every start and the row was
# never mirrored.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
AshTest::both($src, $dst, q{
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE en (id integer PRIMARY KEY, m mood);
});
$src->safe_psql($DB, 'CREATE PUBLICATION pub_en FOR TABLE en');
AshTest::setup_pipeline($src, $dst, sink => 'en', publication => 'pub_en', maps => [ ['en'] ],
	pipeline_extra => 'binary_transfer => true, max_command_retries => 0');
AshTest::wait_slot_consistent($src, $dst, 'en');
my $off = -s $dst->logfile;
$src->safe_psql($DB, "INSERT INTO en VALUES (1, 'ok')");
AshTest::wait_caught_up($src, $dst, 'en', name => 'the enum row streams on in text');
is(AshTest::status_row($dst, 'en')->{state}, 'healthy', 'healthy');
is($dst->safe_psql($DB, "SELECT m FROM en WHERE id = 1"), 'ok', 'the row is mirrored');
my $log = slurp_file($dst->logfile, $off);
like($log, qr/event=binary_transfer\.off sink=en/, 'the switch is logged');
like($log, qr/event=pipeline\.session_end sink=en cause=binary_transfer\.off/, 'as the end of a session');
unlike($log, qr/event=apply\.error sink=en/, 'not as an apply error');
done_testing();
