# Two source refusals the pipeline and doctor named differently, or wrongly
# (found by QA):
#
#  slots     a source with wal_level = logical but max_replication_slots = 0
#            refuses CREATE_REPLICATION_SLOT with 55000, which the worker
#            took for wal_level (source_not_logical) while doctor's
#            source_wal_level passed.  Now the worker reads the source's
#            settings on that refusal and halts misconfigured
#            source_slots_disabled (docs/reasons.md#source_slots_disabled);
#            preflight and doctor fail source_wal_level with the same code.
#  hba       pg_hba.conf rejecting the pipeline's role (28000) while it runs:
#            status said privilege_replication_missing, doctor's
#            source_reachable source_unreachable.  Both now name
#            privilege_replication_missing; fixed and restarted, the mirror
#            catches up.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub verdict
{
	my ($fn, $sink, $check) = @_;
	return q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_$fn('$sink') WHERE check_name = '$check'");
}

# slots
my $ns = PostgreSQL::Test::Cluster->new('noslots');
$ns->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
$ns->append_conf('postgresql.conf',
	"listen_addresses = '127.0.0.1'\nwal_level = logical\nmax_replication_slots = 0\nmax_wal_senders = 4\n");
$ns->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n");
$ns->start;
$ns->safe_psql($DB, 'CREATE TABLE u (id bigint PRIMARY KEY, v text); CREATE PUBLICATION pu FOR TABLE u');
q_dst('CREATE TABLE u (id bigint PRIMARY KEY, v text)');
AshTest::setup_pipeline($ns, $dst, sink => 'mz', publication => 'pu', maps => [ ['u'] ], marker => 0);
AshTest::wait_status($dst, 'mz', 'misconfigured', 'source_slots_disabled', src => $ns,
	name => 'slots: misconfigured/source_slots_disabled');
like(AshTest::halt_line($dst, 'mz', 'source_slots_disabled'), qr/max_replication_slots is 0/, 'slots: the halt says why');
is(verdict('preflight', 'mz', 'source_wal_level'), 'fail/source_slots_disabled', 'slots: preflight says the same');
is(verdict('doctor', 'mz', 'source_wal_level'), 'fail/source_slots_disabled', 'slots: doctor says the same');
$ns->stop;

# hba
q_src('CREATE ROLE rp LOGIN REPLICATION; ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO rp');
my $hba = $src->data_dir . '/pg_hba.conf';
my $hba_orig = slurp_file($hba);
sub set_hba
{
	my ($line) = @_;
	open my $fh, '>', $hba or die "$hba: $!";
	print $fh $line . $hba_orig;
	close $fh;
	$src->reload;
	return;
}
set_hba("host all rp 127.0.0.1/32 trust\n");
AshTest::both($src, $dst, 'CREATE TABLE t (id bigint PRIMARY KEY, v text)');
q_src('CREATE PUBLICATION pub FOR TABLE t');
AshTest::setup_pipeline($src, $dst, sink => 'hb', publication => 'pub', maps => [ ['t'] ],
	connection => "host=127.0.0.1 port=" . $src->port . " dbname=$DB user=rp");
AshTest::wait_status($dst, 'hb', 'healthy', undef, src => $src, name => 'hba: healthy');
AshTest::wait_slot_consistent($src, $dst, 'hb');
q_src("INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 10) g");
AshTest::wait_caught_up($src, $dst, 'hb');

set_hba("host all rp 127.0.0.1/32 reject\n");
q_src("INSERT INTO t SELECT g, 'r' || g FROM generate_series(11, 20) g");
q_src("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'rp'");
AshTest::wait_status($dst, 'hb', 'misconfigured', 'privilege_replication_missing', src => $src,
	name => 'hba: misconfigured/privilege_replication_missing');
like(AshTest::halt_line($dst, 'hb', 'privilege_replication_missing'), qr/pg_hba\.conf/, 'hba: the halt says why');
is(verdict('doctor', 'hb', 'source_reachable'), 'fail/privilege_replication_missing',
	'hba: doctor names the same cause');
is(verdict('preflight', 'hb', 'source_reachable'), 'fail/privilege_replication_missing',
	'hba: preflight names the same cause');

set_hba("host all rp 127.0.0.1/32 trust\n");
AshTest::start_sink($dst, 'hb');
AshTest::wait_caught_up($src, $dst, 'hb', name => 'hba: caught up after the fix');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'hba: nothing lost');

done_testing();
