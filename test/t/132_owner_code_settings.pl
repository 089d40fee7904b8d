# Code the sink owner controls runs inside the worker -- a trigger on a
# target, here -- and the worker's own statements run as the bootstrap
# superuser after it.  Nothing that code sets may reach those statements
# (src/owner_scope.c): a trigger that put its own schema first in the
# session's search_path made the next catalog statement's "=" its operator,
# run as a superuser (the role then made itself one).
#   - a trigger of a non-superuser sink owner sets search_path (session-wide)
#     to put a schema with a shadowing text "=" first: no call of it as a
#     superuser, the role stays unprivileged, every trigger call starts from
#     the database's path (the setting was undone), the mirror is exact;
#   - the database's own search_path puts that schema before pg_catalog
#     (ALTER DATABASE ... SET, open to a database owner): the worker's
#     statements still resolve pg_catalog's operators first.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $DB = $AshTest::DB;

sub q_dst { return $dst->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, "CREATE TABLE acct (id integer PRIMARY KEY, bal integer NOT NULL)");
$src->safe_psql($DB, "CREATE PUBLICATION pub FOR TABLE acct");
q_dst(q{
CREATE ROLE app LOGIN;
ALTER TABLE acct OWNER TO app;
CREATE SCHEMA evil AUTHORIZATION app;
CREATE TABLE public.seen (backend text, super boolean, path text);
GRANT INSERT ON public.seen TO PUBLIC;
});
AshTest::setup_pipeline($src, $dst, sink => 'own', publication => 'pub', maps => [ ['acct'] ], start => 0);
q_dst("ALTER TABLE ash_marker_own OWNER TO app; SELECT ash_replicant_alter_sink('own', owner => 'app')");

# everything below is the unprivileged role's own doing
q_dst(q{
SET ROLE app;
CREATE FUNCTION evil.texteq(a text, b text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	INSERT INTO public.seen
	SELECT (SELECT a.backend_type FROM pg_catalog.pg_stat_activity a
			 WHERE a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()),
		   (SELECT r.rolsuper FROM pg_catalog.pg_roles r
			 WHERE r.rolname OPERATOR(pg_catalog.=) current_user),
		   NULL;
	RETURN a OPERATOR(pg_catalog.=) b;
END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq);
CREATE FUNCTION evil.trg() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES ('trigger', false, pg_catalog.current_setting('search_path'));
	PERFORM pg_catalog.set_config('search_path', 'evil, pg_catalog', false);
	RETURN NEW;
END $$;
CREATE TRIGGER acct_trg BEFORE INSERT OR UPDATE ON public.acct FOR EACH ROW EXECUTE FUNCTION evil.trg();
});
AshTest::start_sink($dst, 'own');
q_dst("SELECT ash_replicant_wait_for_slot('own', '60s')");

for my $i (1 .. 5)
{
	$src->safe_psql($DB, "INSERT INTO acct VALUES ($i, $i)");
	ok(AshTest::wait_caught_up($src, $dst, 'own'), "transaction $i applied");
}
$src->safe_psql($DB, "UPDATE acct SET bal = bal + 1");
ok(AshTest::wait_caught_up($src, $dst, 'own'), 'an update applied');
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'the trigger\'s writes');
is(q_dst("SELECT count(*) FROM seen WHERE super"), '0',
	'no operator of the sink owner ran as a superuser');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f', 'the role is still unprivileged');
is(q_dst("SELECT count(*) FROM seen WHERE backend = 'trigger'"), '10', 'the trigger ran for every row written');
is(q_dst("SELECT count(*) FROM seen WHERE backend = 'trigger' AND path LIKE '%evil%'"), '0',
	'every call of the trigger started from the database\'s search_path (its setting was undone)');
AshTest::wait_status($dst, 'own', 'healthy');

# the database's search_path puts the schema before pg_catalog; the
# harness's own sessions call the operator too (as the test's superuser,
# from client backends): only the pipeline's processes are judged
q_dst("ALTER DATABASE $DB SET search_path = evil, pg_catalog, public");
AshTest::stop_sink($dst, 'own');
AshTest::start_sink($dst, 'own');
$src->safe_psql($DB, "INSERT INTO acct VALUES (6, 6); UPDATE acct SET bal = 0 WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 'own'), 'applied under the database\'s search_path');
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'under the database\'s search_path');
is(q_dst("SELECT count(*) FROM seen WHERE super AND backend LIKE 'ash_replicant%'"), '0',
	'no statement of the pipeline resolved the schema\'s operator');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f', 'the role is still unprivileged');
q_dst("ALTER DATABASE $DB RESET search_path");

done_testing();
