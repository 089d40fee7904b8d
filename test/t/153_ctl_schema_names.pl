# The command-line tool (tools/ash_replicant_ctl, docs/operations.md "The
# command-line tool") where it failed before (found by an exploratory test):
#  schema    the extension created in a schema of its own (CREATE EXTENSION
#            ... SCHEMA ops): status, doctor, verify exit 0 (before: 3,
#            "function ash_replicant_status(text) does not exist")
#  names     sink names with a tab or a newline: status reads not_started,
#            exit 2 (before: the name split psql's row, exit 1 with a bogus
#            reason); printed without the control character
#  1.0.0     catalogs of 1.0.0 under this library: the tool says what
#            ash_replicant_status() says (before: exit 3, "could not
#            diagnose": stat_pipelines has no snapshot columns there)
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(no_extension => 1);
my $DB = $AshTest::DB;
AshTest::both($src, $dst, 'CREATE TABLE t (id int PRIMARY KEY, v text)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub FOR TABLE t');
my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);

sub ctl
{
	my ($db, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'ash_replicant_ctl', @args, '-h', $dst->host, '-p', $dst->port, '-d', $db ],
		'<', \undef, '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

# schema
$dst->safe_psql($DB, qq{
CREATE SCHEMA ops;
CREATE EXTENSION ash_replicant SCHEMA ops;
SELECT ops.ash_replicant_create_sink('s1');
SELECT ops.ash_replicant_map_table('s1', 't'::regclass);
SELECT ops.ash_replicant_configure_pipeline('s1', '$conn', publication => 'pub',
  source_system_identifier => '$sysid', source_database => '$sdb', census => '{"interval_ms": 500}');
SELECT ops.ash_replicant_start('s1');
});
ok(AshTest::poll($dst, "SELECT state = 'healthy' FROM ops.ash_replicant_status('s1')"), 'schema: healthy');
$dst->safe_psql($DB, "SELECT ops.ash_replicant_wait_for_slot('s1')");
$src->safe_psql($DB, "INSERT INTO t VALUES (1, 'a')");
ok(AshTest::poll($dst, 'SELECT count(*) = 1 FROM t'), 'schema: streams');
for my $cmd ('status', 'doctor', 'verify')
{
	my ($rc, $out, $err) = ctl($DB, $cmd, '--sink', 's1');
	is($rc, 0, "schema: ctl $cmd exits 0") or diag "$out$err";
}
my ($rc, $out, $err) = ctl($DB, 'status', '--sink', 's1', '--format', 'json', '--tables');
my $j = eval { decode_json($out) };
is($j && $j->{sinks}[0]{state}, 'healthy', 'schema: ctl status --tables json');

# names
$dst->safe_psql($DB, "SELECT ops.ash_replicant_create_sink(E'tab\\tsink', slot_name => 'tab_slot');"
	  . " SELECT ops.ash_replicant_create_sink(E'nl\\nsink', slot_name => 'nl_slot')");
for my $name ("tab\tsink", "nl\nsink")
{
	($rc, $out, $err) = ctl($DB, 'status', '--sink', $name);
	is($rc, 2, 'names: a not_started sink with a control character in its name exits 2') or diag "$out$err";
	like($out, qr/^"?tabsink|^"?nlsink/, 'names: printed without it');
	like($out, qr/not_started/, 'names: state not_started');
}

# 1.0.0 catalogs
$dst->safe_psql($DB, 'CREATE DATABASE old');
$dst->safe_psql('old', qq{
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE EXTENSION ash_replicant VERSION '1.0.0';
SELECT ash_replicant_create_sink('s0');
SELECT ash_replicant_map_table('s0', 't'::regclass);
SELECT ash_replicant_configure_pipeline('s0', '$conn', publication => 'pub',
  source_system_identifier => '$sysid', source_database => '$sdb');
SELECT ash_replicant_start('s0');
});
# (the launcher supervises the database "postgres" only: another one's
# pipeline waits launcher_database_mismatch, which is what status says)
my $state = $dst->safe_psql('old', "SELECT state || '/' || coalesce(reason, '') FROM ash_replicant_status('s0')");
($rc, $out, $err) = ctl('old', 'status', '--sink', 's0');
isnt($rc, 3, '1.0.0: ctl status answers') or diag "$out$err";
my ($st, $re) = split m{/}, $state;
like($out, qr/^s0\s+\Q$st\E\s+\Q$re\E/, "1.0.0: it says what status says ($state)");
done_testing();
