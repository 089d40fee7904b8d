# No value of a failing row leaks (README.md#status-statistics-and-events, README.md#reason-codes, README.md#testing "Security").
#
# Each case plants a fresh random sentinel in the tenant column (where the
# case allows one), in a sensitive (encrypted) column and in an ordinary
# column of a row that fails; after the halt, and again after the operator's
# fix and restart, the sentinel must appear in no file of the log directory
# (both nodes), in no data-directory log, not in ash_replicant_status(),
# ash_replicant.stat_pipelines, the keyring status or any catalog row, and
# not in any message the test's own calls got.
#
#   a  tenant_scope_missing     context tenant = sentinel (no such schema)
#   b  tenant_conflict          attribute tenant = sentinel meets acme's row
#   c  apply_failed (23514)     a destination CHECK fails on the row; the
#                               server's DETAIL would carry tenant and name
#   c2 apply_failed (23514)     the same in a context tenant's table whose
#                               schema is named like case a's sentinel
#   d  tenant_resolution_failed the tenant function raises with the whole
#                               row in its message
#   e  (no failure) a delete of a row the mirror lacks, under context tenancy:
#                               the event names the table, never the tenant
#                               (here the tenant's schema is the sentinel)
#   f  tenant_required          NULL tenant; sentinel in the other columns
#
# log_statement is 'none' on both nodes (the test itself sends the sentinels
# to the source and creates a schema named like one at the destination), and
# the destination logs errors verbosely, so a leak could not hide.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nlog_error_verbosity = verbose\nlog_min_messages = info\n");
my $sink = 'leak';
AshTenancy::write_keyring($dst, 'keyring', 'column_encryption 1 ' . AshTenancy::key_hex(5));

$src->safe_psql('postgres', q{
CREATE TABLE acct (tenant text, id integer NOT NULL, name text, pan text, UNIQUE (tenant, id));
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text, pan text);
CREATE TABLE ev (id integer PRIMARY KEY, org text, kind text, pan text);
ALTER TABLE acct REPLICA IDENTITY FULL;
ALTER TABLE docs REPLICA IDENTITY FULL;
ALTER TABLE ev REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_leak FOR TABLE acct, docs, ev;
});
$dst->safe_psql('postgres', q{
CREATE TABLE acct (tenant text, id integer PRIMARY KEY, name text, pan bytea);
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text, pan bytea);
CREATE SCHEMA acme;
CREATE TABLE acme.docs (LIKE public.docs INCLUDING ALL);
CREATE TABLE ev (id integer PRIMARY KEY, org text, kind text, pan bytea);
CREATE SCHEMA ev_acme;
CREATE TABLE ev_acme.ev (LIKE public.ev INCLUDING ALL);
CREATE FUNCTION ev_tenant(r jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF r->>'org' LIKE 'SENTINEL%' THEN
		RAISE EXCEPTION 'cannot resolve the tenant of %', r USING DETAIL = r::text, HINT = r->>'org';
	END IF;
	RETURN lower(r->>'org');
END $$;
});

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_leak',
	maps => [
		[ 'acct', tenant_column => 'tenant', tenant_strategy => 'attribute',
			sensitive => ['pan'], encrypted => ['pan'] ],
		[ 'docs', tenant_column => 'tenant', tenant_strategy => 'context',
			sensitive => ['pan'], encrypted => ['pan'] ],
		[ 'ev', tenant_function => 'ev_tenant(jsonb)', tenant_strategy => 'context',
			tenant_schema_format => 'ev_%s', sensitive => ['pan'], encrypted => ['pan'] ] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams') or BAIL_OUT('pipeline never streamed');

$src->safe_psql('postgres', q{
INSERT INTO acct VALUES ('acme', 1, 'acme one', '4111 0000 0000 0001');
INSERT INTO docs VALUES (100, 'acme', 'acme doc', '4111 0000 0000 0100');
INSERT INTO ev VALUES (100, 'ACME', 'created', '4111 0000 0000 0200');
});
AshTest::wait_caught_up($src, $dst, $sink);

my @all_sentinels;
my @messages;    # every error or notice text the test's own calls got

# Everything the test sees of the destination through SQL, as psql text, and
# the stderr of those calls.
sub look_around
{
	for my $sql ('SELECT * FROM ash_replicant_status()', 'SELECT * FROM ash_replicant.stat_pipelines',
		'SELECT * FROM ash_replicant.checkpoints', 'SELECT * FROM ash_replicant.pipelines')
	{
		my ($rc, $out, $err) = $dst->psql('postgres', $sql);
		push @messages, $out, $err;
	}
}

my $faults = 0;    # bad inputs injected (the ash-proof summary line)

# case(label, reason, bad => sub(sentinel) -> sql, fix => sql, sqlstate)
sub case
{
	my (%c) = @_;
	$faults++;
	my $s = AshTenancy::sentinel();
	push @all_sentinels, $s;
	my @needles = ($s, @{ $c{also} // [] });
	my $label = $c{label};
	my $before = AshTenancy::state($dst, $sink, qw(acct acme.docs ev_acme.ev), @{ $c{tables} // [] });

	$src->safe_psql('postgres', $c{bad}->($s));
	AshTenancy::expect_halt($src, $dst, $sink, $c{reason}, $before, label => $label);
	if ($c{sqlstate})
	{
		is($dst->safe_psql('postgres', "SELECT halt_sqlstate FROM ash_replicant.pipelines WHERE sink_name = '$sink'"),
			$c{sqlstate}, "$label: SQLSTATE $c{sqlstate} recorded");
	}
	look_around();
	AshTenancy::assert_no_leak(\@needles, [ $src, $dst ], \@messages, "$label: sentinel after the halt");
	return $s unless defined $c{fix};

	$dst->safe_psql('postgres', $c{fix}->($s));
	push @messages, AshTest::start_sink($dst, $sink);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: resumed after the fix");
	look_around();
	AshTenancy::assert_no_leak(\@needles, [ $src, $dst ], \@messages, "$label: sentinel after the restart");
	return $s;
}

my $sa = case(
	label  => 'a scope missing',
	reason => 'tenant_scope_missing',
	bad    => sub { my ($s) = @_; qq{INSERT INTO docs VALUES (1, '$s', '$s', '$s')} },
	fix    => sub { my ($s) = @_; qq{CREATE SCHEMA "$s"; CREATE TABLE "$s".docs (LIKE public.docs INCLUDING ALL);} });
is($dst->safe_psql('postgres', qq{SELECT count(*) FROM "$sa".docs}), '1', 'a: the row landed once the schema exists');

case(
	label  => 'b tenant conflict',
	reason => 'tenant_conflict',
	bad    => sub { my ($s) = @_; qq{INSERT INTO acct VALUES ('$s', 1, '$s', '$s')} },
	fix    => sub { q{ALTER TABLE acct DROP CONSTRAINT acct_pkey, ADD PRIMARY KEY (tenant, id)} });

$dst->safe_psql('postgres', q{ALTER TABLE acct ADD CONSTRAINT name_ok CHECK (name NOT LIKE 'SENTINEL%') NOT VALID});
case(
	label    => 'c check violation',
	reason   => 'apply_failed',
	sqlstate => '23514',
	bad      => sub { my ($s) = @_; qq{INSERT INTO acct VALUES ('$s', 2, '$s', '$s')} },
	fix      => sub { q{ALTER TABLE acct DROP CONSTRAINT name_ok} });

# c2: the same under context tenancy, in the tenant table of case a (its
# schema is named like that case's sentinel): neither the row's values nor
# the tenant (= the schema's name) may appear
$dst->safe_psql('postgres', qq{ALTER TABLE "$sa".docs ADD CONSTRAINT title_ok CHECK (title NOT LIKE 'SENTINEL%') NOT VALID});
case(
	label    => 'c2 check violation in a tenant table',
	reason   => 'apply_failed',
	sqlstate => '23514',
	also     => [$sa],
	tables   => [qq{"$sa".docs}],
	bad      => sub { my ($s) = @_; qq{INSERT INTO docs VALUES (2, '$sa', '$s', '$s'), (3, '$sa', 'fine', '$s')} },
	fix      => sub { qq{ALTER TABLE "$sa".docs DROP CONSTRAINT title_ok} });

case(
	label  => 'd tenant function raises',
	reason => 'tenant_resolution_failed',
	bad    => sub { my ($s) = @_; qq{INSERT INTO ev VALUES (1, '$s', '$s', '$s')} },
	fix    => sub { q{CREATE OR REPLACE FUNCTION ev_tenant(r jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF r->>'org' LIKE 'SENTINEL%' THEN
		RETURN 'acme';
	END IF;
	RETURN lower(r->>'org');
END $$} });

# e: the mirror lost the row of tenant $sa (an operator deleted it); the source
# deletes it too: counted and logged, value-free
$dst->safe_psql('postgres', qq{DELETE FROM "$sa".docs WHERE id = 1});
my $missing0 = (AshTest::stat_row($dst, $sink) // {})->{missing_row_deletes} // 0;
$src->safe_psql('postgres', q{DELETE FROM docs WHERE id = 1});
AshTest::wait_caught_up($src, $dst, $sink);
is(((AshTest::stat_row($dst, $sink) // {})->{missing_row_deletes} // 0) - $missing0, 1,
	'e: the delete of a row the mirror lacks is counted');
ok(scalar(AshTest::log_lines_like($dst, qr/event=apply\.delete_missing sink=leak/)) >= 1, 'e: and logged as an event');
look_around();
AshTenancy::assert_no_leak([$sa], [ $src, $dst ], \@messages, 'e: context tenant of a missing-row delete');

case(
	label  => 'f tenant required',
	reason => 'tenant_required',
	bad    => sub { my ($s) = @_; qq{INSERT INTO acct VALUES (NULL, 3, '$s', '$s')} });

# the greps read the right files: a structural line the product does log is found
ok(scalar(AshTenancy::grep_all_logs(["event=pipeline.halt sink=$sink reason=tenant_conflict"], $src, $dst)) >= 1,
	'positive control: the log grep finds the halt events');

# and every sentinel, everywhere, at the end
look_around();
AshTenancy::assert_no_leak(\@all_sentinels, [ $src, $dst ], \@messages, 'all sentinels at the end');

diag "ash-proof: faults_injected=$faults checks=" . Test::More->builder->current_test;
done_testing();
