# Contract manifest (README.md#how-apply-works): recorded at the first binding with its SHA-256
# fingerprint; a pure addition is admitted with the watermark untouched; a
# change halts contract_incompatible and leaves mirror and checkpoint as they
# were; a decoder/table-set switch halts decoder_contract_incompatible; while
# streaming the census re-judges it (census_drift).  Widening a target
# column's type (varchar(3) -> varchar(10) -> text) is not a contract change:
# preflight warns on the narrow column first, the narrow column halts
# apply_failed 22001 at the first longer value, and widening it heals the
# pipeline with a plain start (no checkpoint reset), or while streaming.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $DB = 'postgres';
AshTest::both($src, $dst, q{CREATE TABLE c (id int PRIMARY KEY, v text)});
$src->safe_psql($DB, q{CREATE PUBLICATION pub_c FOR TABLE c; CREATE PUBLICATION pub_other FOR TABLE c});

AshTest::setup_pipeline($src, $dst, sink => 'k', publication => 'pub_c', maps => [['c']]);
AshTest::wait_status($dst, 'k', 'healthy', undef, src => $src, name => 'k healthy');
$src->safe_psql($DB, q{INSERT INTO c SELECT g, 'v' || g FROM generate_series(1, 50) g});
AshTest::wait_caught_up($src, $dst, 'k', name => 'k caught up');

my $ck = sub {
	return $dst->safe_psql($DB, q{SELECT encode(contract_fingerprint, 'hex') || '|' || commit_lsn
	  || '|' || (contract->'relations'->'public.c'->'columns' ? 'w')::text
	  FROM ash_replicant.checkpoints WHERE slot_name = 'k'});
};
my ($fp1, $wm1, $has_w1) = split /\|/, $ck->();
like($fp1, qr/^[0-9a-f]{64}$/, 'contract recorded with a SHA-256 fingerprint');
is($has_w1, 'false', 'the manifest lists the mapped columns only');

# 1. an addition: a new target column ahead of the source's
AshTest::stop_sink($dst, 'k');
AshTest::wait_status($dst, 'k', 'not_started', undef, src => $src, name => 'k stopped');
$dst->safe_psql($DB, q{ALTER TABLE c ADD COLUMN w text});
AshTest::start_sink($dst, 'k');
AshTest::wait_status($dst, 'k', 'healthy', undef, src => $src, name => 'addition admitted');
my ($fp2, $wm2, $has_w2) = split /\|/, $ck->();
isnt($fp2, $fp1, 'the fingerprint moved with the addition');
is($wm2, $wm1, 'the watermark is untouched by the addition');
is($has_w2, 'true', 'the added column is in the manifest');
$src->safe_psql($DB, q{ALTER TABLE c ADD COLUMN w text; UPDATE c SET w = 'x' || id WHERE id <= 10});
# its rows held NULL at both ends (docs/reasons.md#source_column_added)
AshTest::acknowledge_column_added($src, $dst, 'k', 'c', 'a source column added while the target holds rows');
AshTest::wait_caught_up($src, $dst, 'k', name => 'k caught up after the addition');
AshTest::assert_mirror_equal($src, $dst, ['c']);

# 2. a change: retype a recorded target column
AshTest::stop_sink($dst, 'k');
AshTest::wait_status($dst, 'k', 'not_started', undef, src => $src, name => 'k stopped again');
my $before = $ck->();
my $rows_before = AshTest::table_hash($dst, 'c');
$dst->safe_psql($DB, q{ALTER TABLE c ALTER COLUMN v TYPE varchar(100)});
$src->safe_psql($DB, q{INSERT INTO c VALUES (1000, 'after the change', NULL)});
AshTest::start_sink($dst, 'k');
AshTest::wait_status($dst, 'k', 'misconfigured', 'contract_incompatible', src => $src,
	name => 'a changed column halts contract_incompatible');
is($ck->(), $before, 'checkpoint (fingerprint, watermark) unchanged by the refused change');
is(AshTest::table_hash($dst, 'c'), $rows_before, 'nothing applied under a refused contract');
ok($dst->log_contains(qr/event=checkpoint\.conflict sink=k reason=contract_incompatible/),
	'one checkpoint.conflict event');

# 3. undo the change: admitted again, the pending row arrives exactly once
$dst->safe_psql($DB, q{ALTER TABLE c ALTER COLUMN v TYPE text});
AshTest::start_sink($dst, 'k');
AshTest::wait_status($dst, 'k', 'healthy', undef, src => $src, name => 'restored contract admitted');
AshTest::wait_caught_up($src, $dst, 'k', name => 'k caught up after the restore');
AshTest::assert_mirror_equal($src, $dst, ['c']);

# 4. while streaming: the census re-judges (a retype halts census_drift)
$dst->safe_psql($DB, q{ALTER TABLE c ALTER COLUMN w TYPE varchar(50)});
AshTest::wait_status($dst, 'k', 'halted', 'census_drift', src => $src,
	name => 'the census halts census_drift on a retyped target column');

# 5. a table-set switch: decoder_contract_incompatible
$dst->safe_psql($DB, q{ALTER TABLE c ALTER COLUMN w TYPE text});
my ($sysid, $db) = AshTest::source_identity($src);
$dst->safe_psql($DB, "SELECT ash_replicant_configure_pipeline('k', connection => "
	  . AshTest::lit(AshTest::conninfo($src)) . ", publication => 'pub_other',"
	  . " source_system_identifier => '$sysid', source_database => '$db',"
	  . q{ census => '{"interval_ms": 1000}')});
$src->safe_psql($DB, q{ALTER PUBLICATION pub_other ADD TABLE ash_marker_k});
AshTest::start_sink($dst, 'k');
AshTest::wait_status($dst, 'k', 'misconfigured', 'decoder_contract_incompatible', src => $src,
	name => 'a publication switch halts decoder_contract_incompatible');

# 6. widening a target column is not a contract change
AshTest::both($src, $dst, q{CREATE TABLE d (id int PRIMARY KEY, v text)});
$dst->safe_psql($DB, q{ALTER TABLE d ALTER COLUMN v TYPE varchar(3)});
$src->safe_psql($DB, q{CREATE PUBLICATION pub_d FOR TABLE d});
AshTest::setup_pipeline($src, $dst, sink => 'wd', publication => 'pub_d', maps => [['d']],
	census => '{"interval_ms": 300}', start => 0);
is($dst->safe_psql($DB, q{SELECT verdict || '/' || reason || '/' || detail FROM ash_replicant_preflight('wd')
	WHERE check_name = 'columns'}),
	'warn/target_column_narrower/table public.d columns: v (text -> character varying(3))',
	'preflight warns that the target column holds less than the source column');
AshTest::start_sink($dst, 'wd');
AshTest::wait_status($dst, 'wd', 'healthy', undef, src => $src, name => 'wd healthy');
$src->safe_psql($DB, q{INSERT INTO d VALUES (1, 'abc')});
AshTest::wait_caught_up($src, $dst, 'wd', name => 'a value that fits applies');
$src->safe_psql($DB, q{INSERT INTO d VALUES (2, 'longer than three')});
AshTest::wait_status($dst, 'wd', 'halted', 'apply_failed', src => $src,
	name => 'the first longer value halts apply_failed');
is(AshTest::status_row($dst, 'wd')->{halt_condition}, 'string_data_right_truncation',
	'status names the condition');
my $wd_fp = $dst->safe_psql($DB, q{SELECT encode(contract_fingerprint, 'hex') FROM ash_replicant.checkpoints
	WHERE slot_name = 'wd'});
$dst->safe_psql($DB, q{ALTER TABLE d ALTER COLUMN v TYPE varchar(20)});
AshTest::start_sink($dst, 'wd');
AshTest::wait_caught_up($src, $dst, 'wd', name => 'widened at a plain start: no checkpoint reset');
AshTest::wait_status($dst, 'wd', 'healthy', undef, src => $src, name => 'wd healthy after widening');
AshTest::assert_mirror_equal($src, $dst, ['d']);
isnt($dst->safe_psql($DB, q{SELECT encode(contract_fingerprint, 'hex') FROM ash_replicant.checkpoints
	WHERE slot_name = 'wd'}), $wd_fp, 'the contract records the wider type');
ok($dst->log_contains(qr/event=contract\.extended sink=wd change=type_widened/),
	'the widening is logged as such');

# while streaming: the census admits a widening and the stream goes on
$dst->safe_psql($DB, q{ALTER TABLE d ALTER COLUMN v TYPE text});
ok(AshTest::poll($dst, q{SELECT (contract->'relations'->'public.d'->'columns'->'v'->>'type') = 'text'
	FROM ash_replicant.checkpoints WHERE slot_name = 'wd'}),
	'the census admits widening while streaming');
$src->safe_psql($DB, q{INSERT INTO d VALUES (3, repeat('long ', 20)); UPDATE d SET v = v || ' more' WHERE id = 1});
AshTest::wait_caught_up($src, $dst, 'wd', name => 'longer values apply after the widening');
is(AshTest::status_row($dst, 'wd')->{state}, 'healthy', 'still healthy');
AshTest::assert_mirror_equal($src, $dst, ['d']);

# narrowing is a contract change, while streaming too
$dst->safe_psql($DB, q{ALTER TABLE d ALTER COLUMN v TYPE varchar(200)});
AshTest::wait_status($dst, 'wd', 'halted', 'census_drift', src => $src,
	name => 'narrowing while streaming halts census_drift');

done_testing();
