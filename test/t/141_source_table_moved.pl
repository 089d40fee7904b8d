# A mapped source table that moves out of its name or its membership and back,
# and a column whose rows were rewritten under a new type modifier
# (docs/reasons.md#publication_gap, #source_type_invalid).  Before, each ended
# healthy with the mirror wrong.
#
#  swap      two mapped tables swap names while streaming (census every 60 s,
#            so the stream itself must see it): halts publication_gap before
#            anything is written under the new names (before: each table's
#            changes went into the other's mirror); a mapped table renamed to
#            an ignored name halts too (before: its changes were dropped)
#  detach    a partition the publication holds through its parent, detached,
#            changed and attached again while streaming: the census halts
#            publication_gap, mirror unchanged; while stopped: the start
#  schema    a table held through its schema (FOR TABLES IN SCHEMA) moved to
#            another schema and back while stopped: the start halts
#            publication_gap; GRANT, COMMENT and ANALYZE of it are no gap
#  wal2json  a listed table renamed away and back while stopped (wal2json
#            selects tables by name as it decodes): the start halts
#            publication_gap
#  typmod    numeric(10,2) to numeric(10,0) and timestamp(6) to timestamp(0)
#            at the source while streaming (the rows were rounded): stops
#            misconfigured/source_type_invalid before the next change is written; a
#            widening (numeric(10,2) to (12,2), varchar(10) to (20)) streams
#            on
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(src_conf => "output_plugin_libraries = 'pgoutput, wal2json'\n");
my ($sysid, $sdb) = AshTest::source_identity($src);
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub rows_of
{
	my ($node, $t) = @_;
	return $node->safe_psql($DB, "SELECT string_agg(id || ':' || coalesce(v::text, '~'), ' ' ORDER BY id) FROM $t");
}



# swap: the stream sees the rename
{
	AshTest::both($src, $dst, q{
CREATE TABLE sa (id int PRIMARY KEY, v text);
CREATE TABLE sb (id int PRIMARY KEY, v text);
CREATE TABLE sc (id int PRIMARY KEY, v text);
});
	q_src("CREATE TABLE sc_ign (id int PRIMARY KEY, v text);"
		  . " CREATE PUBLICATION pub_swap FOR TABLE sa, sb, sc, sc_ign");
	AshTest::setup_pipeline($src, $dst, sink => 'sw', publication => 'pub_swap',
		maps => [ ['sa'], ['sb'], ['sc'] ], ignored_sources => ['public.sc_ign'],
		census => '{"interval_ms": 60000}');
	AshTest::wait_slot_consistent($src, $dst, 'sw');
	q_src("INSERT INTO sa VALUES (1, 'a1'), (2, 'a2'); INSERT INTO sb VALUES (101, 'b101'); INSERT INTO sc VALUES (1, 'c1')");
	AshTest::wait_caught_up($src, $dst, 'sw', name => 'swap: streamed');
	my $cp = AshTest::checkpoint_facts($dst, 'sw');
	q_src("BEGIN; ALTER TABLE sa RENAME TO sx; ALTER TABLE sb RENAME TO sa; ALTER TABLE sx RENAME TO sb; COMMIT");
	q_src("INSERT INTO sa VALUES (201, 'into the new sa'); UPDATE sb SET v = 'upd' WHERE id = 1");
	AshTest::wait_status($dst, 'sw', 'halted', 'publication_gap', src => $src,
		name => 'swap: halted publication_gap');
	like(AshTest::halt_line($dst, 'sw', 'publication_gap'), qr/mapped table public\.s[ab] was renamed to public\.s[ab], a name the pipeline maps to another target/,
		'swap: the halt names both tables');
	is(rows_of($dst, 'sa'), '1:a1 2:a2', 'swap: the mirror of sa received nothing of the other table');
	is(rows_of($dst, 'sb'), '101:b101', 'swap: the mirror of sb received nothing of the other table');
	is(AshTest::checkpoint_facts($dst, 'sw'), $cp, 'swap: checkpoint unchanged');
	AshTest::stop_settled($src, $dst, 'sw');
	# a new session has not seen the tables under their old names: the
	# start finds each name holding another table than the one recorded
	AshTest::start_sink($dst, 'sw');
	AshTest::wait_status($dst, 'sw', 'halted', 'publication_gap', src => $src,
		name => 'swap: the start halts publication_gap too');
	is(rows_of($dst, 'sa'), '1:a1 2:a2', 'swap: still nothing written after the restart');
	AshTest::stop_sink($dst, 'sw');

	AshTest::setup_pipeline($src, $dst, sink => 'si', publication => 'pub_swap',
		maps => [ ['sa'], ['sb'], ['sc'] ], ignored_sources => [ 'public.sc_ign', 'public.ash_marker_sw' ], marker => 0,
		census => '{"interval_ms": 60000}');
	AshTest::wait_status($dst, 'si', 'healthy', undef, src => $src, name => 'to ignored: healthy');
	AshTest::wait_slot_consistent($src, $dst, 'si');
	q_src("INSERT INTO sc VALUES (2, 'c2')");
	AshTest::poll($dst, "SELECT count(*) FROM sc WHERE id = 2", '1');
	q_src("BEGIN; DROP TABLE sc_ign; ALTER TABLE sc RENAME TO sc_ign; COMMIT; INSERT INTO sc_ign VALUES (3, 'c3')");
	AshTest::wait_status($dst, 'si', 'halted', 'publication_gap', src => $src,
		name => 'to ignored: halted publication_gap');
	like(AshTest::halt_line($dst, 'si', 'publication_gap'), qr/renamed to public\.sc_ign, a name the pipeline ignores/,
		'to ignored: the halt says so');
	AshTest::stop_sink($dst, 'si');
}

# detach: a partition held through its parent
{
	q_src(q{
CREATE TABLE pt (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE p1 PARTITION OF pt FOR VALUES FROM (0) TO (100);
CREATE TABLE p2 PARTITION OF pt FOR VALUES FROM (100) TO (200);
CREATE PUBLICATION pub_p FOR TABLE pt;
INSERT INTO pt SELECT g, 'r' || g FROM generate_series(1, 5) g;
});
	q_dst("CREATE TABLE p1 (id int PRIMARY KEY, v text); CREATE TABLE p2 (id int PRIMARY KEY, v text)");
	AshTest::setup_pipeline($src, $dst, sink => 'pp', publication => 'pub_p', marker => 0, maps => [ ['p1'], ['p2'] ]);
	AshTest::wait_status($dst, 'pp', 'healthy', undef, src => $src, name => 'detach: healthy');
	like(q_dst("SELECT published FROM ash_replicant.publication_members WHERE slot_name = 'pp' AND source_table = 'p1'"),
		qr/,def:inh:\d+:\d+,/, 'detach: the record holds the partition by its pg_inherits row');
	AshTest::wait_slot_consistent($src, $dst, 'pp');
	q_src("INSERT INTO pt VALUES (150, 'x')");
	AshTest::poll($dst, "SELECT count(*) FROM p2 WHERE id = 150", '1');
	q_src("ALTER TABLE pt DETACH PARTITION p1");
	q_src("INSERT INTO p1 VALUES (50, 'while detached'); DELETE FROM p1 WHERE id = 2");
	q_src("ALTER TABLE pt ATTACH PARTITION p1 FOR VALUES FROM (0) TO (100)");
	q_src("INSERT INTO pt VALUES (51, 'after')");
	AshTest::wait_status($dst, 'pp', 'halted', 'publication_gap', src => $src,
		name => 'detach: the census halts publication_gap');
	AshTest::stop_settled($src, $dst, 'pp');
	like(rows_of($dst, 'p1'), qr/^(51:after)?$/, 'detach: nothing of the detached time in the mirror');
	is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('pp', " . AshTest::lit($sysid) . ", " . AshTest::lit($sdb) . ")"),
		't', 'detach: acknowledged');
	AshTest::start_sink($dst, 'pp');
	AshTest::wait_status($dst, 'pp', 'healthy', undef, src => $src, name => 'detach: healthy after the acknowledgement');
	AshTest::wait_slot_consistent($src, $dst, 'pp');
	AshTest::stop_settled($src, $dst, 'pp');
	q_src("ALTER TABLE pt DETACH PARTITION p2; UPDATE p2 SET v = 'stopped' WHERE id = 150;"
		  . " ALTER TABLE pt ATTACH PARTITION p2 FOR VALUES FROM (100) TO (200)");
	is(AshTest::preflight_verdict($dst, 'pp', 'publication'), 'fail/publication_gap', 'detach while stopped: preflight fails publication_gap');
	AshTest::start_sink($dst, 'pp');
	AshTest::wait_status($dst, 'pp', 'halted', 'publication_gap', src => $src,
		name => 'detach while stopped: the start halts publication_gap');
	AshTest::stop_sink($dst, 'pp');
}

# schema: a table held through its schema
{
	q_src(q{
CREATE SCHEMA ps;
CREATE SCHEMA other;
CREATE TABLE ps.st (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub_s FOR TABLES IN SCHEMA ps;
INSERT INTO ps.st VALUES (1, 'one');
});
	q_dst("CREATE SCHEMA ps; CREATE TABLE ps.st (id int PRIMARY KEY, v text)");
	AshTest::setup_pipeline($src, $dst, sink => 'ss', publication => 'pub_s', marker => 0,
		maps => [ [ 'ps.st', source_schema => 'ps', source_table => 'st' ] ]);
	AshTest::wait_status($dst, 'ss', 'healthy', undef, src => $src, name => 'schema: healthy');
	AshTest::wait_slot_consistent($src, $dst, 'ss');
	AshTest::stop_settled($src, $dst, 'ss');
	q_src("GRANT SELECT ON ps.st TO PUBLIC; COMMENT ON TABLE ps.st IS 'c'; ANALYZE ps.st");
	is(AshTest::preflight_verdict($dst, 'ss', 'publication'), 'pass/', 'schema: GRANT, COMMENT and ANALYZE are no gap');
	q_src("ALTER TABLE ps.st SET SCHEMA other; INSERT INTO other.st VALUES (2, 'while out');"
		  . " ALTER TABLE other.st SET SCHEMA ps");
	is(AshTest::preflight_verdict($dst, 'ss', 'publication'), 'fail/publication_gap', 'schema: preflight fails publication_gap');
	AshTest::start_sink($dst, 'ss');
	AshTest::wait_status($dst, 'ss', 'halted', 'publication_gap', src => $src,
		name => 'schema: out of the schema and back halts publication_gap');
	is(rows_of($dst, 'ps.st'), '', 'schema: nothing applied (the row before the slot is not mirrored)');
	AshTest::stop_sink($dst, 'ss');
}

# wal2json: renamed away and back
{
	AshTest::both($src, $dst, "CREATE TABLE w (id int PRIMARY KEY, v text)");
	AshTest::setup_pipeline($src, $dst, sink => 'wj', decoder => 'wal2json', tables => ['public.w'], maps => [ ['w'] ]);
	AshTest::wait_status($dst, 'wj', 'healthy', undef, src => $src, name => 'wal2json: healthy');
	AshTest::wait_slot_consistent($src, $dst, 'wj');
	q_src("INSERT INTO w VALUES (1, 'one')");
	AshTest::wait_caught_up($src, $dst, 'wj', name => 'wal2json: streamed');
	AshTest::stop_settled($src, $dst, 'wj');
	q_src("GRANT SELECT ON w TO PUBLIC");
	is(AshTest::preflight_verdict($dst, 'wj', 'publication'), 'pass/', 'wal2json: a GRANT is no gap');
	q_src("ALTER TABLE w RENAME TO w_tmp; INSERT INTO w_tmp VALUES (2, 'while renamed'); ALTER TABLE w_tmp RENAME TO w");
	AshTest::start_sink($dst, 'wj');
	AshTest::wait_status($dst, 'wj', 'halted', 'publication_gap', src => $src,
		name => 'wal2json: renamed away and back halts publication_gap');
	is(rows_of($dst, 'w'), '1:one', 'wal2json: nothing applied');
	AshTest::stop_sink($dst, 'wj');
}

# typmod: rows rewritten under a narrower modifier
{
	AshTest::both($src, $dst, q{
CREATE TABLE m (id int PRIMARY KEY, amount numeric(10,2), ts timestamp(6), w numeric(10,2), s varchar(10));
});
	q_src("CREATE PUBLICATION pub_m FOR TABLE m");
	q_dst("ALTER TABLE m ALTER COLUMN w TYPE numeric(12,2), ALTER COLUMN s TYPE varchar(20)");
	AshTest::setup_pipeline($src, $dst, sink => 'tm', publication => 'pub_m', maps => [ ['m'] ]);
	AshTest::wait_slot_consistent($src, $dst, 'tm');
	q_src("INSERT INTO m VALUES (1, 1.49, '2026-01-01 00:00:00.7', 1.25, 'ab')");
	AshTest::wait_caught_up($src, $dst, 'tm', name => 'typmod: streamed');
	q_src("ALTER TABLE m ALTER COLUMN w TYPE numeric(12,2), ALTER COLUMN s TYPE varchar(20)");
	q_src("INSERT INTO m VALUES (2, 2.5, '2026-01-02', 2.25, 'cd')");
	AshTest::wait_caught_up($src, $dst, 'tm', name => 'typmod: a widening streams on');
	AshTest::assert_mirror_equal($src, $dst, ['m'], name => 'typmod: widened');
	my $cp = AshTest::checkpoint_facts($dst, 'tm');
	q_src("ALTER TABLE m ALTER COLUMN amount TYPE numeric(10,0), ALTER COLUMN ts TYPE timestamp(0)");
	q_src("INSERT INTO m VALUES (3, 3, '2026-01-03', 3, 'ef')");
	AshTest::wait_status($dst, 'tm', 'misconfigured', 'source_type_invalid', src => $src,
		name => 'typmod: narrowed, misconfigured source_type_invalid');
	# the stream at the next change, or the census before it
	like(AshTest::halt_line($dst, 'tm', 'source_type_invalid'),
		qr/column amount changed type modifier|mapped columns were retyped while streaming, which rewrote their rows at the source: public\.m/,
		'typmod: the halt says why');
	is(q_dst('SELECT count(*) FROM m'), '2', 'typmod: nothing written after it');
	is(AshTest::checkpoint_facts($dst, 'tm'), $cp, 'typmod: checkpoint unchanged');
	AshTest::stop_sink($dst, 'tm');
}

done_testing();
