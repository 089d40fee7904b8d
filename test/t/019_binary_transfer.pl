# Binary transfer (pipelines.binary_transfer => true): values arrive in their
# source type's send format and are read with the destination type's receive
# function.
#
#  bin    every common built-in type (numeric edge values, float, text with
#         unicode, bytea, bool, date/time types, interval, uuid, jsonb,
#         arrays with NULL elements, inet, money) lands exactly: the
#         mirror's content hash equals the source's; a column whose source and
#         destination types differ (int4 -> int8) is read through text.
#  ten    attribute tenancy with the tenant column sent in binary, and
#         encrypted text, varchar and date columns: the tenant scopes each
#         row, each ciphertext decrypts to the source's text form.
#  enum   a source type that is not built in (an enum, a domain): its OID means nothing
#         at the destination, so the pipeline logs binary_transfer.off, starts
#         the session over in text and the mirror is still exact.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'message_digest 1 ' . AshTenancy::key_hex(9),
	'column_encryption 1 ' . AshTenancy::key_hex(1));

AshTest::both($src, $dst, q{
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE bt (
	id integer PRIMARY KEY, c_int2 int2, c_int8 int8, c_num numeric, c_nump numeric(30, 10),
	c_f4 float4, c_f8 float8, c_text text, c_vc varchar(10), c_char char(3), c_bytea bytea,
	c_bool boolean, c_date date, c_ts timestamp, c_tstz timestamptz, c_iv interval,
	c_uuid uuid, c_jsonb jsonb, c_json json, c_ints integer[], c_texts text[],
	c_inet inet, c_money money);
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE en (id integer PRIMARY KEY, m mood, d posint, note text);
});
$src->safe_psql('postgres', q{
CREATE TABLE widen (id integer PRIMARY KEY, n int4);
CREATE TABLE ten (id integer PRIMARY KEY, tenant text NOT NULL, pan text, note text,
	code varchar(12), born date);
ALTER TABLE ten REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_bin FOR TABLE bt, widen;
CREATE PUBLICATION pub_ten FOR TABLE ten;
CREATE PUBLICATION pub_en FOR TABLE en;
});
$dst->safe_psql('postgres', q{
CREATE TABLE widen (id integer PRIMARY KEY, n int8);
CREATE TABLE ten (id integer PRIMARY KEY, tenant text NOT NULL, pan bytea, note text,
	code bytea, born bytea);
CREATE ROLE reader LOGIN;
GRANT ash_replicant_decrypt TO reader;
GRANT SELECT ON ten TO reader;
});

my $binary = 'binary_transfer => true';

# --- bin ------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'bin', publication => 'pub_bin',
	maps => [ ['bt'], ['widen'] ], pipeline_extra => $binary);
AshTest::wait_slot_consistent($src, $dst, 'bin');
$src->safe_psql('postgres', q{
INSERT INTO bt VALUES
 (1, 32767, 9223372036854775807, 123456789012345678901234567890.123456789, 12345678901234567890.0123456789,
  1.5, 0.1, E'h\u00e9llo \U0001F389 it''s "q"\n\\\\', 'caf\u00e9', 'ab', '\x00ff10'::bytea,
  true, '2024-02-29', '2024-02-29 23:59:59.999999', '2024-02-29 23:59:59.123456+05:30',
  '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{"a": [1, {"b": null}], "n": 1.0e-30}', '{"k": 1,  "k": 2}', '{1,NULL,3}', '{"a b",NULL,""}',
  '192.168.0.1/24', 12.34),
 (2, -32768, -9223372036854775808, 'NaN', -0.0000000001, '-Infinity', 'NaN', '', '', '', '\x'::bytea,
  false, 'infinity', '-infinity', 'infinity', '-178000000 years', '00000000-0000-0000-0000-000000000000',
  '[]', 'null', '{}', '{}', '::1', -0.01),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO bt (id, c_num, c_text, c_ints)
  SELECT g, g * 1.25, repeat('x', g % 50), ARRAY[g, g + 1] FROM generate_series(10, 400) g;
UPDATE bt SET c_num = c_num * 3, c_tstz = '2001-01-01 00:00:00+00' WHERE id % 3 = 0;
DELETE FROM bt WHERE id % 7 = 0;
INSERT INTO widen SELECT g, g * 1000 FROM generate_series(1, 50) g;
UPDATE widen SET n = -2147483648 WHERE id = 1;
});
AshTest::wait_caught_up($src, $dst, 'bin');
AshTest::assert_mirror_equal($src, $dst, [ 'bt', 'widen' ], name => 'bin: mirror equals source');
is(scalar(AshTest::log_lines_like($dst, qr/(apply\.error|binary_transfer\.off) sink=bin /)), 0,
	'bin: built-in types stream in binary without a restart');
is(AshTest::status_row($dst, 'bin')->{state}, 'healthy', 'bin: healthy');

# --- ten ------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'ten', publication => 'pub_ten',
	maps => [ [ 'ten', tenant_column => 'tenant', tenant_strategy => 'attribute',
			sensitive => [ 'pan', 'code', 'born' ], encrypted => [ 'pan', 'code', 'born' ] ] ],
	pipeline_extra => $binary);
AshTest::wait_slot_consistent($src, $dst, 'ten');
$src->safe_psql('postgres', q{
INSERT INTO ten SELECT g, 'tenant_' || (g % 3), '4111 1111 1111 ' || lpad(g::text, 4, '0'), 'n' || g,
  E'c\u00e9-' || g, date '1970-01-01' + g * 97
  FROM generate_series(1, 60) g;
UPDATE ten SET note = 'changed' WHERE id % 4 = 0;
DELETE FROM ten WHERE id % 9 = 0;
});
AshTest::wait_caught_up($src, $dst, 'ten');
is($dst->safe_psql('postgres',
		q{SET ROLE reader; SELECT string_agg(id || ':' || tenant || ':' || ash_replicant_decrypt(pan, 'public.ten', 'pan') || ':' || note
			|| ':' || ash_replicant_decrypt(code, 'public.ten', 'code') || ':' || ash_replicant_decrypt(born, 'public.ten', 'born'), ',' ORDER BY id) FROM ten}),
	$src->safe_psql('postgres',
		q{SELECT string_agg(id || ':' || tenant || ':' || pan || ':' || note || ':' || code || ':' || born, ',' ORDER BY id) FROM ten}),
	'ten: tenants and decrypted values equal the source');
is(AshTest::status_row($dst, 'ten')->{state}, 'healthy', 'ten: healthy');

# --- enum -----------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'en', publication => 'pub_en',
	maps => [ ['en'] ], pipeline_extra => $binary);
AshTest::wait_slot_consistent($src, $dst, 'en');
$src->safe_psql('postgres', q{
INSERT INTO en SELECT g, (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood, g, 'e' || g FROM generate_series(1, 30) g;
UPDATE en SET m = 'happy' WHERE id < 5;
});
AshTest::wait_caught_up($src, $dst, 'en');
AshTest::assert_mirror_equal($src, $dst, ['en'], name => 'enum: mirror equals source');
ok(scalar(AshTest::log_lines_like($dst, qr/event=binary_transfer\.off sink=en table=public\.en reason=source_type_not_builtin/)),
	'enum: binary transfer switched off, value-free event');
is(AshTest::status_row($dst, 'en')->{state}, 'healthy', 'enum: healthy after streaming again in text');

done_testing();
