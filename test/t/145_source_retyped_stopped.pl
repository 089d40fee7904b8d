# A mapped source column retyped while the pipeline was stopped
# (docs/reasons.md#publication_gap).  ALTER TABLE rewrote the table's rows
# under the new type, outside the stream; a new session describes the
# table as it is and, before, mirrored on with the old values, healthy.
#
#  widen     numeric(10,2) to (12,2), integer to bigint, varchar(10) to
#            text, timestamp(0) to timestamp(6) while stopped: every value
#            kept, the start is healthy and the mirror exact; so is integer
#            to bigint while streaming (it halted source_type_invalid)
#  narrow    numeric(10,2) to (10,1) while stopped (rows rounded): preflight
#            fails publication_gap, the start halts publication_gap, nothing
#            written; acknowledged, the pipeline streams on.  Narrowed while
#            streaming with no later change of the table: the census halts
#            source_type_invalid, as the stream does at the next change;
#            a restart then halts publication_gap
#  retype    timestamp to timestamptz while stopped (every value
#            re-interpreted): halts publication_gap
#  skipped   a column the mapping skips, narrowed: no gap
#  wal2json  numeric(10,2) to (10,0) while stopped: publication_gap
#  snapshot  with snapshot => 'v1' configured, a narrowing while stopped
#            copies the table again: the mirror holds the rounded values
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


# the mapped columns of r, as text, at both ends
sub same_r
{
	my ($name) = @_;
	my $q = "SELECT string_agg(concat_ws('|', id, amount, n, s, ts, t), ' ' ORDER BY id) FROM r";
	is(q_dst($q), q_src($q), $name);
}


sub acknowledge
{
	my ($sink) = @_;
	return q_dst("SELECT ash_replicant_acknowledge_publication_gap('$sink', " . AshTest::lit($sysid)
		  . ", " . AshTest::lit($sdb) . ")");
}

# pgoutput without a snapshot
{
	q_src(q{
CREATE TABLE r (id int PRIMARY KEY, amount numeric(10,2), n int, s varchar(10), ts timestamp(0), t timestamp, junk numeric(10,2));
CREATE PUBLICATION pub_r FOR TABLE r;
});
	q_dst(q{
CREATE TABLE r (id bigint PRIMARY KEY, amount numeric, n bigint, s text, ts timestamp(6), t text);
});
	AshTest::setup_pipeline($src, $dst, sink => 'rt', publication => 'pub_r',
		maps => [ [ 'r', skip => ['junk'] ] ]);
	AshTest::wait_slot_consistent($src, $dst, 'rt');
	q_src("INSERT INTO r VALUES (1, 1.25, 10, 'ab', '2026-01-01 10:00', '2026-01-01 10:00', 1.25),"
		  . " (2, 2.75, 20, 'cd', '2026-01-02 11:00', '2026-01-02 11:00', 2.75)");
	AshTest::wait_caught_up($src, $dst, 'rt', name => 'streamed');

	# while streaming: integer to bigint keeps every value
	q_src("ALTER TABLE r ALTER COLUMN id TYPE bigint");
	q_src("INSERT INTO r VALUES (3, 3.5, 30, 'ef', '2026-01-03', '2026-01-03', 3)");
	AshTest::wait_caught_up($src, $dst, 'rt', name => 'integer to bigint while streaming: streams on');
	same_r('integer to bigint while streaming: mirror exact');

	# widenings while stopped
	AshTest::stop_settled($src, $dst, 'rt');
	q_src("ALTER TABLE r ALTER COLUMN amount TYPE numeric(12,2), ALTER COLUMN n TYPE bigint,"
		  . " ALTER COLUMN s TYPE text, ALTER COLUMN ts TYPE timestamp(6)");
	is(AshTest::preflight_verdict($dst, 'rt', 'publication'), 'pass/', 'widen: preflight passes');
	AshTest::start_sink($dst, 'rt');
	q_src("INSERT INTO r VALUES (4, 4.5, 40, 'gh', '2026-01-04 00:00:00.5', '2026-01-04', 4)");
	AshTest::wait_caught_up($src, $dst, 'rt', name => 'widen: caught up');
	is(AshTest::status_row($dst, 'rt')->{state}, 'healthy', 'widen: healthy');
	same_r('widen: mirror exact');

	# a skipped column narrowed: not written, no gap
	AshTest::stop_settled($src, $dst, 'rt');
	q_src("ALTER TABLE r ALTER COLUMN junk TYPE numeric(10,0)");
	is(AshTest::preflight_verdict($dst, 'rt', 'publication'), 'pass/', 'skipped: a skipped column narrowed is no gap');

	# narrowed while stopped: the rows were rounded at the source
	q_src("ALTER TABLE r ALTER COLUMN amount TYPE numeric(12,1)");
	is(AshTest::preflight_verdict($dst, 'rt', 'publication'), 'fail/publication_gap', 'narrow: preflight fails publication_gap');
	my $cp = AshTest::checkpoint_facts($dst, 'rt');
	AshTest::start_sink($dst, 'rt');
	q_src("INSERT INTO r VALUES (5, 5.5, 50, 'ij', '2026-01-05', '2026-01-05', 5)");
	AshTest::wait_status($dst, 'rt', 'halted', 'publication_gap', src => $src,
		name => 'narrow: the start halts publication_gap');
	is(q_dst('SELECT count(*) FROM r WHERE id = 5'), '0', 'narrow: nothing written');
	is(AshTest::checkpoint_facts($dst, 'rt'), $cp, 'narrow: checkpoint unchanged');
	AshTest::stop_sink($dst, 'rt');
	is(acknowledge('rt'), 't', 'narrow: acknowledged');
	AshTest::start_sink($dst, 'rt');
	AshTest::wait_caught_up($src, $dst, 'rt', name => 'narrow: streams on after the acknowledgement');
	is(q_dst('SELECT amount FROM r WHERE id = 5'), '5.5', 'narrow: the change after it applied');

	# narrowed while streaming, no change of the table after it: the census
	# halts as the stream would; the record keeps the old type, so a restart
	# finds the gap
	q_src("ALTER TABLE r ALTER COLUMN amount TYPE numeric(12,0)");
	AshTest::wait_status($dst, 'rt', 'misconfigured', 'source_type_invalid', src => $src,
		name => 'census: narrowed while streaming halts source_type_invalid');
	like(AshTest::halt_line($dst, 'rt', 'source_type_invalid'), qr/mapped columns were retyped while streaming, which rewrote their rows at the source: public\.r/,
		'census: the halt names the table');
	AshTest::stop_sink($dst, 'rt');
	AshTest::start_sink($dst, 'rt');
	AshTest::wait_status($dst, 'rt', 'halted', 'publication_gap', src => $src,
		name => 'census: a restart halts publication_gap');
	AshTest::stop_sink($dst, 'rt');
	is(acknowledge('rt'), 't', 'census: acknowledged');
	AshTest::start_sink($dst, 'rt');
	AshTest::wait_status($dst, 'rt', 'healthy', undef, src => $src, name => 'census: healthy after the acknowledgement');

	# a type change that re-interprets every value
	AshTest::stop_settled($src, $dst, 'rt');
	q_src("SET TimeZone = 'Asia/Tokyo'; ALTER TABLE r ALTER COLUMN t TYPE timestamptz");
	is(AshTest::preflight_verdict($dst, 'rt', 'publication'), 'fail/publication_gap', 'retype: timestamp to timestamptz is a gap');
	AshTest::start_sink($dst, 'rt');
	AshTest::wait_status($dst, 'rt', 'halted', 'publication_gap', src => $src,
		name => 'retype: the start halts publication_gap');
	AshTest::stop_sink($dst, 'rt');
}

# wal2json
{
	AshTest::both($src, $dst, "CREATE TABLE w (id int PRIMARY KEY, amount numeric(10,2))");
	AshTest::setup_pipeline($src, $dst, sink => 'wj', decoder => 'wal2json', tables => ['public.w'], maps => [ ['w'] ]);
	AshTest::wait_status($dst, 'wj', 'healthy', undef, src => $src, name => 'wal2json: healthy');
	AshTest::wait_slot_consistent($src, $dst, 'wj');
	q_src("INSERT INTO w VALUES (1, 1.49)");
	AshTest::wait_caught_up($src, $dst, 'wj', name => 'wal2json: streamed');
	AshTest::stop_settled($src, $dst, 'wj');
	q_src("ALTER TABLE w ALTER COLUMN amount TYPE numeric(10,0)");
	AshTest::start_sink($dst, 'wj');
	AshTest::wait_status($dst, 'wj', 'halted', 'publication_gap', src => $src,
		name => 'wal2json: narrowed while stopped halts publication_gap');
	is(q_dst('SELECT amount FROM w'), '1.49', 'wal2json: nothing applied');
	AshTest::stop_sink($dst, 'wj');
}

# a snapshot configured: the table is copied again
{
	q_src("CREATE TABLE sn (id int PRIMARY KEY, amount numeric(10,2), v text)");
	q_dst("CREATE TABLE sn (id int PRIMARY KEY, amount numeric, v text)");
	q_src("INSERT INTO sn SELECT g, g + 0.25, 'v' || g FROM generate_series(1, 200) g;"
		  . " CREATE PUBLICATION pub_sn FOR TABLE sn");
	AshTest::setup_pipeline($src, $dst, sink => 'sn', publication => 'pub_sn', maps => [ ['sn'] ],
		pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
	ok(AshTest::wait_caught_up($src, $dst, 'sn'), 'snapshot: copied');
	AshTest::assert_mirror_equal($src, $dst, ['sn'], name => 'snapshot: first copy');
	AshTest::stop_settled($src, $dst, 'sn');
	q_src("ALTER TABLE sn ALTER COLUMN amount TYPE numeric(10,1)");
	AshTest::start_sink($dst, 'sn');
	ok(AshTest::wait_caught_up($src, $dst, 'sn'), 'snapshot: caught up after the narrowing');
	AshTest::assert_mirror_equal($src, $dst, ['sn'], name => 'snapshot: copied again after the narrowing');
	is(AshTest::status_row($dst, 'sn')->{state}, 'healthy', 'snapshot: healthy');
	ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.publication_gap sink=sn table=public\.sn/)),
		'snapshot: the retyped table is copied again');
	AshTest::stop_sink($dst, 'sn');
}

done_testing();
