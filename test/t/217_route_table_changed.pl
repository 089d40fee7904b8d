# A state mirror's message route table changed while the sink streams
# (docs/history-and-events.md, State-mirror routes).
#
# The route holds its table by OID; the worker's prepared insert named the
# table and passed the content with the types it had when prepared.
#   1. renamed, a new table created under the old name: the messages went
#      into the new, never-validated table (healthy).  Now they go to the
#      table the route holds (the statement is made again after the
#      rename), none into the new one.
#   2. content retyped bytea -> text: the stale statement passed bytea and
#      PostgreSQL stored its escape text (\x7365...).  Now the text column
#      holds the text; a content column retyped to neither bytea nor text
#      halts delivery_config_invalid before anything is written.
#   3. a BEFORE INSERT trigger returning NULL: the effect was suppressed
#      while its claim was written (healthy).  Now it halts
#      destination_write_suppressed with nothing of the transaction
#      applied, as a mirror target does; once the trigger is dropped the
#      message is applied once.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my $sink = 'rtc';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'ash_keyring'\n");
AshTenancy::write_keyring($dst, 'ash_keyring', 'message_digest 1 ' . AshTenancy::key_hex(1),
	'horizon_provenance 1 ' . AshTenancy::key_hex(3));
AshTest::both($src, $dst, 'CREATE TABLE items (id integer PRIMARY KEY)');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_rtc FOR TABLE items');
$dst->safe_psql($DB, q{
CREATE TABLE m_tab (content bytea, operation_key bytea, content_digest bytea);
CREATE TABLE m_d (content bytea, operation_key bytea, content_digest bytea);
CREATE FUNCTION drop_it() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
});
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_rtc',
	maps => [ ['items'] ], recovery_horizon => '1 hour', start => 0);
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'rt', 'm_tab'::regclass, '1 hour')");
$dst->safe_psql($DB, "SELECT ash_replicant_add_message_route('$sink', 'rd', 'm_d'::regclass, '1 hour')");
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => 'streams') or BAIL_OUT('never streamed');

my $n = 0;

sub emit
{
	my ($prefix, $content) = @_;
	$n++;
	$src->safe_psql($DB, "BEGIN; INSERT INTO items VALUES ($n);"
		  . " SELECT pg_logical_emit_message(true, '$prefix', '$content'); COMMIT;");
	return $n;
}

# the worker holds a statement for each route
emit('rt', 'warm');
emit('rd', 'first');
AshTest::wait_caught_up($src, $dst, $sink, name => 'both routes applied');

# ---------------------------------------------------------------------------
# 1. renamed; a new table takes the old name
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, q{ALTER TABLE m_tab RENAME TO m_tab_routed;
	CREATE TABLE m_tab (content bytea, operation_key bytea, content_digest bytea);});
emit('rt', 'renamed');
AshTest::wait_caught_up($src, $dst, $sink, name => '1: caught up after the rename');
is($dst->safe_psql($DB, "SELECT count(*) FROM m_tab"), '0',
	'1: nothing written into the new table under the old name');
is($dst->safe_psql($DB, "SELECT string_agg(convert_from(content, 'UTF8'), ',' ORDER BY convert_from(content, 'UTF8')) FROM m_tab_routed"),
	'renamed,warm', '1: the message is in the table the route holds');
is(AshTest::status_row($dst, $sink)->{state}, 'healthy', '1: the sink streams on');

# ---------------------------------------------------------------------------
# 2. content retyped bytea -> text while streaming
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, q{ALTER TABLE m_d ALTER COLUMN content TYPE text USING convert_from(content, 'UTF8')});
emit('rd', 'second');
AshTest::wait_caught_up($src, $dst, $sink, name => '2: caught up after the retype');
is($dst->safe_psql($DB, q{SELECT string_agg(content, ',' ORDER BY content) FROM m_d}), 'first,second',
	'2: the text column holds the text, not the escape form of bytea');

# retyped to a type registration refuses: halts before the write
$dst->safe_psql($DB, q{ALTER TABLE m_d ALTER COLUMN content TYPE varchar});
my $facts = AshTest::checkpoint_facts($dst, $sink);
my $id = emit('rd', 'third');
AshTest::wait_status($dst, $sink, 'halted', 'delivery_config_invalid', src => $src,
	name => '2: a content column retyped to varchar halts delivery_config_invalid');
AshTest::halt_left_nothing($dst, $sink, "SELECT count(*) FROM items WHERE id = $id", '0', $facts);
$dst->safe_psql($DB, q{ALTER TABLE m_d ALTER COLUMN content TYPE text});
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => '2: resumes once the type is back');
is($dst->safe_psql($DB, q{SELECT count(*) FROM m_d WHERE content = 'third'}), '1', '2: applied once after the fix');

# ---------------------------------------------------------------------------
# 3. a BEFORE INSERT trigger returning NULL on the route table
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, q{CREATE TRIGGER drop_it BEFORE INSERT ON m_d FOR EACH ROW EXECUTE FUNCTION drop_it()});
$facts = AshTest::checkpoint_facts($dst, $sink);
my $claims = $dst->safe_psql($DB, 'SELECT count(*) FROM ash_replicant.message_claims');
$id = emit('rd', 'kept-out');
AshTest::wait_status($dst, $sink, 'halted', 'destination_write_suppressed', src => $src,
	name => '3: a trigger keeping the route effect out halts destination_write_suppressed');
AshTest::halt_left_nothing($dst, $sink, "SELECT count(*) FROM items WHERE id = $id", '0', $facts);
is($dst->safe_psql($DB, 'SELECT count(*) FROM ash_replicant.message_claims'), $claims, '3: no claim written');
$dst->safe_psql($DB, q{DROP TRIGGER drop_it ON m_d});
AshTest::start_sink($dst, $sink);
AshTest::wait_caught_up($src, $dst, $sink, name => '3: resumes once the trigger is dropped');
is($dst->safe_psql($DB, q{SELECT count(*) FROM m_d WHERE content = 'kept-out'}), '1', '3: applied once after the fix');
AshTest::assert_mirror_equal($src, $dst, ['items'], name => 'items');

done_testing();
