# Logical messages (docs/history-and-events.md): prefix routes, claims, key rotation.
#
# A state mirror routes 'audit' to a table and 'mail' to a function, ignores
# 'noise', and mirrors an "orders" table.  Messages are emitted inside
# transactions (between row changes) and between them (non-transactional).
#   - every routed message has its effect once, with its claim; an ignored
#     prefix has none; a transactional message sees the rows of its
#     transaction written before it and not those after it (order);
#   - a non-transactional message commits with the watermark at its own LSN;
#   - the message_digest key is rotated mid-stream: new claims carry version
#     2, older ones keep version 1;
#   - forced re-delivery of everything (slot restored from a copy, watermark
#     moved back) applies nothing twice: every claim is found, under either
#     key version, and verified;
#   - a claim whose content digest does not match the re-delivered message
#     halts message_claim_conflict;
#   - removing version 1 from the keyring within the longest route retention
#     halts digest_key_horizon_violated (the effect is not applied); putting
#     it back resumes;
#   - an unrouted prefix halts message_prefix_unmapped, value-free, with
#     nothing of its transaction applied.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'ash_keyring'\n");
my $sink = 'msgs';
my $marker = AshTest::marker_table($sink);

sub key_hex { my ($seed) = @_; return join '', map { sprintf '%02x', ($_ * 29 + $seed * 83 + 7) % 256 } 0 .. 31; }
sub write_keyring
{
	my (@lines) = @_;
	my $path = $dst->data_dir . '/ash_keyring';
	open(my $fh, '>', "$path.tmp") or die "$path.tmp: $!";
	print $fh map { "$_\n" } @lines;
	close($fh);
	chmod(0600, "$path.tmp") or die "chmod: $!";
	rename("$path.tmp", $path) or die "rename: $!";
	return;
}
my @md1 = ("message_digest 1 " . key_hex(1));
my @md2 = ("message_digest 2 " . key_hex(2));
my @hp1 = ("horizon_provenance 1 " . key_hex(3));
write_keyring(@md1, @hp1);

AshTest::both($src, $dst, qq{
CREATE TABLE orders (id integer PRIMARY KEY, note text);
CREATE TABLE $marker (id bigint PRIMARY KEY, note text);
});
$src->safe_psql('postgres', qq{
CREATE PUBLICATION pub_msgs FOR TABLE orders, $marker;
CREATE TABLE emitted (seq bigserial PRIMARY KEY, prefix text, content text, tx boolean, lsn pg_lsn);
});
$dst->safe_psql('postgres', q{
CREATE TABLE msg_audit (id bigserial PRIMARY KEY, content text, operation_key bytea,
	content_digest bytea, prefix text, received_at timestamptz DEFAULT now());
CREATE TABLE mail_log (content text, saw_before boolean, saw_after boolean, opkey bytea);
CREATE FUNCTION on_mail(p text, c bytea, k bytea, d bytea) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO mail_log VALUES (convert_from(c, 'UTF8'),
		EXISTS (SELECT 1 FROM orders WHERE id = convert_from(c, 'UTF8')::integer),
		EXISTS (SELECT 1 FROM orders WHERE id = convert_from(c, 'UTF8')::integer + 100000), k);
END $$;
});

my ($sysid, $db) = AshTest::source_identity($src);
my $conn = AshTest::conninfo($src);
for my $stmt (
	"SELECT ash_replicant_create_sink('$sink', ignored_message_prefixes => '{noise}', recovery_horizon => '1 hour')",
	"SELECT ash_replicant_map_table('$sink', 'orders'::regclass)",
	"SELECT ash_replicant_map_table('$sink', '$marker'::regclass)",
	"SELECT ash_replicant_add_message_route('$sink', 'audit', 'msg_audit'::regclass, '1 hour'::interval)",
	"SELECT ash_replicant_add_message_route('$sink', 'mail', 'on_mail(text,bytea,bytea,bytea)'::regprocedure, '2 hours'::interval)",
	"SELECT ash_replicant_configure_pipeline('$sink', '$conn', publication => 'pub_msgs',"
	  . " source_system_identifier => '$sysid', source_database => '$db', census => '{\"interval_ms\": 1000}')",
	"SELECT ash_replicant_start('$sink')")
{
	my ($rc, $out, $err) = $dst->psql('postgres', $stmt);
	die "setup failed: " . substr($stmt, 0, 60) . ": $err" if $rc;
}
AshTest::wait_caught_up($src, $dst, $sink, name => 'message pipeline streams')
  or BAIL_OUT('pipeline never streamed');
$src->safe_psql('postgres', "SELECT pg_copy_logical_replication_slot('$sink', 'msgs_backup')");

# transactions with messages between row changes; non-transactional ones between
sub workload
{
	my ($from, $to) = @_;
	my $sql = '';
	for my $n ($from .. $to)
	{
		$sql .= "BEGIN;\nINSERT INTO orders VALUES ($n, 'o');\n"
		  . "SELECT pg_logical_emit_message(true, 'mail', '$n');\n"
		  . "INSERT INTO emitted (prefix, content, tx) VALUES ('mail', '$n', true);\n"
		  . "INSERT INTO orders VALUES ($n + 100000, 'after');\n"
		  . "SELECT pg_logical_emit_message(true, 'audit', 'a-$n');\n"
		  . "INSERT INTO emitted (prefix, content, tx) VALUES ('audit', 'a-$n', true);\n"
		  . ($n % 4 == 0 ? "SELECT pg_logical_emit_message(true, 'noise', 'x-$n');\n" : '')
		  . "COMMIT;\n";
		$sql .= "INSERT INTO emitted (prefix, content, tx, lsn) SELECT 'audit', 'nt-$n', false, pg_logical_emit_message(false, 'audit', 'nt-$n');\n"
		  if $n % 5 == 0;
		$sql .= "SELECT pg_logical_emit_message(false, 'noise', 'y-$n');\n" if $n % 7 == 0;
	}
	$src->safe_psql('postgres', $sql);
	return;
}

sub effects_equal
{
	my ($label) = @_;
	is($dst->safe_psql('postgres', q{SELECT string_agg(content, ',' ORDER BY content) FROM msg_audit}),
	   $src->safe_psql('postgres', q{SELECT string_agg(content, ',' ORDER BY content) FROM emitted WHERE prefix = 'audit'}),
	   "$label: each 'audit' message inserted once");
	is($dst->safe_psql('postgres', q{SELECT string_agg(content, ',' ORDER BY content) FROM mail_log}),
	   $src->safe_psql('postgres', q{SELECT string_agg(content, ',' ORDER BY content) FROM emitted WHERE prefix = 'mail'}),
	   "$label: each 'mail' message called the function once");
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM ash_replicant.message_claims}),
	   $src->safe_psql('postgres', q{SELECT count(*) FROM emitted}),
	   "$label: one claim per routed message");
	return;
}

workload(1, 20);
my ($nt_lsn) = $src->safe_psql('postgres',
	"INSERT INTO emitted (prefix, content, tx, lsn) SELECT 'audit', 'nt-last', false, pg_logical_emit_message(false, 'audit', 'nt-last') RETURNING lsn");
# its LSN is the end of its WAL record: the watermark is one below, so a
# commit record right after it (same LSN) is still applied
ok(AshTest::poll($dst, qq{SELECT count(*) = 1 FROM msg_audit WHERE content = 'nt-last'}, 't')
	&& $dst->safe_psql('postgres', AshTest::checkpoint_sql($sink,
		"c.commit_lsn = '$nt_lsn'::pg_lsn - 1 AND c.end_lsn = '$nt_lsn'::pg_lsn - 1")) eq 't',
	'a non-transactional message commits with the watermark at its own LSN');
# a non-transactional message emitted inside a transaction: decoded before
# the transaction, whose commit record usually starts where it ends
my ($nt_in, $commit_after) = split /\|/, $src->safe_psql('postgres', q{BEGIN;
	INSERT INTO orders VALUES (500, 'after a non-transactional message');
	INSERT INTO emitted (prefix, content, tx) VALUES ('audit', 'nt-in-tx', false);
	SELECT pg_logical_emit_message(false, 'audit', 'nt-in-tx')::text || '|' || pg_current_xact_id()::text;
	COMMIT;});
my $commit_at = $src->safe_psql('postgres', "SELECT start_lsn FROM pg_get_wal_records_info('$nt_in', pg_current_wal_flush_lsn())"
	. " WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT' AND xid::text = '$commit_after'");
note "non-transactional message ends at $nt_in, the transaction commits at $commit_at";
AshTest::wait_caught_up($src, $dst, $sink, name => 'caught up after a message inside a transaction');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM orders WHERE id = 500}), '1',
	'the transaction committed right after a non-transactional message is applied');
AshTest::wait_caught_up($src, $dst, $sink, name => 'phase 1 applied');
effects_equal('phase 1');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM mail_log WHERE saw_before AND NOT saw_after}),
	'20', 'a transactional message rides its transaction in order');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM msg_audit a JOIN ash_replicant.message_claims c USING (operation_key)
	WHERE a.content_digest = c.content_digest AND c.route = 'msgs:public.msg_audit'
	  AND c.expires_at > c.claimed_at + interval '59 minutes'}),
	$dst->safe_psql('postgres', 'SELECT count(*) FROM msg_audit'), 'the effect carries its claim (key, digest, route, expiry)');

# ---------------------------------------------------------------------------
# Rotation mid-stream
# ---------------------------------------------------------------------------
write_keyring(@md1, @md2, @hp1);
workload(21, 30);
AshTest::wait_caught_up($src, $dst, $sink, name => 'phase 2 applied after the rotation');
effects_equal('phase 2');
my $version_sql = q{SELECT string_agg(v || ':' || n, ' ' ORDER BY v) FROM (
	SELECT get_byte(content_digest, 4) AS v, count(*) AS n FROM ash_replicant.message_claims
	WHERE get_byte(operation_key, 4) = get_byte(content_digest, 4) GROUP BY 1) x};
my $routed_p2 = 10 * 2 + 2;    # mail + audit per transaction, nt-25 and nt-30
my $routed_all = $src->safe_psql('postgres', 'SELECT count(*) FROM emitted');
is($dst->safe_psql('postgres', $version_sql), '1:' . ($routed_all - $routed_p2) . " 2:$routed_p2",
	'claims after the rotation carry version 2, older ones version 1');

# ---------------------------------------------------------------------------
# Forced re-delivery of everything
# ---------------------------------------------------------------------------
sub redeliver
{
	AshTest::stop_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'not_started', undef, name => 'stopped for re-delivery');
	AshTest::poll($src, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$sink'", 't');
	$src->safe_psql('postgres', qq{SELECT pg_drop_replication_slot('$sink');
		SELECT pg_copy_logical_replication_slot('msgs_backup', '$sink');});
	# the checkpoint rewound as an operator would adopt a slot: the position
	# recorded acknowledged goes too (left, it could be below the copy's
	# confirmed position, when the stream's last idle moment came before the
	# copy was taken, and the pipeline rightly halted checkpoint_behind_slot)
	$dst->safe_psql('postgres', "UPDATE ash_replicant.checkpoints SET commit_lsn = '0/0', end_lsn = '0/0',"
		  . " acknowledged_lsn = NULL WHERE slot_name = '$sink'");
	AshTest::start_sink($dst, $sink);
	return;
}
my $replays_before = () = AshTest::log_lines_like($dst, qr/event=message\.replayed sink=msgs/);
redeliver();
AshTest::wait_caught_up($src, $dst, $sink, name => 're-delivery applied');
effects_equal('after re-delivery');
my $replays = () = AshTest::log_lines_like($dst, qr/event=message\.replayed sink=msgs/);
is($replays - $replays_before, $routed_all, 'every routed message was found claimed (under version 1 or 2) and skipped');
AshTest::assert_mirror_equal($src, $dst, ['orders'], name => 'after re-delivery');

# a claim whose digest does not match the message: conflict
my $victim = $dst->safe_psql('postgres', q{SELECT encode(operation_key, 'hex') FROM ash_replicant.message_claims ORDER BY claimed_at, operation_key LIMIT 1});
my $saved = $dst->safe_psql('postgres', "SELECT encode(content_digest, 'hex') FROM ash_replicant.message_claims WHERE operation_key = '\\x$victim'");
$dst->safe_psql('postgres', qq{UPDATE ash_replicant.message_claims SET content_digest =
	(SELECT content_digest FROM ash_replicant.message_claims WHERE operation_key <> '\\x$victim' AND get_byte(content_digest, 4) = 1 LIMIT 1)
	WHERE operation_key = '\\x$victim'});
redeliver();
AshTest::wait_status($dst, $sink, 'halted', 'message_claim_conflict',
	name => 'a claimed position with other content halts message_claim_conflict');
effects_equal('after the conflict');
$dst->safe_psql('postgres', "UPDATE ash_replicant.message_claims SET content_digest = '\\x$saved' WHERE operation_key = '\\x$victim'");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'resumes once the claim is repaired');

# ---------------------------------------------------------------------------
# Digest key horizon
# ---------------------------------------------------------------------------
write_keyring(@md2, @hp1);
$src->safe_psql('postgres', q{BEGIN;
	SELECT pg_logical_emit_message(true, 'audit', 'after-removal');
	INSERT INTO emitted (prefix, content, tx) VALUES ('audit', 'after-removal', true);
	COMMIT;});
AshTest::wait_status($dst, $sink, 'halted', 'digest_key_horizon_violated',
	name => 'removing a digest key version within the retention horizon halts digest_key_horizon_violated');
is($dst->safe_psql('postgres', q{SELECT count(*) FROM msg_audit WHERE content = 'after-removal'}), '0',
	'its message was not applied');
write_keyring(@md1, @md2, @hp1);
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'resumes with the version back');
effects_equal('after the horizon halt');

# ---------------------------------------------------------------------------
# Unrouted prefix
# ---------------------------------------------------------------------------
$src->safe_psql('postgres', q{BEGIN;
	INSERT INTO orders VALUES (999, 'with unrouted');
	SELECT pg_logical_emit_message(true, 'zz-unrouted-prefix', 'zz-secret-content');
	COMMIT;});
AshTest::wait_status($dst, $sink, 'halted', 'message_prefix_unmapped', name => 'an unrouted prefix halts message_prefix_unmapped');
is($dst->safe_psql('postgres', 'SELECT count(*) FROM orders WHERE id = 999'), '0', 'nothing of its transaction applied');
is(scalar(AshTest::grep_logs_for('zz-unrouted-prefix', $dst)) + scalar(AshTest::grep_logs_for('zz-secret-content', $dst)),
	0, 'neither prefix nor content in the destination log');
unlike(AshTest::catalog_text($dst), qr/zz-unrouted|zz-secret|nt-last|a-1\b/, 'no message value in status or catalogs');

done_testing();
