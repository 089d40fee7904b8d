# An incremental chunk whose write at the destination outlasts
# receive_timeout (10 s in the tests): the worker judged the source silent
# by the time it had spent itself, with the source's messages unread on
# the socket, and reconnected after every such chunk -- a helper's chunk
# lost each time (docs/snapshots.md).  Silence is judged right after the
# worker has read everything there was now.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 1\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(23));
is($dst->safe_psql($DB, 'SHOW ash_replicant.receive_timeout'), '10s', 'receive_timeout is 10 s');
$src->safe_psql($DB, q{
CREATE TABLE a (id bigint PRIMARY KEY, v text);
INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 200) g;
ANALYZE a;
CREATE PUBLICATION pub_s FOR TABLE a;
CREATE VIEW a_v AS SELECT id, v FROM a;
});
$dst->safe_psql($DB, q{
CREATE TABLE a (id bigint PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE VIEW a_v AS SELECT id, v FROM a;
CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM pg_catalog.pg_sleep(12); RETURN NULL; END $$;
CREATE TRIGGER slow AFTER INSERT ON a FOR EACH STATEMENT EXECUTE FUNCTION slow();
});
AshTest::setup_pipeline($src, $dst, sink => 'sl', publication => 'pub_s', marker => 0,
	maps => [ [ 'a', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 100");
ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.stat_pipelines WHERE sink_name = 'sl'",
		't', timeout => 240), 'the attempt completes (two chunks of 12 s each)');
is(scalar(AshTest::log_lines_like($dst, qr/event=source\.fault sink=sl /)), 0,
	'no source fault: a chunk longer than receive_timeout is no silence of the source');
$dst->safe_psql($DB, 'DROP TRIGGER slow ON a');
my ($commit) = AshTest::commit_tracked($src, "UPDATE a SET v = 'touch' WHERE id = 1");
ok(AshTest::wait_lsn($src, $dst, 'sl', $commit), 'streams on');
AshTest::assert_mirror_equal($src, $dst, ['a_v'], order_by => 'id', name => 'copied');
done_testing();
