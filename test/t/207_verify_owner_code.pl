# ash_replicant_verify is SECURITY DEFINER and read the mirror as its
# definer (a superuser), casting each target column to text: a cast the
# target's owner made for a type it owns (CREATE CAST (appz.mood AS text)
# WITH FUNCTION appz.mood_text) ran as the superuser whenever anyone --
# a plain ash_replicant_monitor member -- verified, and could make its
# owner a superuser (docs/operations.md, #verifying-completeness).
#
#   owner    the mirror is read as the sink owner, in a restricted scope:
#            the owner's cast, reached through a value column and through a
#            key column, runs as the owner (it records current_user into a
#            table anyone may insert into) and never as a superuser; the
#            owner stays unprivileged
#   judged   verify still matches an exact mirror through the owner's cast
#            and says verify_values_differ for a hand edit of a value,
#            verify_keys_differ for one of a key
#   denied   a target the owner may no longer read (SELECT revoked after
#            registration): not_comparable config_invalid, as doctor's
#            destination_mappings says, the sink's other table judged
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_dst(q{
CREATE ROLE app LOGIN;
CREATE ROLE mon LOGIN IN ROLE ash_replicant_monitor;
CREATE SCHEMA appz AUTHORIZATION app;
CREATE TABLE public.seen (t text, who text);
GRANT INSERT ON public.seen TO PUBLIC;
});
q_src(q{CREATE SCHEMA appz; CREATE TYPE appz.mood AS ENUM ('sad', 'ok', 'happy');});
q_dst(q{
SET ROLE app;
CREATE TYPE appz.mood AS ENUM ('sad', 'ok', 'happy');
CREATE FUNCTION appz.mood_text(m appz.mood) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES ('cast', current_user);
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE app SUPERUSER';
	END IF;
	RETURN m::name::text;
END $$;
CREATE CAST (appz.mood AS text) WITH FUNCTION appz.mood_text(appz.mood);
});

AshTest::both($src, $dst, "CREATE TABLE acct (id integer PRIMARY KEY, m appz.mood)");
AshTest::both($src, $dst, "CREATE TABLE tag (k appz.mood PRIMARY KEY, n integer)");
q_src("INSERT INTO acct VALUES (1, 'ok'), (2, 'happy')");
q_src("INSERT INTO tag VALUES ('ok', 1), ('happy', 2)");
q_src("CREATE PUBLICATION pub_vo FOR TABLE acct, tag");
q_dst("ALTER TABLE acct OWNER TO app; ALTER TABLE tag OWNER TO app");
AshTest::setup_pipeline($src, $dst, sink => 'vo', publication => 'pub_vo',
	maps => [ ['acct'], ['tag'] ], start => 0,
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
q_dst("ALTER TABLE ash_marker_vo OWNER TO app; SELECT ash_replicant_alter_sink('vo', owner => 'app')");
AshTest::start_sink($dst, 'vo');
AshTest::wait_status($dst, 'vo', 'healthy', undef, name => 'copied');
q_src("INSERT INTO acct VALUES (3, 'sad'); INSERT INTO tag VALUES ('sad', 3)");
ok(AshTest::wait_caught_up($src, $dst, 'vo'), 'applied');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f', 'app unprivileged before verify');
q_dst("TRUNCATE seen");

sub verify_as_mon
{
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT source_table || ':' || verdict || ':' || coalesce(reason, '')"
		  . " FROM ash_replicant_verify('vo') WHERE source_table IN ('acct', 'tag')"
		  . " ORDER BY source_table",
		extra_params => [ '-U', 'mon' ]);
	note("verify rc=$rc err=$err") if $rc != 0;
	return $rc == 0 ? $out : "error: $err";
}

# ---------------------------------------------------------------------------
# owner, judged: an exact mirror
# ---------------------------------------------------------------------------
is(verify_as_mon(), "acct:match:\ntag:match:", 'a monitor verifies an exact mirror: match');
is(q_dst("SELECT count(*) FROM seen WHERE who <> 'app'"), '0',
	'the owner\'s cast never ran as anyone but the owner');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f',
	'app still unprivileged after a monitor verified');
is(q_dst("SELECT count(*) > 0 FROM seen WHERE who = 'app'"), 't',
	'the cast ran, as the owner');

# ---------------------------------------------------------------------------
# judged: hand edits of a value and of a key
# ---------------------------------------------------------------------------
q_dst("UPDATE acct SET m = 'happy' WHERE id = 1");
q_dst("UPDATE tag SET n = 7 WHERE k = 'ok'");
is(verify_as_mon(), "acct:mismatch:verify_values_differ\ntag:mismatch:verify_values_differ",
	'hand edits of values: verify_values_differ');
q_dst("DELETE FROM tag WHERE k = 'sad'");
q_dst("ALTER TYPE appz.mood ADD VALUE 'meh'");
q_dst("INSERT INTO tag VALUES ('meh', 3)");
is(verify_as_mon(), "acct:mismatch:verify_values_differ\ntag:mismatch:verify_keys_differ",
	'a hand edit of a key: verify_keys_differ');
is(q_dst("SELECT count(*) FROM seen WHERE who <> 'app'"), '0',
	'the owner\'s cast never ran as a superuser');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f', 'app still unprivileged');

# a superuser verifying runs the owner's cast as the owner too
q_dst("SELECT count(*) FROM ash_replicant_verify('vo')");
is(q_dst("SELECT count(*) FROM seen WHERE who <> 'app'"), '0',
	'a superuser\'s verify runs the owner\'s cast as the owner');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f', 'app still unprivileged');

# ---------------------------------------------------------------------------
# owner: a target the owner may no longer read is not judged
# ---------------------------------------------------------------------------
q_dst("REVOKE SELECT ON tag FROM app");
is(verify_as_mon(), "acct:mismatch:verify_values_differ\ntag:not_comparable:config_invalid",
	'the owner lost SELECT on a target: not_comparable config_invalid, the other judged');
q_dst("GRANT SELECT ON tag TO app");
done_testing();
