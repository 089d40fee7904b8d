# 164_pglogical_identity_retype.pl
#
# What pglogical_output withholds, judged by what the stream said rather than
# by the source's catalog when the relation message arrives
# (docs/pglogical.md, "Replica identity").
#
#  control   a REPLICA IDENTITY FULL table streams non-key and key updates and
#            deletes exactly; a column widened (numeric(10,2) to (12,2))
#            before the table's first change of the session streams on
#  stopped   while the pipeline is stopped: REPLICA IDENTITY NOTHING, a
#            DELETE (pglogical drops it: no old row), an UPDATE of the key
#            (sent with its new row only), FULL again: the start halts
#            misconfigured/source_replica_identity, the mirror and the
#            checkpoint as before the DELETE
#  update    the same with only the key UPDATE in the window: the same halt
#  streaming NOTHING, a DELETE and a key UPDATE in one transaction while
#            streaming: halts source_replica_identity; FULL and a restart
#            (what reasons.md advises) halts again, nothing applied
#  delete    NOTHING and a lone DELETE while streaming: the same halt
#  retype    numeric(10,2) retyped to numeric(10,0) (which rounds the rows at
#            the source) before the table's first change of the session, the
#            census off: the next change halts source_type_invalid, as under
#            pgoutput, nothing of it applied
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(src_conf => q{
shared_preload_libraries = 'pglogical'
output_plugin_libraries = 'pgoutput, pglogical_output'
});
$src->safe_psql($DB, q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');
});
my $census_off = '{"enabled": false}';

# streaming (with the census off the state stays catching_up)
sub running
{
	my ($sink, $name) = @_;
	$dst->safe_psql($DB, "SELECT ash_replicant_wait_for_slot('$sink', '60s')");
	AshTest::poll($dst, "SELECT state IN ('healthy', 'catching_up', 'halted', 'misconfigured')"
		  . " FROM ash_replicant_status('$sink')");
	like(AshTest::status_row($dst, $sink)->{state}, qr/^(healthy|catching_up)$/, $name);
}

# one table, its own set and sink; rows 1..5 streamed and caught up
sub table_sink
{
	my ($t, $cols, %o) = @_;
	AshTest::both($src, $dst, "CREATE TABLE $t ($cols)");
	$src->safe_psql($DB, "SELECT pglogical.create_replication_set('set_$t');"
		  . " SELECT pglogical.replication_set_add_table('set_$t', '$t')");
	$src->safe_psql($DB, "ALTER TABLE $t REPLICA IDENTITY FULL") if $o{full};
	AshTest::setup_pipeline($src, $dst, sink => "k_$t", decoder => 'pglogical',
		replication_sets => ["set_$t"], maps => [ [$t] ], census => $census_off);
	running("k_$t", "$t: streaming");
	$src->safe_psql($DB, $o{rows} // "INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, 5) g");
	AshTest::wait_caught_up($src, $dst, "k_$t");
	AshTest::assert_mirror_equal($src, $dst, [$t], name => "$t: mirrored before");
	return "k_$t";
}

sub ids
{
	my ($node, $t) = @_;
	return $node->safe_psql($DB, "SELECT string_agg(id::text, ',' ORDER BY id) FROM $t");
}

# the transaction's commit LSN (empty transactions before it, autovacuum's
# say, which pglogical sends, may advance the checkpoint up to it)
sub tracked { my ($commit) = AshTest::commit_tracked($src, $_[0]); return $commit; }

sub checkpoint_before
{
	my ($sink, $lsn, $name) = @_;
	is($dst->safe_psql($DB, AshTest::checkpoint_sql($sink, "c.commit_lsn < '$lsn'::pg_lsn")),
		't', $name);
}

# ---------------------------------------------------------------------------
# control: FULL streams updates and deletes; a widening streams on
# ---------------------------------------------------------------------------
{
	my $sink = table_sink('ctl', 'id int PRIMARY KEY, v text, n numeric(10,2)', full => 1,
		rows => "INSERT INTO ctl SELECT g, 'v' || g, g + 0.25 FROM generate_series(1, 5) g");
	AshTest::stop_settled($src, $dst, $sink);
	AshTest::start_sink($dst, $sink);
	running($sink, 'control: restarted');
	$src->safe_psql($DB, "ALTER TABLE ctl ALTER COLUMN n TYPE numeric(12,2)");
	$src->safe_psql($DB, "UPDATE ctl SET v = 'w' WHERE id = 1");
	$src->safe_psql($DB, "UPDATE ctl SET id = 102 WHERE id = 2");
	$src->safe_psql($DB, "DELETE FROM ctl WHERE id = 3");
	$src->safe_psql($DB, "BEGIN; DELETE FROM ctl WHERE id = 4; INSERT INTO ctl VALUES (6, 'x', 6.5); COMMIT");
	AshTest::wait_caught_up($src, $dst, $sink, name => 'control: caught up');
	AshTest::assert_mirror_equal($src, $dst, ['ctl'], name => 'control: FULL updates and deletes mirrored');
	is(ids($dst, 'ctl'), '1,5,6,102', 'control: the rows the source holds');
	like(AshTest::status_row($dst, $sink)->{state}, qr/^(healthy|catching_up)$/, 'control: streaming on');
	AshTest::stop_settled($src, $dst, $sink);
}

# ---------------------------------------------------------------------------
# stopped: the 917 repro
# ---------------------------------------------------------------------------
{
	my $sink = table_sink('nst', 'id int PRIMARY KEY, v text');
	AshTest::stop_settled($src, $dst, $sink);
	$src->safe_psql($DB, "ALTER TABLE nst REPLICA IDENTITY NOTHING");
	my $before = tracked("DELETE FROM nst WHERE id = 1");
	$src->safe_psql($DB, "UPDATE nst SET id = 102 WHERE id = 2");
	$src->safe_psql($DB, "ALTER TABLE nst REPLICA IDENTITY FULL");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_replica_identity', src => $src,
		name => 'stopped: the delete pglogical dropped halts source_replica_identity');
	is(ids($dst, 'nst'), '1,2,3,4,5', 'stopped: the mirror as before');
	checkpoint_before($sink, $before, 'stopped: the checkpoint not past the DELETE');
	like(AshTest::halt_line($dst, $sink, 'source_replica_identity'), qr/nst/,
		'stopped: the halt names the table');
	AshTest::stop_settled($src, $dst, $sink);
}

# ---------------------------------------------------------------------------
# update: only the key update in the window
# ---------------------------------------------------------------------------
{
	my $sink = table_sink('nsu', 'id int PRIMARY KEY, v text');
	AshTest::stop_settled($src, $dst, $sink);
	$src->safe_psql($DB, "ALTER TABLE nsu REPLICA IDENTITY NOTHING");
	my $before = tracked("UPDATE nsu SET id = 102 WHERE id = 2");
	$src->safe_psql($DB, "ALTER TABLE nsu REPLICA IDENTITY FULL");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_replica_identity', src => $src,
		name => 'update: an update without its old row halts source_replica_identity');
	is(ids($dst, 'nsu'), '1,2,3,4,5', 'update: the mirror as before');
	checkpoint_before($sink, $before, 'update: the checkpoint not past the UPDATE');
	AshTest::stop_settled($src, $dst, $sink);
}

# ---------------------------------------------------------------------------
# streaming: the 911 R2 repro, then FULL and a restart
# ---------------------------------------------------------------------------
{
	my $sink = table_sink('nsr', 'id int PRIMARY KEY, v text');
	my $before = tracked("ALTER TABLE nsr REPLICA IDENTITY NOTHING; DELETE FROM nsr WHERE id = 1;"
		  . " UPDATE nsr SET id = 102 WHERE id = 2");
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_replica_identity', src => $src,
		name => 'streaming: halts source_replica_identity');
	is(ids($dst, 'nsr'), '1,2,3,4,5', 'streaming: nothing of the transaction committed');
	checkpoint_before($sink, $before, 'streaming: the checkpoint not past the transaction');
	AshTest::stop_settled($src, $dst, $sink);
	$src->safe_psql($DB, "ALTER TABLE nsr REPLICA IDENTITY FULL");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_replica_identity', src => $src,
		name => 'streaming: FULL and a restart halt again');
	is(ids($dst, 'nsr'), '1,2,3,4,5', 'streaming: still nothing of it committed');
	checkpoint_before($sink, $before, 'streaming: the checkpoint still not past it');
	AshTest::stop_settled($src, $dst, $sink);
}

# ---------------------------------------------------------------------------
# delete: a lone DELETE under NOTHING while streaming
# ---------------------------------------------------------------------------
{
	my $sink = table_sink('nsd', 'id int PRIMARY KEY, v text');
	$src->safe_psql($DB, "ALTER TABLE nsd REPLICA IDENTITY NOTHING");
	my $before = tracked("DELETE FROM nsd WHERE id = 1");
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_replica_identity', src => $src,
		name => 'delete: halts source_replica_identity');
	is(ids($dst, 'nsd'), '1,2,3,4,5', 'delete: the mirror as before');
	checkpoint_before($sink, $before, 'delete: the checkpoint not past the DELETE');
	AshTest::stop_settled($src, $dst, $sink);
	$src->safe_psql($DB, "ALTER TABLE nsd REPLICA IDENTITY FULL");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_replica_identity', src => $src,
		name => 'delete: FULL and a restart halt again');
	is(ids($dst, 'nsd'), '1,2,3,4,5', 'delete: the mirror still as before');
	AshTest::stop_settled($src, $dst, $sink);
}

# ---------------------------------------------------------------------------
# retype: a rewriting retype before the table's first change of the session
# ---------------------------------------------------------------------------
{
	my $sink = table_sink('rt', 'id int PRIMARY KEY, n numeric(10,2)',
		rows => "INSERT INTO rt VALUES (1, 1.55)");
	# a new session: the stream has not described rt in it
	AshTest::stop_settled($src, $dst, $sink);
	AshTest::start_sink($dst, $sink);
	running($sink, 'retype: restarted');
	$src->safe_psql($DB, "ALTER TABLE rt ALTER COLUMN n TYPE numeric(10,0)");
	my $before = tracked("INSERT INTO rt VALUES (2, 3)");
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_type_invalid', src => $src,
		name => 'retype: the next change halts source_type_invalid');
	is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM rt"),
		'1:1.55', 'retype: nothing of the change committed');
	checkpoint_before($sink, $before, 'retype: the checkpoint not past the change');
	like(AshTest::halt_line($dst, $sink, 'source_type_invalid'), qr/rt: mapped columns were retyped/,
		'retype: the halt says why');
	AshTest::stop_settled($src, $dst, $sink);
}

done_testing();
