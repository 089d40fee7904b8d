# A target column no source column feeds, whose default draws from a
# sequence the sink owner may not use (a bigserial surrogate key, say):
# every insert of the pipeline fails 42501.  Before, registration, preflight
# and doctor passed, status was healthy, and the first source insert was
# retried and then halted apply_failed (found by an exploratory test).  Now
# doctor's and preflight's check columns fails config_invalid naming the
# target, the column and the sequence (docs/reasons.md#config_invalid); a
# column the source feeds needs no such privilege (its default is never
# drawn); granted USAGE, the check passes and the pipeline streams.
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
done_testing();
