# A source column added after the pipeline started but before its table's
# first streamed change is judged as one added later is
# (docs/reasons.md#source_column_added), for every decoder.  Go-forward
# pipelines: the target already holds the source's 5 rows; no change of the
# table has streamed in the pipeline's life, so no record of the columns
# feeding its target exists yet.
#
#  first_<decoder>  target ADD COLUMN d, source ADD COLUMN d DEFAULT 'dsrc',
#                   then UPDATE one row: halts source_column_added, nothing
#                   of the change applied (before: healthy, the mirror's rows
#                   2-5 holding NULL where the source's hold 'dsrc').  The
#                   baseline is the table's publication record (pgoutput,
#                   pglogical) or the session's first description of it
#                   (wal2json, described from the catalog at the start).
#                   pgoutput: the halt leaves the table a record of the
#                   columns it was judged against (a restart halts again;
#                   before, the next start's publication record held the
#                   column and took the change); the rows made to agree
#                   and acknowledged, it streams on and the mirror is equal.
#  old_<decoder>    the column added (both ends agreeing) before the pipeline
#                   was set up: streams on, equal
#  after            pgoutput, one change streamed before the addition: halts
#                   source_column_added as before
#  empty            pgoutput, a target without rows: takes the column
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(
	src_conf => "shared_preload_libraries = 'pglogical'\n"
	  . "output_plugin_libraries = 'pgoutput, wal2json, pglogical_output'\n"
	  . "max_replication_slots = 20\nmax_wal_senders = 20\n");
$src->safe_psql($DB, q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');
});

sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

sub state_of
{
	my $r = AshTest::status_row($dst, $_[0]);
	return ($r->{state} // '') . '/' . ($r->{reason} // '');
}

# A pipeline of $decoder over table $t (id, c): the same 5 rows at both
# ends unless $empty (none at the target).
sub pipeline
{
	my ($sink, $t, $decoder, %o) = @_;
	my %d;

	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, c text)");
	q_src("INSERT INTO $t SELECT g, 'r' || g FROM generate_series(1, 5) g");
	q_dst("INSERT INTO $t SELECT g, 'r' || g FROM generate_series(1, 5) g") unless $o{empty};
	if ($o{old})
	{
		# added long before the pipeline: both ends agree
		q_src("ALTER TABLE $t ADD COLUMN d text DEFAULT 'dsrc'");
		q_dst("ALTER TABLE $t ADD COLUMN d text");
		q_dst("UPDATE $t SET d = 'dsrc'") unless $o{empty};
	}
	if ($decoder eq 'pglogical')
	{
		q_src("SELECT pglogical.create_replication_set('set_$sink');"
			  . " SELECT pglogical.replication_set_add_table('set_$sink', '$t')");
		%d = (decoder => 'pglogical', replication_sets => ["set_$sink"]);
	}
	elsif ($decoder eq 'wal2json')
	{
		%d = (decoder => 'wal2json', tables => ["public.$t"]);
	}
	else
	{
		q_src("CREATE PUBLICATION pub_$sink FOR TABLE $t");
		%d = (publication => "pub_$sink");
	}
	AshTest::setup_pipeline($src, $dst, sink => $sink, maps => [ [$t] ], %d);
	AshTest::wait_status($dst, $sink, 'healthy');
	AshTest::wait_caught_up($src, $dst, $sink);
	return;
}

sub add_column_then_update
{
	my ($t) = @_;
	# the target's first (docs/operations.md): a census between the two
	# would halt source_column_unmapped
	q_dst("ALTER TABLE $t ADD COLUMN d text");
	q_src("ALTER TABLE $t ADD COLUMN d text DEFAULT 'dsrc'");
	q_src("UPDATE $t SET c = 'upd' WHERE id = 1");
	return;
}

# the fixed case, per decoder
for my $decoder ('pgoutput', 'wal2json', 'pglogical')
{
	my $sink = "first_$decoder";
	my $t = "t_$sink";

	pipeline($sink, $t, $decoder);
	add_column_then_update($t);
	AshTest::wait_status($dst, $sink, 'halted', 'source_column_added', src => $src,
		name => "$sink: halted source_column_added");
	is(q_dst("SELECT c FROM $t WHERE id = 1"), 'r1', "$sink: nothing of the change applied");
	like(AshTest::halt_line($dst, $sink, 'source_column_added'),
		qr/public\.t_$sink: source columns d were added while its target held rows/,
		"$sink: the halt names the table and the column");
	if ($decoder eq 'pgoutput')
	{
		# the halt left a record of the columns judged against: a restart
		# halts again, until the rows are made to agree and acknowledged
		is(q_dst("SELECT string_agg(c, ',' ORDER BY c) FROM ash_replicant.source_columns,"
				  . " unnest(columns) c WHERE slot_name = '$sink' AND source_table = '$t'"), 'c,id',
			"$sink: the table's record holds the columns it was judged against");
		AshTest::stop_settled($src, $dst, $sink);
		AshTest::start_sink($dst, $sink);
		AshTest::wait_status($dst, $sink, 'halted', 'source_column_added', src => $src,
			name => "$sink: a restart halts again (before: took the column unjudged)");
		AshTest::stop_settled($src, $dst, $sink);
		q_dst("UPDATE $t SET d = 'dsrc'");
		AshTest::start_sink($dst, $sink);
		AshTest::acknowledge_column_added($src, $dst, $sink, $t);
		AshTest::wait_status($dst, $sink, 'healthy');
		AshTest::wait_caught_up($src, $dst, $sink);
		is(AshTest::table_hash($dst, $t), AshTest::table_hash($src, $t),
			"$sink: the rows made to agree and acknowledged, it streams on, mirror equal");
	}
}

# no false halt: a column added before the pipeline existed
for my $decoder ('pgoutput', 'wal2json', 'pglogical')
{
	my $sink = "old_$decoder";
	my $t = "t_$sink";

	pipeline($sink, $t, $decoder, old => 1);
	q_src("UPDATE $t SET c = 'upd' WHERE id = 1");
	AshTest::wait_caught_up($src, $dst, $sink);
	is(state_of($sink), 'healthy/', "$sink: a column added before the pipeline: healthy");
	is(AshTest::table_hash($dst, $t), AshTest::table_hash($src, $t), "$sink: mirror equal");
}

# a column added after a first change: judged as before
{
	my $sink = 'after';
	my $t = "t_$sink";

	pipeline($sink, $t, 'pgoutput');
	q_src("UPDATE $t SET c = 'p' WHERE id = 5");
	AshTest::wait_caught_up($src, $dst, $sink);
	add_column_then_update($t);
	AshTest::wait_status($dst, $sink, 'halted', 'source_column_added', src => $src,
		name => "$sink: a column added after a first change: halted source_column_added");
}

# a target without rows takes the column
{
	my $sink = 'empty';
	my $t = "t_$sink";

	pipeline($sink, $t, 'pgoutput', empty => 1);
	add_column_then_update($t);
	q_src("INSERT INTO $t VALUES (6, 'r6')");
	AshTest::wait_caught_up($src, $dst, $sink);
	is(state_of($sink), 'healthy/', "$sink: a target without rows: healthy");
	is(q_dst("SELECT string_agg(id || ':' || d, ',' ORDER BY id) FROM $t"), '1:dsrc,6:dsrc',
		"$sink: the rows written carry the column");
}

done_testing();
