# A written table's owner's code never runs with the sink owner's
# privileges (owner_scope.c; docs/sql-api-mapping.md, "Who runs the owner's
# code").  Security QA: a context-tenancy tenant's table owned by the
# tenant's unprivileged role had a trigger that ran as the sink owner (the
# superuser): it read a table only the sink owner may read and made the
# tenant's role SUPERUSER, the pipeline healthy.  The same for a mapped
# target owned by another role whose trigger was added after registration.
# Now a write to a table whose owner lacks the sink owner's privileges runs
# as that owner, security-restricted (as PostgreSQL 16's apply worker);
# where neither role has the other's privileges it is refused.
#
#   tenant    context tenancy, the tenant's table owned by its role with an
#             escalating trigger: the row applied, the trigger ran as the
#             table's owner, read nothing of the sink owner's, the role
#             still unprivileged
#   mapped    a registered target owned by another role, its trigger added
#             after registration: the same
#   v1        a v1 copy (with provenance) into such a target: the same
#   incr      an incremental copy into such a target: the same
#   route     a message route's table of another role: the same
#   untrusted a non-superuser sink owner and a table of a role neither has
#             the privileges of: map_table refuses target_owner_untrusted;
#             a mapped target given to such a role fails doctor's
#             destination_mappings and halts the pipeline
#             target_owner_untrusted with nothing committed; the owner
#             given back, a restart applies the row once; alter_sink
#             refuses a new owner of such a kind; add_message_route
#             refuses a route table of such a role, storing no route
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 2\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(5),
	'message_digest 1 ' . AshTenancy::key_hex(6), 'horizon_provenance 1 ' . AshTenancy::key_hex(7));
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub super_of { return q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = '$_[0]'"); }

# what each trigger call saw: its table, current_user, superuser?, the secret
sub seen_by
{
	my ($tab) = @_;
	return q_dst("SELECT coalesce(string_agg(DISTINCT who || '/' || super || '/' || secret, ' '), '(none)')"
		  . " FROM seen WHERE tab = '$tab'");
}

q_src(q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
ALTER TABLE docs REPLICA IDENTITY FULL;
CREATE TABLE notes (id integer PRIMARY KEY, v text);
CREATE TABLE c1 (id integer PRIMARY KEY, v text);
CREATE TABLE c2 (id integer PRIMARY KEY, v text);
CREATE TABLE u (id integer PRIMARY KEY, v text);
INSERT INTO c1 SELECT g, 'c' || g FROM generate_series(1, 5) g;
INSERT INTO c2 SELECT g, 'c' || g FROM generate_series(1, 5) g;
CREATE PUBLICATION pub_s FOR TABLE docs, notes;
CREATE PUBLICATION pub_v1 FOR TABLE c1;
CREATE PUBLICATION pub_in FOR TABLE c2;
CREATE PUBLICATION pub_u FOR TABLE u;
CREATE PUBLICATION pub_m;
});
q_dst(q{
CREATE ROLE acme_role LOGIN;
CREATE ROLE notes_role LOGIN;
CREATE ROLE c_role LOGIN;
CREATE ROLE sink_low LOGIN;
CREATE ROLE stranger LOGIN;
CREATE TABLE secret (v text);
INSERT INTO secret VALUES ('sink owner only');
CREATE TABLE seen (tab text, who text, super boolean, secret text);
GRANT INSERT ON seen TO PUBLIC;
CREATE FUNCTION public.grab() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
	s text;
	sup boolean;
BEGIN
	BEGIN
		SELECT string_agg(v, ',') INTO s FROM public.secret;
	EXCEPTION WHEN insufficient_privilege THEN
		s := 'denied';
	END;
	SELECT rolsuper INTO sup FROM pg_catalog.pg_roles WHERE rolname = current_user;
	INSERT INTO public.seen VALUES (TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, current_user, sup, s);
	IF sup THEN
		EXECUTE format('ALTER ROLE %I SUPERUSER', TG_ARGV[0]);
	END IF;
	RETURN NEW;
END $f$;
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
CREATE SCHEMA acme AUTHORIZATION acme_role;
CREATE SCHEMA globex;
CREATE TABLE globex.docs (LIKE public.docs INCLUDING ALL);
CREATE TABLE notes (id integer PRIMARY KEY, v text);
ALTER TABLE notes OWNER TO notes_role;
CREATE TABLE c1 (id integer PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE c2 (id integer PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea);
ALTER TABLE c1 OWNER TO c_role;
ALTER TABLE c2 OWNER TO c_role;
SET ROLE acme_role;
CREATE TABLE acme.docs (id integer PRIMARY KEY, tenant text, title text);
CREATE TRIGGER grab AFTER INSERT ON acme.docs FOR EACH ROW EXECUTE FUNCTION public.grab('acme_role');
GRANT ALL ON SCHEMA acme TO PUBLIC;
GRANT ALL ON acme.docs TO PUBLIC;
SET ROLE c_role;
CREATE TRIGGER grab AFTER INSERT ON c1 FOR EACH ROW EXECUTE FUNCTION public.grab('c_role');
CREATE TRIGGER grab AFTER INSERT ON c2 FOR EACH ROW EXECUTE FUNCTION public.grab('c_role');
RESET ROLE;
});
is(super_of('acme_role') . super_of('notes_role') . super_of('c_role'), 'fff', 'the roles start unprivileged');

# ---------------------------------------------------------------------------
# tenant, mapped: a streaming sink of the superuser
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'own', publication => 'pub_s',
	maps => [ [ 'docs', tenant_column => 'tenant', tenant_strategy => 'context' ], [ 'notes' ] ]);
# notes_role adds its trigger after the registration
q_dst(q{
SET ROLE notes_role;
CREATE TRIGGER grab AFTER INSERT ON public.notes FOR EACH ROW EXECUTE FUNCTION public.grab('notes_role');
RESET ROLE;
});
AshTest::wait_caught_up($src, $dst, 'own') or BAIL_OUT('never streamed');
q_src(q{INSERT INTO docs VALUES (1, 'acme', 'hello'), (2, 'globex', 'x'); INSERT INTO notes VALUES (1, 'n')});
AshTest::wait_caught_up($src, $dst, 'own', name => 'tenant: the rows applied, the sink healthy');
is(q_dst('SELECT count(*) FROM acme.docs') . '/' . q_dst('SELECT count(*) FROM globex.docs'), '1/1',
	'tenant: each tenant\'s row in its table');
is(seen_by('acme.docs'), 'acme_role/false/denied',
	'tenant: the trigger ran as the table\'s owner and read nothing of the sink owner\'s');
is(super_of('acme_role'), 'f', 'tenant: the tenant\'s role is not superuser');
is(q_dst('SELECT count(*) FROM notes'), '1', 'mapped: the row applied');
is(seen_by('public.notes'), 'notes_role/false/denied',
	'mapped: the trigger added after registration ran as the table\'s owner');
is(super_of('notes_role'), 'f', 'mapped: the owner is not superuser');
is(AshTest::status_row($dst, 'own')->{state}, 'healthy', 'the sink stays healthy');

# ---------------------------------------------------------------------------
# v1: a whole-table copy with provenance into a table of c_role
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'ownv1', publication => 'pub_v1',
	maps => [ [ 'c1', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'ownv1', 'healthy', undef, src => $src, name => 'v1: copied');
AshTest::wait_caught_up($src, $dst, 'ownv1', quiet => 1);
is(q_dst('SELECT count(*) FROM c1 WHERE replica_fingerprint IS NOT NULL'), '5', 'v1: every row copied and stamped');
is(seen_by('public.c1'), 'c_role/false/denied', 'v1: the trigger ran as the table\'s owner');
is(super_of('c_role'), 'f', 'v1: the owner is not superuser');

# ---------------------------------------------------------------------------
# incr: an incremental copy into a table of c_role
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'owni', publication => 'pub_in', marker => 0,
	maps => [ [ 'c2', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 2");
AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints c WHERE c.slot_name = 'owni'",
	't', timeout => 120);
AshTest::poll($dst, 'SELECT count(*) FROM c2', '5', timeout => 60);
q_src(q{INSERT INTO c2 VALUES (6, 'streamed')});
AshTest::poll($dst, 'SELECT count(*) FROM c2', '6', timeout => 60);
is(q_dst('SELECT count(*) FROM c2'), '6', 'incr: every row copied, then streamed');
is(seen_by('public.c2'), 'c_role/false/denied', 'incr: the trigger ran as the table\'s owner');
is(super_of('c_role'), 'f', 'incr: the owner is not superuser');
is(AshTest::status_row($dst, 'owni')->{state}, 'healthy', 'incr: healthy');

# ---------------------------------------------------------------------------
# route: a message route's table of notes_role
# ---------------------------------------------------------------------------
q_dst(q{
CREATE TABLE inbox (id bigserial PRIMARY KEY, content text, operation_key bytea, content_digest bytea);
ALTER TABLE inbox OWNER TO notes_role;
SET ROLE notes_role;
CREATE TRIGGER grab AFTER INSERT ON public.inbox FOR EACH ROW EXECUTE FUNCTION public.grab('notes_role');
RESET ROLE;
});
AshTest::setup_pipeline($src, $dst, sink => 'ownm', publication => 'pub_m', recovery_horizon => '1 hour',
	start => 0);
q_dst("SELECT ash_replicant_add_message_route('ownm', 'box', 'inbox'::regclass, '1 hour'::interval)");
AshTest::start_sink($dst, 'ownm');
AshTest::wait_caught_up($src, $dst, 'ownm', quiet => 1);
q_src("SELECT pg_logical_emit_message(true, 'box', 'hello')");
AshTest::wait_caught_up($src, $dst, 'ownm', name => 'route: the message applied');
is(q_dst('SELECT count(*) FROM inbox'), '1', 'route: the message in its table');
is(seen_by('public.inbox'), 'notes_role/false/denied', 'route: the trigger ran as the table\'s owner');
is(super_of('notes_role'), 'f', 'route: the owner is not superuser');

# ---------------------------------------------------------------------------
# untrusted: neither role has the other's privileges
# ---------------------------------------------------------------------------
q_dst(q{
CREATE TABLE t3 (id integer PRIMARY KEY, v text);
ALTER TABLE t3 OWNER TO stranger;
GRANT ALL ON t3 TO sink_low;
CREATE TABLE u (id integer PRIMARY KEY, v text);
ALTER TABLE u OWNER TO sink_low;
ALTER DEFAULT PRIVILEGES GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO sink_low;
});
AshTest::setup_pipeline($src, $dst, sink => 'low', publication => 'pub_u', owner => 'sink_low',
	maps => [ [ 'u' ] ]);
my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_map_table('low', 't3'::regclass)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42501: .*target_owner_untrusted \(the owner of target "public"\."t3"/,
	'untrusted: map_table refuses a table whose owner and the sink owner trust neither (42501)');
AshTest::wait_caught_up($src, $dst, 'low') or BAIL_OUT('low never streamed');
q_dst('ALTER TABLE u OWNER TO stranger; GRANT ALL ON u TO sink_low');
like(q_dst("SELECT verdict || '/' || reason FROM ash_replicant_doctor('low') WHERE check_name = 'destination_mappings'"),
	qr{^fail/target_owner_untrusted$}, 'untrusted: doctor fails destination_mappings');
my $before = AshTenancy::state($dst, 'low', 'public.u');
q_src(q{INSERT INTO u VALUES (1, 'x')});
AshTenancy::expect_halt($src, $dst, 'low', 'target_owner_untrusted', $before,
	state => 'misconfigured', label => 'untrusted: the write to a table of a role neither trusts');
like(AshTest::status_row($dst, 'low')->{halt_target} // '', qr/^"?public"?\."?u"?$/,
	'untrusted: the halt names the table');
q_dst('ALTER TABLE u OWNER TO sink_low');
q_dst("SELECT ash_replicant_start('low')");
AshTest::wait_caught_up($src, $dst, 'low', name => 'untrusted: the owner given back, the restart applies');
is(q_dst('SELECT count(*) FROM u'), '1', 'untrusted: the row applied once');
($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_alter_sink('own', owner => 'sink_low')");
like($err, qr/target_owner_untrusted \(sink "own": table "public"\."notes"/,
	'untrusted: alter_sink refuses an owner that a mapped target\'s owner and it trust neither');

# a route table of a role neither trusts: add_message_route refuses it
q_dst(q{
CREATE TABLE outbox3 (id bigserial PRIMARY KEY, content text, operation_key bytea, content_digest bytea);
ALTER TABLE outbox3 OWNER TO stranger;
GRANT ALL ON outbox3 TO sink_low;
GRANT USAGE ON SEQUENCE outbox3_id_seq TO sink_low;
SELECT ash_replicant_alter_sink('low', recovery_horizon => '1 hour');
});
($rc, $out, $err) = $dst->psql($DB,
	"SELECT ash_replicant_add_message_route('low', 'box3', 'outbox3'::regclass, '1 hour'::interval)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42501: .*target_owner_untrusted/,
	'untrusted: add_message_route refuses a route table whose owner and the sink owner trust neither (42501)');
is(q_dst("SELECT count(*) FROM ash_replicant.message_routes WHERE sink_name = 'low'"), '0',
	'untrusted: no route stored');

done_testing();
