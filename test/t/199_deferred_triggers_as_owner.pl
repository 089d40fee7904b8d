# Deferred triggers on a target run as the sink owner (docs/sql-api-mapping.md,
# "Who runs the owner's code").  A DEFERRABLE INITIALLY DEFERRED constraint
# trigger fires at commit, and the worker committed after leaving the
# owner's scope: the owner's trigger ran as the bootstrap superuser (QA:
# an unprivileged owner's trigger made its role superuser with one streamed
# insert).  Deferred triggers now fire inside the owner's scope before the
# commit, for streamed transactions, v1 copies and incremental chunks.
#
#   escalate   an unprivileged owner's deferred trigger tries ALTER ROLE ...
#              SUPERUSER when it finds itself a superuser: still
#              unprivileged after a streamed insert (before: superuser)
#   who        every deferred call (v1 copy, incremental chunks, streamed
#              insert and update) records current_user: the owner's each
#              (before: the superuser's)
#   fails      a deferred trigger refusing a row at commit (sentinel in the
#              row): halted apply_failed P0001, nothing of the transaction
#              committed, checkpoint unchanged, no sentinel in any log;
#              the trigger fixed, a restart applies it once
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_deferred_owner_7f3e';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

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
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE app SUPERUSER';
	END IF;
	RETURN NULL;
END $$;
CREATE FUNCTION appz.rec() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen VALUES (TG_TABLE_NAME, current_user);
	RETURN NULL;
END $$;
CREATE FUNCTION appz.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.v LIKE 'SENTINEL%' THEN
		RAISE EXCEPTION 'refused %', NEW.v USING DETAIL = NEW.v;
	END IF;
	RETURN NULL;
END $$;
});

# the same owner for every sink; each table its own publication
sub owned_table
{
	my ($t, $fn, $rows) = @_;
	AshTest::both($src, $dst, "CREATE TABLE $t (id integer PRIMARY KEY, v text)");
	q_src("INSERT INTO $t SELECT g, 'r' || g FROM generate_series(1, $rows) g") if $rows;
	q_src("CREATE PUBLICATION pub_$t FOR TABLE $t");
	q_dst("ALTER TABLE $t OWNER TO app; SET ROLE app;"
		  . " CREATE CONSTRAINT TRIGGER d_$t AFTER INSERT OR UPDATE ON public.$t"
		  . " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION appz.$fn()");
	return;
}

sub owned_pipeline
{
	my ($sink, $t, %o) = @_;
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$t", maps => [ [$t] ],
		start => 0, %o);
	q_dst("ALTER TABLE ash_marker_$sink OWNER TO app; SELECT ash_replicant_alter_sink('$sink', owner => 'app')");
	AshTest::start_sink($dst, $sink);
	return;
}

# escalate
owned_table('acct', 'grab', 0);
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f', 'escalate: app starts unprivileged');
owned_pipeline('esc', 'acct');
q_dst("SELECT ash_replicant_wait_for_slot('esc', '60s')");
q_src("INSERT INTO acct VALUES (1, 'a')");
ok(AshTest::wait_caught_up($src, $dst, 'esc'), 'escalate: applied');
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'escalate: mirror');
is(q_dst("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f',
	'escalate: the owner is still unprivileged (its deferred trigger ran as itself)');
AshTest::stop_settled($src, $dst, 'esc');

# who: v1 copy, incremental chunks, the stream
owned_table('tv', 'rec', 3);
owned_table('ti', 'rec', 3);
owned_pipeline('sv', 'tv', pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
q_dst('ALTER TABLE ti ADD COLUMN replica_fingerprint bytea, ADD COLUMN replica_seen_attempt bytea');
AshTest::setup_pipeline($src, $dst, sink => 'si', publication => 'pub_ti',
	maps => [ [ 'ti', snapshot_provenance => 'true' ] ], start => 0, marker => 0,
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental'");
q_dst("SELECT ash_replicant_alter_sink('si', owner => 'app')");
AshTest::start_sink($dst, 'si');
AshTest::wait_status($dst, $_, 'healthy', undef, name => "who: $_ copied") for qw(sv si);
q_src("INSERT INTO tv VALUES (10, 's'); UPDATE tv SET v = 'y' WHERE id = 1;"
	  . " INSERT INTO ti VALUES (10, 's'); UPDATE ti SET v = 'y' WHERE id = 1");
ok(AshTest::wait_caught_up($src, $dst, 'sv'), 'who: sv streamed');
AshTest::assert_mirror_equal($src, $dst, [qw(tv)], name => 'who: mirrors');
my $rows = "SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM ti";
my $want = q_src($rows);
ok(AshTest::poll($dst, "SELECT ($rows) = " . AshTest::lit($want)),
	'who: mirror equals source: ti (provenance columns aside)');
is(q_dst("SELECT count(*) FROM seen WHERE t = 'tv'"), '5', 'who: tv: three copied rows and two streamed changes fired');
cmp_ok(q_dst("SELECT count(*) FROM seen WHERE t = 'ti'"), '>=', 5, 'who: ti: copied rows and streamed changes fired');
is(q_dst("SELECT coalesce(string_agg(DISTINCT who, ','), '') FROM seen"), 'app',
	'who: every deferred call ran as the sink owner');
AshTest::stop_settled($src, $dst, 'sv');
q_dst("SELECT ash_replicant_stop('si')");

# fails: refused at commit
owned_table('tf', 'refuse', 0);
owned_pipeline('sf', 'tf');
q_dst("SELECT ash_replicant_wait_for_slot('sf', '60s')");
q_src("INSERT INTO tf VALUES (1, 'ok')");
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'fails: a first row applied');
my $ckpt = AshTest::checkpoint_lsn($dst, 'sf');
q_src("BEGIN; INSERT INTO tf VALUES (2, 'fine'); INSERT INTO tf VALUES (3, '$SENTINEL'); COMMIT");
AshTest::wait_status($dst, 'sf', 'halted', 'apply_failed', src => $src,
	name => 'fails: a deferred trigger refusing at commit halts apply_failed');
is(q_dst("SELECT halt_sqlstate FROM ash_replicant.pipelines WHERE sink_name = 'sf'"), 'P0001', 'fails: halt_sqlstate P0001');
is(q_dst('SELECT count(*) FROM tf'), '1', 'fails: nothing of the transaction committed');
is(AshTest::checkpoint_lsn($dst, 'sf'), $ckpt, 'fails: the checkpoint unchanged');
is(scalar(AshTest::grep_logs_for($SENTINEL, $dst)), 0, 'fails: the refused value is in no destination log');
AshTest::stop_settled($src, $dst, 'sf');
q_dst("SET ROLE app; CREATE OR REPLACE FUNCTION appz.refuse() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RETURN NULL; END \$\$");
AshTest::start_sink($dst, 'sf');
ok(AshTest::wait_caught_up($src, $dst, 'sf'), 'fails: the trigger fixed, the transaction applied');
AshTest::assert_mirror_equal($src, $dst, ['tf'], name => 'fails: mirror after the restart');

done_testing();
