# Two mapped tables swapping names where the session has no description of
# them under their old names (docs/reasons.md#publication_gap): the stream
# carries each table's OID with the name it had when the change was made, the
# publication records hold each mapped name's OID.
#
#  fresh     a session that has not yet seen either table: they swap names
#            and are written; before, each table's rows went into the other's
#            mirror, healthy, until a census found the names moved
#  stopped   the tables swap names while the pipeline is stopped, are
#            written, and swap back: at the start every name holds its
#            recorded table again, but the changes in between carry the
#            swapped names; before, healthy with each mirror holding the
#            other table's rows
#  ack       a swap while stopped, acknowledged: the records are taken anew
#            at the start, the changes before the swap (old names) and after
#            (new names) are applied by the names they carry, as documented
#  pglogical the stopped case through pglogical_output, which describes
#            tables by their OID too
#  control   a table dropped and created again under its name while
#            streaming is no swap: the census's publication_gap, not the
#            stream's
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(src_conf => q{
shared_preload_libraries = 'pglogical'
output_plugin_libraries = 'pgoutput, pglogical_output'
track_commit_timestamp = on
});
my ($sysid, $sdb) = AshTest::source_identity($src);
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub rows_of
{
	my ($node, $t) = @_;
	return $node->safe_psql($DB, "SELECT coalesce(string_agg(id || ':' || coalesce(v::text, '~'), ' ' ORDER BY id), '') FROM $t");
}

my $swap = "BEGIN; ALTER TABLE %1\$s RENAME TO swap_tmp; ALTER TABLE %2\$s RENAME TO %1\$s; ALTER TABLE swap_tmp RENAME TO %2\$s; COMMIT";

sub pair_setup
{
	my ($sink, $a, $b) = @_;
	AshTest::both($src, $dst, "CREATE TABLE $a (id int PRIMARY KEY, v text); CREATE TABLE $b (id int PRIMARY KEY, v text);");
	q_src("CREATE PUBLICATION pub_$sink FOR TABLE $a, $b");
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink",
		maps => [ [$a], [$b] ], census => '{"interval_ms": 600000}');
	AshTest::wait_slot_consistent($src, $dst, $sink);
	q_src("INSERT INTO $a VALUES (1, 'a1'); INSERT INTO $b VALUES (101, 'b101')");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$sink: streamed");
}

# fresh: the session's first descriptions come with the swapped names
{
	pair_setup('fr', 'fa', 'fb');
	AshTest::stop_settled($src, $dst, 'fr');
	AshTest::start_sink($dst, 'fr');
	AshTest::wait_status($dst, 'fr', 'healthy', undef, src => $src, name => 'fresh: healthy again');
	AshTest::wait_slot_consistent($src, $dst, 'fr');
	my $cp = AshTest::checkpoint_facts($dst, 'fr');
	q_src(sprintf($swap, 'fa', 'fb'));
	q_src("INSERT INTO fa VALUES (201, 'into the new fa'); UPDATE fb SET v = 'upd' WHERE id = 1");
	AshTest::wait_status($dst, 'fr', 'halted', 'publication_gap', src => $src,
		name => 'fresh: halted publication_gap');
	like(AshTest::halt_line($dst, 'fr', 'publication_gap'), qr/public\.f[ab]/, 'fresh: the halt names the tables');
	is(rows_of($dst, 'fa'), '1:a1', 'fresh: the mirror of fa received nothing of the other table');
	is(rows_of($dst, 'fb'), '101:b101', 'fresh: the mirror of fb received nothing of the other table');
	is(AshTest::checkpoint_facts($dst, 'fr'), $cp, 'fresh: checkpoint unchanged');
	AshTest::stop_sink($dst, 'fr');
}

# stopped: swapped, written and swapped back while stopped
{
	pair_setup('st', 'sa', 'sb');
	AshTest::stop_settled($src, $dst, 'st');
	my $cp = AshTest::checkpoint_facts($dst, 'st');
	q_src(sprintf($swap, 'sa', 'sb'));
	q_src("INSERT INTO sa VALUES (202, 'into the swapped sa'); UPDATE sb SET v = 'upd' WHERE id = 1");
	q_src(sprintf($swap, 'sa', 'sb'));
	AshTest::start_sink($dst, 'st');
	AshTest::wait_status($dst, 'st', 'halted', 'publication_gap', src => $src,
		name => 'stopped: halted publication_gap');
	like(AshTest::halt_line($dst, 'st', 'publication_gap'), qr/mapped table public\.s[ab] was renamed to public\.s[ab], a name the pipeline maps to another target/,
		'stopped: the halt names both tables');
	is(rows_of($dst, 'sa'), '1:a1', 'stopped: the mirror of sa received nothing of the other table');
	is(rows_of($dst, 'sb'), '101:b101', 'stopped: the mirror of sb received nothing of the other table');
	is(AshTest::checkpoint_facts($dst, 'st'), $cp, 'stopped: checkpoint unchanged');
	AshTest::stop_sink($dst, 'st');
}

# ack: a swap while stopped, acknowledged, applies by the names carried
{
	pair_setup('ak', 'ka', 'kb');
	AshTest::stop_settled($src, $dst, 'ak');
	q_src("INSERT INTO ka VALUES (2, 'a2 before')");
	q_src(sprintf($swap, 'ka', 'kb'));
	q_src("INSERT INTO ka VALUES (203, 'after, into ka')");
	AshTest::start_sink($dst, 'ak');
	AshTest::wait_status($dst, 'ak', 'halted', 'publication_gap', src => $src,
		name => 'ack: the start halts publication_gap');
	AshTest::stop_sink($dst, 'ak');
	is(q_dst("SELECT ash_replicant_acknowledge_publication_gap('ak', " . AshTest::lit($sysid) . ", " . AshTest::lit($sdb) . ")"),
		't', 'ack: acknowledged');
	AshTest::start_sink($dst, 'ak');
	AshTest::wait_caught_up($src, $dst, 'ak', name => 'ack: caught up after the acknowledgement');
	is(rows_of($dst, 'ka'), '1:a1 2:a2 before 203:after, into ka', 'ack: ka by the names carried');
	is(AshTest::status_row($dst, 'ak')->{state}, 'healthy', 'ack: healthy');
	# a later session reads the same WAL again no differently
	AshTest::stop_settled($src, $dst, 'ak');
	AshTest::start_sink($dst, 'ak');
	AshTest::wait_caught_up($src, $dst, 'ak', name => 'ack: a later session');
	is(AshTest::status_row($dst, 'ak')->{state}, 'healthy', 'ack: still healthy');
	AshTest::stop_sink($dst, 'ak');
}

# pglogical: swapped, written and swapped back while stopped
{
	q_src("CREATE EXTENSION pglogical; SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');"
		  . " SELECT pglogical.create_replication_set('swset')");
	AshTest::both($src, $dst, "CREATE TABLE la (id int PRIMARY KEY, v text); CREATE TABLE lb (id int PRIMARY KEY, v text);");
	q_src("SELECT pglogical.replication_set_add_table('swset', 'la'); SELECT pglogical.replication_set_add_table('swset', 'lb')");
	AshTest::setup_pipeline($src, $dst, sink => 'pl', decoder => 'pglogical', replication_sets => ['swset'],
		maps => [ ['la'], ['lb'] ], census => '{"interval_ms": 600000}');
	AshTest::wait_slot_consistent($src, $dst, 'pl');
	q_src("INSERT INTO la VALUES (1, 'a1'); INSERT INTO lb VALUES (101, 'b101')");
	AshTest::wait_caught_up($src, $dst, 'pl', name => 'pglogical: streamed');
	AshTest::stop_settled($src, $dst, 'pl');
	my $cp = AshTest::checkpoint_facts($dst, 'pl');
	q_src(sprintf($swap, 'la', 'lb'));
	q_src("INSERT INTO la VALUES (202, 'into the swapped la'); UPDATE lb SET v = 'upd' WHERE id = 1");
	q_src(sprintf($swap, 'la', 'lb'));
	AshTest::start_sink($dst, 'pl');
	AshTest::wait_status($dst, 'pl', 'halted', 'publication_gap', src => $src,
		name => 'pglogical: halted publication_gap');
	is(rows_of($dst, 'la'), '1:a1', 'pglogical: the mirror of la received nothing of the other table');
	is(rows_of($dst, 'lb'), '101:b101', 'pglogical: the mirror of lb received nothing of the other table');
	is(AshTest::checkpoint_facts($dst, 'pl'), $cp, 'pglogical: checkpoint unchanged');
	AshTest::stop_sink($dst, 'pl');
}

# control: dropped and created again under its name while streaming
{
	pair_setup('ct', 'ca', 'cb');
	q_src("DROP TABLE ca; CREATE TABLE ca (id int PRIMARY KEY, v text); ALTER PUBLICATION pub_ct ADD TABLE ca; INSERT INTO ca VALUES (5, 'new ca')");
	AshTest::poll($dst, "SELECT count(*) FROM ca WHERE id = 5", '1');
	is(AshTest::status_row($dst, 'ct')->{state}, 'healthy', 'control: the stream applies a replaced table by its name');
	AshTest::stop_sink($dst, 'ct');
}

done_testing();
