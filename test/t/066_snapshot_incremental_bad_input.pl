# snapshot => 'incremental' under bad input (docs/snapshots.md#incremental).
# Each case asserts its own refusal, that the mirror and the checkpoint are
# unchanged, and that the values planted in the source rows
# ("SENTINEL-066-<random hex>") appear in no server log of either node, in no
# status, statistics or catalog output and in no error the test got.
#
#   a  a keyless source table (REPLICA IDENTITY FULL, no primary key: a
#      unique index the target's identity rests on, nothing to chunk by)
#      mapped with provenance: the worker halts snapshot_unsupported before it binds
#      a checkpoint or creates a slot; nothing is copied
#   b  a mapping without snapshot_provenance: ash_replicant_start raises
#      snapshot_unsupported, the pipeline stays disabled, no checkpoint
#   c  go_forward_only => true with snapshot incremental: the configuration
#      is refused (config_invalid), the stored one unchanged
#   d  a running incremental pipeline (its copy complete) that gets a table
#      mapped without provenance, then a keyless one: the restarted worker
#      halts snapshot_unsupported each time; mirror and checkpoint unchanged
#      while source writes wait; fixed, it catches up
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my @sentinels;
my @messages;

sub sentinel
{
	my $s = 'SENTINEL-066-' . join('', map { sprintf '%02x', int(rand(256)) } 1 .. 10);
	push @sentinels, $s;
	return $s;
}

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nlog_min_messages = info\nlog_error_verbosity = verbose\n",
	src_conf => "log_min_messages = info\nlog_error_verbosity = verbose\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(5));
my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
my $INC = "go_forward_only => false, snapshot => 'incremental'";

sub q_dst { return $dst->safe_psql($DB, $_[0]); }

sub configure
{
	my ($sink, $pub, $extra) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_configure_pipeline(sink_name => '$sink',"
		  . " connection => " . AshTest::lit($conn) . ", publication => '$pub',"
		  . " source_system_identifier => '$sysid', source_database => '$sdb',"
		  . " census => '{\"interval_ms\": 1000}'::jsonb, $extra)");
	push @messages, $err;
	return ($rc, $err);
}

sub try_start
{
	my ($sink) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_start('$sink')");
	push @messages, $err;
	return ($rc, $err);
}

sub pipeline_facts
{
	my ($sink) = @_;
	return q_dst("SELECT concat_ws('|', enabled, snapshot, go_forward_only, chunk_rows) FROM ash_replicant.pipelines WHERE sink_name = '$sink'");
}

sub checkpoint_count
{
	my ($sink) = @_;
	return q_dst(AshTest::checkpoint_sql($sink, 'count(*)'));
}

sub state_of
{
	my ($sink, @tables) = @_;
	return {
		tables => { map { $_ => AshTest::table_hash($dst, $_, 't::text') } @tables },
		checkpoint => AshTest::checkpoint_facts($dst, $sink) . '|'
		  . q_dst(AshTest::checkpoint_sql($sink, "concat_ws('|', coalesce(c.snapshot_phase, '-'), encode(c.snapshot_attempt, 'hex'))"))
		  . '|' . q_dst("SELECT string_agg(concat_ws(':', source_table, state, rows_copied, chunks_copied), ',' ORDER BY source_table)"
			  . " FROM ash_replicant.snapshot_tables") };
}

sub assert_unchanged
{
	my ($sink, $before, $label) = @_;
	my $now = state_of($sink, sort keys %{ $before->{tables} });
	for my $t (sort keys %{ $before->{tables} })
	{
		is($now->{tables}{$t}, $before->{tables}{$t}, "$label: $t unchanged");
	}
	is($now->{checkpoint}, $before->{checkpoint}, "$label: checkpoint unchanged");
}

sub wait_terminal
{
	my ($sink, $reason, $label) = @_;
	AshTest::poll($dst, "SELECT count(*) > 0 FROM ash_replicant_status('$sink') WHERE state IN ('halted', 'misconfigured')");
	my $row = AshTest::status_row($dst, $sink) // {};
	ok(($row->{state} // '') =~ /^(halted|misconfigured)$/ && ($row->{reason} // '') eq $reason,
		"$label: " . ($row->{state} // '-') . "/$reason")
	  or do { diag "got " . ($row->{state} // '-') . '/' . ($row->{reason} // '-'); AshTest::diag_pipeline($src, $dst, $sink) };
}

sub no_leak
{
	my ($label) = @_;
	my @hits = AshTenancy::grep_all_logs(\@sentinels, $src, $dst);
	is(scalar(@hits), 0, "$label: planted values in no server log of either node")
	  or diag join("\n", @hits[ 0 .. ($#hits < 9 ? $#hits : 9) ]);
	my $text = AshTest::catalog_text($dst) . "\n"
	  . q_dst("SELECT coalesce(string_agg(row_to_json(x)::text, E'\\n'), '') FROM ash_replicant.stat_snapshot_tables x") . "\n"
	  . q_dst("SELECT coalesce(string_agg(row_to_json(x)::text, E'\\n'), '') FROM ash_replicant.snapshot_tables x") . "\n"
	  . q_dst("SELECT coalesce(string_agg(row_to_json(x)::text, E'\\n'), '') FROM ash_replicant.snapshot_windows x");
	my @in = grep { index($text, $_) >= 0 } @sentinels;
	is(scalar(@in), 0, "$label: planted values in no status, stat view or catalog output");
	my @in_err = grep { my $m = $_ // ''; grep { index($m, $_) >= 0 } @sentinels } @messages;
	is(scalar(@in_err), 0, "$label: planted values in no error the test got");
}

my $s = sentinel();
$src->safe_psql($DB, qq{
CREATE TABLE keyless (v text, n integer);
CREATE UNIQUE INDEX keyless_n ON keyless (n);
ALTER TABLE keyless REPLICA IDENTITY FULL;
INSERT INTO keyless SELECT '$s-' || g, g FROM generate_series(1, 300) g;
CREATE TABLE okt (id integer PRIMARY KEY, v text);
INSERT INTO okt SELECT g, CASE WHEN g % 100 = 0 THEN '$s' ELSE 'v' || g END FROM generate_series(1, 3000) g;
CREATE TABLE nop (id integer PRIMARY KEY, v text);
INSERT INTO nop SELECT g, '$s-nop' FROM generate_series(1, 50) g;
CREATE PUBLICATION pub_kl FOR TABLE keyless;
CREATE PUBLICATION pub_np FOR TABLE nop;
CREATE PUBLICATION pub_ok FOR TABLE okt;
});
q_dst(q{
CREATE TABLE keyless (v text, n integer, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE UNIQUE INDEX keyless_n ON keyless (n);
CREATE TABLE okt (id integer PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE nop (id integer PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea);
INSERT INTO keyless (v, n) VALUES ('dest', 1);
-- case d's own target: a provenance target is one sink's (kl maps keyless)
CREATE TABLE keyless_ok (LIKE keyless INCLUDING ALL);
INSERT INTO nop (id, v) VALUES (1, 'dest');
});

# a: keyless table
{
	my $label = 'a keyless table';
	AshTest::setup_pipeline($src, $dst, sink => 'kl', publication => 'pub_kl', marker => 0,
		maps => [ [ 'keyless', snapshot_provenance => 'true', upsert_identity => 'keyless_n' ] ],
		pipeline_extra => $INC, start => 0);
	my $before = state_of('kl', 'keyless');
	my ($rc, $err) = try_start('kl');
	is($rc, 0, "$label: start accepted (only the worker sees the source)") or diag $err;
	wait_terminal('kl', 'snapshot_unsupported', $label);
	is(checkpoint_count('kl'), '0', "$label: no checkpoint was bound");
	is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'kl'"), '0',
		"$label: no slot created");
	assert_unchanged('kl', $before, $label);
	ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=kl reason=snapshot_unsupported\b/)) >= 1,
		"$label: the halt is logged with its reason");
	no_leak($label);
	AshTest::stop_sink($dst, 'kl');
}

# b: a mapping without provenance
{
	my $label = 'b mapping without provenance';
	AshTest::setup_pipeline($src, $dst, sink => 'np', publication => 'pub_np', marker => 0,
		maps => [ ['nop'] ], pipeline_extra => $INC, start => 0);
	my $before = state_of('np', 'nop');
	my ($rc, $err) = try_start('np');
	isnt($rc, 0, "$label: ash_replicant_start raises");
	like($err, qr/snapshot_unsupported/, "$label: with reason snapshot_unsupported");
	is(q_dst("SELECT enabled FROM ash_replicant.pipelines WHERE sink_name = 'np'"), 'f', "$label: the pipeline stays disabled");
	is(checkpoint_count('np'), '0', "$label: no checkpoint");
	assert_unchanged('np', $before, $label);
	no_leak($label);
}

# c: go_forward_only => true
{
	my $label = 'c go_forward_only true';
	my $facts = pipeline_facts('np');
	my ($rc, $err) = configure('np', 'pub_np', "go_forward_only => true, snapshot => 'incremental'");
	isnt($rc, 0, "$label: the configuration is refused");
	like($err, qr/config_invalid/, "$label: with reason config_invalid");
	is(pipeline_facts('np'), $facts, "$label: the stored configuration unchanged");
	no_leak($label);
}

# d: a running incremental pipeline, then bad mappings
{
	my $label = 'd running';
	AshTest::setup_pipeline($src, $dst, sink => 'ok', publication => 'pub_ok', marker => 0,
		maps => [ [ 'okt', snapshot_provenance => 'true' ] ],
		pipeline_extra => "$INC, chunk_rows => 500");
	ok(AshTest::poll($dst, AshTest::checkpoint_sql('ok', "c.snapshot_phase = 'complete'")), "$label: the copy completes");
	# 3000 rows, chunks of 500: six full chunks, then an empty one ends the table
	is(q_dst("SELECT rows_copied || '/' || chunks_copied FROM ash_replicant.snapshot_tables"
			  . " WHERE slot_name = 'ok' AND source_table = 'okt'"), '3000/7',
		"$label: every row copied, the table ended by an empty chunk");
	my ($c) = AshTest::commit_tracked($src, "UPDATE okt SET v = 'w' WHERE id = 1");
	ok(AshTest::wait_lsn($src, $dst, 'ok', $c), "$label: streaming");
	is(AshTest::table_hash($dst, "(SELECT id, v FROM okt) ", 'id'), AshTest::table_hash($src, 'okt', 'id'),
		"$label: mirror equals source");

	# mapped while running: the worker restarts with it and refuses it
	{
		my $l = "$label: a table mapped without provenance while running";
		# mapped before it is published: the census (every second) of a
		# running worker would halt source_table_unmapped on a published,
		# not yet mapped table
		my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_map_table('ok', 'nop'::regclass)");
		is($rc, 0, "$l: mapped") or diag $err;
		push @messages, $err;
		wait_terminal('ok', 'snapshot_unsupported', $l);
		$src->safe_psql($DB, 'ALTER PUBLICATION pub_ok ADD TABLE nop');
		my $before = state_of('ok', 'okt', 'nop');
		my ($c2) = AshTest::commit_tracked($src, "UPDATE okt SET v = '$s-waiting' WHERE id = 2");
		($rc, $err) = try_start('ok');
		isnt($rc, 0, "$l: ash_replicant_start raises too");
		like($err, qr/snapshot_unsupported/, "$l: with reason snapshot_unsupported");
		assert_unchanged('ok', $before, $l);
		no_leak($l);
		AshTest::stop_sink($dst, 'ok');
		q_dst("SELECT ash_replicant_unmap_table('ok', 'nop'::regclass)");
		$src->safe_psql($DB, 'ALTER PUBLICATION pub_ok DROP TABLE nop');
	}
	# a keyless table mapped with provenance: the worker halts before binding
	{
		my $l = "$label: a keyless table mapped";
		my $before = state_of('ok', 'okt', 'keyless_ok');
		$src->safe_psql($DB, 'ALTER PUBLICATION pub_ok ADD TABLE keyless');
		my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_map_table('ok', 'keyless_ok'::regclass,"
			  . " source_table => 'keyless', snapshot_provenance => true,"
			  . " upsert_identity => 'keyless_ok_n_idx')");
		is($rc, 0, "$l: mapped") or diag $err;
		push @messages, $err;
		($rc, $err) = try_start('ok');
		is($rc, 0, "$l: start accepted") or diag $err;
		wait_terminal('ok', 'snapshot_unsupported', $l);
		assert_unchanged('ok', $before, $l);
		no_leak($l);
		AshTest::stop_sink($dst, 'ok');
		q_dst("SELECT ash_replicant_unmap_table('ok', 'keyless_ok'::regclass)");
	}
	$src->safe_psql($DB, 'ALTER PUBLICATION pub_ok DROP TABLE keyless');
	AshTest::start_sink($dst, 'ok');
	($c) = AshTest::commit_tracked($src, "UPDATE okt SET v = 'x' WHERE id = 3");
	ok(AshTest::wait_lsn($src, $dst, 'ok', $c), "$label: fixed, it catches up");
	is(AshTest::table_hash($dst, "(SELECT id, v FROM okt) ", 'id'), AshTest::table_hash($src, 'okt', 'id'),
		"$label: mirror equals source after the fix");
}

done_testing();
