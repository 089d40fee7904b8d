# pgoutput: a session's first description of a mapped table is judged
# against the table's publication record, as a later one is judged against
# the one before (docs/reasons.md#source_type_invalid, #source_column_missing).
# The census is off, so only the stream can see these.
#
#  retyped   numeric(10,2) to numeric(10,0) after the session started, before
#            the table's first change of the session (the rows rounded at the
#            source): halts source_type_invalid, nothing of the change
#            applied (before: applied on, the mirror keeping 1.55 where the
#            source has 2)
#  dropped   a mapped column dropped likewise: source_column_missing (before:
#            applied on without it)
#  widened   numeric(10,2) to numeric(12,2): streams on
#  control   a table first written after the start, unchanged: streams on
#  latin1    a LATIN1 destination, the retyped column named 'größe': the
#            record's names (UTF-8 at the source) read in the destination's
#            encoding, the same halt (before the conversion ran in a
#            transaction: XX000 at every start)
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub fresh_session
{
	my ($sink) = @_;
	AshTest::stop_settled($src, $dst, $sink);
	AshTest::start_sink($dst, $sink);
	streaming($src, $sink);
}

# the new session streams: its start compared the records already
sub streaming
{
	my ($node, $sink) = @_;
	AshTest::poll($node, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$sink' AND active", '1')
	  or die "$sink: no session streams";
}

my $n = 0;
for my $case ([ 'retyped', "ALTER TABLE %s ALTER COLUMN n TYPE numeric(10,0)", 'source_type_invalid' ],
	[ 'dropped', "ALTER TABLE %s DROP COLUMN n", 'source_column_missing' ],
	[ 'widened', "ALTER TABLE %s ALTER COLUMN n TYPE numeric(12,2)", undef ],
	[ 'control', "SELECT 1 FROM %s LIMIT 0", undef ])
{
	my ($what, $ddl, $reason) = @$case;
	my $sink = 's' . ++$n;
	my $t = "t_$what";
	AshTest::both($src, $dst, "CREATE TABLE $t (id int PRIMARY KEY, n numeric(10,2))");
	q_src("CREATE PUBLICATION pub_$sink FOR TABLE $t");
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink", maps => [ [$t] ],
		census => '{"enabled": false}');
	AshTest::wait_slot_consistent($src, $dst, $sink);
	q_src("INSERT INTO $t VALUES (1, 1.55)");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$what: streamed");
	fresh_session($sink);
	my $cp = AshTest::checkpoint_facts($dst, $sink);
	q_src(sprintf($ddl, $t));
	q_src("INSERT INTO $t (id) VALUES (2)");
	if (defined $reason)
	{
		AshTest::wait_status($dst, $sink, 'misconfigured', $reason, src => $src, name => "$what: halts $reason");
		is(q_dst("SELECT string_agg(id || ':' || coalesce(n::text, '~'), ' ' ORDER BY id) FROM $t"), '1:1.55',
			"$what: nothing of the change applied");
		is(AshTest::checkpoint_facts($dst, $sink), $cp, "$what: checkpoint unchanged");
	}
	else
	{
		AshTest::wait_caught_up($src, $dst, $sink, name => "$what: streams on");
		# with the census off the state stays catching_up: no halt is the point
		like(AshTest::status_row($dst, $sink)->{state}, qr/^(healthy|catching_up)$/, "$what: not halted");
		is(q_dst("SELECT count(*) FROM $t"), '2', "$what: the change applied");
	}
	AshTest::stop_sink($dst, $sink);
}

# latin1: the record's column names in the destination's encoding
{
	my ($src2, $dst2) = AshTest::start_pair(name_prefix => 'l1_', dst_encoding => 'LATIN1');
	my $t = 't_latin1';
	my $col = 'U&"gr\00f6\00dfe"';
	AshTest::both($src2, $dst2, "CREATE TABLE $t (id int PRIMARY KEY, $col numeric(10,2))");
	$src2->safe_psql($DB, "CREATE PUBLICATION pub_l1 FOR TABLE $t");
	AshTest::setup_pipeline($src2, $dst2, sink => 'l1', publication => 'pub_l1', maps => [ [$t] ],
		census => '{"enabled": false}');
	AshTest::wait_slot_consistent($src2, $dst2, 'l1');
	$src2->safe_psql($DB, "INSERT INTO $t VALUES (1, 1.55)");
	AshTest::wait_caught_up($src2, $dst2, 'l1', name => 'latin1: streamed');
	AshTest::stop_settled($src2, $dst2, 'l1');
	AshTest::start_sink($dst2, 'l1');
	streaming($src2, 'l1');
	$src2->safe_psql($DB, "ALTER TABLE $t ALTER COLUMN $col TYPE numeric(10,0); INSERT INTO $t (id) VALUES (2)");
	AshTest::wait_status($dst2, 'l1', 'misconfigured', 'source_type_invalid', src => $src2,
		name => 'latin1: halts source_type_invalid');
	is($dst2->safe_psql($DB, "SELECT count(*) FROM $t"), '1', 'latin1: nothing of the change applied');
	AshTest::stop_sink($dst2, 'l1');
}

done_testing();
