# pglogical's TRUNCATE trigger (docs/pglogical.md#truncate): pglogical decodes
# no TRUNCATE; a trigger queues it.  A TRUNCATE the trigger does not fire for
# queues nothing, and the mirror would keep the rows, healthy.
#
#  disabled   the trigger of a mapped table disabled while streaming: the
#             census halts misconfigured/publication_contract_incompatible
#             naming the table and the fix, preflight and doctor fail the
#             publication check; enabled again, the start halts
#             publication_gap (a TRUNCATE in between may have queued
#             nothing); acknowledged, streaming on
#  transient  disabled, a TRUNCATE, enabled again, all while the pipeline is
#             stopped: the start halts publication_gap, nothing applied
#  origins    a replication origin created on the source (it now looks like a
#             subscriber, whose replica sessions an ordinary trigger ignores):
#             the census halts publication_contract_incompatible; after ENABLE
#             ALWAYS and the gap acknowledged, a TRUNCATE run with
#             session_replication_role = replica is mirrored
#  replica    a trigger firing only in replica sessions: refused at the start,
#             before binding; an ignored table's trigger is not judged
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(src_conf => q{
wal_level = logical
shared_preload_libraries = 'pglogical'
output_plugin_libraries = 'pgoutput, pglogical_output'
track_commit_timestamp = on
});
my ($sysid, $sdb) = AshTest::source_identity($src);

$src->safe_psql($DB, q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');
SELECT pglogical.create_replication_set('tset');
SELECT pglogical.create_replication_set('rset');
});
AshTest::both($src, $dst, q{
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE ign (id int PRIMARY KEY);
CREATE TABLE r (id int PRIMARY KEY, v text);
});
$src->safe_psql($DB, q{
SELECT pglogical.replication_set_add_table('tset', 't');
SELECT pglogical.replication_set_add_table('tset', 'ign');
SELECT pglogical.replication_set_add_table('rset', 'r');
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 10) g;
});

sub trigger_of
{
	my ($table) = @_;
	return $src->safe_psql($DB, "SELECT tgname FROM pg_trigger WHERE tgrelid = '$table'::regclass"
		  . " AND tgfoid = 'pglogical.queue_truncate()'::regprocedure");
}
my $trg = trigger_of('t');
like($trg, qr/^queue_truncate_trigger_\d+$/, 'pglogical created the TRUNCATE trigger');

sub publication_check
{
	my ($fn, $sink) = @_;
	return $dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '') FROM $fn('$sink')"
		  . " WHERE check_name = 'publication'");
}


sub acknowledge_gap
{
	my ($sink, $label) = @_;
	AshTest::stop_settled($src, $dst, $sink);
	is($dst->safe_psql($DB, "SELECT ash_replicant_acknowledge_publication_gap('$sink', "
			  . AshTest::lit($sysid) . ", " . AshTest::lit($sdb) . ")"),
		't', "$label: the gap acknowledged");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy again");
}

AshTest::setup_pipeline($src, $dst, sink => 'pt', decoder => 'pglogical', replication_sets => ['tset'],
	ignored_sources => ['public.ign'], maps => [ [ 't', on_truncate => 'mirror' ] ]);
AshTest::wait_status($dst, 'pt', 'healthy', undef, src => $src, name => 'an ordinary trigger on a source without origins');
like($dst->safe_psql($DB, "SELECT published FROM ash_replicant.publication_members WHERE slot_name = 'pt'"
		  . " AND source_table = 't'"),
	qr/,def:trg:\d+:\d+,/, 'the record holds the TRUNCATE trigger by its row');
AshTest::wait_caught_up($src, $dst, 'pt', name => 'caught up');
$src->safe_psql($DB, "TRUNCATE t; INSERT INTO t SELECT g, 'w' || g FROM generate_series(1, 5) g");
AshTest::wait_caught_up($src, $dst, 'pt', name => 'a TRUNCATE streamed');
AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'the TRUNCATE mirrored');

# disabled while streaming: the census halts
{
	my $h0 = AshTest::table_hash($dst, 't');
	$src->safe_psql($DB, "ALTER TABLE ign DISABLE TRIGGER ALL");
	AshTest::wait_caught_up($src, $dst, 'pt', name => 'disabled: an ignored table\'s trigger is not judged');
	$src->safe_psql($DB, "ALTER TABLE ign ENABLE TRIGGER ALL");
	$src->safe_psql($DB, "ALTER TABLE t DISABLE TRIGGER $trg");
	AshTest::wait_status($dst, 'pt', 'misconfigured', 'publication_contract_incompatible', src => $src,
		name => 'disabled: the census halts publication_contract_incompatible');
	like(AshTest::halt_line($dst, 'pt', 'publication_contract_incompatible'),
		qr/pglogical's TRUNCATE trigger on public\.t is disabled: .*ALTER TABLE public\.t ENABLE ALWAYS TRIGGER $trg/,
		'disabled: the halt names the table, the trigger and the fix');
	is(publication_check('ash_replicant_preflight', 'pt'), 'fail/publication_contract_incompatible',
		'disabled: preflight fails the publication check');
	is(publication_check('ash_replicant_doctor', 'pt'), 'fail/publication_contract_incompatible',
		'disabled: doctor fails the publication check');
	is(AshTest::table_hash($dst, 't'), $h0, 'disabled: mirror unchanged');
	AshTest::stop_settled($src, $dst, 'pt');
	$src->safe_psql($DB, "ALTER TABLE t ENABLE TRIGGER $trg");
	my $cp = AshTest::checkpoint_facts($dst, 'pt');
	is(publication_check('ash_replicant_preflight', 'pt'), 'fail/publication_gap',
		'enabled again: preflight fails publication_gap');
	AshTest::start_sink($dst, 'pt');
	AshTest::wait_status($dst, 'pt', 'halted', 'publication_gap', src => $src,
		name => 'enabled again: the start halts publication_gap');
	is(AshTest::checkpoint_facts($dst, 'pt'), $cp, 'enabled again: checkpoint unchanged');
	acknowledge_gap('pt', 'disabled');
	$src->safe_psql($DB, "UPDATE t SET v = v || '+'");
	AshTest::wait_caught_up($src, $dst, 'pt', name => 'disabled: caught up after the acknowledgement');
	AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'disabled: mirror equals source afterwards');
}

# disabled, a TRUNCATE, enabled again while stopped: no census saw it
{
	AshTest::stop_settled($src, $dst, 'pt');
	my $h0 = AshTest::table_hash($dst, 't');
	my $cp = AshTest::checkpoint_facts($dst, 'pt');
	$src->safe_psql($DB, "BEGIN; ALTER TABLE t DISABLE TRIGGER ALL; TRUNCATE t; ALTER TABLE t ENABLE TRIGGER ALL;"
		  . " INSERT INTO t VALUES (100, 'after'); COMMIT;");
	AshTest::start_sink($dst, 'pt');
	AshTest::wait_status($dst, 'pt', 'halted', 'publication_gap', src => $src,
		name => 'transient: the start halts publication_gap');
	is(AshTest::table_hash($dst, 't'), $h0, 'transient: nothing applied');
	is(AshTest::checkpoint_facts($dst, 'pt'), $cp, 'transient: checkpoint unchanged');
	acknowledge_gap('pt', 'transient');
}

# a source holding replication origins: its replica sessions skip an ordinary trigger
{
	my $h0 = AshTest::table_hash($dst, 't');
	$src->safe_psql($DB, "SELECT pg_replication_origin_create('upstream')");
	AshTest::wait_status($dst, 'pt', 'misconfigured', 'publication_contract_incompatible', src => $src,
		name => 'origins: the census halts publication_contract_incompatible');
	like(AshTest::halt_line($dst, 'pt', 'publication_contract_incompatible'),
		qr/TRUNCATE trigger on public\.t does not fire in replica sessions, and the source holds replication origins/,
		'origins: the halt says why');
	is(AshTest::table_hash($dst, 't'), $h0, 'origins: mirror unchanged');
	AshTest::stop_settled($src, $dst, 'pt');
	$src->safe_psql($DB, "ALTER TABLE t ENABLE ALWAYS TRIGGER $trg;"
		  . " ALTER TABLE ash_marker_pt ENABLE ALWAYS TRIGGER " . trigger_of('ash_marker_pt'));
	AshTest::start_sink($dst, 'pt');
	AshTest::wait_status($dst, 'pt', 'halted', 'publication_gap', src => $src,
		name => 'origins: ENABLE ALWAYS halts publication_gap');
	acknowledge_gap('pt', 'origins');
	$src->safe_psql($DB, "SET session_replication_role = replica; TRUNCATE t; INSERT INTO t VALUES (7, 'replica')");
	AshTest::wait_caught_up($src, $dst, 'pt', name => 'origins: caught up');
	AshTest::assert_mirror_equal($src, $dst, ['t'], name => 'origins: a replica session\'s TRUNCATE mirrored');
	is($dst->safe_psql($DB, 'SELECT count(*) FROM t'), '1', 'origins: the mirror holds only the row after it');
	$src->safe_psql($DB, "SELECT pg_replication_origin_drop('upstream')");
}

# a trigger firing only in replica sessions: refused before binding
{
	$src->safe_psql($DB, "ALTER TABLE r ENABLE REPLICA TRIGGER " . trigger_of('r'));
	AshTest::setup_pipeline($src, $dst, sink => 'pr', decoder => 'pglogical', replication_sets => ['rset'],
		maps => [ [ 'r', on_truncate => 'mirror' ] ]);
	AshTest::wait_status($dst, 'pr', 'misconfigured', 'publication_contract_incompatible', src => $src,
		name => 'replica: refused at the start');
	like(AshTest::halt_line($dst, 'pr', 'publication_contract_incompatible'),
		qr/TRUNCATE trigger on public\.r fires only in replica sessions/, 'replica: the halt says why');
	is($dst->safe_psql($DB, "SELECT count(*) FROM (" . AshTest::checkpoint_sql('pr', 'c.commit_lsn') . ") c"), '0',
		'replica: refused before binding (no checkpoint)');
	AshTest::stop_sink($dst, 'pr');
	$src->safe_psql($DB, "ALTER TABLE r ENABLE ALWAYS TRIGGER " . trigger_of('r'));
	AshTest::start_sink($dst, 'pr');
	AshTest::wait_status($dst, 'pr', 'healthy', undef, src => $src, name => 'replica: healthy once it fires always');
}

done_testing();
