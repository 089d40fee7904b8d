# ash_replicant_verify and `ash_replicant_ctl verify` (docs/operations.md#verifying-completeness):
# verdicts, refusals, and that no value leaves it.
#
# One sink maps five source tables:
#   acct     text primary key; one row's key AND note are a random sentinel
#   big      integer key, numeric(10,2) amounts (cast to the target's type)
#   hist     SCD2: the open versions compared by business key
#   docs     context tenancy without a tenant_scope_function: not_comparable
#   orgdocs  context tenancy with snapshot provenance and a scope function:
#            the tenant tables pa.orgdocs and pb.orgdocs summed
# Checks:
#   - a caught-up mirror matches (ctl exit 2: one table is not comparable);
#     a context mapping names its own target, never a tenant's schema;
#     rows committed just before the call are waited for, not reported
#   - a row deleted on the mirror: mismatch verify_rows_differ (ctl exit 1);
#     a row of another key put in its place: verify_keys_differ; another
#     value under the same keys (a plain table, an SCD2 open version, a
#     tenant's table): verify_values_differ, put back: match; an SCD2
#     open version closed on the mirror: verify_rows_differ; a row moved
#     from one tenant table to another: verify_values_differ (test 163); a
#     row missing from one tenant's table: verify_rows_differ; repaired:
#     match
#   - refusals: unknown sink, NULL sink, a REPEATABLE READ caller, a mirror
#     held back by a lock (verify_timeout), a stopped pipeline
#     (verify_pipeline_not_running): ctl exit 3; a role without
#     ash_replicant_monitor may not call it, one with it may
#   - the sentinel is in no output (SQL, ctl text and json, stderr), in no
#     catalog or status row and in no log line of either server; the
#     destination logs errors verbosely and neither server logs statements
#     (the test sends the sentinel itself)
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "log_error_verbosity = verbose\nlog_min_messages = info\n"
	  . "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(21));
$dst->reload;
my $sink = 'ver';
my $sentinel = sprintf('SNTL%08x%08x', int(rand(2**32)), int(rand(2**32)));
note "sentinel $sentinel";

$src->safe_psql('postgres', qq{
CREATE TABLE acct (id text PRIMARY KEY, note text);
CREATE TABLE big (id integer PRIMARY KEY, amount numeric(10,2));
CREATE TABLE hist (id integer PRIMARY KEY, val text);
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
ALTER TABLE docs REPLICA IDENTITY FULL;
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text);
ALTER TABLE orgdocs REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_ver FOR TABLE acct, big, hist, docs, orgdocs;
INSERT INTO acct VALUES ('$sentinel', '$sentinel'), ('plain', 'x');
INSERT INTO orgdocs SELECT g, CASE WHEN g % 3 = 0 THEN 'a' ELSE 'b' END, 'v' FROM generate_series(1, 90) g;
});
$dst->safe_psql('postgres', q{
CREATE TABLE acct (id text PRIMARY KEY, note text);
CREATE TABLE big (id bigint PRIMARY KEY, amount numeric(12,2));
CREATE TABLE hist (
	vid bigserial PRIMARY KEY, id integer NOT NULL, val text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX hist_open ON hist (id) WHERE valid_to_lsn IS NULL;
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
CREATE SCHEMA acme;
CREATE TABLE acme.docs (LIKE public.docs INCLUDING ALL);
CREATE TABLE orgdocs (id integer PRIMARY KEY, tenant text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE SCHEMA pa;
CREATE SCHEMA pb;
CREATE TABLE pa.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE TABLE pb.orgdocs (LIKE public.orgdocs INCLUDING ALL);
CREATE FUNCTION org_scopes() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('a'), ('b') $$;
-- a gate the test can close to hold the apply of big back
CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock_shared(4242);
	RETURN NEW;
END $$;
CREATE TRIGGER gate BEFORE INSERT ON big FOR EACH ROW EXECUTE FUNCTION gate();
CREATE ROLE verify_plain LOGIN;
CREATE ROLE verify_mon LOGIN IN ROLE ash_replicant_monitor;
});

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_ver', marker => 0,
	pipeline_extra => "snapshot => 'v1'",
	maps => [
		[ 'acct' ],
		[ 'big' ],
		[ 'hist', history_strategy => 'scd2', history_business_key => ['id'] ],
		[ 'docs', tenant_column => 'tenant', tenant_strategy => 'context' ],
		[ 'orgdocs', tenant_column => 'tenant', tenant_strategy => 'context',
			tenant_schema_format => 'p%s', snapshot_provenance => 'true',
			tenant_scope_function => 'public.org_scopes()' ] ]);
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src);

# changes committed right before each call: verify waits for them
$src->safe_psql('postgres', q{
INSERT INTO big SELECT g, g * 1.5 FROM generate_series(1, 3000) g;
INSERT INTO hist SELECT g, 'v' || g FROM generate_series(1, 50) g;
UPDATE hist SET val = val || '+' WHERE id <= 20;
DELETE FROM hist WHERE id > 45;
INSERT INTO docs VALUES (1, 'acme', 'a');
});

my @outputs;    # every text the tests got back, for the sentinel check

# verify($sink, %o) -> { table => "verdict/reason/source_rows/mirror_rows" }
sub verify
{
	my ($s, %o) = @_;
	my $t = $o{timeout} // '60s';
	my ($rc, $out, $err) = $dst->psql('postgres',
		"SELECT source_table || '=' || verdict || '/' || coalesce(reason, '-') || '/'"
		  . " || coalesce(source_rows::text, '-') || '/' || coalesce(mirror_rows::text, '-')"
		  . " FROM ash_replicant_verify('$s', '$t')");
	push @outputs, $out, $err;
	return ($rc, $err) if $o{raw};
	diag "verify failed: $err" if $rc;
	return { map { split /=/, $_, 2 } grep { length } split /\n/, $out };
}

# ctl($args...) -> (exit code, stdout, stderr)
sub ctl
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'ash_replicant_ctl', @args, '-h', $dst->host, '-p', $dst->port,
			'-d', 'postgres' ], '>', \$out, '2>', \$err);
	push @outputs, $out, $err;
	return ($? >> 8, $out, $err);
}

my $v = verify($sink);
is($v->{acct}, 'match/-/2/2', 'acct: caught up, 2 rows, keys match');
is($v->{big}, 'match/-/3000/3000',
	'big: the rows committed before the call are waited for; numeric keys cast to the target type match');
is($v->{hist}, 'match/-/45/45', 'hist (SCD2): the open versions match the source rows');
is($v->{docs}, 'not_comparable/verify_tenant_scopes_unknown/-/-',
	'docs (context tenancy without a scope function): not comparable, nothing counted');
is($v->{orgdocs}, 'match/-/90/90', 'orgdocs (context tenancy with scopes): the tenant tables summed match');
is(scalar(keys %$v), 5, 'one row per mapping');
is($dst->safe_psql('postgres', "SELECT target FROM ash_replicant_verify('$sink') WHERE source_table = 'orgdocs'"),
	'public.orgdocs', "a context mapping's row names its target, never a tenant's schema");

my ($rc, $out, $err) = ctl('verify', '--sink', $sink);
is($rc, 2, 'ctl verify: exit 2 when a table is not comparable and none mismatches');
like($out, qr/^public\.acct\s+public\.acct\s+2\s+2\s+match$/m, 'ctl verify: text line of a match');
like($out, qr/^public\.docs\s+public\.docs\s+-\s+-\s+not_comparable\s+verify_tenant_scopes_unknown$/m,
	'ctl verify: text line of a table it cannot compare');
($rc, $out, $err) = ctl('verify', '--sink', $sink, '--format', 'json');
is($rc, 2, 'ctl verify --format json: same exit code');
my $json = eval { JSON::PP::decode_json($out) } // [];
is_deeply([ map { "$_->{source_table}:$_->{verdict}:" . ($_->{mirror_rows} // 'null') } @$json ],
	[ 'acct:match:2', 'big:match:3000', 'docs:not_comparable:null', 'hist:match:45', 'orgdocs:match:90' ],
	'ctl verify --format json: one object per mapping, in order');

# --- deliberate mismatches on the mirror ----------------------------------------
$dst->safe_psql('postgres', "DELETE FROM acct WHERE note <> 'x'");
$v = verify($sink);
is($v->{acct}, 'mismatch/verify_rows_differ/2/1', 'a row missing from the mirror: rows differ');
is($v->{big}, 'match/-/3000/3000', 'the other tables still match');
($rc, $out, $err) = ctl('verify', '--sink', $sink);
is($rc, 1, 'ctl verify: exit 1 on a mismatch');
like($out, qr/^public\.acct\s.*\smismatch\s+verify_rows_differ$/m, 'ctl verify: the mismatch line');

$dst->safe_psql('postgres', "INSERT INTO acct VALUES ('impostor', 'x')");
$v = verify($sink);
is($v->{acct}, 'mismatch/verify_keys_differ/2/2', 'same count, another key: keys differ');

# the same keys, another value: in a plain table (numeric cast to the
# target's type), an SCD2 open version and a tenant's table
$dst->safe_psql('postgres', q{UPDATE big SET amount = amount + 0.01 WHERE id = 5;
UPDATE hist SET val = val || '?' WHERE id = 9 AND valid_to_lsn IS NULL;
SET session_replication_role = replica; UPDATE pa.orgdocs SET v = 'w' WHERE id = 6});
$v = verify($sink);
is($v->{big}, 'mismatch/verify_values_differ/3000/3000', 'another amount: values differ');
is($v->{hist}, 'mismatch/verify_values_differ/45/45', 'SCD2: an open version of another value');
is($v->{orgdocs}, 'mismatch/verify_values_differ/90/90', 'context tenancy: a tenant row of another value');
$dst->safe_psql('postgres', q{UPDATE big SET amount = amount - 0.01 WHERE id = 5;
UPDATE hist SET val = rtrim(val, '?') WHERE id = 9 AND valid_to_lsn IS NULL;
SET session_replication_role = replica; UPDATE pa.orgdocs SET v = 'v' WHERE id = 6});
$v = verify($sink);
is($v->{big}, 'match/-/3000/3000', 'the amount put back: match');
is($v->{hist}, 'match/-/45/45', 'the SCD2 value put back: match');
is($v->{orgdocs}, 'match/-/90/90', 'the tenant row put back: match');

$dst->safe_psql('postgres', "UPDATE hist SET valid_to_lsn = valid_from_lsn + 1 WHERE id = 7 AND valid_to_lsn IS NULL");
$v = verify($sink);
is($v->{hist}, 'mismatch/verify_rows_differ/45/44', 'SCD2: an open version closed on the mirror is missing');

# tenant tables: a row in the other tenant's table is in the wrong scope;
# a row missing from one is missing
$dst->safe_psql('postgres', q{SET session_replication_role = replica;
WITH m AS (DELETE FROM pa.orgdocs WHERE id = 3 RETURNING *) INSERT INTO pb.orgdocs SELECT * FROM m});
$v = verify($sink);
is($v->{orgdocs}, 'mismatch/verify_values_differ/90/90', 'context tenancy: a row in another tenant\'s table');
$dst->safe_psql('postgres', q{SET session_replication_role = replica;
WITH m AS (DELETE FROM pb.orgdocs WHERE id = 3 RETURNING *) INSERT INTO pa.orgdocs SELECT * FROM m});
$dst->safe_psql('postgres', 'SET session_replication_role = replica; DELETE FROM pb.orgdocs WHERE id = 4');
$v = verify($sink);
is($v->{orgdocs}, 'mismatch/verify_rows_differ/90/89', 'context tenancy: a row missing from a tenant table');
$src->safe_psql('postgres', 'UPDATE orgdocs SET v = v WHERE id = 4');

# repairs: the missing row through the pipeline (a source update of a row the
# mirror lacks inserts its full image), the SCD2 version by hand
$dst->safe_psql('postgres', "DELETE FROM acct WHERE id = 'impostor'");
$src->safe_psql('postgres', "UPDATE acct SET note = note WHERE note <> 'x'");
$dst->safe_psql('postgres', "UPDATE hist SET valid_to_lsn = NULL WHERE id = 7 AND valid_to_lsn = valid_from_lsn + 1");
$v = verify($sink);
is($v->{acct}, 'match/-/2/2', 'repaired by a source update');
is($v->{hist}, 'match/-/45/45', 'SCD2 repaired');
is($v->{orgdocs}, 'match/-/90/90', 'the tenant row repaired by a source update');

# --- refusals ---------------------------------------------------------------------
($rc, $err) = verify('nosuch', raw => 1);
like($err, qr/verify rejected: config_invalid \(sink "nosuch" does not exist\)/, 'unknown sink');
($rc, $out, $err) = $dst->psql('postgres', 'SELECT * FROM ash_replicant_verify(NULL)');
like($err, qr/verify rejected: config_invalid/, 'NULL sink name');
($rc, $out, $err) = $dst->psql('postgres',
	"BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM ash_replicant_verify('$sink'); COMMIT");
like($err, qr/verify rejected: config_invalid \(ash_replicant_verify needs a READ COMMITTED transaction\)/,
	'refused in a REPEATABLE READ transaction (the mirror must be read after the wait)');
($rc, $out, $err) = $dst->psql('postgres', "SELECT * FROM ash_replicant_verify('$sink')",
	extra_params => [ '-U', 'verify_plain' ]);
like($err, qr/permission denied for function ash_replicant_verify/, 'a role without monitor may not verify');
($rc, $out, $err) = $dst->psql('postgres',
	"SELECT count(*) FROM ash_replicant_verify('$sink') WHERE verdict = 'match'",
	extra_params => [ '-U', 'verify_mon' ]);
is($out, '4', 'ash_replicant_monitor may verify');

# the mirror cannot reach the source's position: the apply waits at the gate
my $gate = $dst->background_psql('postgres', on_error_stop => 1);
$gate->query_safe('SELECT pg_advisory_lock(4242)');
$src->safe_psql('postgres', 'INSERT INTO big VALUES (100000, 1)');
($rc, $err) = verify($sink, raw => 1, timeout => '2s');
like($err, qr/verify rejected: verify_timeout \(the mirror did not reach the source's position within the timeout\)/,
	'a mirror held back past the timeout: verify_timeout');
($rc, $out, $err) = ctl('verify', '--sink', $sink, '--timeout', '2');
is($rc, 3, 'ctl verify: exit 3 when it cannot verify');
like($err, qr/verify_timeout/, 'ctl verify: says why');
$gate->query_safe('SELECT pg_advisory_unlock(4242)');
$v = verify($sink);
is($v->{big}, 'match/-/3001/3001', 'the gate opened: the row arrives and the table matches');

# a target locked past the timeout
$gate->query_safe('BEGIN; LOCK TABLE hist IN ACCESS EXCLUSIVE MODE');
($rc, $err) = verify($sink, raw => 1, timeout => '2s');
like($err, qr/verify rejected: verify_timeout \(a mirror table stayed locked past the timeout\)/,
	'a mirror table locked past the timeout: verify_timeout');
$gate->query_safe('COMMIT');
$gate->quit;

AshTest::stop_settled($src, $dst, $sink);
($rc, $err) = verify($sink, raw => 1);
like($err, qr/verify rejected: verify_pipeline_not_running \(the pipeline of sink "ver" is not_started\)/,
	'a stopped pipeline: verify_pipeline_not_running');
($rc, $out, $err) = ctl('verify', '--sink', $sink);
is($rc, 3, 'ctl verify on a stopped pipeline: exit 3');

# --- no value anywhere --------------------------------------------------------------
my @seen = grep { defined && index($_, $sentinel) >= 0 } @outputs;
is(scalar(@seen), 0, 'the sentinel is in no output the calls returned');
is(index(AshTest::catalog_text($dst), $sentinel), -1, 'the sentinel is in no catalog, status or statistics row');
my @hits = AshTest::grep_logs_for($sentinel, $src, $dst);
is(scalar(@hits), 0, 'the sentinel is in no log line of either server') or diag join("\n", @hits[0 .. 4]);
# and the sentinel row really was compared: deleting it made the mismatch above
is($src->safe_psql('postgres', "SELECT count(*) FROM acct WHERE id = '$sentinel'"), '1',
	'the sentinel is a key of the compared source table');

done_testing();
