# An ash_replicant_admin member acts only on sinks whose owner's privileges
# it has (docs/sql-api-sinks.md "Who may act on a sink"): the worker writes
# as the sink owner, so whoever configures or operates a sink chooses what
# runs with that owner's rights.  Before, only create_sink/alter_sink's
# owner argument was checked:
#   - adm mapped its own table, carrying its own trigger, into a sink of the
#     superuser and started it: the trigger ran as the superuser and made
#     adm a superuser (QA 975);
#   - adm mapped a table it may not even read (secret, app's) into app's sink
#     with on_truncate => 'mirror': the worker overwrote it (QA 974);
#   - adm took another role's sink over: alter_sink(owner => 'adm').
# Now, as adm, on app's sink and on the superuser's: map, unmap, add and drop
# a message route, configure, alter (owner or a setting), start, stop, drop
# and the five recovery functions are each refused config_invalid (42501),
# nothing changed; the superuser's own start then runs neither adm's trigger
# nor touches secret.  The superuser still does everything there, and adm
# does all of it on a sink owned by a role it is a member of (team).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $PASSWORD = 'Pw_206_c0ffee';
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

# as adm, with the SQLSTATE in the error text
sub as_adm
{
	my ($sql) = @_;
	return $dst->psql($DB, "\\set VERBOSITY verbose\n$sql", extra_params => [ '-U', 'adm' ]);
}

my ($sysid, $sdb) = AshTest::source_identity($src);
my $tli = AshTest::source_timeline($src);
my $pw_conn = "host=127.0.0.1 port=" . $src->port . " dbname=$DB user=pwuser password=$PASSWORD";

q_src(qq{
CREATE TABLE acct (id integer PRIMARY KEY, v text);
CREATE TABLE sacct (id integer PRIMARY KEY, v text);
CREATE TABLE tacct (id integer PRIMARY KEY, v text);
CREATE TABLE t2 (id integer PRIMARY KEY, v text);
CREATE TABLE admz_t (id integer PRIMARY KEY, v text);
CREATE PUBLICATION pub_x FOR TABLE acct;
CREATE PUBLICATION pub_s FOR TABLE sacct;
CREATE PUBLICATION pub_t FOR TABLE tacct;
SET password_encryption = 'scram-sha-256';
CREATE ROLE pwuser LOGIN REPLICATION PASSWORD '$PASSWORD';
GRANT SELECT ON tacct TO pwuser;
});
# pwuser's connections check its password (an admin's conninfo must carry one)
my $hba = $src->data_dir . '/pg_hba.conf';
my $rules = slurp_file($hba);
open my $fh, '>', $hba or die "cannot write $hba: $!";
print $fh "host all pwuser 127.0.0.1/32 scram-sha-256\nhost replication pwuser 127.0.0.1/32 scram-sha-256\n$rules";
close $fh;
$src->reload;

q_dst(q{
CREATE ROLE app LOGIN;
CREATE ROLE team NOLOGIN;
CREATE ROLE adm LOGIN IN ROLE ash_replicant_admin, team;
CREATE SCHEMA admz AUTHORIZATION adm;
CREATE TABLE public.seen (t text, who text);
GRANT INSERT ON public.seen TO PUBLIC;
CREATE TABLE acct (id integer PRIMARY KEY, v text);
CREATE TABLE sacct (id integer PRIMARY KEY, v text);
CREATE TABLE tacct (id integer PRIMARY KEY, v text);
CREATE TABLE secret (id integer PRIMARY KEY, v text);
INSERT INTO secret VALUES (1, 'precious');
ALTER TABLE secret OWNER TO app;
ALTER TABLE acct OWNER TO app;
ALTER TABLE tacct OWNER TO team;
REVOKE ALL ON secret FROM PUBLIC;
CREATE FUNCTION public.on_msg(text, bytea) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
});

# xs: app's sink (974); ss: the superuser's (975); neither started yet
AshTest::setup_pipeline($src, $dst, sink => 'xs', publication => 'pub_x', maps => [ ['acct'] ], start => 0);
q_dst("ALTER TABLE ash_marker_xs OWNER TO app; SELECT ash_replicant_alter_sink('xs', owner => 'app')");
AshTest::setup_pipeline($src, $dst, sink => 'ss', publication => 'pub_s', maps => [ ['sacct'] ], start => 0);
is(q_dst("SELECT string_agg(sink_name || ':' || owner::text, ',' ORDER BY sink_name) FROM ash_replicant.sinks"),
	'ss:postgres,xs:app', 'xs is app\'s, ss the superuser\'s');

##############################################################################
# 1. The attacks of QA 974 and 975 are refused
##############################################################################
my ($rc, $out, $err) = as_adm(q{
CREATE TABLE admz.mine (id integer PRIMARY KEY, v text);
CREATE FUNCTION admz.grab() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES ('trigger', current_user);
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE adm SUPERUSER';
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER g AFTER INSERT ON admz.mine FOR EACH ROW EXECUTE FUNCTION admz.grab();
});
is($rc, 0, 'adm creates its own table with a trigger') or diag $err;
($rc, $out, $err) = as_adm("SELECT ash_replicant_map_table('ss', 'admz.mine'::regclass,"
	  . " source_schema => 'public', source_table => 'admz_t')");
isnt($rc, 0, '975: adm may not map its table into the superuser\'s sink');
like($err, qr/42501: ash_replicant: mapping rejected: config_invalid \(sink "ss": the calling role does not have the privileges of its owner, role "postgres"\)/,
	'975: refused config_invalid, 42501, naming the owner');
($rc, $out, $err) = as_adm("SELECT ash_replicant_map_table('xs', 'secret'::regclass, source_table => 't2', on_truncate => 'mirror')");
isnt($rc, 0, '974: adm may not map secret into app\'s sink');
like($err, qr/42501: ash_replicant: mapping rejected: config_invalid \(sink "xs": .*privileges of its owner, role "app"\)/,
	'974: refused config_invalid, 42501');
($rc, $out, $err) = as_adm("SELECT ash_replicant_alter_sink('xs', owner => 'adm')");
isnt($rc, 0, 'adm may not take app\'s sink over');
like($err, qr/42501: ash_replicant: sink rejected: config_invalid \(sink "xs": .*privileges of its owner/,
	'takeover refused config_invalid, 42501');
is(q_dst("SELECT count(*) FROM ash_replicant.resources WHERE target::text IN ('admz.mine', 'secret')"), '0',
	'nothing mapped');

# the superuser starts both: the worker writes only what it was given
AshTest::start_sink($dst, 'xs');
AshTest::start_sink($dst, 'ss');
q_dst("SELECT ash_replicant_wait_for_slot('xs', '60s'), ash_replicant_wait_for_slot('ss', '60s')");
q_src("INSERT INTO acct VALUES (1, 'a'); INSERT INTO sacct VALUES (1, 's');"
	  . " INSERT INTO t2 VALUES (1, 'overwritten-by-adm'), (2, 'planted'); INSERT INTO admz_t VALUES (1, 'x')");
AshTest::wait_caught_up($src, $dst, 'xs', timeout => 90);
AshTest::wait_caught_up($src, $dst, 'ss', timeout => 90);
is(q_dst("SELECT (SELECT string_agg(id || ':' || v, ',') FROM acct) || '/' || (SELECT string_agg(id || ':' || v, ',') FROM sacct)"),
	'1:a/1:s', 'the sinks mirror what their owners mapped');
is(q_dst("SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM secret"), '1:precious', '974: secret untouched');
is(q_dst("SELECT count(*) FROM admz.mine") . '/' . q_dst("SELECT count(*) FROM seen"), '0/0',
	'975: adm\'s trigger never ran');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'adm'"), 'f', '975: adm still unprivileged');
AshTest::stop_settled($src, $dst, 'xs');
AshTest::stop_settled($src, $dst, 'ss');

##############################################################################
# 2. Every function acting on an existing sink: refused, nothing changed
##############################################################################
sub fingerprint
{
	my ($sink) = @_;
	return q_dst(qq{SELECT md5(concat_ws('|',
	(SELECT string_agg(s::text, ',') FROM ash_replicant.sinks s WHERE sink_name = '$sink'),
	(SELECT string_agg(r::text, ',' ORDER BY resource_id) FROM ash_replicant.resources r WHERE sink_name = '$sink'),
	(SELECT string_agg(m::text, ',' ORDER BY prefix) FROM ash_replicant.message_routes m WHERE sink_name = '$sink'),
	(SELECT string_agg(p::text, ',') FROM ash_replicant.pipelines p WHERE sink_name = '$sink'),
	(SELECT string_agg(c::text, ',') FROM ash_replicant.checkpoints c WHERE slot_name = '$sink')))});
}

my @calls = (
	[ 'mapping',       "ash_replicant_map_table('%s', 'admz.mine'::regclass, source_table => 'admz_t')" ],
	[ 'unmap',         "ash_replicant_unmap_table('%s', 'acct'::regclass)" ],
	[ 'message route', "ash_replicant_add_message_route('%s', 'p', 'public.on_msg(text,bytea)'::regprocedure, '1 day')" ],
	[ 'message route', "ash_replicant_drop_message_route('%s', 'p')" ],
	[ 'pipeline',      "ash_replicant_configure_pipeline('%s', " . AshTest::lit($pw_conn)
		  . ", publication => 'pub_t', source_system_identifier => '$sysid', source_database => '$sdb')" ],
	[ 'sink',     "ash_replicant_alter_sink('%s', owner => 'adm')" ],
	[ 'sink',     "ash_replicant_alter_sink('%s', batch_max_transactions => 7)" ],
	[ 'start',    "ash_replicant_start('%s')" ],
	[ 'sink',     "ash_replicant_stop('%s')" ],
	[ 'sink',     "ash_replicant_drop_sink('%s')" ],
	[ 'recovery', "ash_replicant_reset_checkpoint('%s', '$sysid', '$sdb')" ],
	[ 'recovery', "ash_replicant_adopt_checkpoint('%s', '$sysid', '$sdb', '0/1')" ],
	[ 'recovery', "ash_replicant_acknowledge_checkpoint_timeline('%s', '$sysid', '$sdb', $tli + 1)" ],
	[ 'recovery', "ash_replicant_acknowledge_publication_gap('%s', '$sysid', '$sdb')" ],
	[ 'recovery', "ash_replicant_acknowledge_column_added('%s', '$sysid', '$sdb', 'public', 'acct')" ],
);
for my $sink ('xs', 'ss')
{
	my $before = fingerprint($sink);
	for my $c (@calls)
	{
		my ($stage, $fmt) = @$c;
		my $call = sprintf($fmt, $sink);
		my ($fn) = $call =~ /^(\w+)/;
		($rc, $out, $err) = as_adm("SELECT $call");
		isnt($rc, 0, "$sink, adm: $fn refused");
		like($err, qr/42501: ash_replicant: \Q$stage\E rejected: config_invalid \(sink "$sink": the calling role does not have the privileges of its owner/,
			"$sink, adm: $fn refused config_invalid at stage $stage") or diag $err;
	}
	is(fingerprint($sink), $before, "$sink: the refused calls changed nothing");
}
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'adm'"), 'f', 'adm still unprivileged');
# monitoring stays open to the admin (docs/operations.md)
($rc, $out, $err) = as_adm("SELECT count(*) > 0 FROM ash_replicant_status('xs');"
	  . " SELECT count(*) > 0 FROM ash_replicant_doctor('ss')");
is($rc, 0, 'adm still reads status and doctor of sinks it may not operate') or diag $err;

##############################################################################
# 3. The superuser does everything there
##############################################################################
for my $sql (
	"SELECT ash_replicant_alter_sink('xs', batch_max_transactions => 3)",
	"SELECT ash_replicant_acknowledge_publication_gap('xs', '$sysid', '$sdb')",
	"SELECT ash_replicant_acknowledge_checkpoint_timeline('xs', '$sysid', '$sdb', $tli)",
	"SELECT ash_replicant_start('xs')",
	"SELECT ash_replicant_stop('xs')",
	"SELECT ash_replicant_unmap_table('ss', 'sacct'::regclass)",
	"SELECT ash_replicant_drop_sink('ss')")
{
	($rc, $out, $err) = $dst->psql($DB, $sql);
	is($rc, 0, "superuser: $sql") or diag $err;
}
is(q_dst("SELECT batch_max_transactions FROM ash_replicant.sinks WHERE sink_name = 'xs'")
	  . '/' . q_dst("SELECT count(*) FROM ash_replicant.sinks WHERE sink_name = 'ss'"), '3/0',
	'the superuser\'s changes took');

##############################################################################
# 4. adm does all of it on a sink of a role it is a member of
##############################################################################
for my $sql (
	"SELECT ash_replicant_create_sink('ts', owner => 'team', recovery_horizon => '1 hour')",
	"SELECT ash_replicant_map_table('ts', 'tacct'::regclass)",
	"SELECT ash_replicant_add_message_route('ts', 'tp', 'public.on_msg(text,bytea)'::regprocedure, '1 day')",
	"SELECT ash_replicant_drop_message_route('ts', 'tp')",
	"SELECT ash_replicant_configure_pipeline('ts', " . AshTest::lit($pw_conn)
	  . ", publication => 'pub_t', source_system_identifier => '$sysid', source_database => '$sdb',"
	  . " go_forward_only => false, snapshot => 'v1')",
	# no routes left: no horizon either (start refuses one)
	"SELECT ash_replicant_alter_sink('ts', batch_max_transactions => 5, reset_recovery_horizon => true)",
	"SELECT ash_replicant_start('ts')")
{
	($rc, $out, $err) = as_adm($sql);
	is($rc, 0, "adm, team's sink: " . substr($sql, 7, 60)) or diag $err;
}
q_dst("SELECT ash_replicant_wait_for_slot('ts', '60s')");
q_src("INSERT INTO tacct VALUES (1, 't'), (2, 'u')");
ok(AshTest::poll($dst, "SELECT count(*) FROM tacct", '2'), 'team\'s sink mirrors as team');
($rc, $out, $err) = as_adm("SELECT ash_replicant_stop('ts')");
is($rc, 0, 'adm stops team\'s sink') or diag $err;
AshTest::wait_status($dst, 'ts', 'not_started', undef, no_early_exit => 1, name => 'ts stopped');
AshTest::poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'ts' AND active");
for my $sql (
	"SELECT ash_replicant_acknowledge_checkpoint_timeline('ts', '$sysid', '$sdb', $tli)",
	"SELECT ash_replicant_acknowledge_publication_gap('ts', '$sysid', '$sdb')",
	"SELECT ash_replicant_unmap_table('ts', 'tacct'::regclass)",
	"SELECT ash_replicant_drop_sink('ts')")
{
	# an origin of the stopped pipeline may take a moment to be released
	my $ok = AshTest::wait_until(sub { ($rc, $out, $err) = as_adm($sql); $rc == 0 || $err !~ /pipeline_running/ });
	is($rc, 0, "adm, team's sink: " . substr($sql, 7, 60)) or diag $err;
}
is(q_dst("SELECT count(*) FROM ash_replicant.sinks WHERE sink_name = 'ts'"), '0', 'adm dropped team\'s sink');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'adm'"), 'f', 'adm unprivileged at the end');

done_testing();
