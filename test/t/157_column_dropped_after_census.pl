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
#  streamed  (streaming => true) a large transaction of another table,
#            streamed and rolled back at the source, dropped every
#            resolution the same way (any large failed job of the source
#            database): the same halt
#  touched   the same where the rolled-back transaction wrote the table
#            itself (a failed bulk load): its description came in that
#            transaction, and the committed one is kept aside until it ends
#  control   the same without either: the same halt
#  aborted   a column added in a streamed transaction the source rolls
#            back: no false halt once the next description lacks it
#  redescribed  the same with the table described twice in that
#            transaction: neither description is a baseline
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	src_conf => "logical_decoding_work_mem = '64kB'\n");

AshTest::both($src, $dst, "CREATE TABLE big (id int PRIMARY KEY, v text)");
for my $case ('widened', 'streamed', 'touched', 'control')
{
	my $t = "t_$case";
	my $streamed = $case eq 'streamed' || $case eq 'touched';
	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, a text, n int, c int)");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$case FOR TABLE $t" . ($streamed ? ', big' : ''));
	AshTest::setup_pipeline($src, $dst, sink => "s_$case", publication => "pub_$case",
		maps => [ [$t], $streamed ? (['big']) : () ],
		$streamed ? (pipeline_extra => 'streaming => true') : ());
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

	if ($streamed)
	{
		$src->safe_psql($DB, $case eq 'touched'
			? "BEGIN; INSERT INTO $t SELECT g, repeat('x', 100), g, g FROM generate_series(101, 8100) g; ROLLBACK"
			: "BEGIN; INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 8000) g; ROLLBACK");
		AshTest::wait_caught_up($src, $dst, "s_$case", name => "$case: streams on after the rolled-back transaction");
		ok(AshTest::poll($src, "SELECT stream_txns > 0 FROM pg_stat_replication_slots WHERE slot_name = 's_$case'"),
			"$case: the large transaction came streamed");
	}

	$src->safe_psql($DB, "ALTER TABLE $t DROP COLUMN c; UPDATE $t SET a = 'after drop' WHERE id = 2");
	AshTest::wait_status($dst, "s_$case", 'misconfigured', 'source_column_missing', src => $src,
		name => "$case: the dropped column halts source_column_missing");
	is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || a || ':' || c, ' ' ORDER BY id) FROM $t"),
		'1:a:10 2:a:20 3:a:30', "$case: nothing of the update applied");
	AshTest::stop_sink($dst, "s_$case");
}

# aborted   a column added in a streamed transaction the source rolls back:
#           the description it came with is no baseline (the next one lacks
#           the column, which no committed state ever had): no halt
{
	AshTest::both($src, $dst, "CREATE TABLE t_aborted (id int PRIMARY KEY, a text)");
	$dst->safe_psql($DB, "ALTER TABLE t_aborted ADD COLUMN c int");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_aborted FOR TABLE t_aborted");
	AshTest::setup_pipeline($src, $dst, sink => 's_aborted', publication => 'pub_aborted',
		maps => [ ['t_aborted'] ], pipeline_extra => 'streaming => true');
	AshTest::wait_slot_consistent($src, $dst, 's_aborted');
	$src->safe_psql($DB, "BEGIN; ALTER TABLE t_aborted ADD COLUMN c int;"
		  . " INSERT INTO t_aborted SELECT g, repeat('x', 100), g FROM generate_series(1, 8000) g; ROLLBACK");
	$src->safe_psql($DB, "INSERT INTO t_aborted VALUES (1, 'one')");
	AshTest::wait_caught_up($src, $dst, 's_aborted', name => 'aborted: streams on');
	ok(AshTest::poll($src, "SELECT stream_txns > 0 FROM pg_stat_replication_slots WHERE slot_name = 's_aborted'"),
		'aborted: the transaction came streamed');
	is(AshTest::status_row($dst, 's_aborted')->{state}, 'healthy', 'aborted: no halt');
	is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || a || ':' || coalesce(c::text, '~'), ' ') FROM t_aborted"),
		'1:one:~', 'aborted: the committed row only');
	AshTest::stop_sink($dst, 's_aborted');
}

# redescribed  the same, the table described twice in the streamed
#              transaction (a second column added in it): the first of them,
#              uncommitted too, is no baseline either (before: kept as the
#              committed one, the next description halted
#              source_column_missing for a column no committed state had)
{
	AshTest::both($src, $dst, "CREATE TABLE t_redesc (id int PRIMARY KEY, a text)");
	$dst->safe_psql($DB, "ALTER TABLE t_redesc ADD COLUMN c int, ADD COLUMN d int");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_redesc FOR TABLE t_redesc");
	AshTest::setup_pipeline($src, $dst, sink => 's_redesc', publication => 'pub_redesc',
		maps => [ ['t_redesc'] ], pipeline_extra => 'streaming => true');
	AshTest::wait_slot_consistent($src, $dst, 's_redesc');
	$src->safe_psql($DB, "BEGIN; ALTER TABLE t_redesc ADD COLUMN c int;"
		  . " INSERT INTO t_redesc SELECT g, repeat('x', 100), g FROM generate_series(1, 4000) g;"
		  . " ALTER TABLE t_redesc ADD COLUMN d int;"
		  . " INSERT INTO t_redesc SELECT g, repeat('x', 100), g, g FROM generate_series(4001, 8000) g; ROLLBACK");
	$src->safe_psql($DB, "INSERT INTO t_redesc VALUES (1, 'one')");
	AshTest::wait_caught_up($src, $dst, 's_redesc', name => 'redescribed: streams on');
	is(AshTest::status_row($dst, 's_redesc')->{state}, 'healthy', 'redescribed: no halt');
	is($dst->safe_psql($DB, "SELECT string_agg(id || ':' || a || ':' || coalesce(c::text, '~') || ':' || coalesce(d::text, '~'), ' ') FROM t_redesc"),
		'1:one:~:~', 'redescribed: the committed row only');
	AshTest::stop_sink($dst, 's_redesc');
}

done_testing();
