# A target column no source column feeds, whose default draws from a
# sequence the sink owner may not use (a bigserial surrogate key, say):
# every insert of the pipeline fails 42501.  Before, registration, preflight
# and doctor passed, status was healthy, and the first source insert was
# retried and then halted apply_failed (found by an exploratory test).  Now
# doctor's and preflight's check columns fails config_invalid naming the
# target, the column and the sequence (docs/reasons.md#config_invalid); a
# column the source feeds needs no such privilege (its default is never
# drawn); granted USAGE, the check passes and the pipeline streams.
#
# required   the same for a target column no source column feeds that is
#            NOT NULL without a default: every insert fails 23502 (before:
#            doctor passed, the first insert halted apply_failed): columns
#            fails config_invalid naming it; a BEFORE INSERT trigger, which
#            may fill it, is not judged; given a default, it passes
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

q_src(q{CREATE TABLE t (id int PRIMARY KEY, v text, f bigint);
	CREATE PUBLICATION pub_t FOR TABLE t});
q_dst(q{CREATE ROLE own LOGIN;
	CREATE TABLE t (id int PRIMARY KEY, v text, f bigserial, n bigserial);
	GRANT SELECT, INSERT, UPDATE, DELETE ON t TO own;
	GRANT own TO CURRENT_USER});
AshTest::setup_pipeline($src, $dst, sink => 'ow', publication => 'pub_t', maps => [ ['t'] ], marker => 0,
	owner => 'own', start => 0);

sub columns_check
{
	return q_dst("SELECT verdict || '/' || coalesce(reason, '') || '/' || coalesce(detail::text, '')"
		  . " FROM ash_replicant_preflight('ow') WHERE check_name = 'columns'");
}
my $c = columns_check();
like($c, qr{^fail/config_invalid/}, 'preflight: columns fails config_invalid');
like($c, qr{target public\.t: n \(public\.t_n_seq\)}, 'the detail names the target, the column and the sequence');
unlike($c, qr{t_f_seq}, 'a column the source feeds needs no USAGE on its sequence');
like(q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_doctor('ow') WHERE check_name = 'columns'"),
	qr{^fail/config_invalid}, 'doctor: the same');

q_dst('GRANT USAGE ON SEQUENCE t_n_seq TO own');
like(columns_check(), qr{^pass/}, 'granted: columns passes');
q_dst("SELECT ash_replicant_start('ow')");
AshTest::wait_slot_consistent($src, $dst, 'ow');
q_src("INSERT INTO t VALUES (1, 'one', 10)");
AshTest::poll($dst, 'SELECT count(*) FROM t WHERE id = 1', '1');
is(q_dst('SELECT v || f || (n > 0)::text FROM t'), 'one10true', 'streamed, the surrogate drawn');

# required
q_src(q{CREATE TABLE r (id int PRIMARY KEY, v text); CREATE PUBLICATION pub_r FOR TABLE r});
q_dst(q{CREATE TABLE r (id int PRIMARY KEY, v text, required_local text NOT NULL, note text)});
AshTest::setup_pipeline($src, $dst, sink => 'rq', publication => 'pub_r', maps => [ ['r'] ], marker => 0, start => 0);
my $r = q_dst("SELECT verdict || '/' || coalesce(reason, '') || '/' || coalesce(detail::text, '')"
	  . " FROM ash_replicant_preflight('rq') WHERE check_name = 'columns'");
like($r, qr{^fail/config_invalid/.*NOT NULL without a default: target public\.r: required_local$},
	'required: columns fails config_invalid naming the column');
q_dst(q{CREATE FUNCTION fill() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN NEW.required_local := 'x'; RETURN NEW; END $$;
	CREATE TRIGGER r_fill BEFORE INSERT ON r FOR EACH ROW EXECUTE FUNCTION fill()});
like(AshTest::preflight_verdict($dst, 'rq', 'columns'), qr{^(pass|warn)/}, 'required: a BEFORE INSERT trigger may fill it');
q_dst(q{DROP TRIGGER r_fill ON r; ALTER TABLE r ALTER COLUMN required_local SET DEFAULT 'local'});
like(AshTest::preflight_verdict($dst, 'rq', 'columns'), qr{^pass/}, 'required: given a default, columns passes');
done_testing();
