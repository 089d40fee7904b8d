# No value of a failing row leaks from the history and event paths under
# context tenancy (README.md#status-statistics-and-events, README.md#reason-codes,
# docs/history-and-events.md, docs/keys.md).
#
# Under context tenancy the destination schema is named by the tenant value,
# so the tenant table's qualified name carries that value.  Each case plants
# a fresh random sentinel as the context tenant (its schema, created first,
# is named like the sentinel) and in an ordinary and an encrypted
# (sensitive + encrypted) column of the failing row.  After the halt, and
# again after the operator's fix and ash_replicant_start, the sentinel must
# appear in no log file of either node, not in ash_replicant_status() (whose
# halt_target must be the mapping's own target, never the tenant's table),
# ash_replicant.stat_pipelines, doctor or preflight output, the keyring
# status, any catalog row, nor in any message the test's own calls got; the
# mirror and the checkpoint are unchanged by the halt, and after the fix the
# row arrives exactly once.
#
# Sink "hist" (state mirror): SCD2 mapping public.h_hist <- hsrc, business
# key "code", tenant column "tenant", context tenancy, "pan" encrypted.
# Sink "alog" (append log, initial_state snapshot: context tenancy on an
# append log needs one): public.a_log <- asrc, context tenancy, "pan"
# encrypted.
#
#   1a apply_failed (23514)     SCD2: a CHECK on the tenant's history table
#                               rejects the new version of an update (the
#                               close of the old version rolls back with it)
#   1b census_drift             SCD2: the tenant's history table was created
#                               without its indexes: judged as its template
#                               was at registration (history_invalid) before
#                               the first write to it, the context withheld
#                               (the schema names the tenant); before, the
#                               version insert's ON CONFLICT found no arbiter
#                               (apply_failed 42P10)
#   2a apply_failed (23514)     append log: a CHECK on the tenant's log
#                               rejects an insert event
#   2b census_drift             append log: the tenant's log lacks the unique
#                               index on the five identity axes
#                               (append_log_invalid, as 1b)
#   3a keyring_missing_family   encryption: the keyring file is replaced
#                               while the pipeline runs by one without the
#                               column_encryption family (a valid file: the
#                               worker re-reads it at the next batch, see
#                               src/keyring.c); sealing an SCD2 insert fails
#                               in crypto.c through apply.c's call
#   3b keyring_missing_family   the same for an append-log delete event,
#                               sealed through apply_append.c's call
#   1c source_replica_identity  SCD2: a NULL business key (no fix exists
#                               short of changing the mapping: a restart
#                               halts again, still value-free)
#
# Not reachable honestly under context tenancy, so not tested here:
#   - unchanged_value_unavailable on the SCD2 and append paths: context
#     tenancy needs the old row of every update and delete (REPLICA IDENTITY
#     FULL, refused at start otherwise), whose unchanged TOAST values the
#     driver merges into the new row (PostgreSQL logs a FULL old row
#     detoasted), so the image is always complete;
#   - SCD2 tenant_conflict: only attribute tenancy scopes versions by a
#     tenant column; under context tenancy the tenant's table is the scope,
#     and an open version of another tenant's value in it is superseded like
#     any open version of the key (tried: the row applies, no halt);
#   - crypto.c's "value too long to encrypt" (over 1 GB).
# Their messages name the mapping's target or only the column all the same
# (src/apply_scd2.c, src/apply_append.c, src/crypto.c).
#
# 1c runs last: its sink stays halted.
#
# log_statement is 'none' on both nodes (the test itself sends the sentinels
# to the source and names schemas after them at the destination), and the
# destination logs errors verbosely, so a leak could not hide.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nlog_error_verbosity = verbose\nlog_min_messages = info\n");
my $md = 'message_digest 1 ' . AshTenancy::key_hex(9);
my @full_keyring = ($md, 'column_encryption 1 ' . AshTenancy::key_hex(5));
AshTenancy::write_keyring($dst, 'keyring', @full_keyring);

$src->safe_psql('postgres', q{
CREATE TABLE hsrc (id integer PRIMARY KEY, code text UNIQUE, tenant text, title text, pan text);
ALTER TABLE hsrc REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_hist FOR TABLE hsrc;
CREATE TABLE asrc (id integer PRIMARY KEY, tenant text, val text, pan text);
ALTER TABLE asrc REPLICA IDENTITY FULL;
CREATE TABLE ash_marker_alog (id bigint PRIMARY KEY, note text);
ALTER TABLE ash_marker_alog REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_alog FOR TABLE asrc, ash_marker_alog;
});

my $structural = AshTest::append_log_columns();
my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';

# the templates, and acme's tables as an ordinary tenant beside the sentinels
$dst->safe_psql('postgres', qq{
CREATE TABLE h_hist (
	vid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	code text, id integer, tenant text, title text, pan bytea,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	UNIQUE (code, valid_from_lsn));
CREATE UNIQUE INDEX h_hist_open ON h_hist (code) WHERE valid_to_lsn IS NULL;
CREATE TABLE a_log ($structural, id integer, tenant text, val text, pan bytea, $axes);
CREATE TABLE ash_marker_alog ($structural, id bigint, note text, $axes);
CREATE SCHEMA acme;
CREATE TABLE acme.h_hist (LIKE public.h_hist INCLUDING ALL);
CREATE TABLE acme.a_log (LIKE public.a_log INCLUDING ALL);
});

AshTest::setup_pipeline($src, $dst, sink => 'hist', publication => 'pub_hist',
	maps => [
		[ 'h_hist', source_table => 'hsrc', history_strategy => 'scd2', history_business_key => ['code'],
			tenant_column => 'tenant', tenant_strategy => 'context',
			sensitive => ['pan'], encrypted => ['pan'] ] ]);

{
	my ($sysid, $db) = AshTest::source_identity($src);
	my $conn = AshTest::conninfo($src);
	for my $stmt (
		# context tenancy on an append log needs a snapshot sink (docs/sql-api-mapping.md)
		"SELECT ash_replicant_create_sink('alog', sink_kind => 'append_log', initial_state => 'snapshot')",
		"SELECT ash_replicant_map_table('alog', 'a_log'::regclass, source_table => 'asrc', append_log => true,"
		  . " tenant_column => 'tenant', tenant_strategy => 'context', sensitive => ARRAY['pan'], encrypted => ARRAY['pan'])",
		"SELECT ash_replicant_map_table('alog', 'ash_marker_alog'::regclass, append_log => true)",
		"SELECT ash_replicant_configure_pipeline('alog', '$conn', publication => 'pub_alog',"
		  . " source_system_identifier => '$sysid', source_database => '$db', census => '{\"interval_ms\": 1000}',"
		  . " go_forward_only => false, snapshot => 'v1')",
		"SELECT ash_replicant_start('alog')")
	{
		my ($rc, $out, $err) = $dst->psql('postgres', $stmt);
		BAIL_OUT("setup of alog failed: " . substr($stmt, 0, 60) . ": $err") if $rc;
	}
}
for my $s (qw(hist alog))
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s streams") or BAIL_OUT("pipeline $s never streamed");
}

$src->safe_psql('postgres', q{
INSERT INTO hsrc VALUES (100, 'acme-100', 'acme', 'acme title', '4111 0000 0000 0100');
INSERT INTO asrc VALUES (100, 'acme', 'acme event', '4111 0000 0000 0200');
});
AshTest::wait_caught_up($src, $dst, $_) for qw(hist alog);
is($dst->safe_psql('postgres', q{SELECT (SELECT count(*) FROM acme.h_hist WHERE valid_to_lsn IS NULL) || '/'
	|| (SELECT count(*) FROM acme.a_log WHERE operation = 'insert')}),
	'1/1', "acme's rows reach acme's tables (the setup works)");

my %template = (hist => 'public.h_hist', alog => 'public.a_log');
my %home = (hist => 'h_hist', alog => 'a_log');
my @all_sentinels;
my @messages;    # every output and error text the test's own calls got

# Everything the test sees of the destination through SQL, as psql text, and
# the stderr of those calls.
sub look_around
{
	for my $sql ('SELECT * FROM ash_replicant_status()', 'SELECT * FROM ash_replicant.stat_pipelines',
		'SELECT * FROM ash_replicant.checkpoints', 'SELECT * FROM ash_replicant.pipelines',
		'SELECT * FROM ash_replicant_keyring_status()',
		(map { ("SELECT * FROM ash_replicant_doctor('$_')", "SELECT * FROM ash_replicant_preflight('$_')") }
			qw(hist alog)))
	{
		my ($rc, $out, $err) = $dst->psql('postgres', $sql);
		push @messages, $out, $err;
	}
}

my $faults = 0;    # bad inputs injected (the ash-proof summary line)

# A tenant's schema named like the sentinel, with its table of the sink's
# template (LIKE ... $like [INCLUDING ALL]), then the other statements given.
sub tenant_table_like
{
	my ($sink, $s, $like, @more) = @_;
	$dst->safe_psql('postgres',
		join(";\n", qq{CREATE SCHEMA "$s"}, qq{CREATE TABLE "$s".$home{$sink} (LIKE $template{$sink} $like)}, @more));
	return qq{"$s".$home{$sink}};
}

sub tenant_table
{
	my ($sink, $s, @more) = @_;
	return tenant_table_like($sink, $s, 'INCLUDING ALL', @more);
}

# The halt as the status function and the catalog record it.
sub halt_facts
{
	my ($sink) = @_;
	return $dst->safe_psql('postgres', "SELECT coalesce(s.halt_target, '(none)') || '|' || coalesce(s.halt_sqlstate, '')"
		  . " FROM ash_replicant_status('$sink') s");
}

# case(label, sink, reason, state, sqlstate, prep => sub(s), bad => sub(s),
#      fix => sub(s), arrived => [sql => expected, name] ...)
sub case
{
	my (%c) = @_;
	$faults++;
	my $s = AshTenancy::sentinel();
	push @all_sentinels, $s;
	my ($label, $sink) = @c{qw(label sink)};
	my $table = $c{prep}->($s);
	my $before = AshTenancy::state($dst, $sink, "acme.$home{$sink}", $table);

	$c{bad}->($s);
	AshTenancy::expect_halt($src, $dst, $sink, $c{reason}, $before, label => $label,
		state => $c{state} // 'halted');
	is(halt_facts($sink), "$template{$sink}|" . ($c{sqlstate} // ''),
		"$label: the halt names the mapping's target $template{$sink}"
		  . ($c{sqlstate} ? " and SQLSTATE $c{sqlstate}" : ''));
	if ($c{sqlstate})
	{
		is($dst->safe_psql('postgres', "SELECT halt_sqlstate || '|' || halt_target FROM ash_replicant.pipelines WHERE sink_name = '$sink'"),
			"$c{sqlstate}|$template{$sink}", "$label: the catalog records SQLSTATE and target");
	}
	look_around();
	AshTenancy::assert_no_leak([$s], [ $src, $dst ], \@messages, "$label: sentinel after the halt");

	if (!$c{fix})
	{
		push @messages, AshTenancy::restart_and_expect_halt($src, $dst, $sink, $c{reason}, $before,
			label => $label, state => $c{state} // 'halted');
		look_around();
		AshTenancy::assert_no_leak([$s], [ $src, $dst ], \@messages, "$label: sentinel after a restart without a fix");
		return $s;
	}
	$c{fix}->($s);
	push @messages, AshTest::start_sink($dst, $sink);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: resumed after the fix");
	my @arrived = @{ $c{arrived}->($s, $table) };
	while (my ($sql, $want, $name) = splice(@arrived, 0, 3))
	{
		is($dst->safe_psql('postgres', $sql), $want, "$label: $name");
	}
	look_around();
	AshTenancy::assert_no_leak([$s], [ $src, $dst ], \@messages, "$label: sentinel after the restart");
	return $s;
}

# SQL: the plaintext of an encrypted column of one row of a tenant table
sub plain_sql
{
	my ($table, $where) = @_;
	return "SELECT ash_replicant_decrypt(pan, '$table', 'pan') = title FROM $table WHERE $where";
}

# ---------------------------------------------------------------------------
# 1a SCD2: the new version of an update violates a CHECK of the tenant table
# ---------------------------------------------------------------------------
case(
	label    => '1a SCD2 check violation',
	sink     => 'hist',
	reason   => 'apply_failed',
	sqlstate => '23514',
	prep     => sub {
		my ($s) = @_;
		my $t = tenant_table('hist', $s);
		$src->safe_psql('postgres', qq{INSERT INTO hsrc VALUES (1, 'k1', '$s', 'first', 'first')});
		AshTest::wait_caught_up($src, $dst, 'hist', name => '1a: the first version lands in the tenant table');
		$dst->safe_psql('postgres', qq{ALTER TABLE $t ADD CONSTRAINT title_ok CHECK (title NOT LIKE 'SENTINEL%') NOT VALID});
		return $t;
	},
	bad => sub { my ($s) = @_; $src->safe_psql('postgres', qq{UPDATE hsrc SET title = '$s', pan = '$s' WHERE id = 1}) },
	fix => sub { my ($s) = @_; $dst->safe_psql('postgres', qq{ALTER TABLE "$s".h_hist DROP CONSTRAINT title_ok}) },
	arrived => sub {
		my ($s, $t) = @_;
		return [
			"SELECT string_agg(title || ':' || (valid_to_lsn IS NULL), ',' ORDER BY valid_from_lsn) FROM $t WHERE code = 'k1'",
			"first:false,$s:true", 'the old version closed once, the new one opened once',
			plain_sql($t, "code = 'k1' AND valid_to_lsn IS NULL"), 't', 'the encrypted column decrypts to the source value' ];
	});

# ---------------------------------------------------------------------------
# 1b SCD2: the tenant's history table was created without its indexes
# ---------------------------------------------------------------------------
case(
	label    => '1b SCD2 tenant table without its indexes',
	sink     => 'hist',
	reason   => 'census_drift',
	prep     => sub { my ($s) = @_; return tenant_table_like('hist', $s, 'INCLUDING IDENTITY INCLUDING DEFAULTS') },
	bad      => sub { my ($s) = @_; $src->safe_psql('postgres', qq{INSERT INTO hsrc VALUES (2, 'k2', '$s', '$s', '$s')}) },
	fix      => sub {
		my ($s) = @_;
		$dst->safe_psql('postgres', qq{ALTER TABLE "$s".h_hist ADD PRIMARY KEY (vid), ADD UNIQUE (code, valid_from_lsn);
CREATE UNIQUE INDEX ON "$s".h_hist (code) WHERE valid_to_lsn IS NULL});
	},
	arrived => sub {
		my ($s, $t) = @_;
		return [
			"SELECT string_agg(tenant || ':' || title || ':' || (valid_to_lsn IS NULL), ',') FROM $t",
			"$s:$s:true", 'exactly one open version',
			plain_sql($t, "code = 'k2'"), 't', 'the encrypted column decrypts to the source value' ];
	});

# ---------------------------------------------------------------------------
# 2a append log: an insert event violates a CHECK of the tenant's log
# ---------------------------------------------------------------------------
case(
	label    => '2a append-log check violation',
	sink     => 'alog',
	reason   => 'apply_failed',
	sqlstate => '23514',
	prep     => sub {
		my ($s) = @_;
		return tenant_table('alog', $s,
			qq{ALTER TABLE "$s".a_log ADD CONSTRAINT val_ok CHECK (val NOT LIKE 'SENTINEL%') NOT VALID});
	},
	bad => sub { my ($s) = @_; $src->safe_psql('postgres', qq{INSERT INTO asrc VALUES (1, '$s', '$s', '$s')}) },
	fix => sub { my ($s) = @_; $dst->safe_psql('postgres', qq{ALTER TABLE "$s".a_log DROP CONSTRAINT val_ok}) },
	arrived => sub {
		my ($s, $t) = @_;
		return [
			"SELECT string_agg(operation || ':' || tenant || ':' || val, ',') FROM $t",
			"insert:$s:$s", 'exactly one insert event',
			"SELECT ash_replicant_decrypt(pan, '$t', 'pan') = val FROM $t", 't',
			'the encrypted column decrypts to the source value' ];
	});

# ---------------------------------------------------------------------------
# 2b append log: the tenant's log lacks the unique index on the identity axes
# ---------------------------------------------------------------------------
case(
	label    => '2b append-log tenant table without its identity index',
	sink     => 'alog',
	reason   => 'census_drift',
	prep     => sub { my ($s) = @_; return tenant_table_like('alog', $s, 'INCLUDING DEFAULTS') },
	bad      => sub { my ($s) = @_; $src->safe_psql('postgres', qq{INSERT INTO asrc VALUES (2, '$s', '$s', '$s')}) },
	fix      => sub {
		my ($s) = @_;
		$dst->safe_psql('postgres', qq{ALTER TABLE "$s".a_log ADD $axes});
	},
	arrived => sub {
		my ($s, $t) = @_;
		return [
			"SELECT string_agg(operation || ':' || tenant || ':' || val, ',') FROM $t",
			"insert:$s:$s", 'exactly one insert event',
			"SELECT ash_replicant_decrypt(pan, '$t', 'pan') = val FROM $t", 't',
			'the encrypted column decrypts to the source value' ];
	});

# ---------------------------------------------------------------------------
# 3a/3b: the keyring loses column_encryption while the pipelines run
# ---------------------------------------------------------------------------
case(
	label  => '3a SCD2 insert, keyring without column_encryption',
	sink   => 'hist',
	reason => 'keyring_missing_family',
	state  => 'misconfigured',
	prep   => sub { my ($s) = @_; return tenant_table('hist', $s) },
	bad    => sub {
		my ($s) = @_;
		AshTenancy::write_keyring($dst, 'keyring', $md);
		$src->safe_psql('postgres', qq{INSERT INTO hsrc VALUES (3, 'k3', '$s', '$s', '$s')});
	},
	fix     => sub { AshTenancy::write_keyring($dst, 'keyring', @full_keyring) },
	arrived => sub {
		my ($s, $t) = @_;
		return [
			"SELECT string_agg(tenant || ':' || title || ':' || (valid_to_lsn IS NULL), ',') FROM $t",
			"$s:$s:true", 'exactly one open version',
			plain_sql($t, "code = 'k3'"), 't', 'the encrypted column decrypts to the source value' ];
	});

case(
	label  => '3b append-log delete, keyring without column_encryption',
	sink   => 'alog',
	reason => 'keyring_missing_family',
	state  => 'misconfigured',
	prep   => sub {
		my ($s) = @_;
		my $t = tenant_table('alog', $s);
		$src->safe_psql('postgres', qq{INSERT INTO asrc VALUES (3, '$s', '$s', '$s')});
		AshTest::wait_caught_up($src, $dst, 'alog', name => '3b: the insert event lands in the tenant log');
		return $t;
	},
	bad => sub {
		my ($s) = @_;
		AshTenancy::write_keyring($dst, 'keyring', $md);
		$src->safe_psql('postgres', q{DELETE FROM asrc WHERE id = 3});
	},
	fix     => sub { AshTenancy::write_keyring($dst, 'keyring', @full_keyring) },
	arrived => sub {
		my ($s, $t) = @_;
		return [
			"SELECT string_agg(operation || ':' || id, ',' ORDER BY commit_lsn, ordinal) FROM $t",
			'insert:3,delete:3', 'the delete event arrives once, after the insert',
			"SELECT ash_replicant_decrypt(pan, '$t', 'pan') = val FROM $t WHERE operation = 'delete'", 't',
			'the old row of the delete decrypts to the source value' ];
	});

# ---------------------------------------------------------------------------
# 1c SCD2: a NULL business key; nothing an operator can fix at the destination
# ---------------------------------------------------------------------------
case(
	label  => '1c SCD2 NULL business key',
	sink   => 'hist',
	reason => 'source_replica_identity',
	state  => 'misconfigured',
	prep   => sub { my ($s) = @_; return tenant_table('hist', $s) },
	bad    => sub { my ($s) = @_; $src->safe_psql('postgres', qq{INSERT INTO hsrc VALUES (4, NULL, '$s', '$s', '$s')}) });

# the greps read the right files: structural lines the product does log are found
for my $r ([ hist => 'apply_failed' ], [ alog => 'keyring_missing_family' ])
{
	ok(scalar(AshTenancy::grep_all_logs(["event=pipeline.halt sink=$r->[0] reason=$r->[1]"], $src, $dst)) >= 1,
		"positive control: the log grep finds the $r->[0] $r->[1] halt event");
}
ok(scalar(grep { defined && /\Q$template{hist}\E/ } @messages) > 0,
	"positive control: the collected messages hold the status output (halt_target $template{hist})");

# and every sentinel, everywhere, at the end
look_around();
AshTenancy::assert_no_leak(\@all_sentinels, [ $src, $dst ], \@messages, 'all sentinels at the end');

diag "ash-proof: faults_injected=$faults checks=" . Test::More->builder->current_test;
done_testing();
