# A role without superuser (a member of ash_replicant_admin) must not lend
# the destination server's own identity to a connection it configures
# (docs/reasons.md#source_password_required): the server's OS user may get
# into a source without a password -- trust or peer, its ~/.pgpass, a
# client certificate -- and an admin pointing a pipeline there mirrored a
# table it could not read anywhere (found by an exploratory test; here the
# source trusts every connection from 127.0.0.1, as such a setup would).
#   - configured by the admin without a password: refused
#     source_password_required, nothing stored;
#   - with a password the source does not ask for (trust): the worker halts
#     source_password_required at its connection, nothing copied; doctor
#     names the reason too;
#   - with a password the source checks (SCRAM): copied and streamed;
#   - a superuser's connection without a password still works (every other
#     test);
#   - no password in any log.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $DB = $AshTest::DB;
my $PASSWORD = 'Pw_sentinel_5e81c2';
my $JUNK = 'Junk_sentinel_77a0d3';
my $CARD = 'SENTINEL_CARD_4111_93b2';

sub q_dst { return $dst->safe_psql($DB, $_[0]); }

$src->safe_psql($DB, qq{
CREATE TABLE secret (id integer PRIMARY KEY, card text);
INSERT INTO secret VALUES (1, '$CARD');
CREATE PUBLICATION pub FOR TABLE secret;
SET password_encryption = 'scram-sha-256';
CREATE ROLE pwuser LOGIN REPLICATION PASSWORD '$PASSWORD';
GRANT SELECT ON secret TO pwuser;
});
# pwuser's connections check its password; every other one is trusted
my $hba = $src->data_dir . '/pg_hba.conf';
my $rules = slurp_file($hba);
open my $fh, '>', $hba or die "cannot write $hba: $!";
print $fh "host all pwuser 127.0.0.1/32 scram-sha-256\nhost replication pwuser 127.0.0.1/32 scram-sha-256\n$rules";
close $fh;
$src->reload;

q_dst(q{
CREATE ROLE adm LOGIN IN ROLE ash_replicant_admin;
CREATE TABLE loot (id integer PRIMARY KEY, card text);
ALTER TABLE loot OWNER TO adm;
});
my ($sysid, $dbname) = AshTest::source_identity($src);
my $base = "host=127.0.0.1 port=" . $src->port . " dbname=$DB";

sub as_adm
{
	my ($sql) = @_;
	return $dst->psql($DB, "SET ROLE adm; $sql");
}

sub configure
{
	my ($conninfo) = @_;
	return as_adm("SELECT ash_replicant_configure_pipeline('x', " . AshTest::lit($conninfo)
		  . ", publication => 'pub', source_system_identifier => " . AshTest::lit($sysid)
		  . ", source_database => " . AshTest::lit($dbname) . ", go_forward_only => false, snapshot => 'v1')");
}

my ($rc, $out, $err) = as_adm("SELECT ash_replicant_create_sink('x');"
	  . " SELECT ash_replicant_map_table('x', 'loot'::regclass, source_schema => 'public', source_table => 'secret')");
is($rc, 0, 'the admin creates a sink and maps a table it owns') or diag $err;

# without a password: the server's identity (trust) would be used
($rc, $out, $err) = configure("$base user=postgres");
isnt($rc, 0, 'the admin\'s connection without a password is refused');
like($err, qr/source_password_required/, 'refused source_password_required');
is(q_dst("SELECT count(*) FROM ash_replicant.pipelines WHERE sink_name = 'x'"), '0', 'nothing stored');

# a password the source does not ask for
($rc, $out, $err) = configure("$base user=postgres password=$JUNK");
is($rc, 0, 'a connection carrying a password is accepted at configuration') or diag $err;
($rc, $out, $err) = as_adm("SELECT ash_replicant_start('x')");
is($rc, 0, 'started') or diag $err;
AshTest::wait_status($dst, 'x', 'misconfigured', 'source_password_required',
	name => 'the source let it in without asking for the password: halted source_password_required');
is(q_dst("SELECT count(*) FROM loot"), '0', 'nothing was copied');
is(q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('x')"
		  . " WHERE check_name = 'source_reachable'"),
	'fail/source_password_required', 'doctor names the reason');

# a password the source checks
($rc, $out, $err) = as_adm("SELECT ash_replicant_stop('x')");
($rc, $out, $err) = configure("$base user=pwuser password=$PASSWORD");
is($rc, 0, 'reconfigured with the role\'s password') or diag $err;
($rc, $out, $err) = as_adm("SELECT ash_replicant_start('x')");
is($rc, 0, 'started') or diag $err;
ok(AshTest::poll($dst, "SELECT count(*) FROM loot", '1'), 'copied with a password the source checked');
$src->safe_psql($DB, "INSERT INTO secret VALUES (2, 'streamed')");
ok(AshTest::poll($dst, "SELECT count(*) FROM loot", '2'), 'and streamed');
AshTest::wait_status($dst, 'x', 'healthy');
is(q_dst("SELECT string_agg(id || ':' || card, ',' ORDER BY id) FROM loot"), "1:$CARD,2:streamed",
	'mirror = source');
AshTest::stop_sink($dst, 'x');

my @hits = AshTest::grep_logs_for($PASSWORD, $src, $dst);
push @hits, AshTest::grep_logs_for($JUNK, $src, $dst);
is(scalar(@hits), 0, 'no password in any server log')
  or diag join("\n", @hits[0 .. ($#hits < 4 ? $#hits : 4)]);

done_testing();
