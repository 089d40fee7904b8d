# Nothing the owner's code leaves behind runs as the worker's superuser
# (owner_scope.c; docs/sql-api-mapping.md, "Who runs the owner's code").
# Security QA: a WITH HOLD cursor declared by a target trigger or a message
# route's function ran the rest of its query at the commit, after the
# owner's scope -- the owner's function in it made the owner superuser with
# one streamed insert; a temporary domain named int8 created by a trigger
# shadowed the worker's next unqualified ::int8 (an append log's v1 copy)
# and ran the owner's CHECK function as the superuser.  Now the apply closes
# every cursor inside the owner's scope before each commit, and the
# worker's search_path names pg_temp last.
#
#   cursor   a trigger and a message route's function declare a WITH HOLD
#            cursor over the owner's escalating function and create a
#            temporary domain int8: the rows and the message applied, the
#            function never run, every call as the owner, the owner still
#            unprivileged (before: superuser)
#   again    the trigger declares the cursor under the same name in the next
#            transaction: it was closed, applied again
#   temp     an append log copied by v1 whose trigger creates a temporary
#            domain int8 checking with the owner's function: the copy
#            completes, the function runs only as the owner (before: as
#            postgres, the owner superuser)
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 1\n");
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

# cursor
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
ok(AshTest::wait_caught_up($src, $dst, 'esc'), 'cursor: applied');
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'cursor');
is(q_dst("SELECT count(DISTINCT t) FROM seen WHERE t IN ('route', 'trigger:hold:declared', 'trigger:temp:created')"),
	'3', 'cursor: the trigger declared its cursor and the domain, the route function ran');
is(q_dst("SELECT count(*) FROM seen WHERE t = 'evil'"), '0', "cursor: the cursors' query never ran");
is(q_dst("SELECT coalesce(string_agg(DISTINCT who, ','), '') FROM seen"), 'app', 'cursor: every call ran as the owner');
is(app_super(), 'f', 'cursor: the owner is still unprivileged (before: superuser)');

# again
AshTest::both($src, $dst, 'CREATE TABLE held (id integer PRIMARY KEY, v text)');
q_src('ALTER PUBLICATION pub_acct ADD TABLE held');
q_dst("ALTER TABLE held OWNER TO app; SET ROLE app;"
	  . " CREATE TRIGGER h AFTER INSERT ON public.held FOR EACH ROW EXECUTE FUNCTION appz.hold()");
q_dst("SELECT ash_replicant_map_table('esc', 'held'::regclass)");
AshTest::stop_settled($src, $dst, 'esc');
AshTest::start_sink($dst, 'esc');
q_src("INSERT INTO held VALUES (1, 'a')");
ok(AshTest::wait_caught_up($src, $dst, 'esc'), 'again: a trigger declaring a held cursor applied');
q_src("INSERT INTO held VALUES (2, 'b')");
ok(AshTest::wait_caught_up($src, $dst, 'esc'), 'again: the same cursor name in the next transaction applied');
AshTest::assert_mirror_equal($src, $dst, ['held'], name => 'again');
is(q_dst("SELECT count(*) FROM seen WHERE t = 'evil'"), '0', "again: the cursors' query never ran");
is(app_super(), 'f', 'again: the owner is still unprivileged');
AshTest::stop_settled($src, $dst, 'esc');

# temp: an append log's v1 copy
q_dst(q{
SET ROLE app;
CREATE FUNCTION appz.check8(v int8) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES ('domain', current_user);
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE app SUPERUSER';
	END IF;
	RETURN true;
END $$;
CREATE FUNCTION appz.plant8() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_type WHERE typname = 'int8' AND typnamespace = pg_my_temp_schema()) THEN
		EXECUTE 'CREATE DOMAIN pg_temp.int8 AS pg_catalog.int8 CHECK (appz.check8(VALUE))';
	END IF;
	RETURN NULL;
END $$;
});
my $structural = AshTest::append_log_columns();
my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';
my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
my $mk = AshTest::marker_table('al');
q_src(qq{
CREATE TABLE t1 (id integer PRIMARY KEY, v text); ALTER TABLE t1 REPLICA IDENTITY FULL;
CREATE TABLE t2 (id integer PRIMARY KEY, v text); ALTER TABLE t2 REPLICA IDENTITY FULL;
CREATE TABLE $mk (id bigint PRIMARY KEY, note text); ALTER TABLE $mk REPLICA IDENTITY FULL;
INSERT INTO t1 SELECT g, 'a' || g FROM generate_series(1, 50) g;
INSERT INTO t2 SELECT g, 'b' || g FROM generate_series(1, 20) g;
ANALYZE t1, t2;
CREATE PUBLICATION pub_al FOR TABLE t1, t2, $mk;
});
q_dst(qq{
CREATE TABLE l1 ($structural, id integer, v text, $axes);
CREATE TABLE l2 ($structural, id integer, v text, $axes);
CREATE TABLE $mk ($structural, id bigint, note text, $axes);
ALTER TABLE l1 OWNER TO app; ALTER TABLE l2 OWNER TO app; ALTER TABLE $mk OWNER TO app;
SET ROLE app;
CREATE TRIGGER p AFTER INSERT ON l1 FOR EACH ROW EXECUTE FUNCTION appz.plant8();
CREATE TRIGGER p AFTER INSERT ON l2 FOR EACH ROW EXECUTE FUNCTION appz.plant8();
});
q_dst($_) for (
	"SELECT ash_replicant_create_sink('al', sink_kind => 'append_log', initial_state => 'snapshot', owner => 'app')",
	"SELECT ash_replicant_map_table('al', 'l1'::regclass, source_table => 't1', append_log => true)",
	"SELECT ash_replicant_map_table('al', 'l2'::regclass, source_table => 't2', append_log => true)",
	"SELECT ash_replicant_map_table('al', '$mk'::regclass, append_log => true)",
	"SELECT ash_replicant_configure_pipeline('al', '$conn', publication => 'pub_al',"
	  . " source_system_identifier => '$sysid', source_database => '$sdb', census => '{\"interval_ms\": 1000}',"
	  . " go_forward_only => false, snapshot => 'v1')",
	"SELECT ash_replicant_start('al')");
AshTest::wait_status($dst, 'al', 'healthy', undef, src => $src, name => 'temp: copied');
is(q_dst('SELECT count(*) FROM l1') . '/' . q_dst('SELECT count(*) FROM l2'), '50/20', 'temp: every row copied');
is(q_dst("SELECT count(*) FROM seen WHERE t = 'domain' AND who <> 'app'"), '0',
	'temp: the temporary domain shadowed nothing of the worker (its CHECK never ran as postgres)');
is(app_super(), 'f', 'temp: the owner is still unprivileged');
done_testing();
