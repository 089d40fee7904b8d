# Preflight, doctor and ash_replicant_ctl against a real source (docs/operations.md
# "Operations", README.md#how-apply-works, README.md#status-statistics-and-events).
#
#  - a healthy running pipeline: every preflight and doctor check passes, the
#    CLI exits 0, and neither function writes (no transaction id on the
#    destination, none consumed on the source);
#  - unstarted sinks, one problem each: an unmapped published table
#    (source_table_unmapped), an added source column (source_column_unmapped),
#    a changed column type (source_type_invalid), REPLICA IDENTITY DEFAULT on a
#    tenant-scoped table (source_replica_identity), a role without REPLICATION
#    and without SELECT (privilege_replication_missing,
#    privilege_select_missing), an ignore matching nothing (warning
#    ignore_never_matches), an unreachable source (source_reachable fails,
#    every later source check skipped);
#  - the running pipeline stopped and its slot dropped while a watermark
#    exists: doctor fails slot/retention_lost;
#  - the CLI's exit codes (0 clean, 1 failed, 2 warnings, 3 undiagnosable)
#    and its JSON;
#  - no output (rows, CLI text and JSON, notices) carries the conninfo, a
#    publication or slot name, the system identifier or an LSN.
#
# Self-contained: two clusters on 127.0.0.1 (source trusts TCP for normal and
# replication connections); waits poll, never sleep.
use strict;
use warnings;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'postgres';

my $src = PostgreSQL::Test::Cluster->new('doc_src');
$src->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
$src->append_conf('postgresql.conf', qq{
listen_addresses = '127.0.0.1'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
log_min_messages = warning
});
$src->append_conf('pg_hba.conf', qq{
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
});
$src->start;

my $dst = PostgreSQL::Test::Cluster->new('doc_dst');
$dst->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
$dst->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ash_replicant'
ash_replicant.database = 'postgres'
ash_replicant.naptime = '500ms'
ash_replicant.reconnect_min_delay = '200ms'
ash_replicant.reconnect_max_delay = '2s'
ash_replicant.connect_timeout = '10s'
max_worker_processes = 16
});
$dst->start;
$dst->safe_psql($db, 'CREATE EXTENSION ash_replicant');

my ($sysid, $srcdb) = split /\|/, $src->safe_psql($db,
	'SELECT system_identifier, current_database() FROM pg_control_system()');
my $superuser = $src->safe_psql($db, 'SELECT current_user');
sub conninfo
{
	my ($user) = @_;
	return "host=127.0.0.1 port=" . $src->port . " dbname=$db user=" . ($user // $superuser);
}

# tables at both ends; the source then drifts per scenario
my $ddl = q{
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE unmapped_extra (id int PRIMARY KEY);
CREATE TABLE addcol (id int PRIMARY KEY, v text);
CREATE TABLE chtype (id int PRIMARY KEY, n int);
CREATE TABLE ten (id int PRIMARY KEY, tenant text NOT NULL, v text);
};
$src->safe_psql($db, $ddl);
$dst->safe_psql($db, $ddl);
$src->safe_psql($db, q{
ALTER TABLE addcol ADD COLUMN extra int;
ALTER TABLE chtype ALTER COLUMN n TYPE text;
CREATE PUBLICATION pubsecret_main FOR TABLE t;
CREATE PUBLICATION pubsecret_unmapped FOR TABLE t, unmapped_extra;
CREATE PUBLICATION pubsecret_addcol FOR TABLE addcol;
CREATE PUBLICATION pubsecret_chtype FOR TABLE chtype;
CREATE PUBLICATION pubsecret_ten FOR TABLE ten;
CREATE ROLE weakrole LOGIN;
});

# sink(name, publication, [ map_table argument lists ], %o)
sub sink
{
	my ($name, $pub, $maps, %o) = @_;
	my $ign = $o{ignored} ? ", ignored_sources => ARRAY[$o{ignored}]" : '';
	my @sql = ("SELECT ash_replicant_create_sink('$name', slot_name => 'slotsecret_$name'$ign)");
	push @sql, "SELECT ash_replicant_map_table('$name', $_)" for @$maps;
	my $conn = $o{conn} // conninfo();
	my $id = $o{sysid} // $sysid;
	push @sql, "SELECT ash_replicant_configure_pipeline('$name', '$conn', publication => '$pub',"
	  . " source_system_identifier => '$id', source_database => '$srcdb',"
	  . " census => '{\"interval_ms\": 500}'" . ($o{snapshot} ? ", snapshot => '$o{snapshot}'" : '') . ")";
	$dst->safe_psql($db, join(";\n", @sql));
	return;
}

# every output the test sees, for the leak greps at the end
my @outputs;

# preflight/doctor as (check => [verdict, reason]) plus the ordered rows
sub checks
{
	my ($fn, $name) = @_;
	my ($rc, $out, $err) = $dst->psql($db,
		"SELECT check_name, verdict, coalesce(reason, '') FROM ash_replicant_$fn('$name')");
	push @outputs, $out, $err;
	die "ash_replicant_$fn('$name') failed: $err" if $rc;
	my (%c, @order);
	for my $line (split /\n/, $out)
	{
		my ($check, $verdict, $reason) = split /\|/, $line, -1;
		$c{$check} = [ $verdict, $reason ];
		push @order, $check;
	}
	return (\%c, \@order);
}

sub verdict_is
{
	my ($c, $check, $verdict, $reason, $name) = @_;
	my $got = $c->{$check} // [ '(missing)', '' ];
	is("$got->[0]/$got->[1]", "$verdict/" . ($reason // ''), $name);
}

sub all_pass
{
	my ($c, $name) = @_;
	my @bad = map { "$_=$c->{$_}[0]/$c->{$_}[1]" } grep { $c->{$_}[0] ne 'pass' } sort keys %$c;
	is(join(', ', @bad), '', $name);
}

# ash_replicant_ctl: (exit code, stdout, stderr)
sub ctl
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'ash_replicant_ctl', @args ], '<', \undef, '>', \$out, '2>', \$err);
	my $rc = $? >> 8;
	push @outputs, $out, $err;
	return ($rc, $out, $err);
}
my @dstconn = ('-h', $dst->host, '-p', $dst->port, '-d', $db);

########################################################################
# a healthy pipeline
########################################################################
sink('dr', 'pubsecret_main', [q{'t'}]);
$dst->safe_psql($db, "SELECT ash_replicant_start('dr')");
ok($dst->poll_query_until($db, "SELECT state = 'healthy' FROM ash_replicant_status('dr')"),
	'pipeline dr healthy')
  or diag $dst->safe_psql($db, "SELECT * FROM ash_replicant_status('dr')");
$src->safe_psql($db, "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20) g");
ok($dst->poll_query_until($db, "SELECT count(*) = 20 FROM t"), 'rows mirrored');

my ($pre, $pre_order) = checks('preflight', 'dr');
all_pass($pre, 'healthy: every preflight check passes');
is(join(',', @$pre_order),
	'configuration_complete,destination_mappings,keyring_families,source_reachable,source_identity,'
	  . 'source_release,source_wal_level,privilege_replication,output_plugin,publication,'
	  . 'privilege_select,coverage,columns,existing_rows',
	'preflight checks in their fixed order');
my ($doc, $doc_order) = checks('doctor', 'dr');
all_pass($doc, 'healthy: every doctor check passes');
is(scalar(@$doc_order), 20, 'doctor adds six checks');

# no writes: no transaction id on the destination, none consumed at the source
my $src_next = $src->safe_psql($db, 'SELECT pg_snapshot_xmax(pg_current_snapshot())');
my $cp_before = $dst->safe_psql($db, 'SELECT updated_at FROM ash_replicant.checkpoints');
is($dst->safe_psql($db, q{
BEGIN;
SELECT count(*) FROM ash_replicant_doctor('dr');
SELECT count(*) FROM ash_replicant_preflight('dr');
SELECT pg_current_xact_id_if_assigned() IS NULL;
COMMIT;}), "20\n14\nt", 'doctor and preflight take no transaction id on the destination');
is($src->safe_psql($db, 'SELECT pg_snapshot_xmax(pg_current_snapshot())'), $src_next,
	'no transaction id consumed at the source');
is($dst->safe_psql($db, 'SELECT updated_at FROM ash_replicant.checkpoints'), $cp_before,
	'checkpoint row untouched');

my ($rc, $out, $err) = ctl('doctor', '--sink', 'dr', @dstconn);
is($rc, 0, 'ctl doctor on a healthy pipeline exits 0');
like($out, qr/^runtime\s+pass/m, 'ctl text lists the checks');
($rc, $out) = ctl('doctor', '--sink', 'dr', '--format', 'json', @dstconn);
my $json = eval { decode_json($out) };
ok(ref $json eq 'ARRAY' && @$json == 20, 'ctl json: an array of 20 objects') or diag $out;
is_deeply([ sort keys %{ $json->[0] // {} } ], [qw(check detail reason verdict)],
	'ctl json objects carry check, verdict, reason, detail');
is($json->[0]{check}, 'configuration_complete', 'ctl json keeps the order');
($rc) = ctl('status', '--sink', 'dr', @dstconn);
is($rc, 0, 'ctl status of a healthy pipeline exits 0');

########################################################################
# one problem per unstarted sink
########################################################################
sink('s_unmapped', 'pubsecret_unmapped', [q{'t'}]);
my ($c) = checks('preflight', 's_unmapped');
verdict_is($c, 'coverage', 'fail', 'source_table_unmapped', 'unmapped published table');
verdict_is($c, 'columns', 'pass', '', '... the mapped table is still judged');
($rc, $out) = ctl('preflight', '--sink', 's_unmapped', @dstconn);
is($rc, 1, 'ctl exits 1 on a failed check');

sink('s_addcol', 'pubsecret_addcol', [q{'addcol'}]);
($c) = checks('preflight', 's_addcol');
verdict_is($c, 'columns', 'fail', 'source_column_unmapped', 'added source column');

sink('s_chtype', 'pubsecret_chtype', [q{'chtype'}]);
($c) = checks('preflight', 's_chtype');
verdict_is($c, 'columns', 'fail', 'source_type_invalid', 'changed source column type');
is($dst->safe_psql($db, "SELECT detail FROM ash_replicant_preflight('s_chtype') WHERE check_name = 'columns'"),
	'table public.chtype columns: n (text -> integer)', '... its detail names the column and both types');

sink('s_ten', 'pubsecret_ten',
	[q{'ten', tenant_column => 'tenant', tenant_strategy => 'attribute'}]);
($c) = checks('preflight', 's_ten');
verdict_is($c, 'columns', 'fail', 'source_replica_identity',
	'tenant-scoped table under REPLICA IDENTITY DEFAULT');
$src->safe_psql($db, 'ALTER TABLE ten REPLICA IDENTITY FULL');
($c) = checks('preflight', 's_ten');
verdict_is($c, 'columns', 'pass', '', '... passes under REPLICA IDENTITY FULL');

# the README's least-privilege setup, with the snapshot its quick start takes
sink('s_weak', 'pubsecret_main', [q{'t'}], conn => conninfo('weakrole'), snapshot => 'v1');
($c) = checks('preflight', 's_weak');
verdict_is($c, 'source_identity', 'pass', '', 'weak role: identity verified');
verdict_is($c, 'privilege_replication', 'fail', 'privilege_replication_missing',
	'role without REPLICATION');
verdict_is($c, 'privilege_select', 'fail', 'privilege_select_missing', 'role without SELECT');
verdict_is($c, 'output_plugin', 'skipped', 'privilege_probe_missing',
	'weak role cannot read output_plugin_libraries: skipped, not passed');
$src->safe_psql($db, 'ALTER ROLE weakrole REPLICATION; GRANT SELECT ON t TO weakrole;'
	  . ' GRANT pg_read_all_settings TO weakrole');
($c) = checks('preflight', 's_weak');
all_pass($c, 'weak role granted REPLICATION, SELECT and pg_read_all_settings: all pass');

sink('s_warn', 'pubsecret_main', [q{'t'}], ignored => q{'public.nowhere'});
($c) = checks('preflight', 's_warn');
verdict_is($c, 'coverage', 'warn', 'ignore_never_matches', 'an ignore that matches nothing warns');
($rc) = ctl('preflight', '--sink', 's_warn', @dstconn);
is($rc, 2, 'ctl exits 2 on warnings only');

my $wrongid = ($sysid =~ /^7/ ? '6' : '7') . substr($sysid, 1);
sink('s_wrongid', 'pubsecret_main', [q{'t'}], sysid => $wrongid);
my $order;
($c, $order) = checks('doctor', 's_wrongid');
verdict_is($c, 'source_identity', 'fail', 'source_identity_mismatch', 'a foreign source fails its identity');
is(join(',', map { $c->{$_}[0] } qw(source_release coverage columns slot timeline)),
	'skipped,skipped,skipped,skipped,skipped', '... and nothing else is judged on it');

my $closed = PostgreSQL::Test::Cluster::get_free_port();
sink('s_unreach', 'pubsecret_main', [q{'t'}],
	conn => "host=127.0.0.1 port=$closed dbname=$db user=$superuser");
($c, $order) = checks('preflight', 's_unreach');
verdict_is($c, 'source_reachable', 'fail', 'source_unreachable', 'unreachable source fails');
my @after = @$order[ (grep { $order->[$_] eq 'source_reachable' } 0 .. $#$order)[0] + 1 .. $#$order ];
is(join(',', map { "$c->{$_}[0]/$c->{$_}[1]" } @after),
	join(',', map { 'skipped/source_unreachable' } @after), '... every later source check skipped');
($c) = checks('doctor', 's_unreach');
verdict_is($c, 'slot', 'skipped', 'source_unreachable', '... doctor too');
($rc) = ctl('doctor', '--sink', 's_unreach', '--format', 'json', @dstconn);
is($rc, 1, 'ctl exits 1 for an unreachable source');

########################################################################
# the slot dropped while a watermark exists
########################################################################
$dst->safe_psql($db, "SELECT ash_replicant_stop('dr')");
ok($dst->poll_query_until($db,
	"SELECT worker_pid IS NULL FROM ash_replicant.stat_pipelines WHERE sink_name = 'dr'"),
	'dr stopped');
ok($src->poll_query_until($db,
	"SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'slotsecret_dr' AND active"),
	'slot released');
$src->safe_psql($db, "SELECT pg_drop_replication_slot('slotsecret_dr')");
($c) = checks('doctor', 'dr');
verdict_is($c, 'slot', 'fail', 'retention_lost', 'slot gone under a watermark: retention_lost');
verdict_is($c, 'checkpoint_state', 'pass', '', '... the checkpoint itself is fine');
($c) = checks('preflight', 'dr');
ok(!exists $c->{slot}, 'preflight does not judge the slot');

# a change the recorded contract does not contain: a target column retyped
$dst->safe_psql($db, "ALTER TABLE t ALTER COLUMN v TYPE varchar(100)");
($c) = checks('doctor', 'dr');
verdict_is($c, 'contract', 'fail', 'contract_incompatible', 'a retyped target column: contract_incompatible');
verdict_is($c, 'columns', 'warn', 'target_column_narrower',
	'... while the source still covers the mapping (into a narrower column: a warning)');
unlike(slurp_file($dst->logfile), qr/event=checkpoint\.conflict/,
	'... and the doctor logs no checkpoint.conflict event (that is the binding\'s)');

########################################################################
# undiagnosable: exit 3
########################################################################
($rc, $out, $err) = ctl('doctor', '--sink', 'no_such_sink', @dstconn);
is($rc, 3, 'ctl exits 3 for an unknown sink');
like($err, qr/does not exist/, '... and says so');
($rc) = ctl('doctor', @dstconn);
is($rc, 3, 'ctl exits 3 without --sink');
($rc) = ctl('frobnicate', '--sink', 'dr', @dstconn);
is($rc, 3, 'ctl exits 3 for an unknown command');
($rc, $out, $err) = ctl('doctor', '--sink', 'dr', '-h', '127.0.0.1', '-p', $closed, '-d', $db);
is($rc, 3, 'ctl exits 3 when the destination cannot be reached');
like($err, qr/could not connect to the destination database: .*(refused|failed)/,
	'... and says why, in libpq\'s words');
($rc) = ctl('status', '--sink', 'no_such_sink', @dstconn);
is($rc, 3, 'ctl status exits 3 for an unknown sink');

########################################################################
# a go-forward start over tables that already have rows says so
########################################################################
for my $n ($src, $dst)
{
	$n->safe_psql($db, q{
CREATE TABLE par (id int PRIMARY KEY, v text);
CREATE TABLE kid (id int PRIMARY KEY, par_id int REFERENCES par, v text);
CREATE TABLE empty_t (id int PRIMARY KEY);});
}
$src->safe_psql($db, q{
INSERT INTO par SELECT g, 'p' FROM generate_series(1, 5) g;
INSERT INTO kid SELECT g, g, 'k' FROM generate_series(1, 5) g;
CREATE PUBLICATION pubsecret_gf FOR TABLE par, kid, empty_t;});
sink('gf', 'pubsecret_gf', [q{'par'}, q{'kid'}, q{'empty_t'}]);
my $rows_detail = sub {
	my ($fn) = @_;
	my $r = $dst->safe_psql($db, "SELECT verdict || '|' || reason || '|' || detail FROM ash_replicant_$fn('gf')"
		  . " WHERE check_name = 'existing_rows'");
	push @outputs, $r;
	return $r;
};
is($rows_detail->('preflight'),
	"warn|go_forward_foreign_key|tables with rows that a go-forward start does not copy: public.kid, public.par;"
	  . " their targets have foreign keys that changes to those rows will trip: public.kid (kid_par_id_fkey);"
	  . " snapshot => 'v1' copies them (docs/snapshots.md)",
	'preflight: a go-forward start would leave existing rows behind, and a foreign key would trip');
$dst->safe_psql($db, "SELECT ash_replicant_start('gf')");
ok($dst->poll_query_until($db,
	"SELECT go_forward_uncopied IS NOT NULL FROM ash_replicant.checkpoints WHERE slot_name = 'slotsecret_gf'"),
	'the worker records, once, what the go-forward slot left out');
is($dst->safe_psql($db,
	"SELECT go_forward_uncopied FROM ash_replicant.checkpoints WHERE slot_name = 'slotsecret_gf'"),
	'{public.kid,public.par}', '... the tables that had rows');
ok($dst->log_contains(qr/event=pipeline\.go_forward_rows_not_copied sink=gf table=public\.kid/),
	'... and logs an event per table');
$src->safe_psql($db, q{DELETE FROM kid; DELETE FROM par; INSERT INTO empty_t VALUES (1)});
like($rows_detail->('doctor'), qr/^warn\|go_forward_foreign_key\|tables with rows that a go-forward start does not copy: public\.kid, public\.par;/,
	'doctor keeps saying so from the record, whatever the tables hold now');
$dst->safe_psql($db, "SELECT ash_replicant_stop('gf')");

########################################################################
# nothing leaks
########################################################################
my $all = join("\n", @outputs);
my @secrets = (
	[ "port=" . $src->port, 'source conninfo' ],
	[ 'host=', 'conninfo keyword' ],
	[ 'pubsecret', 'publication name' ],
	[ 'slotsecret', 'slot name' ],
	[ $sysid, 'system identifier' ]);
for my $s (@secrets)
{
	ok(index($all, $s->[0]) < 0, "no $s->[1] in any output");
}
unlike($all, qr{\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b}, 'no LSN in any output');

$dst->stop;
$src->stop;
done_testing();
