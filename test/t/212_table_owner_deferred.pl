# Deferred triggers of a table written as its owner (owner_scope.c; docs/
# sql-api-mapping.md, "Who runs the owner's code").  A write to a table
# whose owner lacks the sink owner's privileges runs as that owner,
# security-restricted; PostgreSQL refuses to queue a deferred trigger
# there (42501), as in PostgreSQL 16's apply worker.  That refusal is what
# keeps the deferred triggers the apply fires before each commit -- as the
# sink owner -- from ever being a table owner's of that kind.
#
#   case 2   a table of an unprivileged role with a DEFERRABLE INITIALLY
#            DEFERRED constraint trigger that escalates when it finds
#            itself superuser, in a sink of the superuser: halted
#            apply_failed 42501, nothing committed, the checkpoint
#            unchanged, the role still unprivileged
#   equal    the sink given to the table's owner: a restart applies the
#            transaction once, the trigger ran as the owner, still
#            unprivileged
#   case 1   tables of the sink owner with a deferred foreign key: a child
#            written before its parent in one transaction applies
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
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
CREATE FUNCTION appz.grab() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES (TG_TABLE_NAME, current_user);
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE app SUPERUSER';
	END IF;
	RETURN NULL;
END $$;
});

# ---------------------------------------------------------------------------
# case 2: a deferred trigger on a table written as its owner
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, 'CREATE TABLE dt (id integer PRIMARY KEY, v text)');
q_src('CREATE PUBLICATION pub_dt FOR TABLE dt');
q_dst('ALTER TABLE dt OWNER TO app; SET ROLE app;'
	  . ' CREATE CONSTRAINT TRIGGER d AFTER INSERT OR UPDATE ON public.dt'
	  . ' DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION appz.grab()');
is(app_super(), 'f', 'app starts unprivileged');
AshTest::setup_pipeline($src, $dst, sink => 'd2', publication => 'pub_dt', maps => [ ['dt'] ]);
AshTest::wait_caught_up($src, $dst, 'd2') or BAIL_OUT('d2 never streamed');
my $before = AshTenancy::state($dst, 'd2', 'public.dt', 'public.seen');
q_src(q{BEGIN; INSERT INTO dt VALUES (1, 'a'); INSERT INTO dt VALUES (2, 'b'); COMMIT});
AshTenancy::expect_halt($src, $dst, 'd2', 'apply_failed', $before,
	label => 'case 2: a deferred trigger queued in the owner\'s restricted write');
is(q_dst("SELECT halt_sqlstate FROM ash_replicant.pipelines WHERE sink_name = 'd2'"), '42501',
	'case 2: halt_sqlstate 42501');
is(app_super(), 'f', 'case 2: the table\'s owner never gained the sink owner\'s privileges');

# equal: the sink owner is the table's owner
q_dst("ALTER TABLE ash_marker_d2 OWNER TO app; SELECT ash_replicant_alter_sink('d2', owner => 'app')");
AshTest::start_sink($dst, 'd2');
ok(AshTest::wait_caught_up($src, $dst, 'd2'), 'equal: the restart applies');
AshTest::assert_mirror_equal($src, $dst, ['dt'], name => 'equal: mirror');
is(q_dst("SELECT string_agg(who, ',' ORDER BY who) FROM seen WHERE t = 'dt'"), 'app,app',
	'equal: the deferred trigger fired once a row, as the owner');
is(app_super(), 'f', 'equal: the owner is still unprivileged');

# ---------------------------------------------------------------------------
# case 1: the sink owner's tables, a deferred foreign key
# ---------------------------------------------------------------------------
AshTest::both($src, $dst, q{
CREATE TABLE parent (id integer PRIMARY KEY);
CREATE TABLE child (id integer PRIMARY KEY, parent_id integer);
});
q_dst('ALTER TABLE child ADD FOREIGN KEY (parent_id) REFERENCES parent DEFERRABLE INITIALLY DEFERRED');
q_src('CREATE PUBLICATION pub_fk FOR TABLE parent, child');
AshTest::setup_pipeline($src, $dst, sink => 'd1', publication => 'pub_fk', maps => [ ['parent'], ['child'] ]);
AshTest::wait_caught_up($src, $dst, 'd1') or BAIL_OUT('d1 never streamed');
q_src('BEGIN; INSERT INTO child VALUES (1, 10); INSERT INTO parent VALUES (10); COMMIT');
ok(AshTest::wait_caught_up($src, $dst, 'd1'), 'case 1: a child before its parent applies');
AshTest::assert_mirror_equal($src, $dst, [qw(parent child)], name => 'case 1: mirror');
is(AshTest::status_row($dst, 'd1')->{state}, 'healthy', 'case 1: healthy');

done_testing();
