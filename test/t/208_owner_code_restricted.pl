# The owner's code runs as a security-restricted operation (owner_scope.c;
# docs/sql-api-mapping.md, "Who runs the owner's code").  What it could
# leave behind ran later as the worker's bootstrap superuser (security QA):
# a WITH HOLD cursor declared by a target trigger or a message route's
# function runs the rest of its query at the commit -- the owner's function
# in it made the owner superuser with one streamed insert; a temporary
# domain named int8 created by a trigger shadowed the worker's next
# unqualified ::int8.  Now each is refused inside the owner's code (42501),
# and the worker's search_path names pg_temp last.
#
#   caught   a trigger that tries a WITH HOLD cursor over the owner's
#            escalating function and a temporary domain, each in an
#            exception block that records the SQLSTATE: both refused
#            (42501), the rows applied, every call as the owner, the owner
#            still unprivileged (before: superuser)
#   route    a message route's function trying the same: refused, the
#            message routed, the owner unprivileged (before: superuser)
#   raised   a trigger declaring a WITH HOLD cursor without a handler:
#            halted apply_failed 42501, nothing of the transaction applied
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'message_digest 1 ' . AshTenancy::key_hex(1),
	'horizon_provenance 1 ' . AshTenancy::key_hex(3));
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub app_super { return q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"); }

q_dst(q{
CREATE ROLE app LOGIN;
CREATE SCHEMA appz AUTHORIZATION app;
CREATE TABLE public.seen (t text, who text);
GRANT INSERT ON public.seen TO PUBLIC;
});
q_dst(q{
SET ROLE app;
CREATE FUNCTION appz.evil() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES ('evil', current_user);
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE app SUPERUSER';
	END IF;
	RETURN 1;
END $$;
CREATE FUNCTION appz.try_plant(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES (what, current_user);
	BEGIN
		EXECUTE 'DECLARE evilc CURSOR WITH HOLD FOR SELECT appz.evil()';
		INSERT INTO public.seen VALUES (what || ':hold:declared', current_user);
	EXCEPTION WHEN OTHERS THEN
		INSERT INTO public.seen VALUES (what || ':hold:' || SQLSTATE, current_user);
	END;
	BEGIN
		EXECUTE 'CREATE DOMAIN pg_temp.int8 AS pg_catalog.int8 CHECK (appz.evil() = 1)';
		INSERT INTO public.seen VALUES (what || ':temp:created', current_user);
	EXCEPTION WHEN OTHERS THEN
		INSERT INTO public.seen VALUES (what || ':temp:' || SQLSTATE, current_user);
	END;
END $$;
CREATE FUNCTION appz.plant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM appz.try_plant('trigger');
	RETURN NULL;
END $$;
CREATE FUNCTION appz.on_msg(p text, c bytea, k bytea, d bytea) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	PERFORM appz.try_plant('route');
END $$;
CREATE FUNCTION appz.hold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE 'DECLARE evilc CURSOR WITH HOLD FOR SELECT appz.evil()';
	RETURN NULL;
END $$;
});

# caught, route
AshTest::both($src, $dst, 'CREATE TABLE acct (id integer PRIMARY KEY, v text)');
q_src('CREATE PUBLICATION pub_acct FOR TABLE acct');
q_dst("ALTER TABLE acct OWNER TO app; SET ROLE app;"
	  . " CREATE TRIGGER p AFTER INSERT ON public.acct FOR EACH ROW EXECUTE FUNCTION appz.plant()");
AshTest::setup_pipeline($src, $dst, sink => 'esc', publication => 'pub_acct', maps => [ ['acct'] ],
	start => 0, recovery_horizon => '1 hour');
q_dst("ALTER TABLE ash_marker_esc OWNER TO app; SELECT ash_replicant_alter_sink('esc', owner => 'app');"
	  . " SELECT ash_replicant_add_message_route('esc', 'mail', 'appz.on_msg(text,bytea,bytea,bytea)'::regprocedure, '1 hour'::interval)");
AshTest::start_sink($dst, 'esc');
q_dst("SELECT ash_replicant_wait_for_slot('esc', '60s')");
is(app_super(), 'f', 'app starts unprivileged');
q_src("INSERT INTO acct VALUES (1, 'a')");
q_src("BEGIN; INSERT INTO acct VALUES (2, 'b'); SELECT pg_logical_emit_message(true, 'mail', 'hello'); COMMIT");
ok(AshTest::wait_caught_up($src, $dst, 'esc'), 'caught: applied');
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'caught');
my $seen = "SELECT string_agg(DISTINCT t, ',' ORDER BY t) FROM seen";
is(q_dst($seen), 'route,route:hold:42501,route:temp:42501,trigger,trigger:hold:42501,trigger:temp:42501',
	'caught, route: the cursor and the temporary domain refused in the trigger and the route function');
is(q_dst("SELECT coalesce(string_agg(DISTINCT who, ','), '') FROM seen"), 'app', 'every call ran as the owner');
is(app_super(), 'f', 'the owner is still unprivileged (before: superuser)');
AshTest::stop_settled($src, $dst, 'esc');

# raised
AshTest::both($src, $dst, 'CREATE TABLE held (id integer PRIMARY KEY, v text)');
q_src('CREATE PUBLICATION pub_held FOR TABLE held');
q_dst("ALTER TABLE held OWNER TO app; SET ROLE app;"
	  . " CREATE TRIGGER h AFTER INSERT ON public.held FOR EACH ROW EXECUTE FUNCTION appz.hold()");
AshTest::setup_pipeline($src, $dst, sink => 'hs', publication => 'pub_held', maps => [ ['held'] ], start => 0);
q_dst("ALTER TABLE ash_marker_hs OWNER TO app; SELECT ash_replicant_alter_sink('hs', owner => 'app')");
AshTest::start_sink($dst, 'hs');
q_dst("SELECT ash_replicant_wait_for_slot('hs', '60s')");
q_src("INSERT INTO held VALUES (1, 'a')");
AshTest::wait_status($dst, 'hs', 'halted', 'apply_failed', src => $src,
	name => 'raised: a WITH HOLD cursor in a trigger halts apply_failed');
is(q_dst("SELECT halt_sqlstate FROM ash_replicant.pipelines WHERE sink_name = 'hs'"), '42501',
	'raised: halt_sqlstate 42501');
is(q_dst('SELECT count(*) FROM held'), '0', 'raised: nothing of the transaction applied');
is(app_super(), 'f', 'raised: the owner is still unprivileged');
done_testing();
