# Bad input from the SOURCE side and from the pipeline configuration (SPEC
# README.md#reason-codes, README.md#testing "every bad input gets its reason code and leaves the mirror and
# checkpoint unchanged").
#
# Sink "bi" mirrors table t and connects as role pw_user, which the source
# authenticates with scram-sha-256 over 127.0.0.1.  Its password, and every
# conninfo the test configures, carry a random sentinel.  Each case injects
# one bad input into a sink that has mirrored rows and owns a checkpoint, with
# a source change pending where the case allows one, and asserts:
#   - ash_replicant_status() reaches the expected state/reason (while the
#     worker retries a condition that may be transient, it is catching_up);
#   - the halt is logged as event=pipeline.halt with the reason and a clear,
#     value-free context;
#   - the mirror's content hash and the checkpoint row (watermark, end,
#     timeline, decoder, contract fingerprint, snapshot state, origin floor)
#     are unchanged: the halt committed nothing;
#   - the sentinel is in no destination log line and no status, statistics,
#     preflight or doctor output;
# then repairs the input and asserts the sink is healthy again and the mirror
# equals the source.
#
#   malformed conninfo (syntax)   configure_pipeline refuses config_invalid
#   unusable conninfo (port=x)    misconfigured source_connection_invalid
#                                 (the doctor's source_reachable says the same)
#   wrong password                misconfigured source_authentication_failed
#                                 (the doctor's source_reachable says the same)
#   role without REPLICATION      misconfigured privilege_replication_missing
#   publication does not exist    misconfigured source_publication_missing
#   slot held by pg_recvlogical   catching_up while retrying, then
#                                 misconfigured source_slot_in_use
#   source table renamed          misconfigured source_table_unmapped (census)
#   TRUNCATE under on_truncate    halted source_truncate; the insert of the
#     halt (sink "tr")            same transaction is not applied either
#   source wal_level = replica    misconfigured source_not_logical (sink "wl",
#     (a third cluster)           no watermark written)
#   slot invalidated (WAL gone)   halted retention_lost
#   slot dropped                  halted source_slot_missing
#
# Covered elsewhere: identity mismatch, timeline, checkpoint conflicts (014),
# coverage reasons and a dropped publication (032), contract (033), apply
# failures (012), mapped table leaving the publication (032, a warning).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $DB = 'postgres';
my $S = 'SNTNL' . join('', map { ('a' .. 'z')[ int(rand(26)) ] } 1 .. 12);
my $good_pw = "${S}ok";
my $faults = 0;
my $t0 = time;

# log_statement none and log_min_error_statement panic: the test itself sends
# the sentinel in its SQL (a refused configure_pipeline call would otherwise
# be logged by the server as the failing STATEMENT: the operator's own text)
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "log_min_messages = info\nlog_error_verbosity = verbose\nlog_min_error_statement = panic\n");

# pw_user / norepl_user authenticate with scram-sha-256 on 127.0.0.1 (first
# matching pg_hba line wins: prepend)
$src->safe_psql($DB, qq{
SET password_encryption = 'scram-sha-256';
CREATE ROLE pw_user LOGIN REPLICATION PASSWORD '$good_pw';
CREATE ROLE norepl_user LOGIN NOREPLICATION PASSWORD '$good_pw';
ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO pw_user, norepl_user;
});
{
	my $hba = $src->data_dir . '/pg_hba.conf';
	my $old = slurp_file($hba);
	open my $fh, '>', $hba or die "$hba: $!";
	print $fh "host all pw_user,norepl_user 127.0.0.1/32 scram-sha-256\n"
	  . "host replication pw_user,norepl_user 127.0.0.1/32 scram-sha-256\n" . $old;
	close $fh;
	$src->reload;
}

AshTest::both($src, $dst, q{
CREATE TABLE t (id integer PRIMARY KEY, v text);
CREATE TABLE tt (id integer PRIMARY KEY, v text);
});
$src->safe_psql($DB, q{
CREATE PUBLICATION pub_bi FOR TABLE t;
CREATE PUBLICATION pub_tr FOR TABLE tt;
});

my ($sysid, $sdb) = AshTest::source_identity($src);
sub conn_of
{
	my ($user, $pw, $extra) = @_;
	return "host=127.0.0.1 port=" . $src->port . " dbname=$DB user=$user password=$pw" . ($extra // '');
}
my $good_conn = conn_of('pw_user', $good_pw);

AshTest::setup_pipeline($src, $dst, sink => 'bi', publication => 'pub_bi', maps => [ ['t'] ],
	connection => $good_conn);
AshTest::setup_pipeline($src, $dst, sink => 'tr', publication => 'pub_tr', maps => [ ['tt'] ]);
AshTest::wait_status($dst, 'bi', 'healthy', undef, src => $src, name => 'bi healthy (password auth)');
AshTest::wait_status($dst, 'tr', 'healthy', undef, src => $src, name => 'tr healthy');
AshTest::wait_slot_consistent($src, $dst, $_) for qw(bi tr);
$src->safe_psql($DB, q{
INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 100) g;
INSERT INTO tt SELECT g, 'x' || g FROM generate_series(1, 20) g;
});
AshTest::wait_caught_up($src, $dst, 'bi');
AshTest::wait_caught_up($src, $dst, 'tr');
AshTest::assert_mirror_equal($src, $dst, [ 't', 'tt' ], name => 'initial mirror');

##############################################################################
# Helpers
##############################################################################

sub configure
{
	my ($sink, $conn, $pub) = @_;
	return $dst->psql($DB, "SELECT ash_replicant_configure_pipeline(sink_name => '$sink', connection => "
		  . AshTest::lit($conn) . ", publication => " . AshTest::lit($pub)
		  . ", source_system_identifier => '$sysid', source_database => '$sdb',"
		  . " census => '{\"interval_ms\": 1000}'::jsonb)");
}



# Everything an operator or monitor reads about the sink.
sub outputs_text
{
	my ($sink) = @_;
	my @parts;
	for my $sql ("SELECT * FROM ash_replicant_status()", "SELECT * FROM ash_replicant.stat_pipelines",
		"SELECT * FROM ash_replicant_preflight('$sink')", "SELECT * FROM ash_replicant_doctor('$sink')")
	{
		my ($rc, $out, $err) = $dst->psql($DB, "SELECT row_to_json(x)::text FROM ($sql) x");
		push @parts, $out, $err;
	}
	return join("\n", @parts);
}

sub no_sentinel
{
	my ($label, @extra) = @_;
	my @hits = AshTest::grep_logs_for($S, $dst);
	is(scalar(@hits), 0, "$label: sentinel in no destination log line")
	  or diag join("\n", @hits[ 0 .. ($#hits < 4 ? $#hits : 4) ]);
	my $text = join("\n", outputs_text('bi'), @extra);
	ok(index($text, $S) < 0, "$label: sentinel in no status, statistics, preflight or doctor output, no error");
}

sub halt_logged
{
	my ($sink, $reason, $context, $label) = @_;
	my @l = AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=$sink reason=\Q$reason\E /);
	ok(scalar(@l) >= 1, "$label: halt logged with reason $reason") or return;
	like($l[-1], $context, "$label: the halt says what is wrong") if $context;
}

# One case on an existing sink: stopped, a pending source change (unless
# no_pending), inject, start, expected state/reason, nothing applied, then fix.
sub bad_case
{
	my (%c) = @_;
	my ($sink, $label) = ($c{sink} // 'bi', $c{label});
	my $table = $c{table} // 't';
	note sprintf("case %s at %.1fs", $label, time - $t0);
	AshTest::stop_settled($src, $dst, $sink) unless $c{running};
	my $h0 = AshTest::table_hash($dst, $table);
	my $cp0 = AshTest::checkpoint_facts($dst, $sink);
	$src->safe_psql($DB, "UPDATE $table SET v = v || '+' WHERE id = 7") unless $c{no_pending};
	$c{inject}->();
	$faults++;
	AshTest::start_sink($dst, $sink) unless $c{running};
	$c{during}->() if $c{during};
	AshTest::wait_status($dst, $sink, $c{state}, $c{reason}, src => $src,
		name => "$label: $c{state}/$c{reason}", timeout => $c{timeout} // 60);
	halt_logged($sink, $c{reason}, $c{context}, $label);
	if ($c{doctor})
	{
		# the doctor names a source it cannot connect to as the pipeline does
		my ($check, $reason) = @{ $c{doctor} };
		is($dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('$sink')"
				  . " WHERE check_name = '$check'"),
			"fail/$reason", "$label: doctor $check fails $reason");
	}
	is(AshTest::table_hash($dst, $table), $h0, "$label: mirror unchanged");
	is(AshTest::checkpoint_facts($dst, $sink), $cp0, "$label: checkpoint unchanged");
	no_sentinel($label);
	return unless $c{fix};
	$c{fix}->();
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy after the fix");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: caught up after the fix");
	AshTest::assert_mirror_equal($src, $dst, [$table], name => "$label: mirror equals source after the fix");
}

sub restore_good
{
	my ($rc, $out, $err) = configure('bi', $good_conn, 'pub_bi');
	is($rc, 0, 'good configuration restored') or diag $err;
}

##############################################################################
# Configuration: a conninfo that does not parse is refused at configuration
##############################################################################
{
	AshTest::stop_settled($src, $dst, 'bi');
	my $before = $dst->safe_psql($DB, "SELECT md5(connection) FROM ash_replicant.pipelines WHERE sink_name = 'bi'");
	my ($rc, $out, $err) = configure('bi', "host=127.0.0.1 port=" . $src->port . " password='$S unterminated", 'pub_bi');
	$faults++;
	isnt($rc, 0, 'malformed conninfo: configure_pipeline refuses');
	like($err, qr/config_invalid \(connection is not a valid libpq connection string\)/,
		'malformed conninfo: config_invalid, clear message');
	ok(index($err, $S) < 0, 'malformed conninfo: the error does not echo the conninfo');
	is($dst->safe_psql($DB, "SELECT md5(connection) FROM ash_replicant.pipelines WHERE sink_name = 'bi'"),
		$before, 'malformed conninfo: configuration unchanged');
	($rc, $out, $err) = configure('bi', "host=127.0.0.1 port=" . $src->port . " bogus_option=$S", 'pub_bi');
	$faults++;
	like($err, qr/config_invalid/, 'unknown conninfo option: config_invalid');
	ok(index($err, $S) < 0, 'unknown conninfo option: the error does not echo the conninfo');
	no_sentinel('malformed conninfo', $err);
	AshTest::start_sink($dst, 'bi');
	AshTest::wait_status($dst, 'bi', 'healthy', undef, src => $src, name => 'bi healthy again');
}

##############################################################################
# Source side, activation
##############################################################################

bad_case(label => 'unusable conninfo', state => 'misconfigured', reason => 'source_connection_invalid',
	context => qr/context="[^"]*connection settings/,
	doctor => [ 'source_reachable', 'source_connection_invalid' ],
	inject => sub { configure('bi', conn_of('pw_user', $good_pw, " port=notaport$S"), 'pub_bi') },
	fix => \&restore_good);

bad_case(label => 'wrong password', state => 'misconfigured', reason => 'source_authentication_failed',
	context => qr/context="[^"]*authentication/,
	doctor => [ 'source_reachable', 'source_authentication_failed' ],
	inject => sub { configure('bi', conn_of('pw_user', "${S}wrong"), 'pub_bi') },
	fix => \&restore_good);

bad_case(label => 'role without REPLICATION', state => 'misconfigured', reason => 'privilege_replication_missing',
	context => qr/context="[^"]*lack of privilege/,
	inject => sub { configure('bi', conn_of('norepl_user', $good_pw), 'pub_bi') },
	fix => \&restore_good);

bad_case(label => 'publication does not exist', state => 'misconfigured', reason => 'source_publication_missing',
	context => qr/context="[^"]*table set is absent/,
	inject => sub { configure('bi', $good_conn, 'no_such_pub') },
	fix => \&restore_good);

# Another consumer holds the slot: the worker retries (the holder may go
# away), visibly catching_up, then halts source_slot_in_use.  No source change
# while the holder runs: it would consume it.  What it acknowledged is lost
# to the pipeline (checkpoint_behind_slot): the fix adopts the slot's position.
{
	my $holder;
	bad_case(label => 'slot held by another consumer', state => 'misconfigured', reason => 'source_slot_in_use',
	context => qr/context="[^"]*another consumer/,
		no_pending => 1, timeout => 90,
		inject => sub {
			$holder = IPC::Run::start(
				[ 'pg_recvlogical', '-h', '127.0.0.1', '-p', $src->port, '-d', $DB, '-S', 'bi',
				  '--start', '--no-loop', '-o', 'proto_version=1', '-o', 'publication_names=pub_bi',
				  '-f', '/dev/null' ],
				'>', \my $o, '2>', \my $e);
			ok(AshTest::poll($src, "SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = 'bi' AND active"),
				'slot in use: pg_recvlogical holds the slot');
		},
		during => sub {
			ok($dst->wait_for_log(qr/event=source\.fault sink=bi step=(?:slot|start) source_sqlstate=55006/),
				'slot in use: the worker retries (source.fault 55006)');
			my $st = AshTest::status_row($dst, 'bi') // {};
			is($st->{state} // '', 'catching_up', 'slot in use: catching_up while retrying');
		},
		fix => sub {
			$holder->kill_kill;
			AshTest::poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'bi' AND active");
			# what the holder acknowledged is past this database's record
			# (checkpoint_behind_slot): nothing was committed to t while it
			# held the slot, so the operator adopts the slot's position
			my $at = $src->safe_psql($DB, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'bi'");
			AshTest::stop_settled($src, $dst, 'bi');
			my ($sysid, $sdb) = AshTest::source_identity($src);
			$dst->safe_psql($DB, "SELECT ash_replicant_adopt_checkpoint('bi', '$sysid', '$sdb', '$at')"
				  . " FROM ash_replicant.checkpoints WHERE slot_name = 'bi'"
				  . " AND GREATEST(end_lsn, acknowledged_lsn) < '$at'::pg_lsn");
			$src->safe_psql($DB, "UPDATE t SET v = v || '+' WHERE id = 8");
		});
}

##############################################################################
# Source side, while streaming
##############################################################################

bad_case(label => 'source table renamed', state => 'misconfigured', reason => 'source_table_unmapped',
	context => qr/context="[^"]*neither mapped nor ignored: public.t_renamed/,
	running => 1, no_pending => 1,
	inject => sub {
		AshTest::wait_status($dst, 'bi', 'healthy', undef, src => $src, name => 'renamed: healthy before');
		$src->safe_psql($DB, 'ALTER TABLE t RENAME TO t_renamed');
	},
	fix => sub {
		$src->safe_psql($DB, 'ALTER TABLE t_renamed RENAME TO t');
		$src->safe_psql($DB, "UPDATE t SET v = v || '+' WHERE id = 9");
	});

# TRUNCATE with on_truncate halt; the insert before it in the same source
# transaction must not be applied either.
bad_case(label => 'truncate under on_truncate halt', sink => 'tr', table => 'tt',
	state => 'halted', reason => 'source_truncate',
	context => qr/context="[^"]*on_truncate halt/, running => 1, no_pending => 1,
	inject => sub {
		AshTest::wait_status($dst, 'tr', 'healthy', undef, src => $src, name => 'truncate: healthy before');
		$src->safe_psql($DB, "BEGIN; INSERT INTO tt VALUES (1000, 'late'); TRUNCATE tt; COMMIT;");
	});

##############################################################################
# A source with wal_level = replica (a third cluster): the slot cannot be
# created; no watermark is written, nothing applied.
##############################################################################
{
	my $rep = PostgreSQL::Test::Cluster->new('replica_level');
	$rep->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
	$rep->append_conf('postgresql.conf', "listen_addresses = '127.0.0.1'\nwal_level = replica\nmax_wal_senders = 4\n");
	$rep->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n");
	$rep->start;
	AshTest::both($rep, $dst, 'CREATE TABLE w (id integer PRIMARY KEY, v text)');
	$rep->safe_psql($DB, "CREATE PUBLICATION pub_wl FOR TABLE w; INSERT INTO w VALUES (1, 'a')");
	AshTest::setup_pipeline($rep, $dst, sink => 'wl', publication => 'pub_wl', maps => [ ['w'] ]);
	$faults++;
	AshTest::wait_status($dst, 'wl', 'misconfigured', 'source_not_logical', src => $rep,
		name => 'wal_level replica: misconfigured/source_not_logical');
	halt_logged('wl', 'source_not_logical', qr/context="[^"]*wal_level/, 'wal_level replica');
	is($dst->safe_psql($DB, 'SELECT count(*) FROM w'), '0', 'wal_level replica: nothing applied');
	like($dst->safe_psql($DB, "SELECT coalesce(max(c.commit_lsn::text), 'none') FROM (" . AshTest::checkpoint_sql('wl', 'c.commit_lsn') . ") c"),
		qr{^(0/0|none)$}, 'wal_level replica: no watermark');
	is($rep->safe_psql($DB, 'SELECT count(*) FROM pg_replication_slots'), '0', 'wal_level replica: no slot');
	no_sentinel('wal_level replica');
	AshTest::stop_sink($dst, 'wl');
	$rep->stop;
}

##############################################################################
# The slot loses its WAL (max_slot_wal_keep_size) while the sink is stopped,
# then the slot is dropped: retention_lost, then source_slot_missing (a
# re-created slot would skip changes).
##############################################################################

bad_case(label => 'slot invalidated', state => 'halted', reason => 'retention_lost',
	context => qr/context="[^"]*WAL was removed/,
	inject => sub {
		$src->safe_psql($DB, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
		$src->reload;
		for (1 .. 4)
		{
			$src->safe_psql($DB, "CREATE TABLE IF NOT EXISTS walfill (x int); INSERT INTO walfill VALUES (1); SELECT pg_switch_wal()");
		}
		$src->safe_psql($DB, 'CHECKPOINT');
		ok(AshTest::poll($src, "SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = 'bi'", 't', timeout => 30),
			'slot invalidated: wal_status lost');
		$src->safe_psql($DB, "ALTER SYSTEM RESET max_slot_wal_keep_size");
		$src->reload;
	});

bad_case(label => 'slot dropped', state => 'halted', reason => 'source_slot_missing',
	context => qr/context="[^"]*slot is gone/,
	inject => sub {
		$src->safe_psql($DB, "SELECT pg_drop_replication_slot('bi')");
	});
is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'bi'"), '0',
	'slot dropped: not re-created behind the watermark');

no_sentinel('end');
note sprintf("done after %.1fs", time - $t0);
diag "ash-proof: faults_injected=$faults checks=" . Test::More->builder->current_test;
done_testing();
