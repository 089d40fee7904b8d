# Recovery functions against a real pipeline (docs/operations.md "Recovery", README.md#how-apply-works).
#
# Each case halts a streaming pipeline with a binding conflict, shows it in
# the doctor, refuses recovery while the pipeline is enabled, recovers with
# the functions an operator has, and ends healthy with an exact mirror
# (content hash equal at both ends, rows written while halted included):
#
#  A. source_timeline_changed (the recorded timeline edited while stopped):
#     acknowledge_checkpoint_timeline with the source's timeline.
#  B. checkpoint_identity_conflict (our row rewritten to another identity):
#     reset refuses nothing of ours (no row), adopt refuses the conflict;
#     the operator points the pipeline at the foreign identity, resets that
#     row, points it back, and starts (the slot still holds every change).
#  C. adopt into a missing row: reset, adopt the saved watermark (timeline
#     read from the source), start.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'postgres';

my $src = PostgreSQL::Test::Cluster->new('rec_src');
$src->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
$src->append_conf('postgresql.conf', qq{
listen_addresses = '127.0.0.1'
wal_level = logical
max_wal_senders = 5
max_replication_slots = 5
});
$src->append_conf('pg_hba.conf', qq{
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
});
$src->start;

my $dst = PostgreSQL::Test::Cluster->new('rec_dst');
$dst->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
$dst->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ash_replicant'
ash_replicant.database = 'postgres'
ash_replicant.naptime = '500ms'
ash_replicant.reconnect_min_delay = '200ms'
ash_replicant.reconnect_max_delay = '2s'
max_worker_processes = 12
});
$dst->start;
$dst->safe_psql($db, 'CREATE EXTENSION ash_replicant');

my ($sysid, $srcdb) = split /\|/, $src->safe_psql($db,
	'SELECT system_identifier, current_database() FROM pg_control_system()');
my $tli = $src->safe_psql($db, 'SELECT timeline_id FROM pg_control_checkpoint()');
my $foreign = ($sysid =~ /^7/ ? '6' : '7') . substr($sysid, 1);
my $conn = "host=127.0.0.1 port=" . $src->port . " dbname=$db user="
  . $src->safe_psql($db, 'SELECT current_user');

my $ddl = 'CREATE TABLE t (id int PRIMARY KEY, v text)';
$src->safe_psql($db, "$ddl; CREATE PUBLICATION rec_pub FOR TABLE t");
$dst->safe_psql($db, $ddl);

sub configure
{
	my ($id, $database) = @_;
	$dst->safe_psql($db, "SELECT ash_replicant_configure_pipeline('rv', '$conn',"
		  . " publication => 'rec_pub', source_system_identifier => '$id',"
		  . " source_database => '$database', census => '{\"interval_ms\": 500}')");
}
$dst->safe_psql($db, q{
SELECT ash_replicant_create_sink('rv', slot_name => 'rv_slot');
SELECT ash_replicant_map_table('rv', 't');});
configure($sysid, $srcdb);

my $next_id = 0;
sub write_rows
{
	my ($n) = @_;
	my $from = $next_id + 1;
	$next_id += $n;
	$src->safe_psql($db, "INSERT INTO t SELECT g, 'v' || g FROM generate_series($from, $next_id) g;"
		  . " UPDATE t SET v = v || '+' WHERE id % 7 = 0; DELETE FROM t WHERE id % 11 = 0");
}

my $hash_sql = "SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY id), '')) || ' ' || count(*) FROM t";
sub start_healthy
{
	my ($name) = @_;
	$dst->safe_psql($db, "SELECT ash_replicant_start('rv')");
	ok($dst->poll_query_until($db, "SELECT state = 'healthy' FROM ash_replicant_status('rv')"),
		"$name: healthy")
	  or diag $dst->safe_psql($db, "SELECT * FROM ash_replicant_status('rv')");
}
sub mirror_exact
{
	my ($name) = @_;
	my $want = $src->safe_psql($db, $hash_sql);
	$dst->poll_query_until($db, "SELECT ($hash_sql) = '$want'");
	is($dst->safe_psql($db, $hash_sql), $want, "$name: mirror equals source");
}
sub stop_wait
{
	$dst->safe_psql($db, "SELECT ash_replicant_stop('rv')");
	$dst->poll_query_until($db,
		"SELECT worker_pid IS NULL FROM ash_replicant.stat_pipelines WHERE sink_name = 'rv'")
	  or die 'worker did not exit';
}
sub wait_state
{
	my ($state, $reason, $name) = @_;
	$dst->poll_query_until($db,
		"SELECT state || '/' || coalesce(reason, '') FROM ash_replicant_status('rv')",
		"$state/$reason");
	is($dst->safe_psql($db, "SELECT state || '/' || coalesce(reason, '') FROM ash_replicant_status('rv')"),
		"$state/$reason", $name);
}
sub doctor
{
	my %c;
	for (split /\n/, $dst->safe_psql($db,
		"SELECT check_name, verdict, coalesce(reason, '') FROM ash_replicant_doctor('rv')"))
	{
		my ($k, $v, $r) = split /\|/, $_, -1;
		$c{$k} = "$v/$r";
	}
	return \%c;
}
sub call
{
	my ($sql) = @_;
	my ($rc, $out, $err) = $dst->psql($db, $sql);
	return $rc ? "ERROR: $err" : $out;
}
my $key = "'rv', '$sysid', '$srcdb'";

# a streaming mirror
start_healthy('initial');
ok($src->poll_query_until($db,
	"SELECT confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots WHERE slot_name = 'rv_slot'"),
	'slot at its consistent point');
write_rows(200);
mirror_exact('initial');

########################################################################
# A. timeline changed
########################################################################
stop_wait();
$dst->safe_psql($db,
	"UPDATE ash_replicant.checkpoints SET timeline_id = timeline_id + 6 WHERE slot_name = 'rv_slot'");
write_rows(50);
$dst->safe_psql($db, "SELECT ash_replicant_start('rv')");
wait_state('misconfigured', 'source_timeline_changed', 'A: halts source_timeline_changed');
my $c = doctor();
is($c->{timeline}, 'fail/source_timeline_changed', 'A: doctor timeline fails');
is($c->{checkpoint_state}, 'fail/source_timeline_changed', 'A: doctor shows the tombstone');
like(call("SELECT ash_replicant_acknowledge_checkpoint_timeline($key, $tli)"),
	qr/pipeline_running/, 'A: refused while enabled');
stop_wait();
is(call("SELECT ash_replicant_acknowledge_checkpoint_timeline($key, $tli)"), 't', 'A: acknowledged');
is(call("SELECT ash_replicant_acknowledge_checkpoint_timeline($key, $tli)"), 'f', 'A: idempotent');
$c = doctor();
is("$c->{timeline} $c->{checkpoint_state}", 'pass/ pass/', 'A: doctor clean again');
start_healthy('A');
mirror_exact('A');

########################################################################
# B. identity conflict
########################################################################
stop_wait();
$dst->safe_psql($db,
	"UPDATE ash_replicant.checkpoints SET source_system_id = '$foreign' WHERE slot_name = 'rv_slot'");
write_rows(50);
$dst->safe_psql($db, "SELECT ash_replicant_start('rv')");
wait_state('misconfigured', 'checkpoint_identity_conflict', 'B: halts checkpoint_identity_conflict');
is(doctor()->{checkpoint_state}, 'fail/checkpoint_identity_conflict', 'B: doctor names the conflict');
stop_wait();
like(call("SELECT ash_replicant_adopt_checkpoint($key, '0/1')"),
	qr/checkpoint_identity_conflict/, 'B: adopt refuses the foreign owner');
is(call("SELECT ash_replicant_reset_checkpoint($key)"), 'f', 'B: reset has no row of ours to delete');
is($dst->safe_psql($db, "SELECT count(*) FROM ash_replicant.checkpoints WHERE source_system_id = '$foreign'"),
	'1', 'B: the foreign row is untouched');
# the operator states the foreign identity to remove its row
configure($foreign, $srcdb);
is(call("SELECT ash_replicant_reset_checkpoint('rv', '$foreign', '$srcdb')"), 't',
	'B: foreign row reset under its own identity');
configure($sysid, $srcdb);
start_healthy('B');
mirror_exact('B');

########################################################################
# C. adopt a preserved watermark into a missing row
########################################################################
write_rows(20);
mirror_exact('C before');
stop_wait();
my $commit = $dst->safe_psql($db,
	"SELECT commit_lsn FROM ash_replicant.checkpoints WHERE slot_name = 'rv_slot'");
# a watermark beyond the source's WAL shows in the doctor
$dst->safe_psql($db, "UPDATE ash_replicant.checkpoints SET commit_lsn = '1000/0' WHERE slot_name = 'rv_slot'");
is(doctor()->{watermark}, 'fail/checkpoint_ahead_of_source', 'C: doctor sees a watermark ahead of the source');
is(call("SELECT ash_replicant_adopt_checkpoint($key, '$commit')"), 't', 'C: adopt puts it back');
is(doctor()->{watermark}, 'pass/', 'C: doctor watermark passes again');
is(call("SELECT ash_replicant_reset_checkpoint($key)"), 't', 'C: reset');
is(call("SELECT ash_replicant_adopt_checkpoint($key, '$commit')"), 't', 'C: adopted into a new row');
is(call("SELECT ash_replicant_adopt_checkpoint($key, '$commit')"), 'f', 'C: idempotent');
is($dst->safe_psql($db,
	"SELECT timeline_id || ' ' || (commit_lsn = '$commit') || ' ' || (end_lsn = '$commit'::pg_lsn + 1)"
	  . " FROM ash_replicant.checkpoints WHERE slot_name = 'rv_slot'"),
	"$tli true true", 'C: timeline read from the source, restart point just past the watermark');
write_rows(30);
start_healthy('C');
mirror_exact('C');
is($dst->safe_psql($db, "SELECT count(*) FROM ash_replicant.checkpoints"), '1',
	'C: one checkpoint row');

$dst->stop;
$src->stop;
done_testing();
