# snapshot => 'v1' under bad input (docs: src/snapshot.c).  Every case
# asserts its reason code (ash_replicant_status(), or the error of the call),
# that the mirror and the checkpoint (AshTest::checkpoint_facts, and the
# snapshot attempt where one is recorded) are unchanged, and that the values
# planted in the source rows of the case ("SENTINEL-063-<random hex>") appear
# in no server log of either node (log_statement 'none': the test sends them
# itself), in no status, statistics, snapshot-table, doctor or catalog output
# and in no error the test's own calls got.
#
#   rf  a (fresh sink) snapshot incremental with a mapping that keeps no
#       provenance: start raises snapshot_unsupported,
#       pipelines.enabled stays false, no checkpoint is created
#       b (sink with a completed snapshot, stopped) reconfigured to
#       incremental (its mapping keeps no provenance): start raises
#       snapshot_unsupported, enabled stays false;
#       then, reconfigured while RUNNING, the worker refuses it
#       (snapshot_unsupported); fixed, it resumes
#       c a mapping with snapshot_provenance => true (the target has nullable
#       bytea replica_fingerprint / replica_seen_attempt) and no
#       snapshot_provenance key in the keyring: the worker halts
#       keyring_missing_family before it copies anything; mapped so while
#       running, the same; mapped without provenance, the table is copied
#   tp  a 300,000-row copy stopped in the middle (a destination trigger
#       sleeps every 1000th row until released):
#       d the attempt tampered with (checkpoints.snapshot_lsn = NULL while
#         the phase is copying): halted snapshot_state_invalid, nothing applied
#       e the slot dropped while the snapshot is incomplete: halted
#         source_slot_missing, nothing applied; re-seeded (reset, start) it copies
#         everything anew
#   ck  f a destination CHECK rejects one source row (holding the sentinel)
#         in the middle of a table's copy (a table mapped after a completed
#         snapshot, so a checkpoint exists): after max_command_retries the
#         pipeline halts apply_failed with SQLSTATE 23514; the table's whole
#         copy rolled back, the stale rows it would have overwritten intact;
#         the checkpoint unchanged but for the contract the binding of the
#         new mapping records; started again unfixed: the same halt, and this
#         time nothing at all changes; the constraint dropped, it converges
#   mm  g a table mapped while a long copy runs: its source has rows, it is
#         added to the publication and mapped during the copy (a published
#         table that is neither mapped nor ignored would refuse activation,
#         source_table_unmapped, so it cannot be published before the start):
#         the worker restarts with the new configuration, the table joins the
#         same attempt and is copied; both mirrors equal the source, no key
#         inserted twice, every row the writes did not touch written once,
#         no changed key written more often than the copy and the changes
#         committed after its snapshot allow
# The copies are fast: where the test must act in the middle of one, a
# destination trigger (the "brake") sleeps on every 1000th copied row until
# the test releases it.
# Seed: ASH_SEED (default: time), printed.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $seed = (defined $ENV{ASH_SEED} && $ENV{ASH_SEED} =~ /^\d+$/) ? $ENV{ASH_SEED} : (time() ^ $$) % 1_000_000;
srand($seed);
diag "seed $seed (rerun with ASH_SEED=$seed)";

my $DB = $AshTest::DB;
my $t0 = time;
my $faults = 0;
my @all_sentinels;
my @messages;    # every error text the test's own calls got

sub sentinel
{
	my $s = 'SENTINEL-063-' . join('', map { sprintf '%02x', int(rand(256)) } 1 .. 10);
	push @all_sentinels, $s;
	return $s;
}

sub stamp { my ($what) = @_; note sprintf('%s at %.1fs', $what, time - $t0); }

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "log_min_messages = info\nlog_error_verbosity = verbose\n",
	src_conf => "log_min_messages = info\nlog_error_verbosity = verbose\n");
my ($sysid, $sdb) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
my $V1 = "go_forward_only => false, snapshot => 'v1'";

# configure_pipeline again (it replaces the whole configuration)
sub configure
{
	my ($sink, $pub, $extra) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_configure_pipeline(sink_name => '$sink',"
		  . " connection => " . AshTest::lit($conn) . ", publication => '$pub',"
		  . " source_system_identifier => '$sysid', source_database => '$sdb',"
		  . " census => '{\"interval_ms\": 1000}'::jsonb, $extra)");
	is($rc, 0, "configure $sink: $extra") or diag $err;
	push @messages, $err;
}

sub try_start
{
	my ($sink) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_start('$sink')");
	push @messages, $err;
	return ($rc, $err);
}

sub enabled_of
{
	my ($sink) = @_;
	return $dst->safe_psql($DB, "SELECT enabled FROM ash_replicant.pipelines WHERE sink_name = '$sink'");
}

# The snapshot attempt as recorded: phase, position, id and its tables.
sub attempt_facts
{
	my ($sink) = @_;
	return $dst->safe_psql($DB, AshTest::checkpoint_sql($sink,
		"concat_ws('|', coalesce(c.snapshot_phase, '-'), coalesce(c.snapshot_lsn::text, '-'), coalesce(encode(c.snapshot_attempt, 'hex'), '-'),"
		  . " (SELECT string_agg(concat_ws(':', t.source_schema, t.source_table, t.state, t.rows_copied, coalesce(t.snapshot_lsn::text, '-')), ','"
		  . "   ORDER BY t.source_schema, t.source_table) FROM ash_replicant.snapshot_tables t"
		  . "   WHERE t.source_system_id = c.source_system_id AND t.source_database = c.source_database"
		  . "   AND t.slot_name = c.slot_name))"));
}

# Content hashes of destination tables, checkpoint facts, attempt facts.
sub state_of
{
	my ($sink, @tables) = @_;
	return {
		tables => { map { $_ => AshTest::table_hash($dst, $_, 't::text') } @tables },
		checkpoint => AshTest::checkpoint_facts($dst, $sink),
		attempt => attempt_facts($sink) };
}

sub assert_unchanged
{
	my ($sink, $before, $label, %o) = @_;
	my $now = state_of($sink, sort keys %{ $before->{tables} });
	for my $t (sort keys %{ $before->{tables} })
	{
		is($now->{tables}{$t}, $before->{tables}{$t}, "$label: $t unchanged");
	}
	is($now->{checkpoint}, $before->{checkpoint}, "$label: checkpoint unchanged");
	is($now->{attempt}, $before->{attempt}, "$label: snapshot attempt unchanged") unless $o{no_attempt};
}

# Everything an operator or monitor reads about the sinks.
sub outputs_text
{
	my @parts = (AshTest::catalog_text($dst));
	for my $sql ('SELECT * FROM ash_replicant.stat_snapshot_tables', 'SELECT * FROM ash_replicant.snapshot_tables',
		map { "SELECT * FROM ash_replicant_doctor('$_')" } qw(rf tp ck mm))
	{
		my ($rc, $out, $err) = $dst->psql($DB, "SELECT row_to_json(x)::text FROM ($sql) x");
		push @parts, $out, $err;
	}
	return join("\n", @parts);
}

sub no_leak
{
	my ($label, @needles) = @_;
	@needles = @all_sentinels unless @needles;
	my @hits = AshTenancy::grep_all_logs(\@needles, $src, $dst);
	is(scalar(@hits), 0, "$label: planted values in no server log of either node")
	  or diag join("\n", @hits[ 0 .. ($#hits < 9 ? $#hits : 9) ]);
	my $text = outputs_text();
	my @in = grep { index($text, $_) >= 0 } @needles;
	is(scalar(@in), 0, "$label: planted values in no status, stat view, snapshot table, doctor or catalog output");
	my @in_err = grep { my $m = $_ // ''; grep { index($m, $_) >= 0 } @needles } @messages;
	is(scalar(@in_err), 0, "$label: planted values in no error the test got");
}

sub halt_logged
{
	my ($sink, $reason, $label) = @_;
	ok(scalar(AshTest::log_lines_like($dst, qr/event=pipeline\.halt sink=\Q$sink\E reason=\Q$reason\E\b/)) >= 1,
		"$label: the halt is logged with its reason");
}

# wait for a terminal state and check the reason (class: halted or misconfigured)
sub wait_terminal
{
	my ($sink, $reason, $label) = @_;
	AshTest::poll($dst, "SELECT count(*) > 0 FROM ash_replicant_status('$sink') WHERE state IN ('halted', 'misconfigured')");
	my $row = AshTest::status_row($dst, $sink) // {};
	ok(($row->{state} // '') =~ /^(halted|misconfigured)$/ && ($row->{reason} // '') eq $reason,
		"$label: " . ($row->{state} // '-') . "/$reason") or do { diag "got " . ($row->{state} // '-') . '/' . ($row->{reason} // '-'); AshTest::diag_pipeline($src, $dst, $sink) };
}

sub poll_copying
{
	my ($sink, $table, $label) = @_;
	ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.stat_snapshot_tables WHERE sink_name = '$sink'"
			  . " AND source_table = '$table' AND state = 'copying' AND rows_copied > 0", 't', timeout => 60),
		"$label: the copy of $table is under way");
}

my $brake_sql = sub {
	my ($table) = @_;
	return qq{
CREATE TABLE IF NOT EXISTS brake (ms integer NOT NULL);
INSERT INTO brake SELECT 25 WHERE NOT EXISTS (SELECT 1 FROM brake);
CREATE OR REPLACE FUNCTION brake_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	PERFORM pg_sleep(ms / 1000.0) FROM brake;
	RETURN NULL;
END \$\$;
CREATE TRIGGER ${table}_brake AFTER INSERT ON $table FOR EACH ROW WHEN (NEW.id % 1000 = 0) EXECUTE FUNCTION brake_fn();
};
};

# rf: settings this pipeline cannot act on
# ===========================================================================
stamp('rf');
my $s_rf = sentinel();
AshTest::both($src, $dst, 'CREATE TABLE rf_t (id integer PRIMARY KEY, v text)');
$src->safe_psql($DB, qq{
INSERT INTO rf_t SELECT g, 'r' || g FROM generate_series(1, 2000) g;
UPDATE rf_t SET v = '$s_rf-existing' WHERE id = 1000;
CREATE PUBLICATION pub_rf FOR TABLE rf_t;
});

# a: a fresh sink configured with snapshot incremental
{
	my $label = 'a fresh sink, snapshot incremental';
	AshTest::both($src, $dst, 'CREATE TABLE rf_fresh (id integer PRIMARY KEY, v text)');
	$src->safe_psql($DB, "INSERT INTO rf_fresh SELECT g, '$s_rf-' || g FROM generate_series(1, 50) g; CREATE PUBLICATION pub_fresh FOR TABLE rf_fresh");
	AshTest::setup_pipeline($src, $dst, sink => 'inc', publication => 'pub_fresh', maps => [ ['rf_fresh'] ],
		pipeline_extra => "go_forward_only => false, snapshot => 'incremental'", start => 0);
	$faults++;
	my ($rc, $err) = try_start('inc');
	isnt($rc, 0, "$label: ash_replicant_start raises");
	like($err, qr/snapshot_unsupported/, "$label: with reason snapshot_unsupported");
	is(enabled_of('inc'), 'f', "$label: pipelines.enabled stays false");
	is(AshTest::status_row($dst, 'inc')->{state}, 'not_started', "$label: status not_started");
	is($dst->safe_psql($DB, AshTest::checkpoint_sql('inc', 'count(*)')), '0', "$label: no checkpoint was created");
	is($dst->safe_psql($DB, 'SELECT count(*) FROM rf_fresh'), '0', "$label: nothing copied");
	is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'inc'"), '0', "$label: no slot created");
	no_leak($label, $s_rf);
}

AshTest::setup_pipeline($src, $dst, sink => 'rf', publication => 'pub_rf', maps => [ ['rf_t'] ], pipeline_extra => $V1);
AshTest::wait_caught_up($src, $dst, 'rf', name => 'rf: snapshot complete and streaming');
AshTest::assert_mirror_equal($src, $dst, ['rf_t'], name => 'rf: mirror after the snapshot');
my $mk_rf = AshTest::marker_table('rf');

# b: the stopped sink reconfigured to incremental
{
	my $label = 'b incremental on a sink with a checkpoint';
	AshTest::stop_settled($src, $dst, 'rf');
	$src->safe_psql($DB, "UPDATE rf_t SET v = '$s_rf-pending' WHERE id = 5");
	my $before = state_of('rf', 'rf_t', $mk_rf);
	configure('rf', 'pub_rf', "go_forward_only => false, snapshot => 'incremental'");
	$faults++;
	my ($rc, $err) = try_start('rf');
	isnt($rc, 0, "$label: ash_replicant_start raises");
	like($err, qr/snapshot_unsupported/, "$label: with reason snapshot_unsupported");
	is(enabled_of('rf'), 'f', "$label: pipelines.enabled stays false");
	is(AshTest::status_row($dst, 'rf')->{state}, 'not_started', "$label: status not_started");
	assert_unchanged('rf', $before, $label);
	no_leak($label);

	# fixed: the pending change arrives
	configure('rf', 'pub_rf', $V1);
	AshTest::start_sink($dst, 'rf');
	AshTest::wait_caught_up($src, $dst, 'rf', name => "$label: v1 again, caught up");
	AshTest::assert_mirror_equal($src, $dst, ['rf_t'], name => "$label: after the fix");
	is(attempt_facts('rf'), $before->{attempt}, "$label: the completed attempt is kept, nothing copied again");

	# reconfigured while running: the worker restarts and refuses it
	$label = 'b2 incremental while running';
	$before = state_of('rf', 'rf_t', $mk_rf);
	configure('rf', 'pub_rf', "go_forward_only => false, snapshot => 'incremental'");
	$faults++;
	wait_terminal('rf', 'snapshot_unsupported', $label);
	$src->safe_psql($DB, "UPDATE rf_t SET v = '$s_rf-while-refused' WHERE id = 6");
	halt_logged('rf', 'snapshot_unsupported', $label);
	assert_unchanged('rf', $before, $label);
	no_leak($label);
	configure('rf', 'pub_rf', $V1);
	AshTest::start_sink($dst, 'rf');
	AshTest::wait_caught_up($src, $dst, 'rf', name => "$label: v1 again, caught up");
	AshTest::assert_mirror_equal($src, $dst, ['rf_t'], name => "$label: after the fix");
}

# c: snapshot_provenance
{
	my $label = 'c snapshot_provenance';
	my $s_p = sentinel();
	$src->safe_psql($DB, qq{
CREATE TABLE rf_p (id integer PRIMARY KEY, v text);
INSERT INTO rf_p SELECT g, CASE WHEN g = 77 THEN '$s_p' ELSE 'p' || g END FROM generate_series(1, 500) g;
});
	$dst->safe_psql($DB, 'CREATE TABLE rf_p (id integer PRIMARY KEY, v text, replica_fingerprint bytea, replica_seen_attempt bytea)');
	AshTest::stop_settled($src, $dst, 'rf');
	$src->safe_psql($DB, "ALTER PUBLICATION pub_rf ADD TABLE rf_p; UPDATE rf_t SET v = '$s_p-pending' WHERE id = 7");
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_map_table('rf', 'rf_p'::regclass, snapshot_provenance => true)");
	is($rc, 0, "$label: the mapping is accepted") or diag $err;
	push @messages, $err;
	my $before = state_of('rf', 'rf_t', 'rf_p', $mk_rf);
	$faults++;
	($rc, $err) = try_start('rf');
	is($rc, 0, "$label: ash_replicant_start accepts it") or diag $err;
	wait_terminal('rf', 'keyring_missing_family', $label);
	halt_logged('rf', 'keyring_missing_family', $label);
	assert_unchanged('rf', $before, $label);
	no_leak($label);

	# mapped without provenance: rf_p is copied into the existing attempt
	($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_map_table('rf', 'rf_p'::regclass)");
	is($rc, 0, "$label: remapped without provenance") or diag $err;
	AshTest::start_sink($dst, 'rf');
	AshTest::wait_caught_up($src, $dst, 'rf', name => "$label: without provenance, caught up");
	AshTest::assert_mirror_equal($src, $dst, ['rf_t'], name => "$label: after the fix");
	is($dst->safe_psql($DB, 'SELECT md5(string_agg(row(id, v)::text, \',\' ORDER BY id)) FROM rf_p'),
		$src->safe_psql($DB, 'SELECT md5(string_agg(row(id, v)::text, \',\' ORDER BY id)) FROM rf_p'),
		"$label: the table mapped later was copied");

	# mapped with provenance while running: the worker refuses it (no key)
	$label = 'c2 snapshot_provenance while running';
	$before = state_of('rf', 'rf_t', 'rf_p', $mk_rf);
	($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_map_table('rf', 'rf_p'::regclass, snapshot_provenance => true)");
	is($rc, 0, "$label: the mapping is accepted") or diag $err;
	$faults++;
	wait_terminal('rf', 'keyring_missing_family', $label);
	$src->safe_psql($DB, "UPDATE rf_p SET v = v || '+' WHERE id = 8");
	halt_logged('rf', 'keyring_missing_family', $label);
	assert_unchanged('rf', $before, $label);
	no_leak($label);
	$dst->safe_psql($DB, "SELECT ash_replicant_map_table('rf', 'rf_p'::regclass)");
	AshTest::start_sink($dst, 'rf');
	AshTest::wait_caught_up($src, $dst, 'rf', name => "$label: without provenance, caught up");
	is($dst->safe_psql($DB, 'SELECT md5(string_agg(row(id, v)::text, \',\' ORDER BY id)) FROM rf_p'),
		$src->safe_psql($DB, 'SELECT md5(string_agg(row(id, v)::text, \',\' ORDER BY id)) FROM rf_p'),
		"$label: after the fix");
}

# ===========================================================================
# tp: a stopped copy, tampered with; then its slot dropped
# ===========================================================================
stamp('tp');
my $NBIG = 300_000;
my $s_tp = sentinel();
AshTest::both($src, $dst, 'CREATE TABLE tp_big (id integer PRIMARY KEY, v text)');
$src->safe_psql($DB, qq{
INSERT INTO tp_big SELECT g, CASE WHEN g % 50000 = 17 THEN '$s_tp-' || g ELSE 'v' || g END FROM generate_series(1, $NBIG) g;
ANALYZE tp_big;
CREATE PUBLICATION pub_tp FOR TABLE tp_big;
});
# rows the destination holds already (the copy would overwrite them)
$dst->safe_psql($DB, "INSERT INTO tp_big VALUES (1, 'stale'), (2, NULL), (150001, 'stale')");
$dst->safe_psql($DB, $brake_sql->('tp_big'));
$dst->safe_psql($DB, 'UPDATE brake SET ms = 25');
my $mk_tp = AshTest::marker_table('tp');
AshTest::setup_pipeline($src, $dst, sink => 'tp', publication => 'pub_tp', maps => [ ['tp_big'] ], pipeline_extra => $V1);
poll_copying('tp', 'tp_big', 'tp');
AshTest::stop_settled($src, $dst, 'tp');
like(attempt_facts('tp'), qr/^copying\|[0-9A-F]+\/[0-9A-F]+\|[0-9a-f]{32}\|.*public:tp_big:pending:0:-$/,
	'tp: stopped mid-copy: the attempt is copying, tp_big pending');
is($dst->safe_psql($DB, 'SELECT count(*) FROM tp_big'), '3', 'tp: the stop rolled back the table in flight');

# d: tampered attempt
{
	my $label = 'd tampered attempt';
	$src->safe_psql($DB, "UPDATE tp_big SET v = '$s_tp-pending' WHERE id = 3; INSERT INTO tp_big VALUES ($NBIG + 1, '$s_tp-new')");
	my $before = state_of('tp', 'tp_big', $mk_tp);
	my $lsn = $dst->safe_psql($DB, "SELECT snapshot_lsn FROM ash_replicant.checkpoints WHERE slot_name = 'tp'");
	$dst->safe_psql($DB, "UPDATE ash_replicant.checkpoints SET snapshot_lsn = NULL WHERE slot_name = 'tp'");
	(my $tampered = $before->{attempt}) =~ s/^copying\|[^|]+\|/copying|-|/;
	$before->{attempt} = $tampered;
	$faults++;
	AshTest::start_sink($dst, 'tp');
	AshTest::wait_status($dst, 'tp', 'halted', 'snapshot_state_invalid', src => $src, name => "$label: halted/snapshot_state_invalid");
	halt_logged('tp', 'snapshot_state_invalid', $label);
	assert_unchanged('tp', $before, $label);
	is($dst->safe_psql($DB, "SELECT terminal_cause FROM ash_replicant.checkpoints WHERE slot_name = 'tp'"),
		'snapshot_state_invalid', "$label: the tombstone names the reason");
	no_leak($label);
	$dst->safe_psql($DB, "UPDATE ash_replicant.checkpoints SET snapshot_lsn = '$lsn' WHERE slot_name = 'tp'");
}

# e: the slot dropped while the snapshot is incomplete
{
	my $label = 'e slot dropped mid-snapshot';
	AshTest::stop_settled($src, $dst, 'tp');
	my $before = state_of('tp', 'tp_big', $mk_tp);
	$src->safe_psql($DB, "SELECT pg_drop_replication_slot('tp')");
	$src->safe_psql($DB, "UPDATE tp_big SET v = '$s_tp-pending2' WHERE id = 4");
	$faults++;
	AshTest::start_sink($dst, 'tp');
	AshTest::wait_status($dst, 'tp', 'halted', 'source_slot_missing', src => $src, name => "$label: halted/source_slot_missing");
	halt_logged('tp', 'source_slot_missing', $label);
	assert_unchanged('tp', $before, $label);
	is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'tp'"), '0',
		"$label: no slot was created behind the attempt's back");
	no_leak($label);

	# re-seed: reset the checkpoint, start: a new attempt copies everything
	AshTest::stop_settled($src, $dst, 'tp');
	is($dst->safe_psql($DB, "SELECT ash_replicant_reset_checkpoint('tp', '$sysid', '$sdb')"), 't', "$label: checkpoint reset");
	$dst->safe_psql($DB, 'UPDATE brake SET ms = 0');
	AshTest::start_sink($dst, 'tp');
	AshTest::wait_caught_up($src, $dst, 'tp', name => "$label: re-seeded, caught up", timeout => 120);
	AshTest::assert_mirror_equal($src, $dst, ['tp_big'], name => "$label: re-seeded");
	my $after = attempt_facts('tp');
	like($after, qr/^complete\|/, "$label: the new attempt is complete");
	isnt((split /\|/, $after)[2], (split /\|/, $before->{attempt})[2], "$label: under a new attempt id");
}

# ===========================================================================
# ck: a destination CHECK rejects a row in the middle of a copy
# ===========================================================================
stamp('ck');
{
	my $label = 'f apply failure during the copy';
	my $s_ck = sentinel();
	AshTest::both($src, $dst, 'CREATE TABLE ck_ok (id integer PRIMARY KEY, v text)');
	$src->safe_psql($DB, "INSERT INTO ck_ok SELECT g, 'ok' || g FROM generate_series(1, 2000) g; CREATE PUBLICATION pub_ck FOR TABLE ck_ok");
	AshTest::setup_pipeline($src, $dst, sink => 'ck', publication => 'pub_ck', maps => [ ['ck_ok'] ], pipeline_extra => $V1);
	AshTest::wait_caught_up($src, $dst, 'ck', name => "$label: first snapshot complete");
	AshTest::stop_settled($src, $dst, 'ck');

	$src->safe_psql($DB, qq{
CREATE TABLE ck_bad (id integer PRIMARY KEY, v text, w text);
INSERT INTO ck_bad SELECT g, CASE WHEN g = 1500 THEN '$s_ck' ELSE 'b' || g END, 'w' || g FROM generate_series(1, 3000) g;
ALTER PUBLICATION pub_ck ADD TABLE ck_bad;
UPDATE ck_ok SET v = '$s_ck-pending' WHERE id = 3;
});
	$dst->safe_psql($DB, q{
CREATE TABLE ck_bad (id integer PRIMARY KEY, v text, w text,
	CONSTRAINT no_sentinel CHECK (v NOT LIKE 'SENTINEL-063-%'));
INSERT INTO ck_bad VALUES (1, 'stale', NULL), (2, NULL, 'stale'), (2999, 'stale', 'stale');
SELECT ash_replicant_map_table('ck', 'ck_bad'::regclass);
});
	my $before = state_of('ck', 'ck_ok', 'ck_bad', AshTest::marker_table('ck'));
	$faults++;
	AshTest::start_sink($dst, 'ck');
	AshTest::wait_status($dst, 'ck', 'halted', 'apply_failed', src => $src, name => "$label: halted/apply_failed");
	is($dst->safe_psql($DB, "SELECT halt_sqlstate FROM ash_replicant.pipelines WHERE sink_name = 'ck'"), '23514',
		"$label: SQLSTATE 23514 recorded");
	my @errors = AshTest::log_lines_like($dst, qr/event=apply\.error sink=ck sqlstate=23514 step=snapshot\b/);
	is(scalar(@errors), 4, "$label: tried max_command_retries + 1 = 4 times, each logged value-free");
	halt_logged('ck', 'apply_failed', $label);
	# the binding of the new configuration records the contract with ck_bad
	# in it (an addition); every other fact of the checkpoint is unchanged
	my $mask = sub { my @f = split /\|/, $_[0], -1; splice(@f, 4, 1); join('|', @f) };
	my $now = state_of('ck', sort keys %{ $before->{tables} });
	for my $t (sort keys %{ $before->{tables} })
	{
		is($now->{tables}{$t}, $before->{tables}{$t}, "$label: $t unchanged (the whole table's copy rolled back)");
	}
	is($mask->($now->{checkpoint}), $mask->($before->{checkpoint}),
		"$label: checkpoint unchanged (watermark, end, timeline, decoder, origin floor ...; the contract re-recorded at binding)");
	is($dst->safe_psql($DB, "SELECT state || ' ' || rows_copied FROM ash_replicant.stat_snapshot_tables WHERE sink_name = 'ck' AND source_table = 'ck_bad'"),
		'pending 0', "$label: ck_bad is still pending, nothing of it copied");
	is($dst->safe_psql($DB, "SELECT state FROM ash_replicant.stat_snapshot_tables WHERE sink_name = 'ck' AND source_table = 'ck_ok'"),
		'copied', "$label: ck_ok stays copied");
	no_leak($label);

	# started again without a fix: the same halt, and now nothing at all changes
	$label = 'f2 apply failure again (not fixed)';
	$before = $now;
	$faults++;
	AshTest::start_sink($dst, 'ck');
	AshTest::wait_status($dst, 'ck', 'halted', 'apply_failed', src => $src, name => "$label: halted/apply_failed");
	AshTest::poll($dst, q{SELECT count(*) = 0 FROM ash_replicant.stat_pipelines WHERE sink_name = 'ck' AND worker_pid IS NOT NULL});
	@errors = AshTest::log_lines_like($dst, qr/event=apply\.error sink=ck sqlstate=23514 step=snapshot\b/);
	is(scalar(@errors), 8, "$label: 4 more tries");
	assert_unchanged('ck', $before, $label);
	no_leak($label);

	$dst->safe_psql($DB, 'ALTER TABLE ck_bad DROP CONSTRAINT no_sentinel');
	AshTest::start_sink($dst, 'ck');
	AshTest::wait_caught_up($src, $dst, 'ck', name => "$label: constraint dropped, caught up");
	AshTest::assert_mirror_equal($src, $dst, [ 'ck_ok', 'ck_bad' ], name => "$label: after the fix");
	no_leak("$label (after the fix)");
}

# ===========================================================================
# mm: a table mapped while a long copy runs
# ===========================================================================
stamp('mm');
{
	my $label = 'g mapping added mid-copy';
	my $s_mm = sentinel();
	AshTest::both($src, $dst, 'CREATE TABLE mm_big (id integer PRIMARY KEY, v text); CREATE TABLE mm_two (id integer PRIMARY KEY, v text)');
	$src->safe_psql($DB, qq{
INSERT INTO mm_big SELECT g, 'v' || g FROM generate_series(1, $NBIG) g;
INSERT INTO mm_two SELECT g, CASE WHEN g = 42 THEN '$s_mm' ELSE 't' || g END FROM generate_series(1, 5000) g;
ANALYZE mm_big;
CREATE PUBLICATION pub_mm FOR TABLE mm_big;
});
	for my $t (qw(mm_big mm_two))
	{
		$src->safe_psql($DB, qq{
CREATE TABLE audit_$t (seq bigserial PRIMARY KEY, xid text, op text, id integer);
CREATE FUNCTION audit_${t}_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.id <> NEW.id) THEN
		INSERT INTO audit_$t (xid, op, id) VALUES (pg_current_xact_id()::text, 'D', OLD.id);
	END IF;
	IF TG_OP <> 'DELETE' THEN
		INSERT INTO audit_$t (xid, op, id) VALUES (pg_current_xact_id()::text, 'W', NEW.id);
	END IF;
	RETURN NULL;
END \$\$;
CREATE TRIGGER audit_$t AFTER INSERT OR UPDATE OR DELETE ON $t FOR EACH ROW EXECUTE FUNCTION audit_${t}_fn();
});
	}
	my $wal_from = $src->safe_psql($DB, 'SELECT pg_current_wal_lsn()');
	$dst->safe_psql($DB, $brake_sql->('mm_big') . AshTest::write_audit_sql('mm_big', 'integer')
		  . AshTest::write_audit_sql('mm_two', 'integer') . 'UPDATE brake SET ms = 25;');
	AshTest::setup_pipeline($src, $dst, sink => 'mm', publication => 'pub_mm', maps => [ ['mm_big'] ], pipeline_extra => $V1);
	# source writes from the start on, to both tables (mm_two not yet published)
	my (%touched, $script);
	for my $i (1 .. 60)
	{
		my ($u, $d, $u2) = (1 + int(rand($NBIG)), 1 + int(rand($NBIG)), 1 + int(rand(5000)));
		$touched{mm_big}{$_} = 1 for $u, $d, $NBIG + $i;
		$touched{mm_two}{$_} = 1 for $u2, 5000 + $i;
		$script .= "BEGIN;\nUPDATE mm_big SET v = v || '+' WHERE id = $u;\n"
		  . "INSERT INTO mm_big VALUES (" . ($NBIG + $i) . ", 'late');\n"
		  . "DELETE FROM mm_big WHERE id = $d;\n"
		  . "UPDATE mm_two SET v = v || '+' WHERE id = $u2;\n"
		  . "INSERT INTO mm_two VALUES (" . (5000 + $i) . ", 'late');\n"
		  . ($i == 10 ? "UPDATE mm_two SET id = 90000 WHERE id = 9;\nUPDATE mm_big SET id = $NBIG + 90000 WHERE id = 9;\n" : '')
		  . "COMMIT;\nSELECT pg_sleep(0.05);\n";
	}
	$touched{$_}{9} = 1 for qw(mm_big mm_two);
	$touched{mm_two}{90000} = $touched{mm_big}{$NBIG + 90000} = 1;
	my $w = AshTest::start_workload($src, $script, timeout => 120);
	poll_copying('mm', 'mm_big', $label);
	my $attempt0 = (split /\|/, attempt_facts('mm'))[2];
	my $pid0 = AshTest::stat_row($dst, 'mm')->{worker_pid};
	$src->safe_psql($DB, 'ALTER PUBLICATION pub_mm ADD TABLE mm_two');
	$dst->safe_psql($DB, "SELECT ash_replicant_map_table('mm', 'mm_two'::regclass)");
	ok(AshTest::poll($dst, "SELECT count(*) = 1 FROM ash_replicant.snapshot_tables WHERE slot_name = 'mm' AND source_table = 'mm_two'", 't', timeout => 30),
		"$label: the new table joined the attempt");
	isnt(AshTest::stat_row($dst, 'mm')->{worker_pid} // 0, $pid0, "$label: the worker restarted with the new configuration");
	$dst->safe_psql($DB, 'UPDATE brake SET ms = 0');
	ok(AshTest::finish_workload($w), "$label: concurrent source writes done");
	AshTest::wait_caught_up($src, $dst, 'mm', name => "$label: caught up", timeout => 120);
	AshTest::assert_mirror_equal($src, $dst, [ 'mm_big', 'mm_two' ], name => $label);
	for my $t (qw(mm_big mm_two))
	{
		is($dst->safe_psql($DB, "SELECT count(*) FROM (SELECT id FROM ${t}_audit WHERE op = 'INSERT' GROUP BY id HAVING count(*) > 1) x"),
			'0', "$label: no key of $t inserted twice");
		my @ids = sort { $a <=> $b } keys %{ $touched{$t} };
		my $n = ($t eq 'mm_big' ? $NBIG : 5000) - grep({ $_ <= ($t eq 'mm_big' ? $NBIG : 5000) } @ids);
		is($dst->safe_psql($DB, "SELECT count(*) || ' ' || count(*) FILTER (WHERE n = 1 AND ins) FROM"
				  . " (SELECT id, count(*) AS n, bool_and(op = 'INSERT') AS ins FROM ${t}_audit"
				  . "  WHERE id <> ALL ('{" . join(',', @ids) . "}'::integer[]) GROUP BY id) x"),
			"$n $n", "$label: every row of $t the workload did not touch was written exactly once, by one insert");
		AshTest::assert_writes_bounded($src, $dst, label => "$label: $t", src_audit => "audit_$t", dst_audit => "${t}_audit", wal_from => $wal_from,
			initial => ($t eq 'mm_big' ? $NBIG : 5000),
			F => $dst->safe_psql($DB, "SELECT (snapshot_lsn - '0/0'::pg_lsn)::bigint FROM ash_replicant.snapshot_tables WHERE slot_name = 'mm' AND source_table = '$t'"));
	}
	my $after = attempt_facts('mm');
	is((split /\|/, $after)[2], $attempt0, "$label: one attempt (the same id) throughout");
	like($after, qr/^complete\|.*public:mm_big:copied:\d+:[0-9A-F\/]+,public:mm_two:copied:\d+:[0-9A-F\/]+$/,
		"$label: both tables copied, the attempt complete");
	ok(scalar(AshTest::log_lines_like($dst, qr/event=snapshot\.armed sink=mm tables=3 new_tables=1\b/)) >= 1,
		"$label: the restarted worker added the table to the attempt");
	no_leak($label);
}

# the greps read the right files: structural lines the product logs are found
ok(scalar(AshTenancy::grep_all_logs(['event=pipeline.halt sink=ck reason=apply_failed'], $src, $dst)) >= 1,
	'positive control: the log grep finds the halt events');
ok(scalar(AshTenancy::grep_all_logs(['event=snapshot.table_copied sink=mm'], $src, $dst)) >= 1,
	'positive control: the log grep finds the snapshot events');
no_leak('every planted value at the end');

stamp('end');
diag "ash-proof: faults_injected=$faults checks=" . Test::More->builder->current_test;
done_testing();
