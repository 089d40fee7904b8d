# A mapped target column dropped and added again under its name (or renamed
# away and another added under its name) is another column: empty where the
# mirror had values (docs/operations.md, "Target DDL while streaming").  The
# contract records each target column's number.
#
#  streaming  DROP COLUMN v; ADD COLUMN v in one transaction: census_drift
#             before anything is written to the table (before: healthy, v
#             NULL in every earlier row), contract_incompatible at the next
#             start, checkpoint unchanged
#  renamed    RENAME COLUMN v TO v_old; ADD COLUMN v: the same
#  recorded   a contract recorded before column numbers were (their keys
#             removed from the stored manifest): admitted at the start as an
#             addition, streaming on
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
my ($sysid, $sdb) = AshTest::source_identity($src);
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, q{
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE u (id int PRIMARY KEY, v text);
});
$src->safe_psql($DB, "CREATE PUBLICATION pub_t FOR TABLE t; CREATE PUBLICATION pub_u FOR TABLE u");

sub replaced_case
{
	my ($sink, $table, $ddl, $label) = @_;
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$table", maps => [ [$table] ]);
	AshTest::wait_slot_consistent($src, $dst, $sink);
	$src->safe_psql($DB, "INSERT INTO $table SELECT g, 'v' || g FROM generate_series(1, 5) g");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: streamed");
	like(q_dst("SELECT contract::text FROM ash_replicant.checkpoints WHERE slot_name = '$sink'"),
		qr/"attnum": 2/, "$label: the contract records the column's number");
	my $cp = AshTest::checkpoint_facts($dst, $sink);
	q_dst($ddl);
	AshTest::wait_status($dst, $sink, 'halted', 'census_drift', src => $src,
		name => "$label: halted census_drift");
	$src->safe_psql($DB, "UPDATE $table SET v = v || '+' WHERE id = 1");
	is(q_dst("SELECT count(*) FROM $table WHERE v IS NOT NULL"), '0', "$label: nothing written since");
	is(AshTest::checkpoint_facts($dst, $sink), $cp, "$label: checkpoint unchanged");
	AshTest::stop_settled($src, $dst, $sink);
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'contract_incompatible', src => $src,
		name => "$label: the start finds contract_incompatible");
	AshTest::stop_sink($dst, $sink);
}

replaced_case('ts', 't', 'BEGIN; ALTER TABLE t DROP COLUMN v; ALTER TABLE t ADD COLUMN v text; COMMIT', 'streaming');
replaced_case('tu', 'u', 'BEGIN; ALTER TABLE u RENAME COLUMN v TO v_old; ALTER TABLE u ADD COLUMN v text; COMMIT', 'renamed');

# a contract recorded before the column numbers were
{
	AshTest::both($src, $dst, 'CREATE TABLE w (id int PRIMARY KEY, v text)');
	$src->safe_psql($DB, 'CREATE PUBLICATION pub_w FOR TABLE w');
	AshTest::setup_pipeline($src, $dst, sink => 'tw', publication => 'pub_w', maps => [ ['w'] ]);
	AshTest::wait_status($dst, 'tw', 'healthy', undef, src => $src, name => 'recorded: healthy');
	AshTest::stop_settled($src, $dst, 'tw');
	q_dst(q{
UPDATE ash_replicant.checkpoints c SET contract = jsonb_set(c.contract, '{relations}', (
  SELECT jsonb_object_agg(rk, jsonb_set(rv, '{columns}', (
    SELECT jsonb_object_agg(ck, cv - 'attnum') FROM jsonb_each(rv->'columns') x(ck, cv))))
    FROM jsonb_each(c.contract->'relations') r(rk, rv)))
 WHERE slot_name = 'tw';
UPDATE ash_replicant.checkpoints SET contract_fingerprint = sha256(convert_to(contract::text, 'UTF8'))
 WHERE slot_name = 'tw'});
	unlike(q_dst("SELECT contract::text FROM ash_replicant.checkpoints WHERE slot_name = 'tw'"),
		qr/attnum/, 'recorded: the stored contract holds no column number');
	AshTest::start_sink($dst, 'tw');
	AshTest::wait_status($dst, 'tw', 'healthy', undef, src => $src, name => 'recorded: admitted at the start');
	$src->safe_psql($DB, "INSERT INTO w VALUES (1, 'one')");
	AshTest::wait_caught_up($src, $dst, 'tw', name => 'recorded: streams on');
	AshTest::assert_mirror_equal($src, $dst, ['w'], name => 'recorded');
	like(q_dst("SELECT contract::text FROM ash_replicant.checkpoints WHERE slot_name = 'tw'"),
		qr/"attnum": 2/, 'recorded: the contract now records the column number');
}

done_testing();
