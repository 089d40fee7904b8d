# A message routed to a text content column on a destination whose
# encoding differs from the source's (docs/history-and-events.md,
# State-mirror routes).
#
# Row values reach the destination converted (client_encoding); message
# contents are the source's bytes.  Before the fix a text route stored them
# as they were: café from a UTF8 source in a LATIN1 destination read cafÃ©,
# and a character LATIN1 lacks was stored as two other characters.  Now a
# text content is converted from the source's encoding into the
# destination's, as row values are: café is café; a character the
# destination's encoding lacks halts message_content_invalid with nothing
# of the transaction applied.  A bytea route keeps the source's bytes.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $sink = 'enc';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none', dst_encoding => 'LATIN1',
	dst_conf => "ash_replicant.keyring_file = 'ash_keyring'\n");
AshTenancy::write_keyring($dst, 'ash_keyring', 'message_digest 1 ' . AshTenancy::key_hex(1),
	'horizon_provenance 1 ' . AshTenancy::key_hex(3));
is($src->safe_psql($DB, 'SHOW server_encoding') . '/' . $dst->safe_psql($DB, 'SHOW server_encoding'),
	'UTF8/LATIN1', 'a UTF8 source, a LATIN1 destination');
AshTest::both($src, $dst, 'CREATE TABLE items (id integer PRIMARY KEY, v text)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_enc FOR TABLE items');
$dst->safe_psql($DB, q{CREATE TABLE m_text (content text, operation_key bytea, content_digest bytea);
	CREATE TABLE m_bytea (content bytea, operation_key bytea, content_digest bytea);});
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_enc',
	maps => [ ['items'] ], recovery_horizon => '1 hour', start => 0);
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'rt', 'm_text'::regclass, '1 hour')");
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'rb', 'm_bytea'::regclass, '1 hour')");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'streams') or BAIL_OUT('never streamed');

# the same text as a row value and as the content of both routes
$src->safe_psql($DB, q{BEGIN; INSERT INTO items VALUES (1, 'caf' || chr(233));
	SELECT pg_logical_emit_message(true, 'rt', 'caf' || chr(233));
	SELECT pg_logical_emit_message(true, 'rb', 'caf' || chr(233)); COMMIT;});
AshTest::wait_caught_up($src, $dst, $sink, name => 'caught up');
is($dst->safe_psql($DB, q{SELECT encode(convert_to(v, 'LATIN1'), 'hex') FROM items WHERE id = 1}), '636166e9',
	'the row holds café');
is($dst->safe_psql($DB, q{SELECT coalesce(string_agg(encode(convert_to(content, 'LATIN1'), 'hex'), ','), '') FROM m_text}),
	'636166e9', 'the text route holds café too (not cafÃ©)');
is($dst->safe_psql($DB, q{SELECT encode(content, 'hex') FROM m_bytea}), '636166c3a9',
	'the bytea route holds the source bytes (UTF-8)');

# a character LATIN1 lacks
my $facts = AshTest::checkpoint_facts($dst, $sink);
$src->safe_psql($DB, q{BEGIN; INSERT INTO items VALUES (2, 'two');
	SELECT pg_logical_emit_message(true, 'rt', 'price ' || chr(8364)); COMMIT;});
AshTest::wait_status($dst, $sink, 'halted', 'message_content_invalid', src => $src,
	name => 'a character the destination encoding lacks halts message_content_invalid');
AshTest::halt_left_nothing($dst, $sink, 'SELECT count(*) FROM items WHERE id = 2', '0', $facts);
is($dst->safe_psql($DB, 'SELECT count(*) FROM m_text'), '1', 'nothing of it in the text route');

# the documented recovery: route the prefix to a bytea table
AshTest::stop_settled($src, $dst, $sink);
$dst->safe_psql($DB, "SELECT ash_replicant_drop_message_route('$sink', 'rt');"
	  . " SELECT ash_replicant_add_message_route('$sink', 'rt', 'm_bytea'::regclass, '1 hour')");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'resumes once re-routed');
is($dst->safe_psql($DB, q{SELECT count(*) FROM m_bytea WHERE content = convert_to('price ', 'LATIN1') || '\xe282ac'::bytea}), '1',
	'the message applied once to the bytea route');

done_testing();
