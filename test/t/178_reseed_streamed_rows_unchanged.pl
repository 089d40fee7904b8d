# A re-seed with snapshot_provenance leaves alone the rows the stream wrote
# that the source still has unchanged (docs/snapshots.md, provenance).  A
# row the stream wrote carries no fingerprint; it was taken for changed and
# written again: under SCD2 a new version with the same content (a version
# boundary the source never had), under SCD1 an update a trigger sees.  Now
# such a row is fingerprinted from its stored values.
#
# SCD2 and SCD1 targets, a v1 copy; the stream updates key 1, inserts key
# 100, updates key 2 and back; while the pipeline is stopped the source
# changes key 3.  Reset (a v1 re-seed), start:
#   - key 1, 2 and 100 keep their versions (SCD2) and see no write (SCD1);
#   - key 3, changed, gets its new version / its update;
#   - open versions (rows) equal the source, healthy.
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
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(37));
my ($sysid, $sdb) = AshTest::source_identity($src);

sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

sub complete
{
	my ($sink) = @_;
	return AshTest::poll($dst, AshTest::checkpoint_sql($sink, "c.snapshot_phase = 'complete'"), 't');
}

q_src(q{
CREATE TABLE h (id bigint PRIMARY KEY, v text, n bigint);
CREATE TABLE s (id bigint PRIMARY KEY, v text, n bigint);
INSERT INTO h SELECT g, 'v' || g, 0 FROM generate_series(1, 10) g;
INSERT INTO s SELECT g, 'v' || g, 0 FROM generate_series(1, 10) g;
CREATE VIEW h_v AS SELECT id, v, n FROM h;
CREATE VIEW s_v AS SELECT id, v, n FROM s;
CREATE PUBLICATION pub FOR TABLE h, s;
});
AshTest::provenance_history($dst, 'h');
q_dst(q{
CREATE TABLE s (id bigint PRIMARY KEY, v text, n bigint, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE VIEW s_v AS SELECT id, v, n FROM s;
CREATE TABLE writes (tbl text, op text, id bigint);
CREATE FUNCTION note_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.writes VALUES (TG_TABLE_NAME, TG_OP, NEW.id);
	RETURN NULL;
END $$;
CREATE TRIGGER h_writes AFTER INSERT ON h_hist FOR EACH ROW EXECUTE FUNCTION note_write();
CREATE TRIGGER s_writes AFTER INSERT OR UPDATE ON s FOR EACH ROW EXECUTE FUNCTION note_write();
});
AshTest::setup_pipeline($src, $dst, sink => 'rs', publication => 'pub',
	maps => [
		[ 'h_hist', source_table => 'h', history_strategy => 'scd2', history_business_key => ['id'],
		  snapshot_provenance => 'true' ],
		[ 's', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(complete('rs'), 'the first copy completes');
AshTest::wait_status($dst, 'rs', 'healthy');

for my $t ('h', 's')
{
	q_src("UPDATE $t SET v = 'changed', n = 1 WHERE id = 1");
	q_src("INSERT INTO $t VALUES (100, 'new', 0)");
	q_src("UPDATE $t SET v = 'x' WHERE id = 2");
	q_src("UPDATE $t SET v = 'v2' WHERE id = 2");
}
ok(AshTest::wait_caught_up($src, $dst, 'rs'), 'the stream applied them');
is(q_dst("SELECT count(*) FROM h_hist WHERE id = 1") . '/' . q_dst("SELECT count(*) FROM h_hist WHERE id = 2"),
	'2/3', 'key 1 has two versions, key 2 three');
AshTest::stop_settled($src, $dst, 'rs');
q_src("UPDATE $_ SET v = 'while stopped', n = 2 WHERE id = 3") for ('h', 's');
my $versions = q_dst("SELECT count(*) FROM h_hist");
q_dst("TRUNCATE writes");

is(q_dst("SELECT ash_replicant_reset_checkpoint('rs', '$sysid', '$sdb')"), 't', 'reset: a v1 re-seed');
AshTest::start_sink($dst, 'rs');
ok(complete('rs'), 'the re-seed completes');
AshTest::wait_status($dst, 'rs', 'healthy');

AshTest::assert_mirror_equal($src, $dst, ['h_v'], order_by => 'id', name => 'SCD2: open versions equal the source');
AshTest::assert_mirror_equal($src, $dst, ['s_v'], order_by => 'id', name => 'SCD1: rows equal the source');
is(q_dst("SELECT count(*) FROM h_hist"), $versions + 1, 'SCD2: one new version, for the key changed while stopped');
is(q_dst("SELECT string_agg(id::text, ',' ORDER BY id) FROM h_hist WHERE valid_to_lsn IS NULL AND n = 2"), '3',
	'SCD2: that is key 3');
is(q_dst("SELECT coalesce(string_agg(tbl || ':' || op || ':' || id, ',' ORDER BY tbl, id), '') FROM writes"),
	'h_hist:INSERT:3,s:UPDATE:3',
	'no write of a row the stream wrote unchanged since (keys 1, 2, 100): only key 3');
is(q_dst("SELECT count(*) FROM s WHERE replica_fingerprint IS NULL"), '0',
	'every row of the SCD1 target has its fingerprint now');

done_testing();
