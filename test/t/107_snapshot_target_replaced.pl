# A snapshot follows its target (docs/snapshots.md, "A target replaced"):
# the attempt records the table each source table was copied into, and a
# later start whose mapping writes to another table copies the source table
# again, into that one, while tables whose target is the same are not copied
# again:
#   - v1: the target dropped and re-created, the mapping re-pointed, with
#     source changes while the pipeline was stopped;
#   - a sink dropped and re-created over its kept checkpoint (same slot),
#     one target re-created and one kept;
#   - a row listed before 1.4.0 (no target recorded) takes the target mapped
#     at the next start and is not copied again;
#   - stat_snapshot_tables shows each table's target (to a monitor too);
#   - a mapped table out of the publication and back (its changes in between
#     never decoded): copied again at the next start (stopped) or once the
#     census finds it back (streaming); a table still held by its row is not;
#   - incremental: the target re-created after the attempt completed is
#     copied again in chunks, its provenance stamped by the same attempt;
#     out of the publication and back while streaming, copied again into
#     the same target, the rows deleted meanwhile retired.
# Every case ends with mirror = source by content hash, and a write audit
# on the kept targets shows no row inserted twice.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(7));
my $DB = $AshTest::DB;

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

my $orders_ddl = "CREATE TABLE orders (id bigint PRIMARY KEY, v text, n integer NOT NULL DEFAULT 0)";
my $keep_ddl   = "CREATE TABLE keep (id integer PRIMARY KEY, v text)";
AshTest::both($src, $dst, "$orders_ddl; $keep_ddl");
q_src(q{
INSERT INTO orders SELECT g, md5(g::text), g % 10 FROM generate_series(1, 5000) g;
INSERT INTO keep SELECT g, 'k' || g FROM generate_series(1, 1000) g;
CREATE PUBLICATION pub FOR TABLE orders, keep;
});
q_dst(AshTest::write_audit_sql('keep', 'integer'));

AshTest::setup_pipeline($src, $dst, sink => 's1', publication => 'pub',
	maps => [ ['orders'], ['keep'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'v1: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 'v1 copy');

sub recorded_target
{
	my ($table) = @_;
	return q_dst("SELECT coalesce(target::text, 'NULL') FROM ash_replicant.snapshot_tables"
		  . " WHERE slot_name = 's1' AND source_table = '$table'");
}
is(recorded_target('orders'), 'orders', 'the attempt records the target of each table');
is(q_dst("SELECT string_agg(source_table || ':' || coalesce(target::text, 'NULL'), ',' ORDER BY source_table)"
		  . " FROM ash_replicant.stat_snapshot_tables WHERE sink_name = 's1'"),
	'ash_marker_s1:ash_marker_s1,keep:keep,orders:orders', 'stat_snapshot_tables shows each target');

sub inserted_twice
{
	my ($audit) = @_;
	return q_dst("SELECT count(*) FROM (SELECT id FROM ${audit} WHERE op = 'INSERT'"
		  . " GROUP BY id HAVING count(*) > 1) x");
}

##############################################################################
# v1: the target dropped and re-created, the mapping re-pointed
##############################################################################

AshTest::stop_sink($dst, 's1');
my $old_oid = q_dst("SELECT 'orders'::regclass::oid");
q_dst("DROP TABLE orders; $orders_ddl");
q_dst("SELECT ash_replicant_unmap_table('s1', ${old_oid}::regclass);"
	  . " SELECT ash_replicant_map_table('s1', 'orders'::regclass)");
# changes while the pipeline was stopped, in both tables
q_src(q{
UPDATE orders SET v = 'changed while stopped' WHERE id % 50 = 0;
DELETE FROM orders WHERE id BETWEEN 100 AND 120;
INSERT INTO orders SELECT g, 'new', 1 FROM generate_series(5001, 5100) g;
UPDATE keep SET v = 'changed while stopped' WHERE id <= 5;
});
AshTest::start_sink($dst, 's1');
q_src("UPDATE orders SET n = n + 1 WHERE id % 7 = 0; INSERT INTO keep VALUES (1001, 'after start')");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 're-created target: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 're-created target copied again');
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.target_replaced sink=s1 table=public\.orders/)),
	'snapshot.target_replaced logged for the re-created target');
ok(!AshTest::log_lines_like($dst, qr/event=snapshot\.target_replaced sink=s1 table=public\.keep/),
	'no target_replaced for a kept target');
is(inserted_twice('keep_audit'), '0', 'the kept target was not copied again');
is(q_dst("SELECT count(*) FROM keep_audit WHERE op = 'INSERT' AND id <= 1000"), '1000',
	'the kept target holds its first copy only');
isnt(q_dst("SELECT target::oid FROM ash_replicant.snapshot_tables WHERE slot_name = 's1' AND source_table = 'orders'"),
	$old_oid, 'the attempt records the new target');
is(AshTest::stat_row($dst, 's1')->{snapshot_phase}, 'complete', 'the attempt is complete again');

##############################################################################
# A sink dropped and re-created over its kept checkpoint
##############################################################################

q_dst(AshTest::write_audit_sql('orders', 'bigint'));
AshTest::stop_sink($dst, 's1');
q_dst("SELECT ash_replicant_drop_sink('s1')");
is(q_dst("SELECT count(*) FROM ash_replicant.snapshot_tables WHERE slot_name = 's1'"), '3',
	'the checkpoint and its attempt are kept with the dropped sink');
q_dst("DROP TABLE keep_audit; DROP TABLE keep; DROP FUNCTION keep_audit_fn(); $keep_ddl");
q_dst(AshTest::write_audit_sql('keep', 'integer'));
q_src("DELETE FROM keep WHERE id % 3 = 0; UPDATE orders SET v = 'sink away' WHERE id % 11 = 0");
AshTest::setup_pipeline($src, $dst, sink => 's1', publication => 'pub', marker => 0,
	maps => [ ['orders'], ['keep'], ['ash_marker_s1'] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 're-created sink: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 're-created sink');
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.target_replaced sink=s1 table=public\.keep/)),
	'the re-created sink copies the re-created target again');
is(q_dst("SELECT count(*) FROM orders_audit WHERE op = 'INSERT'"), '0',
	'the kept target of the re-created sink was not copied again');
is(inserted_twice('keep_audit'), '0', 'the re-created target was copied once');

##############################################################################
# A row listed before 1.4.0 names no target: it takes the current one
##############################################################################

AshTest::stop_sink($dst, 's1');
q_dst("UPDATE ash_replicant.snapshot_tables SET target = NULL WHERE slot_name = 's1'");
q_dst("TRUNCATE orders_audit, keep_audit");
q_src("UPDATE orders SET v = 'adopted' WHERE id % 13 = 0");
AshTest::start_sink($dst, 's1');
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'unrecorded targets: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 'unrecorded targets');
is(q_dst("SELECT count(*) FROM orders_audit WHERE op = 'INSERT'")
	  + q_dst("SELECT count(*) FROM keep_audit WHERE op = 'INSERT'"),
	0, 'an unrecorded target is adopted, not copied again');
is(recorded_target('orders') . ',' . recorded_target('keep'), 'orders,keep',
	'the targets mapped at that start are recorded');
# the monitor role reads the view, never the catalog
q_dst("CREATE ROLE mon LOGIN; GRANT ash_replicant_monitor TO mon");
is($dst->safe_psql($DB, "SET ROLE mon; SELECT target FROM ash_replicant.stat_snapshot_tables"
		  . " WHERE sink_name = 's1' AND source_table = 'keep'"), 'keep', 'a monitor sees the target in the view');
AshTest::stop_sink($dst, 's1');

##############################################################################
# A mapped table out of the publication and back: its changes in between
# were never decoded; with a snapshot configured it is copied again -- at
# the next start when it happened while the pipeline was stopped, and while
# streaming when the census finds it back (the session ends, the next one
# copies it)
##############################################################################

sub gaps_logged
{
	return scalar(() = AshTest::log_lines_like($dst,
			qr/event=snapshot\.publication_gap sink=s1 table=public\.orders/));
}

# while stopped
q_src("ALTER PUBLICATION pub DROP TABLE orders");
q_src("UPDATE orders SET v = 'while out, stopped' WHERE id <= 10; INSERT INTO orders VALUES (6001, 'out', 0)");
q_src("ALTER PUBLICATION pub ADD TABLE orders");
q_src("UPDATE orders SET n = n + 1 WHERE id = 20");
AshTest::start_sink($dst, 's1');
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'out of the publication while stopped: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 'out of the publication while stopped');
is(gaps_logged(), 1, 'snapshot.publication_gap logged once, at the start');
is(q_dst("SELECT count(*) FROM keep_audit WHERE op = 'INSERT'"), '0',
	'a table that stayed in the publication is not copied again');

# while streaming
my $warned = () = AshTest::log_lines_like($dst, qr/event=coverage\.warning sink=s1 reason=mapping_never_matches/);
q_src("ALTER PUBLICATION pub DROP TABLE orders");
q_src("UPDATE orders SET v = 'while out, streaming' WHERE id BETWEEN 11 AND 30");
ok(wait_for_warning($warned), 'the census warns mapping_never_matches while the table is out');
q_src("ALTER PUBLICATION pub ADD TABLE orders");
q_src("UPDATE orders SET n = n + 1 WHERE id = 40");
ok(AshTest::wait_until(sub { gaps_logged() >= 3 }),
	'the census finds the table back after a gap (logged by it, and by the next session that copies it)');
ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.session_end sink=s1 cause=snapshot\.publication_gap /)),
	'the census ends the session to copy the table again: logged as such');
is(scalar(AshTest::log_lines_like($dst, qr/event=source\.fault sink=s1 step=stream source_sqlstate=none/)), 0,
	'... and not as a source fault');
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'out of the publication while streaming: caught up');
AshTest::assert_mirror_equal($src, $dst, [ 'orders', 'keep' ], name => 'out of the publication while streaming');
AshTest::wait_status($dst, 's1', 'healthy');
is(AshTest::status_row($dst, 's1')->{state}, 'healthy', 'healthy after copying the table again');
# a table held by two rows (its own and its schema's) that loses one is no gap
my $gaps = gaps_logged();
AshTest::stop_sink($dst, 's1');
q_src("ALTER PUBLICATION pub ADD TABLES IN SCHEMA public");
AshTest::start_sink($dst, 's1');
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'published through its schema too: caught up');
q_src("ALTER PUBLICATION pub DROP TABLE orders");
q_src("UPDATE orders SET n = n + 1 WHERE id = 50");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 'still published through its schema: caught up');
my $census = q_dst("SELECT last_census_at FROM ash_replicant.stat_pipelines WHERE sink_name = 's1'");
ok(AshTest::poll($dst, "SELECT last_census_at > '$census' FROM ash_replicant.stat_pipelines WHERE sink_name = 's1'"),
	'a census ran since');
AshTest::assert_mirror_equal($src, $dst, ['orders'], name => 'still published through its schema');
is(gaps_logged(), $gaps, 'a table still held by one of its rows is not copied again');
AshTest::stop_sink($dst, 's1');
q_src("ALTER PUBLICATION pub DROP TABLES IN SCHEMA public");

# wait until the log holds more mapping_never_matches warnings than $before
sub wait_for_warning
{
	my ($before) = @_;
	return AshTest::wait_until(sub {
		scalar(() = AshTest::log_lines_like($dst, qr/event=coverage\.warning sink=s1 reason=mapping_never_matches/))
		  > $before;
	});
}


##############################################################################
# incremental: a re-created target is copied again in chunks
##############################################################################

my $inc_src = "CREATE TABLE inc (id bigint PRIMARY KEY, v text)";
my $inc_dst = "CREATE TABLE inc (id bigint PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea)";
q_src("$inc_src; INSERT INTO inc SELECT g, md5(g::text) FROM generate_series(1, 4000) g;"
	  . " CREATE PUBLICATION pub2 FOR TABLE inc");
q_dst("$inc_dst; CREATE VIEW inc_v AS SELECT id, v FROM inc");
q_src("CREATE VIEW inc_v AS SELECT id, v FROM inc");
AshTest::setup_pipeline($src, $dst, sink => 's2', publication => 'pub2', marker => 0,
	maps => [ [ 'inc', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 500");

# an incremental sink maps only provenance tables: a probe row instead of a marker
my $probe = 1_000_000;
sub incr_caught_up
{
	my ($name) = @_;
	# complete, and its table copied into the target mapped now
	my $ok = AshTest::poll($dst, "SELECT c.snapshot_phase = 'complete' AND t.state = 'copied'"
		  . " AND t.target = 'inc'::regclass FROM ash_replicant.checkpoints c"
		  . " JOIN ash_replicant.snapshot_tables t USING (source_system_id, source_database, slot_name)"
		  . " WHERE c.slot_name = 's2'");
	my ($commit) = AshTest::commit_tracked($src, "INSERT INTO inc VALUES (" . ++$probe . ", 'probe')");
	$ok &&= AshTest::wait_lsn($src, $dst, 's2', $commit);
	ok($ok, $name);
	return $ok;
}
incr_caught_up('incremental: copied and caught up');
AshTest::assert_mirror_equal($src, $dst, ['inc_v'], name => 'incremental copy', order_by => 'id');
my $attempt = q_dst("SELECT snapshot_attempt FROM ash_replicant.checkpoints WHERE slot_name = 's2'");

AshTest::stop_sink($dst, 's2');
$old_oid = q_dst("SELECT 'inc'::regclass::oid");
q_dst("DROP VIEW inc_v; DROP TABLE inc; $inc_dst; CREATE VIEW inc_v AS SELECT id, v FROM inc");
q_dst("SELECT ash_replicant_unmap_table('s2', ${old_oid}::regclass);"
	  . " SELECT ash_replicant_map_table('s2', 'inc'::regclass, snapshot_provenance => true)");
q_src("DELETE FROM inc WHERE id % 9 = 0; UPDATE inc SET v = 'stopped' WHERE id % 4 = 0;"
	  . " INSERT INTO inc SELECT g, 'new' FROM generate_series(4001, 4300) g");
AshTest::start_sink($dst, 's2');
q_src("UPDATE inc SET v = 'streamed' WHERE id % 5 = 0");
incr_caught_up('incremental, re-created target: copied and caught up');
AshTest::assert_mirror_equal($src, $dst, ['inc_v'], name => 'incremental re-created target', order_by => 'id');
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.target_replaced sink=s2 table=public\.inc/)),
	'incremental: snapshot.target_replaced logged');
is(q_dst("SELECT chunks_copied > 1 FROM ash_replicant.snapshot_tables WHERE slot_name = 's2' AND source_table = 'inc'"),
	't', 'incremental: the re-created target was copied in chunks');
is(q_dst("SELECT count(*) FROM inc WHERE id % 5 <> 0 AND id <= 4300"
		  . " AND (replica_fingerprint IS NULL OR replica_seen_attempt IS NULL)"),
	'0', 'incremental: the copied rows carry provenance');
is(q_dst("SELECT snapshot_attempt FROM ash_replicant.checkpoints WHERE slot_name = 's2'"), $attempt,
	'incremental: the same attempt copies the table again');

# incremental, out of the publication and back while streaming: the copy
# into the same target (it holds rows) retires what the source deleted
sub count_logged
{
	my ($re) = @_;
	return scalar(() = AshTest::log_lines_like($dst, $re));
}
q_dst(AshTest::write_audit_sql('inc', 'bigint'));
my $complete_re = qr/event=snapshot\.complete sink=s2 /;
my $completes = count_logged($complete_re);
my $warned2 = count_logged(qr/event=coverage\.warning sink=s2 reason=mapping_never_matches/);
q_src("ALTER PUBLICATION pub2 DROP TABLE inc");
q_src("DELETE FROM inc WHERE id BETWEEN 100 AND 150; UPDATE inc SET v = 'gap' WHERE id BETWEEN 200 AND 260;"
	  . " INSERT INTO inc SELECT g, 'gap' FROM generate_series(5001, 5050) g");
ok(AshTest::wait_until(sub { count_logged(qr/event=coverage\.warning sink=s2 reason=mapping_never_matches/) > $warned2 }),
	'incremental: the census warns while the table is out');
q_src("ALTER PUBLICATION pub2 ADD TABLE inc");
ok(AshTest::wait_until(sub { count_logged(qr/event=snapshot\.publication_gap sink=s2 table=public\.inc/) >= 2 }),
	'incremental: the census finds the table back, the next session lists it again');
ok(AshTest::wait_until(sub { count_logged($complete_re) > $completes }), 'incremental: copied again');
incr_caught_up('incremental, back in the publication: caught up');
AshTest::assert_mirror_equal($src, $dst, ['inc_v'], name => 'incremental, back in the publication', order_by => 'id');
is(q_dst("SELECT count(*) FROM inc WHERE id BETWEEN 100 AND 150"), '0',
	'incremental: rows deleted during the gap are retired');
# (the probe rows came by the stream after the copy, without a fingerprint:
# the copy writes each of them once)
is(q_dst("SELECT count(*) FROM inc_audit WHERE op = 'UPDATE' AND id NOT BETWEEN 200 AND 260 AND id < 1000000"), '0',
	'incremental: the copy again writes no copied row that did not change (only marks it seen)');
cmp_ok(q_dst("SELECT max(n) FROM (SELECT count(*) AS n FROM inc_audit GROUP BY id) x"), '<=', 1,
	'incremental: no row written twice');
is(q_dst("SELECT count(*) FROM inc_audit WHERE op = 'UPDATE' AND id BETWEEN 200 AND 260"),
	q_src("SELECT count(*) FROM inc WHERE id BETWEEN 200 AND 260"),
	'incremental: each row changed during the gap is written once');

done_testing();
