# A state mirror's message route function renamed, or moved to another
# schema, while the sink streams (docs/history-and-events.md: the route
# holds its function by signature; renamed, it names no function and the
# next message halts destination_table_missing).
#
# Before the fix the function's OID still existed, so the check passed; the
# prepared call named the old name and failed 42883 at every attempt, and
# the sink halted apply_failed after the retries.  Now the route's
# signature is resolved again before each call: a rename or a move halts
# misconfigured/destination_table_missing at once, nothing of the
# transaction applied, the checkpoint unchanged; routing the prefix to the
# function under its new name (the documented recovery) applies the held
# message once.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $sink = 'rfn';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'ash_keyring'\n");
AshTenancy::write_keyring($dst, 'ash_keyring', 'message_digest 1 ' . AshTenancy::key_hex(1),
	'horizon_provenance 1 ' . AshTenancy::key_hex(3));
AshTest::both($src, $dst, 'CREATE TABLE items (id integer PRIMARY KEY)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_rfn FOR TABLE items');
$dst->safe_psql($DB, q{
CREATE SCHEMA other;
CREATE TABLE fn_log (content text);
CREATE FUNCTION m_fn(p text, c bytea) RETURNS void LANGUAGE sql
	AS $$ INSERT INTO public.fn_log VALUES (convert_from(c, 'UTF8')) $$;
});
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_rfn',
	maps => [ ['items'] ], recovery_horizon => '1 hour', start => 0);
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'rf', 'm_fn(text,bytea)'::regprocedure, '1 hour')");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'streams') or BAIL_OUT('never streamed');

my $n = 0;

sub emit
{
	my ($content) = @_;
	$n++;
	$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES ($n);"
		  . " SELECT pg_logical_emit_message(true, 'rf', '$content'); COMMIT;");
	return $n;
}

emit('warm');
AshTest::wait_caught_up($src, $dst, $sink, name => 'the worker called the function once');

# $ddl while streaming, then a message: halts, nothing applied; re-routing
# to $sig applies it once
sub renamed
{
	my ($label, $ddl, $sig, $content) = @_;
	$dst->safe_psql($DB, $ddl);
	my $facts = AshTest::checkpoint_facts($dst, $sink);
	my $id = emit($content);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'destination_table_missing', src => $src,
		name => "$label: halts misconfigured/destination_table_missing");
	AshTest::halt_left_nothing($dst, $sink, "SELECT count(*) FROM items WHERE id = $id", '0', $facts);
	is(scalar(AshTest::log_lines_like($dst, qr/event=apply\.error sink=$sink .*sqlstate=42883/)), 0,
		"$label: no attempt called the old name");
	AshTest::stop_settled($src, $dst, $sink);
	$dst->safe_psql($DB, "SELECT ash_replicant_drop_message_route('$sink', 'rf');"
		  . " SELECT ash_replicant_add_message_route('$sink', 'rf', '$sig'::regprocedure, '1 hour')");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: resumes once re-routed");
	is($dst->safe_psql($DB, "SELECT count(*) FROM fn_log WHERE content = '$content'"), '1',
		"$label: the held message applied once");
}

renamed('rename', 'ALTER FUNCTION m_fn(text, bytea) RENAME TO m_fn_renamed',
	'm_fn_renamed(text,bytea)', 'after-rename');
renamed('move', 'ALTER FUNCTION m_fn_renamed(text, bytea) SET SCHEMA other',
	'other.m_fn_renamed(text,bytea)', 'after-move');
AshTest::assert_mirror_equal($src, $dst, ['items'], name => 'items');

done_testing();
