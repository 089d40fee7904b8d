# PostgreSQL's own log lines about a worker's statements (docs/reasons.md,
# no values out): a lock wait it logs (log_lock_waits) and a target
# trigger's RAISE WARNING carry, in their CONTEXT, the text of the SPI
# statement running -- which, under context tenancy, names the tenant's
# schema.  Now the statement's text is withheld from such lines in our
# workers, the rest of their context kept (before: "SQL statement "UPDATE
# <tenant>.docs AS t SET ..."" in the destination log).  The planted tenant
# and plaintext appear in no log line; the rows are mirrored.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nlog_lock_waits = on\ndeadlock_timeout = '200ms'\n");
AshTenancy::write_keyring($dst, 'keyring', 'column_encryption 1 ' . AshTenancy::key_hex(5));
my $T = 'tenantsentinel7c1';
my $P = 'PLAINSENTINEL7C1';

$src->safe_psql($DB, q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text, pan text);
ALTER TABLE docs REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_l FOR TABLE docs;
});
$dst->safe_psql($DB, qq{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text, pan bytea);
CREATE SCHEMA $T;
CREATE TABLE $T.docs (LIKE public.docs INCLUDING ALL);
});
AshTest::setup_pipeline($src, $dst, sink => 'l', publication => 'pub_l',
	maps => [ [ 'docs', tenant_column => 'tenant', tenant_strategy => 'context',
			sensitive => ['pan'], encrypted => ['pan'] ] ]);
AshTest::wait_slot_consistent($src, $dst, 'l');
$src->safe_psql($DB, "INSERT INTO docs VALUES (1, '$T', 't', '$P-1')");
AshTest::wait_caught_up($src, $dst, 'l', name => 'streamed');

# a reader holds the row; the mirror's update waits for it, logged
my $off = -s $dst->logfile;
my $h = $dst->background_psql($DB);
$h->query_safe("BEGIN; SELECT * FROM $T.docs WHERE id = 1 FOR UPDATE;");
$src->safe_psql($DB, "UPDATE docs SET title = 'u', pan = '$P-2' WHERE id = 1");
ok($dst->wait_for_log(qr/still waiting for/, $off), 'the lock wait is logged');
$h->query_safe("COMMIT;");
$h->quit;
AshTest::wait_caught_up($src, $dst, 'l', name => 'the update applied after the wait');
like(slurp_file($dst->logfile, $off), qr/SQL statement of ash_replicant \(its text withheld\)/,
	'the lock wait\'s context says a statement of ours, its text withheld');

# a target trigger's warning
$off = -s $dst->logfile;
$dst->safe_psql($DB, qq{
CREATE FUNCTION warn_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RAISE WARNING 'audit trigger fired'; RETURN NULL; END \$\$;
CREATE TRIGGER warn AFTER INSERT OR UPDATE ON $T.docs FOR EACH ROW EXECUTE FUNCTION warn_fn();});
$src->safe_psql($DB, "INSERT INTO docs VALUES (2, '$T', 't2', '$P-3')");
AshTest::wait_caught_up($src, $dst, 'l', name => 'the insert applied under the trigger');
my $tail = slurp_file($dst->logfile, $off);
like($tail, qr/WARNING:  audit trigger fired/, 'the trigger\'s warning is logged');
like($tail, qr/PL\/pgSQL function warn_fn\(\) line \d+ at RAISE/, 'with its context');

is($dst->safe_psql($DB, "SELECT count(*) FROM $T.docs"), '2', 'the rows are mirrored');
my @hits = (AshTest::grep_logs_for($T, $dst), AshTest::grep_logs_for($P, $dst));
is(scalar(@hits), 0, 'no tenant schema or plaintext in the destination log')
  or diag join("\n", @hits[0 .. ($#hits < 8 ? $#hits : 8)]);

done_testing();
