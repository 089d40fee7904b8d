# A mapped source column dropped while streaming halts source_column_missing
# (docs/reasons.md#source_column_missing) also after a census found a target
# changed.  Such a census (a target column widened at the destination, an
# ordinary step) drops every resolution so that the apply judges the targets
# again; before, it dropped with them the description each table was
# resolved with, so the table's next description -- the one without the
# column -- was judged against nothing: the pipeline stayed healthy and
# applied on, the mirror keeping the dropped column's old values (found by
# an exploratory test, with every decoder).
#
#  widened   a target column widened, a census admits it; the source drops a
#            mapped column and updates a row: halts source_column_missing,
#            nothing of the update applied
#  control   the same without the widening: the same halt
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');

for my $case ('widened', 'control')
{
	my $t = "t_$case";
	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, a text, n int, c int)");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$case FOR TABLE $t");
	AshTest::setup_pipeline($src, $dst, sink => "s_$case", publication => "pub_$case", maps => [ [$t] ]);
	AshTest::wait_slot_consistent($src, $dst, "s_$case");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, 'a', g, g * 10 FROM generate_series(1, 3) g");
	AshTest::wait_caught_up($src, $dst, "s_$case", name => "$case: rows mirrored");

	if ($case eq 'widened')
	{
		my $from = -s $dst->logfile;
		$dst->safe_psql($DB, "ALTER TABLE $t ALTER COLUMN n TYPE bigint");
		ok(AshTest::wait_until(sub { slurp_file($dst->logfile, $from) =~ /event=contract\.extended sink=s_widened/ }),
			"$case: a census admitted the widened target");
		AshTest::wait_caught_up($src, $dst, "s_$case", name => "$case: streams on after the census");
	}

	$src->safe_psql($DB, "ALTER TABLE $t DROP COLUMN c; UPDATE $t SET a = 'after drop' WHERE id = 2");
	AshTest::wait_status($dst, "s_$case", 'misconfigured', 'source_column_missing', src => $src,
		name => "$case: the dropped column halts source_column_missing");
	is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || a || ':' || c, ' ' ORDER BY id) FROM $t"),
		'1:a:10 2:a:20 3:a:30', "$case: nothing of the update applied");
	AshTest::stop_sink($dst, "s_$case");
}

done_testing();
