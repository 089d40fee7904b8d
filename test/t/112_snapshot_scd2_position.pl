# Where snapshot rows land in SCD2 history (docs/snapshots.md#incremental,
# docs/reasons.md#snapshot_history_ahead).
#
#   a  incremental on a quiet source: every chunk is written before the
#      stream delivers a commit (the watermark is still unset), by the
#      pipeline worker and its helper.  The targets hold stale open versions,
#      a key with only an old closed version and an open version the source
#      lacks.  The chunk rows take the attempt's start - 1: the stale versions
#      are closed there and new ones opened, the key with only history gets
#      an open version, the version the source lacks is closed; a source
#      update afterwards lands after the chunk's version.  (Chunk rows at
#      position 1 were taken for history already applied: the stale versions
#      were kept and stamped as seen, the history-only key halted.)
#   b  a target holding a version past the source's position, for a key the
#      source has (the row would be skipped, the version kept) and for one it
#      lacks (retirement cannot close a version before it begins; it was left
#      open): v1 halts misconfigured/snapshot_history_ahead in the table's
#      copy, incremental when it arms the table, before any chunk; the
#      target is unchanged; no planted value in any log, status or error; the version
#      removed, a restart copies everything.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $S  = 'SENTINEL-112-' . join('', map { sprintf '%02x', int(rand(256)) } 1 .. 10);
my @messages;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 2\n"
	  . "log_min_messages = info\nlog_error_verbosity = verbose\n",
	# quiet: no autovacuum transaction ends during a copy, so no chunk has
	# the source flush (a request the stream would deliver before the chunks)
	src_conf => "log_min_messages = info\nlog_error_verbosity = verbose\nautovacuum = off\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(12));

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub scd2_map
{
	my ($t, $prov) = @_;
	return [ "${t}_hist", source_table => $t, history_strategy => 'scd2',
		history_business_key => ['id'], ($prov ? (snapshot_provenance => 'true') : ()) ];
}

sub complete
{
	my ($sink) = @_;
	return AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints"
		  . " WHERE slot_name = " . AshTest::lit($sink), 't');
}

# ---------------------------------------------------------------------------
# a: chunks before the stream's first commit
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE qa (id bigint PRIMARY KEY, v text, n bigint NOT NULL DEFAULT 0);
CREATE TABLE qb (id bigint PRIMARY KEY, v text, n bigint NOT NULL DEFAULT 0);
CREATE VIEW qa_v AS SELECT id, v, n FROM qa;
CREATE VIEW qb_v AS SELECT id, v, n FROM qb;
INSERT INTO qa SELECT g, md5(g::text), 0 FROM generate_series(1, 95) g;
INSERT INTO qb SELECT g, md5((-g)::text), 0 FROM generate_series(1, 57) g;
CREATE PUBLICATION pub_q FOR TABLE qa, qb;
});
for my $t ('qa', 'qb')
{
	AshTest::provenance_history($dst, $t);
	q_dst(qq{
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn) SELECT g, 'stale', -1, 16 FROM generate_series(1, 5) g;
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn, valid_to_lsn) VALUES (6, 'old', -2, 8, 16);
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn) VALUES (900, 'dest only', -1, 16);
});
}
AshTest::setup_pipeline($src, $dst, sink => 'quiet', publication => 'pub_q', marker => 0,
	maps => [ scd2_map('qa', 1), scd2_map('qb', 1) ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 10");
ok(complete('quiet'), 'a: the incremental attempt completes on a quiet source')
  or AshTest::diag_pipeline($src, $dst, 'quiet');
my $start = q_dst("SELECT (snapshot_lsn - '0/0'::pg_lsn)::bigint FROM ash_replicant.checkpoints WHERE slot_name = 'quiet'");
ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.complete sink=quiet tables=2 mode=incremental flush_requests=0$/)),
	'a: no chunk had the quiet source flush');
for my $t ('qa', 'qb')
{
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'id',
		name => "a: $t: open versions equal the source");
	is(q_dst("SELECT count(DISTINCT valid_from_lsn) || '/' || bool_and(valid_from_lsn = $start - 1)"
		  . " FROM ${t}_hist WHERE valid_to_lsn IS NULL"),
		'1/true', "a: $t: every chunk row opened at the attempt's start - 1");
	is(q_dst("SELECT string_agg(id || ':' || v || ':' || (valid_to_lsn = $start - 1), ',' ORDER BY id)"
		  . " FROM ${t}_hist WHERE valid_to_lsn IS NOT NULL AND id <> 6"),
		'1:stale:true,2:stale:true,3:stale:true,4:stale:true,5:stale:true,900:dest only:true',
		"a: $t: the stale versions and the one the source lacks closed at that position");
	is(q_dst("SELECT string_agg(v || ':' || valid_from_lsn || ':' || coalesce(valid_to_lsn::text, 'open'), ','"
		  . " ORDER BY valid_from_lsn) FROM ${t}_hist WHERE id = 6"),
		"old:8:16," . q_src("SELECT v FROM $t WHERE id = 6") . ':' . ($start - 1) . ':open',
		"a: $t: the key with only history got an open version after it");
}
my ($commit) = AshTest::commit_tracked($src, "UPDATE qa SET n = n + 1, v = 'after' WHERE id = 3");
ok(AshTest::wait_lsn($src, $dst, 'quiet', $commit), 'a: the stream delivers an update after the copy');
is(q_dst("SELECT string_agg(v || ':' || (valid_from_lsn = $start - 1) || ':' || coalesce((valid_to_lsn > valid_from_lsn)::text, 'open'), ','"
	  . " ORDER BY valid_from_lsn) FROM qa_hist WHERE id = 3 AND valid_from_lsn > 16"),
	q_src("SELECT md5('3')") . ':true:true,after:false:open',
	'a: the update closes the chunk\'s version and opens its own after it');
AshTest::wait_status($dst, 'quiet', 'healthy');

# ---------------------------------------------------------------------------
# b: a target holding history past the source's position
# ---------------------------------------------------------------------------
for my $case ([ 'ahead_v1', "snapshot => 'v1'", 0, 17 ], [ 'ahead_inc', "snapshot => 'incremental', chunk_rows => 10", 1, 17 ],
	[ 'ahead_gone', "snapshot => 'v1'", 1, 5000 ], [ 'ahead_inc_gone', "snapshot => 'incremental', chunk_rows => 10", 1, 5000 ])
{
	my ($t, $mode, $prov, $key) = @$case;
	q_src(qq{
CREATE TABLE $t (id bigint PRIMARY KEY, v text, n bigint NOT NULL DEFAULT 0);
CREATE VIEW ${t}_v AS SELECT id, v, n FROM $t;
INSERT INTO $t SELECT g, '$S-' || g, 0 FROM generate_series(1, 40) g;
CREATE PUBLICATION pub_$t FOR TABLE $t;
});
	AshTest::provenance_history($dst, $t);
	q_dst(qq{
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn) SELECT g, 'stale', -1, 16 FROM generate_series(1, 3) g;
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn) VALUES ($key, 'future', -1, 9000000000000000);
});
	my $before = AshTest::table_hash($dst, "${t}_hist", 't::text');
	AshTest::setup_pipeline($src, $dst, sink => $t, publication => "pub_$t", marker => 0,
		maps => [ scd2_map($t, $prov) ], pipeline_extra => "go_forward_only => false, $mode");
	AshTest::poll($dst, "SELECT count(*) > 0 FROM ash_replicant_status('$t') WHERE state IN ('halted', 'misconfigured')");
	my $row = AshTest::status_row($dst, $t) // {};
	is(($row->{state} // '-') . '/' . ($row->{reason} // '-'), 'misconfigured/snapshot_history_ahead',
		"b: $t: the copy halts on history past its position");
	push @messages, join(' ', map { $_ // '' } values %$row);
	is(AshTest::table_hash($dst, "${t}_hist", 't::text'), $before, "b: $t: the target is unchanged");

	# the operator removes the version past the source, and starts again
	q_dst("DELETE FROM ${t}_hist WHERE valid_from_lsn = 9000000000000000");
	q_dst("SELECT ash_replicant_start('$t')");
	ok(complete($t), "b: $t: after the fix the copy completes") or AshTest::diag_pipeline($src, $dst, $t);
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'id',
		name => "b: $t: open versions equal the source");
	AshTest::wait_status($dst, $t, 'healthy');
}

my @hits = AshTenancy::grep_all_logs([$S], $src, $dst);
is(scalar(@hits), 0, 'planted values in no server log of either node')
  or diag join("\n", @hits[ 0 .. ($#hits < 9 ? $#hits : 9) ]);
my $text = AshTest::catalog_text($dst) . "\n" . join("\n", @messages);
is(index($text, $S), -1, 'planted values in no status, catalog output or error');
like(join("\n", map { slurp_file($_->logfile) } $dst), qr/event=pipeline\.halt sink=ahead_v1 reason=snapshot_history_ahead/,
	'the halt is logged with its reason');

done_testing();
