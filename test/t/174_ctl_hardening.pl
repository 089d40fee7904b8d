# The command-line tool (tools/ash_replicant_ctl, docs/operations.md "The
# command-line tool") where it failed before (found by an exploratory test):
#  leak      a password in a malformed connection string (a URI libpq cannot
#            parse, a bad %-escape, an unescaped "@" that makes part of it
#            the host name) is not printed; a refused connection and a
#            missing database still say why, without the quoted values
#  empty     a name or tenant that is empty once control characters are
#            stripped keeps the columns in place (tab-separated read merged
#            the two tabs: counts printed as the tenant, a time as a count)
#  dash      a tenant named "-" is that tenant, not the all-tenants line
#  encoding  output is UTF-8 whatever PGCLIENTENCODING says; a sink name the
#            client encoding lacks does not fail status of every sink
#  timeout   --timeout is refused outside verify; a huge one is refused as
#            too large (not "negative"); verify runs READ COMMITTED under a
#            role whose default isolation is REPEATABLE READ
#  messages  text mode prints a sink's name as it is (not JSON-escaped); a
#            database without the extension is named as such; status of a
#            database without sinks exits 2 with a message; verify says
#            "could not verify"; a session the server ends mid-query is a
#            lost connection, not "could not connect"; --help is stdout, 0
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();

# ctl({env}, args...): the tool against the destination (-h/-p appended)
sub ctl
{
	my ($env, @args) = @_;
	return ctl_raw($env, @args, '-h', $dst->host, '-p', $dst->port);
}

# ctl_raw({env}, args...): the tool with exactly these arguments
sub ctl_raw
{
	my ($env, @args) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, %{ $env // {} });
	delete $ENV{PGCLIENTENCODING} unless $env && exists $env->{PGCLIENTENCODING};
	IPC::Run::run([ 'ash_replicant_ctl', @args ], '<', \undef, '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

$src->safe_psql($DB, q{
CREATE TABLE accounts (tenant text NOT NULL, id integer NOT NULL, name text, PRIMARY KEY (tenant, id));
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE accounts;
});
$dst->safe_psql($DB, q{
CREATE TABLE accounts (tenant text NOT NULL, id integer NOT NULL, name text, PRIMARY KEY (tenant, id));
CREATE ROLE mon LOGIN IN ROLE ash_replicant_monitor;
});
AshTest::setup_pipeline($src, $dst, sink => 'shop', publication => 'pub',
	maps => [ [ 'accounts', tenant_column => 'tenant', tenant_strategy => 'attribute' ] ]);
AshTest::wait_caught_up($src, $dst, 'shop') or BAIL_OUT('no stream');
# tenants are source data: one made of a control character only, one named
# "-", one plain
$src->safe_psql($DB, q{
INSERT INTO accounts VALUES (E'\x01', 1, 'a'), (E'\x01', 2, 'b'), (E'\x01', 3, 'c');
INSERT INTO accounts VALUES ('-', 1, 'a');
INSERT INTO accounts VALUES ('acme', 1, 'a'), ('acme', 2, 'b');
});
AshTest::wait_caught_up($src, $dst, 'shop') or BAIL_OUT('no stream');
my $closed = PostgreSQL::Test::Cluster::get_free_port();

# leak
{
	my $pw = 'SENTINEL_PW_4711';
	my ($rc, $out, $err) = ctl({}, 'status', '-d', "postgresql://u:$pw\@[::1/postgres");
	is($rc, 3, 'leak: a malformed URI exits 3');
	unlike("$out$err", qr/SENTINEL/, 'leak: the password of a malformed URI is not printed') or diag $err;
	like($err, qr/could not connect to the destination database: the connection string could not be parsed/,
		'leak: ... it says the connection string could not be parsed') or diag $err;
	($rc, $out, $err) = ctl({}, 'status', '-d', 'postgresql://u:SENTINEL%zz_4711@127.0.0.1/postgres');
	unlike("$out$err", qr/SENTINEL/, 'leak: the password of a URI with a bad %-escape is not printed') or diag $err;
	# an unescaped "@" in the password: libpq takes "SENTINEL...@127.0.0.1" as the host
	($rc, $out, $err) = ctl_raw({}, 'status', '-d', "postgresql://u:p\@$pw\@127.0.0.1:$closed/postgres");
	is($rc, 3, 'leak: a password libpq reads as a host name exits 3');
	unlike("$out$err", qr/SENTINEL/, 'leak: ... the host name holding it is not printed') or diag $err;
	like($err, qr/could not connect to the destination database: could not translate host name/,
		'leak: ... it still says why') or diag $err;
	# a refused connection: the reason is kept, the values are not
	($rc, $out, $err) = ctl_raw({}, 'status', '-d', "host=127.0.0.1 port=$closed password=$pw dbname=postgres");
	is($rc, 3, 'leak: a refused connection exits 3');
	like($err, qr/could not connect to the destination database: .*Connection refused/,
		'leak: ... and says the connection was refused') or diag $err;
	unlike("$out$err", qr/SENTINEL/, 'leak: ... without the password');
	note $err;
	# a missing database: the server's reason, without the name
	($rc, $out, $err) = ctl({}, 'status', '-d', "dbname=nosuch_$pw");
	is($rc, 3, 'leak: a missing database exits 3');
	like($err, qr/could not connect to the destination database: .*database .*does not exist/,
		'leak: ... and says the database does not exist') or diag $err;
	unlike("$out$err", qr/SENTINEL/, 'leak: ... without its name');
	note $err;
}

# empty
{
	my ($rc, $out, $err) = ctl({}, 'status', '--sink', 'shop', '--tables', '--format', 'json', '-d', $DB);
	my $j = eval { decode_json($out) };
	ok($j, 'empty: status --tables json parses') or diag "$out$err";
	is($dst->safe_psql($DB, q{SELECT inserted FROM ash_replicant.stat_tables WHERE tenant = E'\x01'}), '3',
		'empty: (the view counts 3 rows of the control-character tenant)');
	my @rows = grep { $_->{target} eq 'public.accounts' } @{ $j->{tables} // [] };
	my ($ctl_tenant) = grep { defined $_->{tenant} && $_->{tenant} eq '' } @rows;
	is($ctl_tenant && $ctl_tenant->{inserted}, 3, 'empty: the control-character tenant shows its 3 rows')
	  or diag explain \@rows;
	ok(!(grep { defined $_->{tenant} && $_->{tenant} =~ /^\d+$/ } @rows),
		'empty: no row shows a count in the tenant field');
	ok(!(grep { !defined $_->{last_commit_time} || $_->{last_commit_time} !~ /^\d{4}-/ } @rows),
		'empty: every last_commit_time is a time') or diag explain \@rows;
	my $total = 0;
	$total += $_->{inserted} for @rows;
	# all-tenants line 6, per tenant 3 + 1 + 2
	is($total, 12, 'empty: the per-tenant counts add up as the view has them');
	($rc, $out, $err) = ctl({}, 'status', '--sink', 'shop', '--tables', '-d', $DB);
	like($out, qr/^shop\s+public\.accounts\s+3\s+0\s+0\s+0\s+\d{4}-/m,
		'empty: text mode: the control-character tenant line keeps its columns') or diag $out;

	$dst->safe_psql($DB, q{SELECT ash_replicant_create_sink(E'\t', slot_name => 'tabonly')});
	($rc, $out, $err) = ctl({}, 'status', '--sink', "\t", '--format', 'json', '-d', $DB);
	$j = eval { decode_json($out) };
	is($j && $j->[0]{state}, 'not_started', 'empty: a sink named by a control character only reads not_started')
	  or diag "$out$err";
	is($j && $j->[0]{sink}, '', 'empty: ... its name printed empty');
	is($rc, 2, 'empty: ... and exits 2');
	($rc, $out, $err) = ctl({}, 'status', '--sink', "\t", '-d', $DB);
	like($out, qr/^\s*not_started/, 'empty: text mode too') or diag "$out$err";
	$dst->safe_psql($DB, q{SELECT ash_replicant_drop_sink(E'\t')});
}

# dash
{
	my ($rc, $out, $err) = ctl({}, 'status', '--sink', 'shop', '--tables', '--format', 'json', '-d', $DB);
	my $j = eval { decode_json($out) } // {};
	my @rows = grep { $_->{target} eq 'public.accounts' } @{ $j->{tables} // [] };
	my @all = grep { !defined $_->{tenant} } @rows;
	is(scalar(@all), 1, 'dash: one all-tenants (tenant null) line per target') or diag explain \@rows;
	is($all[0] && $all[0]{inserted}, 6, 'dash: ... counting every tenant');
	my ($dash) = grep { defined $_->{tenant} && $_->{tenant} eq '-' } @rows;
	is($dash && $dash->{inserted}, 1, 'dash: the tenant "-" is its own line');
	($rc, $out, $err) = ctl({}, 'status', '--sink', 'shop', '--tables', '-d', $DB);
	like($out, qr/^shop\s+public\.accounts\s+-\s+1\s+0\s+0\s+0\s/m, 'dash: text mode prints the tenant "-"')
	  or diag $out;
	note $out;
}

# encoding
{
	$dst->safe_psql($DB, "SELECT ash_replicant_create_sink('caf\x{c3}\x{a9}', slot_name => 'cafe')");
	my ($rc, $out, $err) = ctl({ PGCLIENTENCODING => 'LATIN1' }, 'status', '--format', 'json', '-d', $DB);
	my $j = eval { JSON::PP->new->utf8->decode($out) };
	ok($j, 'encoding: status --format json under PGCLIENTENCODING=LATIN1 is valid UTF-8 JSON') or diag $@;
	ok($j && (grep { $_->{sink} eq "caf\x{e9}" } @$j), 'encoding: ... naming the sink café');
	($rc, $out, $err) = ctl({ PGCLIENTENCODING => 'LATIN1' }, 'status', '--sink', "caf\x{c3}\x{a9}", '-d', $DB);
	like($out, qr/^caf\x{c3}\x{a9}\s+not_started/m, 'encoding: text mode is UTF-8 too') or diag "$out$err";
	$dst->safe_psql($DB, "SELECT ash_replicant_create_sink('\x{d1}\x{8f}', slot_name => 'ya')");
	($rc, $out, $err) = ctl({ PGCLIENTENCODING => 'LATIN1' }, 'status', '--sink', 'shop', '-d', $DB);
	is($rc, 0, 'encoding: status --sink shop under LATIN1 exits 0') or diag "$out$err";
	($rc, $out, $err) = ctl({ PGCLIENTENCODING => 'LATIN1' }, 'status', '-d', $DB);
	is($rc, 2, 'encoding: status of all sinks answers although one name is not LATIN1 (not_started: 2)')
	  or diag "$out$err";
	$dst->safe_psql($DB, "SELECT ash_replicant_drop_sink('\x{d1}\x{8f}')");
	$dst->safe_psql($DB, "SELECT ash_replicant_drop_sink('caf\x{c3}\x{a9}')");
}

# timeout
for my $cmd ('status', 'doctor', 'preflight')
{
	my ($rc, $out, $err) = ctl({}, $cmd, '--sink', 'shop', '--timeout', '1', '-d', $DB);
	is($rc, 3, "timeout: $cmd refuses --timeout") or diag "rc=$rc $err";
	like($err, qr/--timeout belongs to verify/, "timeout: ... saying so");
	($rc, $out, $err) = ctl({}, $cmd, '--sink', 'shop', '--timeout=1', '-d', $DB);
	is($rc, 3, "timeout: $cmd refuses --timeout=1");
}
{
	my ($rc, $out, $err) = ctl({}, 'verify', '--sink', 'shop', '--timeout', '99999999999999', '-d', $DB);
	is($rc, 3, 'timeout: a huge --timeout exits 3');
	unlike($err, qr/negative/, 'timeout: ... is not called negative') or diag $err;
	like($err, qr/--timeout must be at most 31536000 seconds/, 'timeout: ... it is too large') or diag $err;
	($rc, $out, $err) = ctl({}, 'verify', '--sink', 'shop', '--timeout', '31536001', '-d', $DB);
	like($err, qr/--timeout must be at most/, 'timeout: one second over the bound is refused');
	($rc, $out, $err) = ctl({}, 'verify', '--sink', 'shop', '--timeout', '0000000000000000000060', '-d', $DB);
	is($rc, 0, 'timeout: leading zeros are a number') or diag "$out$err";

	$dst->safe_psql($DB, q{ALTER ROLE mon SET default_transaction_isolation = 'repeatable read'});
	($rc, $out, $err) = ctl({}, 'verify', '--sink', 'shop', '-U', 'mon', '-d', $DB);
	is($rc, 0, 'timeout: ctl verify runs READ COMMITTED under a REPEATABLE READ role default') or diag "$out$err";
	like($out, qr/^public\.accounts\s+public\.accounts\s+6\s+6\s+match/m, 'timeout: ... and compares');
	$dst->safe_psql($DB, q{ALTER ROLE mon RESET default_transaction_isolation});
}

# messages
{
	$dst->safe_psql($DB, q{SELECT ash_replicant_create_sink($$back\slash "q"$$, slot_name => 'bs')});
	my ($rc, $out, $err) = ctl({}, 'status', '--sink', 'back\\slash "q"', '-d', $DB);
	like($out, qr/^back\\slash "q"\s+not_started/m, 'messages: text status prints the sink name as it is')
	  or diag $out;
	($rc, $out, $err) = ctl({}, 'status', '--sink', 'back\\slash "q"', '--format', 'json', '-d', $DB);
	my $j = eval { decode_json($out) };
	is($j && $j->[0]{sink}, 'back\\slash "q"', 'messages: ... and JSON escapes it');
	$dst->safe_psql($DB, q{SELECT ash_replicant_drop_sink($$back\slash "q"$$)});

	$dst->safe_psql($DB, 'CREATE DATABASE noext');
	for my $cmd ('status', 'doctor', 'verify')
	{
		($rc, $out, $err) = ctl({}, $cmd, '--sink', 'shop', '-d', 'noext');
		is($rc, 3, "messages: $cmd in a database without the extension exits 3");
		like($err, qr/the ash_replicant extension is not installed in this database/,
			"messages: ... and says the extension is not installed") or diag $err;
		unlike($err, qr/does not exist/, "messages: ... not that a function does not exist");
	}

	$dst->safe_psql($DB, 'CREATE DATABASE empty');
	$dst->safe_psql('empty', 'CREATE EXTENSION ash_replicant');
	($rc, $out, $err) = ctl({}, 'status', '-d', 'empty');
	is($rc, 2, 'messages: status with no sink at all exits 2 (as verify with nothing mapped)');
	like($err, qr/no sink in this database/, 'messages: ... saying so') or diag $err;
	($rc, $out, $err) = ctl({}, 'status', '--format', 'json', '-d', 'empty');
	is($out, "[]\n", 'messages: ... JSON: an empty array');
	($rc, $out, $err) = ctl({}, 'status', '--tables', '--format', 'json', '-d', 'empty');
	is($out, qq({"sinks":[],"tables":[]}\n), 'messages: ... --tables: empty arrays');
	is($rc, 2, 'messages: ... exit 2');
	($rc, $out, $err) = ctl({}, 'status', '--sink', 'nosuch', '-d', 'empty');
	is($rc, 3, 'messages: an unknown sink still exits 3');

	($rc, $out, $err) = ctl({}, 'verify', '--sink', 'nosuch', '-d', $DB);
	is($rc, 3, 'messages: verify of an unknown sink exits 3');
	like($err, qr/could not verify/, 'messages: ... it says it could not verify');
	unlike($err, qr/could not diagnose/, 'messages: ... not "could not diagnose"');

	for my $h ('--help', 'help', '-?')
	{
		($rc, $out, $err) = ctl_raw({}, $h);
		is($rc, 0, "messages: $h exits 0");
		like($out, qr/^usage: ash_replicant_ctl /, "messages: $h prints the usage to stdout");
		is($err, '', "messages: $h prints nothing to stderr");
	}
	($rc, $out, $err) = ctl_raw({}, 'status', '--sink', 'shop', '--help');
	is($rc, 0, 'messages: --help after a command exits 0');
	like($out, qr/^usage: /, 'messages: ... with the usage on stdout');
	($rc, $out, $err) = ctl_raw({}, 'bogus');
	is($rc, 3, 'messages: an unknown command exits 3');
	like($err, qr/usage:/, 'messages: ... with the usage on stderr');
	is($out, '', 'messages: ... and nothing on stdout');
	($rc, $out, $err) = ctl_raw({});
	is($rc, 3, 'messages: no command exits 3');
}

# a session the server ends mid-query: a lost connection, not a failed connect
{
	my $bg = $dst->background_psql($DB, on_error_stop => 1);
	$bg->query_safe('BEGIN; LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE');
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'ash_replicant_ctl', 'verify', '--sink', 'shop', '--timeout', '120',
		'-h', $dst->host, '-p', $dst->port, '-d', $DB ], '<', \undef, '>', \$out, '2>', \$err);
	ok(AshTest::poll($dst, q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE '%ash_replicant_verify%'}),
		'lost: verify waits for the locked table');
	$dst->safe_psql($DB, q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE '%ash_replicant_verify%'});
	$h->finish;
	my $rc = $? >> 8;
	$bg->query_safe('ROLLBACK');
	$bg->quit;
	is($rc, 3, 'lost: exits 3');
	like($err, qr/lost the connection to the destination database/, 'lost: says the connection was lost')
	  or diag $err;
	unlike($err, qr/could not connect/, 'lost: ... not that it could not connect');
	note $err;
}

done_testing();
