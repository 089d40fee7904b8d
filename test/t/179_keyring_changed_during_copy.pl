# The keyring changes while one long transaction encrypts: a v1 copy of a
# table with an encrypted column, slowed by a trigger to several seconds
# (docs/keys.md).  The worker read the keyring at the start of each
# transaction only: a table's copy kept encrypting with the keys it began
# with, and committed.
#
#   rotated  v2 added, then v1 removed, while the copy runs: every row of the
#            mirror decrypts with the keyring as it is (before: all 3000
#            rows under v1, the version the operator removed, healthy);
#            the transaction that encrypted under a version removed before
#            it committed halts keyring_version_missing and is applied again
#   refused  the keyring file made group-readable while the copy runs:
#            halts keyring_invalid with nothing of the table committed
#            (before: all rows committed under the refused file's key, the
#            halt after); the file fixed, a restart copies the table, every
#            row decrypts
# No plaintext or key in any server log.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $DB = $AshTest::DB;
my $S  = AshTenancy::sentinel();
my %k  = map { $_ => AshTenancy::key_hex(140 + $_) } 1 .. 2;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 1\n");
my $dd = $dst->data_dir;
AshTenancy::write_keyring($dst, 'keyring', "column_encryption 1 $k{1}");

sub q_dst { return $dst->safe_psql($DB, $_[0]); }

# the versions of the mirror's ciphertexts (bytes 2..5 of the format)
sub versions
{
	my ($t) = @_;
	return q_dst("SELECT coalesce(string_agg(v::text, ',' ORDER BY v), '') FROM (SELECT DISTINCT"
		  . " ('x' || encode(substr(pan, 2, 4), 'hex'))::bit(32)::int AS v FROM $t) x");
}

sub copying
{
	return AshTest::poll($dst, "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
		  . " AND backend_type LIKE 'ash_replicant%'", 't');
}

for my $t ('rotated', 'refused')
{
	$src->safe_psql($DB, qq{
CREATE TABLE $t (id integer PRIMARY KEY, pan text);
INSERT INTO $t SELECT g, '$S ' || g FROM generate_series(1, 3000) g;
CREATE PUBLICATION pub_$t FOR TABLE $t;
});
	q_dst(qq{
CREATE TABLE $t (id integer PRIMARY KEY, pan bytea);
CREATE TABLE ${t}_brake (ms float8 NOT NULL);
INSERT INTO ${t}_brake VALUES (2);
CREATE FUNCTION ${t}_slow() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN PERFORM pg_sleep(ms / 1000) FROM public.${t}_brake; RETURN NEW; END \$\$;
CREATE TRIGGER slow BEFORE INSERT ON $t FOR EACH ROW EXECUTE FUNCTION ${t}_slow();
});
}

# --- rotated ---------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'rotated', publication => 'pub_rotated', marker => 0,
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'",
	maps => [ [ 'rotated', sensitive => ['pan'], encrypted => ['pan'] ] ]);
ok(copying(), 'rotated: the copy is under way');
AshTenancy::write_keyring($dst, 'keyring', "column_encryption 1 $k{1}\ncolumn_encryption 2 $k{2}");
usleep(1_500_000);
AshTenancy::write_keyring($dst, 'keyring', "column_encryption 2 $k{2}");
ok(copying(), 'rotated: v1 removed while the copy still runs');
AshTest::wait_status($dst, 'rotated', 'halted', 'keyring_version_missing', src => $src,
	name => 'rotated: the copy that encrypted under a removed version halts');
is(q_dst('SELECT count(*) FROM rotated'), '0', 'rotated: nothing of it committed');
q_dst('UPDATE rotated_brake SET ms = 0');
q_dst("SELECT ash_replicant_start('rotated')");
ok(AshTest::poll($dst, AshTest::checkpoint_sql('rotated', "c.snapshot_phase = 'complete'"), 't'),
	'rotated: restarted, the copy completes');
AshTest::wait_status($dst, 'rotated', 'healthy');
is(q_dst('SELECT count(*) FROM rotated'), '3000', 'rotated: every row copied');
is(versions('rotated'), '2', 'rotated: every value under the active version');
is(q_dst("SELECT count(*) FROM rotated WHERE ash_replicant_decrypt(pan, 'rotated'::regclass, 'pan') = '$S ' || id"),
	'3000', 'rotated: every value decrypts with the keyring as it is, to the source\'s');
q_dst("SELECT ash_replicant_stop('rotated')");

# --- refused ---------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'refused', publication => 'pub_refused', marker => 0,
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'",
	maps => [ [ 'refused', sensitive => ['pan'], encrypted => ['pan'] ] ]);
ok(copying(), 'refused: the copy is under way');
chmod 0644, "$dd/keyring" or die "chmod: $!";
AshTest::wait_status($dst, 'refused', 'misconfigured', 'keyring_invalid', src => $src,
	name => 'refused: the copy halts on the refused keyring');
is(q_dst('SELECT count(*) FROM refused'), '0', 'refused: nothing encrypted under a refused keyring committed');
chmod 0600, "$dd/keyring" or die "chmod: $!";
q_dst('UPDATE refused_brake SET ms = 0');
q_dst("SELECT ash_replicant_start('refused')");
ok(AshTest::poll($dst, AshTest::checkpoint_sql('refused', "c.snapshot_phase = 'complete'"), 't'),
	'refused: the file fixed and restarted, the copy completes');
AshTest::wait_status($dst, 'refused', 'healthy');
is(q_dst("SELECT count(*) FROM refused WHERE ash_replicant_decrypt(pan, 'refused'::regclass, 'pan') = '$S ' || id"),
	'3000', 'refused: every value decrypts to the source\'s');

my @hits = AshTenancy::grep_all_logs([ $S, $k{1}, $k{2} ], $src, $dst);
is(scalar(@hits), 0, 'no plaintext or key in any server log')
  or diag join("\n", @hits[ 0 .. ($#hits < 9 ? $#hits : 9) ]);

done_testing();
