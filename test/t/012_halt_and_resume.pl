# Streaming mirror core: a destination-side failure halts value-free and the
# operator resumes exactly (README.md#how-apply-works, README.md#status-statistics-and-events).
#
# The destination has constraints the source does not (round 1: CHECK, round
# 2: UNIQUE).  A source transaction that also writes other rows and another
# table carries a random sentinel in a text column and violates the
# constraint: the pipeline halts apply_failed with the SQLSTATE; nothing of
# that transaction (nor of a later one) is visible; the checkpoint watermark is
# unchanged; the sentinel appears in no server log of either node, nor in
# status, stat_pipelines or any catalog row of the extension.  The operator
# drops the constraint and calls ash_replicant_start: the mirror converges, the
# failed transaction applied exactly once (write audit on the destination).
# Round 3: a transient class on every attempt is retried, never halts, and
# status says catching_up/destination_apply_retrying until it applies.
#
# Logs: log_statement is 'none' on BOTH nodes, so the test's own statements
# (which carry the sentinel to the source) are not logged and every server log
# of both nodes must be free of the sentinel.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $sink = 'hr';

AshTest::both($src, $dst, q{
CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE orders (id integer PRIMARY KEY, customer_id integer, qty integer NOT NULL, note text);
});
# destination only: a write audit (every INSERT/UPDATE row event, by key), and
# the constraint of round 1
$dst->safe_psql('postgres', AshTest::write_audit_sql('orders', 'integer') . q{
ALTER TABLE orders ADD CONSTRAINT qty_small CHECK (qty < 1000);
});
$src->safe_psql('postgres', 'CREATE PUBLICATION pub_hr FOR TABLE customers, orders');

AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_hr',
	maps => [ ['customers'], ['orders'] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams')
  or BAIL_OUT('pipeline never streamed');

# applied history before the failure
$src->safe_psql('postgres', q{
INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, 10) g;
INSERT INTO orders SELECT g, 1 + g % 10, g, 'n' || g FROM generate_series(1, 50) g;
UPDATE orders SET qty = qty + 1 WHERE id <= 5;
});
AshTest::wait_caught_up($src, $dst, $sink);
AshTest::assert_mirror_equal($src, $dst, [ 'customers', 'orders' ], name => 'before the failure');

sub sentinel { return 'SENTINEL_' . join('', map { sprintf '%02x', int(rand(256)) } 1 .. 12); }

# Everything the destination shows about itself, and every log, must be free
# of $s; also the stderr of the operator's calls.
sub assert_no_leak
{
	my ($s, $label, @extra_text) = @_;
	my @hits = AshTest::grep_logs_for($s, $src, $dst);
	is(scalar(@hits), 0, "$label: sentinel in no server log of either node")
	  or diag join("\n", @hits[ 0 .. ($#hits < 4 ? $#hits : 4) ]);
	my $cat = AshTest::catalog_text($dst);
	ok(index($cat, $s) < 0, "$label: sentinel not in status, stat_pipelines or catalogs");
	ok(!grep({ index($_ // '', $s) >= 0 } @extra_text), "$label: sentinel not in any error text obtained");
}

my $faults = 0;    # bad inputs injected (the ash-proof summary line)

# One round: $violate is the failing transaction (its sentinel in it), $ids
# the orders ids it inserts, $sqlstate the expected SQLSTATE, $fix the
# operator's repair.
sub round
{
	my (%r) = @_;
	$faults++;
	my $label = $r{label};
	my $c0 = AshTest::checkpoint_lsn($dst, $sink);
	my %h0 = map { $_ => AshTest::table_hash($dst, $_) } qw(customers orders orders_audit);

	my $lsn_before = $src->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	$src->safe_psql('postgres', $r{violate});
	my $lsn_after = $src->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	# a later, valid transaction must not overtake the failed one
	$src->safe_psql('postgres', $r{later});

	AshTest::wait_status($dst, $sink, 'halted', 'apply_failed', src => $src,
		name => "$label: halted apply_failed");
	is($dst->safe_psql('postgres', "SELECT halt_sqlstate FROM ash_replicant.pipelines WHERE sink_name = '$sink'"),
		$r{sqlstate}, "$label: SQLSTATE $r{sqlstate} recorded");

	# the halt explains itself: SQLSTATE, condition, target, commit LSN of
	# the failed transaction (issue 25) -- in status, doctor and the CLI
	my $st = AshTest::status_row($dst, $sink);
	is($st->{halt_sqlstate}, $r{sqlstate}, "$label: status shows the SQLSTATE");
	is($st->{halt_condition}, $r{condition}, "$label: status shows the condition name");
	is($st->{halt_target}, 'public.orders', "$label: status shows the target table");
	is($dst->safe_psql('postgres',
		"SELECT '$st->{halt_lsn}'::pg_lsn > '$lsn_before'::pg_lsn AND '$st->{halt_lsn}'::pg_lsn < '$lsn_after'::pg_lsn"),
		't', "$label: status shows the failed transaction's commit LSN");
	my $doc = $dst->safe_psql('postgres',
		"SELECT detail FROM ash_replicant_doctor('$sink') WHERE check_name = 'checkpoint_state'");
	is($doc, "sqlstate $r{sqlstate} ($r{condition}), table public.orders, commit LSN $st->{halt_lsn}; see docs/reasons.md#apply_failed",
		"$label: doctor's verdict carries the same");
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'ash_replicant_ctl', 'status', '--sink', $sink, '-h', $dst->host, '-p', $dst->port,
		'-d', 'postgres' ], '<', \undef, '>', \$out, '2>', \$err);
	is($? >> 8, 1, "$label: ctl status exits 1 on a halt");
	like($out, qr/^\s+sqlstate \Q$r{sqlstate} ($r{condition}), table public.orders, commit LSN $st->{halt_lsn}; see docs\/reasons.md#apply_failed\E$/m,
		"$label: ctl status prints where it stopped and the runbook")
	  or diag $out, $err;
	my @reason_lines = AshTest::log_lines_like($dst, qr/apply_failed/);
	ok(scalar(@reason_lines) >= 1, "$label: the halt is logged with its reason");
	ok(scalar(grep { /\Q$r{sqlstate}\E/ } @reason_lines) >= 1, "$label: the log names the SQLSTATE")
	  or diag join("\n", @reason_lines);

	for my $t (sort keys %h0)
	{
		is(AshTest::table_hash($dst, $t), $h0{$t}, "$label: nothing of the failed transaction visible in $t");
	}
	is(AshTest::checkpoint_lsn($dst, $sink), $c0, "$label: checkpoint watermark unchanged");
	my $row = AshTest::checkpoint_row($dst, $sink) // {};
	is($row->{terminal_cause}, 'apply_failed', "$label: tombstone written value-free");

	# let the (halted) worker settle, then look for leaks everywhere
	assert_no_leak($r{sentinel}, $label);

	# the operator repairs the target and restarts
	$dst->safe_psql('postgres', $r{fix});
	my $start_err = AshTest::start_sink($dst, $sink);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: resumed after the fix");
	AshTest::assert_mirror_equal($src, $dst, [ 'customers', 'orders' ], name => "$label: converged");
	is($dst->safe_psql('postgres',
		"SELECT count(*) FROM orders_audit WHERE id IN ($r{ids}) GROUP BY id HAVING count(*) <> 1"),
		'', "$label: each row of the failed transaction written exactly once");
	is($dst->safe_psql('postgres', "SELECT count(DISTINCT id) FROM orders_audit WHERE id IN ($r{ids})"),
		scalar(split /,/, $r{ids}), "$label: every row of the failed transaction written");
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy again");
	is((AshTest::checkpoint_row($dst, $sink) // { terminal_cause => "(no checkpoint row)" })->{terminal_cause}, undef, "$label: tombstone cleared by the next checkpoint write");
	assert_no_leak($r{sentinel}, "$label after resume", $start_err);
}

# Round 1: CHECK violation; the failing row's DETAIL would carry the sentinel.
my $s1 = sentinel();
round(
	label    => 'check',
	sentinel => $s1,
	sqlstate => '23514',
	condition => 'check_violation',
	ids      => '900,901,902,999',
	violate  => qq{
BEGIN;
INSERT INTO customers VALUES (900, 'customer 900');
INSERT INTO orders VALUES (900, 900, 1, 'ok 900'), (901, 900, 2, 'ok 901');
UPDATE orders SET qty = qty + 100, note = 'touched' WHERE id = 1;
INSERT INTO orders VALUES (999, 900, 5000, '$s1');
INSERT INTO orders VALUES (902, 900, 3, 'ok 902');
COMMIT;},
	later => q{INSERT INTO customers VALUES (901, 'customer 901')},
	fix   => 'ALTER TABLE orders DROP CONSTRAINT qty_small');

# Round 2: UNIQUE violation inside one transaction; the key DETAIL would carry
# the sentinel.
my $s2 = sentinel();
$dst->safe_psql('postgres', 'CREATE UNIQUE INDEX orders_note_uq ON orders (note)');
round(
	label    => 'unique',
	sentinel => $s2,
	sqlstate => '23505',
	condition => 'unique_violation',
	ids      => '2001,2002,2003',
	violate  => qq{
BEGIN;
INSERT INTO customers VALUES (2000, 'customer 2000');
INSERT INTO orders VALUES (2001, 2000, 1, '$s2');
INSERT INTO orders VALUES (2002, 2000, 1, '$s2');
INSERT INTO orders VALUES (2003, 2000, 1, 'fine');
COMMIT;},
	later => q{UPDATE customers SET name = 'renamed' WHERE id = 1},
	fix   => 'DROP INDEX orders_note_uq');

# Round 3: a transient class on every attempt (a target trigger raising
# lock_not_available, as under a lock_timeout) never halts: the worker
# retries with back-off, and from the third failure in a row status says
# catching_up/destination_apply_retrying -- the previous build read healthy
# between two attempts.  Nothing of the transaction is committed meanwhile;
# once the cause is gone it applies exactly once and the reason clears.
{
	$faults++;
	my $s3 = sentinel();
	my $label = 'transient';
	my $c0 = AshTest::checkpoint_lsn($dst, $sink);
	my %h0 = map { $_ => AshTest::table_hash($dst, $_) } qw(customers orders orders_audit);
	$dst->safe_psql('postgres', q{
CREATE FUNCTION orders_busy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'busy %', NEW.note USING ERRCODE = 'lock_not_available';
END $$;
CREATE TRIGGER orders_busy BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_busy();
ALTER TABLE orders ENABLE ALWAYS TRIGGER orders_busy;
});
	$src->safe_psql('postgres', qq{
BEGIN;
INSERT INTO customers VALUES (3000, 'customer 3000');
INSERT INTO orders VALUES (3001, 3000, 1, '$s3');
COMMIT;});
	AshTest::wait_status($dst, $sink, 'catching_up', 'destination_apply_retrying', src => $src,
		name => "$label: catching_up/destination_apply_retrying", no_early_exit => 1);
	ok(scalar(AshTest::log_lines_like($dst, qr/event=apply\.error sink=$sink sqlstate=55P03 .*table=public\.orders .*attempt=transient\/3 /)),
		"$label: each attempt logged with its SQLSTATE and target");
	for my $t (sort keys %h0)
	{
		is(AshTest::table_hash($dst, $t), $h0{$t}, "$label: nothing of the transaction visible in $t");
	}
	is(AshTest::checkpoint_lsn($dst, $sink), $c0, "$label: checkpoint watermark unchanged");
	my $st = AshTest::status_row($dst, $sink);
	is($st->{halt_sqlstate}, undef, "$label: not a halt");
	assert_no_leak($s3, $label);

	$dst->safe_psql('postgres', 'DROP TRIGGER orders_busy ON orders');
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: applied once the cause is gone");
	AshTest::assert_mirror_equal($src, $dst, [ 'customers', 'orders' ], name => "$label: converged");
	is($dst->safe_psql('postgres', "SELECT count(*) FROM orders_audit WHERE id = 3001"),
		'1', "$label: the row written exactly once");
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy, the reason cleared");
	assert_no_leak($s3, "$label after resume");
}

diag "ash-proof: faults_injected=$faults checks=" . Test::More->builder->current_test;
done_testing();
