# An incremental snapshot of a table whose primary key is stored out of
# line (a long text key, TOASTed), under the default replica identity and
# FULL: an UPDATE of another column during the copy sends the key in the
# new row as "unchanged" (pgoutput 'u'), the old key or row carrying it.
# The copy judged the new row's key without it and halted
# unchanged_value_unavailable, again at every restart (docs/snapshots.md).
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(23));
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

# 'K' || 3 digits || 2.3 kB of md5 text: incompressible, out of line
sub key_sql
{
	my ($g) = @_;
	return "('K' || lpad(($g)::text, 3, '0') || (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 72) i))";
}

my $lock = 4300;
for my $identity ('DEFAULT', 'FULL')
{
	my $t = 'tk_' . lc($identity);
	my $sink = "s_$t";
	$lock++;

	q_src("CREATE TABLE $t (k text PRIMARY KEY, v text NOT NULL, big text);"
		  . " ALTER TABLE $t ALTER COLUMN big SET STORAGE EXTERNAL;"
		  . " ALTER TABLE $t REPLICA IDENTITY $identity;"
		  . " INSERT INTO $t SELECT " . key_sql('g') . ", 'v' || g, repeat(md5(g::text), 3000)"
		  . "   FROM generate_series(1, 60) g;"
		  . " ANALYZE $t; CREATE PUBLICATION pub_$t FOR TABLE $t;"
		  . " CREATE VIEW ${t}_v AS SELECT k, v, big FROM $t");
	is(q_src("SELECT count(*) FROM $t WHERE pg_column_size(k) > 2000"), '60', "$identity: the keys are long");
	q_dst("CREATE TABLE $t (k text PRIMARY KEY, v text NOT NULL, big text,"
		  . " replica_fingerprint bytea, replica_seen_attempt bytea);"
		  . " CREATE VIEW ${t}_v AS SELECT k, v, big FROM $t");
	my $gate = AshTest::close_gate($dst, $t, 0, $lock, where => "NEW.v = 'v5'");
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$t", marker => 0,
		maps => [ [ $t, snapshot_provenance => 'true' ] ],
		pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 10,"
		  . " max_pending_chunks => 1");
	ok(AshTest::gate_waiting($dst, $lock), "$identity: chunk 1 waits at the gate");

	# other columns updated: a key in chunk 1's range, one beyond the cursor
	q_src("UPDATE $t SET v = 'upd' || v WHERE v IN ('v3', 'v40')");
	AshTest::open_gate($gate, $lock);
	ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines"
			  . " WHERE sink_name = '$sink'"), "$identity: the attempt completes");
	AshTest::wait_status($dst, $sink, 'healthy', undef,
		name => "$identity: healthy (before: halted unchanged_value_unavailable)");
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'k', name => "$identity: copied");

	my ($commit) = AshTest::commit_tracked($src, "UPDATE $t SET v = v || '!' WHERE v LIKE 'v1%'");
	ok(AshTest::wait_lsn($src, $dst, $sink, $commit), "$identity: streams on");
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'k', name => "$identity: streamed");
	AshTest::stop_sink($dst, $sink);
}

done_testing();
