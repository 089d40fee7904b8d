# ash_replicant_status('NAME') of a name no sink has.  It returned no row, so
# a typo (or a sink dropped meanwhile) read as "nothing to report"; it now
# raises 42704 'sink "NAME" does not exist', as every other function taking
# a sink name does.  NULL (the default) still lists every sink, and a name
# matches exactly (no case folding).  The other monitor functions taking a
# name are checked alongside: doctor, preflight, verify, wait_for_slot and
# reset_table_stats already raise; the stat views take no name.  The
# command-line tool still exits 3 for an unknown sink, now with the
# server's words.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
AshTest::both($src, $dst, "CREATE TABLE t (id int PRIMARY KEY, v text)");
$src->safe_psql($DB, "CREATE PUBLICATION p_s FOR TABLE t");
AshTest::setup_pipeline($src, $dst, sink => 's', publication => 'p_s', maps => [ ['t'] ], start => 0);
$dst->safe_psql($DB, "SELECT ash_replicant_create_sink('Other', slot_name => 'other')");

sub raises_unknown
{
	my ($sql, $name, $label) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "\\set VERBOSITY verbose\n$sql");
	isnt($rc, 0, "$label raises");
	like($err, qr/ERROR:  42704: ash_replicant: sink "\Q$name\E" does not exist/,
		"... 42704, the sink's name in the documented format") or diag $err;
	is($out, '', '... and returns no row');
}

# status
raises_unknown("SELECT * FROM ash_replicant_status('nosuch')", 'nosuch', 'status of an unknown sink');
raises_unknown("SELECT * FROM ash_replicant_status('S')", 'S', 'status of a name differing only in case');
raises_unknown("SELECT * FROM ash_replicant_status('')", '', 'status of the empty name');
is($dst->safe_psql($DB, "SELECT sink_name || ':' || state FROM ash_replicant_status('s')"), 's:not_started',
	'status of a sink: its row');
is($dst->safe_psql($DB, "SELECT sink_name FROM ash_replicant_status('Other')"), 'Other',
	'... the exact name of a mixed-case one');
is($dst->safe_psql($DB, "SELECT string_agg(sink_name, ',' ORDER BY sink_name) FROM ash_replicant_status()"),
	'Other,s', 'status(): every sink');
is($dst->safe_psql($DB, "SELECT string_agg(sink_name, ',' ORDER BY sink_name) FROM ash_replicant_status(NULL)"),
	'Other,s', 'status(NULL): every sink');
$dst->safe_psql($DB, "SELECT ash_replicant_drop_sink('Other')");
raises_unknown("SELECT * FROM ash_replicant_status('Other')", 'Other', 'status of a dropped sink');

# the other functions taking a sink name
raises_unknown("SELECT * FROM ash_replicant_doctor('nosuch')", 'nosuch', 'doctor of an unknown sink');
raises_unknown("SELECT * FROM ash_replicant_preflight('nosuch')", 'nosuch', 'preflight of an unknown sink');
raises_unknown("SELECT ash_replicant_wait_for_slot('nosuch', '1s')", 'nosuch', 'wait_for_slot of an unknown sink');
raises_unknown("SELECT ash_replicant_reset_table_stats('nosuch')", 'nosuch', 'reset_table_stats of an unknown sink');
my ($rc, $out, $err) = $dst->psql($DB, "SELECT * FROM ash_replicant_verify('nosuch', '1s')");
isnt($rc, 0, 'verify of an unknown sink raises');
like($err, qr/verify rejected: config_invalid \(sink "nosuch" does not exist\)/, '... saying so') or diag $err;

# the command-line tool
my @conn = ('-h', $dst->host, '-p', $dst->port, '-d', $DB);
my ($stdout, $stderr) = ('', '');
IPC::Run::run([ 'ash_replicant_ctl', 'status', '--sink', 'nosuch', @conn ], '<', \undef, '>', \$stdout, '2>', \$stderr);
is($? >> 8, 3, 'ctl status --sink of an unknown sink exits 3');
like($stderr, qr/does not exist|sink not found/, '... and says the sink is not there') or diag $stderr;
($stdout, $stderr) = ('', '');
IPC::Run::run([ 'ash_replicant_ctl', 'status', '--sink', 's', '--format', 'json', @conn ], '<', \undef, '>', \$stdout, '2>', \$stderr);
is($? >> 8, 2, 'ctl status --sink s: not_started exits 2') or diag $stderr;
like($stdout, qr/"sink":"s","state":"not_started"/, '... its row') or diag $stdout;
($stdout, $stderr) = ('', '');
IPC::Run::run([ 'ash_replicant_ctl', 'status', @conn ], '<', \undef, '>', \$stdout, '2>', \$stderr);
like($stdout, qr/^s\s+not_started/m, 'ctl status without --sink lists the sinks') or diag "$stdout$stderr";
done_testing();
