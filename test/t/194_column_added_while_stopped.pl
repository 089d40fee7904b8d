# A source column added while the pipeline is stopped, to a table no change
# of which was applied yet (docs/reasons.md#source_column_added).  Such a
# table has no record of the source columns feeding its target: each
# session judged its first description, and the census judged its catalog,
# against the columns its publication record held when the session started
# -- and a start after the addition reads a record that holds the column.
# The census now keeps that baseline as the table's record once the stream
# has passed the position it read the catalog at, so the next start judges
# the addition.  Go-forward pipelines; the target holds the source's rows.
#
#   stopped_<decoder>  the idle table gets a record from the census
#                      (before: none); stopped, a column added at both ends
#                      (the source with a default), started: halted
#                      source_column_added naming the table and column,
#                      mirror unchanged (before: healthy, the mirror's rows
#                      NULL where the source's hold the default); made to
#                      agree and acknowledged: healthy, the next change
#                      streams, mirror equal.
#   empty              a target without rows takes the column at the start
#   unchanged          a restart without an addition is no halt
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $SENTINEL = 'SENTINEL_stopped_added_51ae';
my ($src, $dst) = AshTest::start_pair(
	log_statement => 'none',
	src_conf => "shared_preload_libraries = 'pglogical'\n"
	  . "output_plugin_libraries = 'pgoutput, wal2json, pglogical_output'\n"
	  . "max_replication_slots = 20\nmax_wal_senders = 20\n");
$src->safe_psql($DB, q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');
});

sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

sub record
{
	my ($sink, $t) = @_;
	return q_dst("SELECT array_to_string(columns, ',') FROM ash_replicant.source_columns"
		  . " WHERE slot_name = '$sink' AND source_table = '$t'");
}

# A go-forward pipeline of $decoder over the idle table $t (5 rows at both
# ends unless $empty) and a busy table ${t}_busy.
sub pipeline
{
	my ($sink, $t, $decoder, %o) = @_;
	my %d;

	AshTest::both($src, $dst,
		"CREATE TABLE $t (id int PRIMARY KEY, c text); CREATE TABLE ${t}_busy (id int PRIMARY KEY)");
	q_src("INSERT INTO $t SELECT g, 'r' || g FROM generate_series(1, 5) g");
	q_dst("INSERT INTO $t SELECT g, 'r' || g FROM generate_series(1, 5) g") unless $o{empty};
	if ($decoder eq 'pglogical')
	{
		q_src("SELECT pglogical.create_replication_set('set_$sink');"
			  . " SELECT pglogical.replication_set_add_table('set_$sink', '$t');"
			  . " SELECT pglogical.replication_set_add_table('set_$sink', '${t}_busy')");
		%d = (decoder => 'pglogical', replication_sets => ["set_$sink"]);
	}
	elsif ($decoder eq 'wal2json')
	{
		%d = (decoder => 'wal2json', tables => [ "public.$t", "public.${t}_busy" ]);
	}
	else
	{
		q_src("CREATE PUBLICATION pub_$sink FOR TABLE $t, ${t}_busy");
		%d = (publication => "pub_$sink");
	}
	AshTest::setup_pipeline($src, $dst, sink => $sink, maps => [ [$t], ["${t}_busy"] ], %d);
	AshTest::wait_status($dst, $sink, 'healthy');
	q_src("INSERT INTO ${t}_busy VALUES (1)");
	AshTest::wait_caught_up($src, $dst, $sink);
	return;
}

for my $decoder ('pgoutput', 'wal2json', 'pglogical')
{
	my $sink = "stopped_$decoder";
	my $t = "t_$sink";

	pipeline($sink, $t, $decoder);
	ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.source_columns"
			  . " WHERE slot_name = '$sink' AND source_table = '$t'"),
		"$sink: the census keeps the idle table's columns as its record");
	is(record($sink, $t), 'id,c', "$sink: the record holds the columns the session started with");
	AshTest::stop_settled($src, $dst, $sink);
	my $mirror = AshTest::table_hash($dst, $t);
	# the target's first (docs/operations.md)
	q_dst("ALTER TABLE $t ADD COLUMN d text");
	q_src("ALTER TABLE $t ADD COLUMN d text DEFAULT '$SENTINEL'");
	my $mirror_altered = AshTest::table_hash($dst, $t);
	AshTest::start_sink($dst, $sink);
	q_src("INSERT INTO ${t}_busy VALUES (2)");
	AshTest::wait_status($dst, $sink, 'halted', 'source_column_added', src => $src,
		name => "$sink: a column added while stopped halts source_column_added"
		  . ' (before: healthy, NULL in the mirror)');
	like(AshTest::halt_line($dst, $sink, 'source_column_added') // '',
		qr/public\.t_$sink: source columns d were added while its target held rows/,
		"$sink: the halt names the table and the column");
	is(AshTest::table_hash($dst, $t), $mirror_altered, "$sink: the mirror is unchanged");
	is(q_dst("SELECT count(*) FROM $t WHERE d IS NULL"), '5', "$sink: its rows still lack the value");
	is(record($sink, $t), 'id,c', "$sink: the record still lacks the column");

	# a restart alone halts again; the operator makes the rows agree
	AshTest::stop_settled($src, $dst, $sink);
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'halted', 'source_column_added', src => $src,
		name => "$sink: a restart halts again");
	AshTest::stop_settled($src, $dst, $sink);
	q_dst("UPDATE $t SET d = '$SENTINEL'");
	AshTest::start_sink($dst, $sink);
	AshTest::acknowledge_column_added($src, $dst, $sink, $t);
	AshTest::wait_status($dst, $sink, 'healthy', undef,
		name => "$sink: made to agree and acknowledged: healthy");
	q_src("UPDATE $t SET c = 'upd' WHERE id = 1");
	ok(AshTest::wait_caught_up($src, $dst, $sink), "$sink: the next change streams");
	AshTest::assert_mirror_equal($src, $dst, [ $t, "${t}_busy" ], name => "$sink: after the change");
	is(record($sink, $t), 'id,c,d', "$sink: the description took the addition");
	AshTest::stop_settled($src, $dst, $sink);
}
is(scalar(AshTest::grep_logs_for($SENTINEL, $src, $dst)), 0, 'the default is in no server log');

# a target without rows takes a column added while stopped
{
	my $sink = 'empty';
	my $t = "t_$sink";

	pipeline($sink, $t, 'pgoutput', empty => 1);
	ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.source_columns"
			  . " WHERE slot_name = '$sink' AND source_table = '$t'"),
		"$sink: the census keeps the idle table's record");
	AshTest::stop_settled($src, $dst, $sink);
	q_dst("ALTER TABLE $t ADD COLUMN d text");
	q_src("ALTER TABLE $t ADD COLUMN d text DEFAULT 'dsrc'");
	AshTest::start_sink($dst, $sink);
	q_src("INSERT INTO ${t}_busy VALUES (2)");
	AshTest::wait_caught_up($src, $dst, $sink);
	ok(AshTest::census_runs($dst, $sink, 3), "$sink: census runs after the start");
	AshTest::wait_status($dst, $sink, 'healthy', undef, name => "$sink: a target without rows: healthy");
	q_src("INSERT INTO $t VALUES (6, 'r6')");
	AshTest::wait_caught_up($src, $dst, $sink);
	is(q_dst("SELECT string_agg(id || ':' || d, ',' ORDER BY id) FROM $t"), '6:dsrc',
		"$sink: the row written carries the column");
	AshTest::stop_settled($src, $dst, $sink);
}

# a restart with no addition: no halt, the record as it was
{
	my $sink = 'unchanged';
	my $t = "t_$sink";

	pipeline($sink, $t, 'pgoutput');
	ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.source_columns"
			  . " WHERE slot_name = '$sink' AND source_table = '$t'"),
		"$sink: the census keeps the idle table's record");
	AshTest::stop_settled($src, $dst, $sink);
	AshTest::start_sink($dst, $sink);
	q_src("INSERT INTO ${t}_busy VALUES (2)");
	AshTest::wait_caught_up($src, $dst, $sink);
	ok(AshTest::census_runs($dst, $sink, 3), "$sink: census runs after the restart");
	AshTest::wait_status($dst, $sink, 'healthy', undef, name => "$sink: healthy");
	is(record($sink, $t), 'id,c', "$sink: the record as it was");
	AshTest::assert_mirror_equal($src, $dst, [ $t, "${t}_busy" ], name => "$sink: mirror equal");
}

done_testing();
