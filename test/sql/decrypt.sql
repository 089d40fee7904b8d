-- Column encryption (AES-256-GCM, format 1) and ash_replicant_decrypt:
-- known answers, round trips, binding, tampering, rotation, a removed key
-- version, and who may decrypt.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

-- keyring in the data directory; $KEYRING.sh MODE LINE... rewrites it
-- atomically (see keyring.sql)
SELECT current_setting('data_directory') || '/regress_decrypt_keyring' AS keyring_path \gset
\setenv KEYRING :keyring_path
\! printf '%s\n' 'set -e' 'mode=$1; shift' 'sleep 0.02' 'rm -f "$KEYRING.tmp"' '(umask 077; printf "%b\n" "$@" > "$KEYRING.tmp")' 'chmod "$mode" "$KEYRING.tmp"' 'rm -f "$KEYRING"' 'mv "$KEYRING.tmp" "$KEYRING"' > "$KEYRING.sh"
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
ALTER SYSTEM SET ash_replicant.keyring_file = 'regress_decrypt_keyring';
SELECT pg_reload_conf();
\c
\set VERBOSITY terse
SELECT * FROM ash_replicant_keyring_status() WHERE family = 'column_encryption';

-- destination tables and mappings with encrypted columns
CREATE SCHEMA regress_crypto;
CREATE TABLE regress_crypto.cards (id int PRIMARY KEY, pan bytea, holder bytea,
    cvv bytea, note text);
CREATE TABLE regress_crypto.cards_copy (id int PRIMARY KEY, pan bytea);
CREATE TABLE regress_crypto.unmapped (id int PRIMARY KEY, pan bytea);
-- names that would collide if the binding were not quoted: t.x + y, t + x.y
CREATE TABLE regress_crypto."t.x" (id int PRIMARY KEY, y bytea);
CREATE TABLE regress_crypto.t (id int PRIMARY KEY, "x.y" bytea);
CREATE TABLE regress_crypto."Odd ""Name""" (id int PRIMARY KEY, "Pan ""Col""" bytea);
SELECT ash_replicant_create_sink('crypto_sink');
SELECT ash_replicant_map_table('crypto_sink', 'regress_crypto.cards',
       column_map => '{"card_holder": "holder"}',
       sensitive => '{pan, card_holder, cvv}', encrypted => '{pan, card_holder}') AS mapped_id \gset
SELECT 'cards_mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant_map_table('crypto_sink', 'regress_crypto.cards_copy',
       sensitive => '{pan}', encrypted => '{pan}') AS mapped_id \gset
SELECT 'copy_mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant_map_table('crypto_sink', 'regress_crypto."t.x"',
       sensitive => '{y}', encrypted => '{y}') AS mapped_id \gset
SELECT 'tx_mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant_map_table('crypto_sink', 'regress_crypto.t',
       sensitive => '{x.y}', encrypted => '{x.y}') AS mapped_id \gset
SELECT 't_mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant_map_table('crypto_sink', 'regress_crypto."Odd ""Name"""',
       sensitive => '{"Pan \"Col\""}', encrypted => '{"Pan \"Col\""}') AS mapped_id \gset
SELECT 'odd_mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT target, column_map, sensitive, encrypted FROM ash_replicant.resources
 WHERE sink_name = 'crypto_sink' ORDER BY resource_id;

---------------------------------------------------------------------------
-- known answers (computed outside PostgreSQL with key version 1 =
-- 00 01 .. 1f, binding "regress_crypto"."cards"."pan"): pins the format
---------------------------------------------------------------------------
SELECT ash_replicant_decrypt('\x0100000001a0a1a2a3a4a5a6a7a8a9aaabd2294d1c65fa338e5345b6e2364be0ef419d6884f476c7c5d3b809f5a7f055be4dd67f',
       'regress_crypto.cards', 'pan') AS known_answer;
SELECT ash_replicant_decrypt('\x0100000001a0a1a2a3a4a5a6a7a8a9aaab9c8416b76727a6bba2833fa7b060c427',
       'regress_crypto.cards', 'pan') = '' AS known_answer_empty;
-- authentic, but not text in the database encoding (0xff 0xfe; 'a' NUL 'b')
SELECT ash_replicant_decrypt('\x0100000001b0b1b2b3b4b5b6b7b8b9babb66ab5d8bf484431c5433b982a9842dda6d1a',
       'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt('\x0100000001b0b1b2b3b4b5b6b7b8b9babbf85538319afcb0534b6a822cec1a6fece90ade',
       'regress_crypto.cards', 'pan');
-- the same known answer under any other binding fails the tag
SELECT ash_replicant_decrypt('\x0100000001a0a1a2a3a4a5a6a7a8a9aaabd2294d1c65fa338e5345b6e2364be0ef419d6884f476c7c5d3b809f5a7f055be4dd67f',
       'regress_crypto.cards_copy', 'pan');

---------------------------------------------------------------------------
-- round trips through the apply path's encryption (test-only hook)
---------------------------------------------------------------------------
SELECT ash_replicant._encrypt_for_test('4111 1111 1111 1111', 'regress_crypto.cards', 'pan') AS ct1 \gset
-- format 1 | key version 1 | 12-byte nonce | ciphertext | 16-byte tag
SELECT get_byte(:'ct1'::bytea, 0) AS format,
       substring(:'ct1'::bytea FROM 2 FOR 4) AS key_version,
       length(:'ct1'::bytea) - 33 AS plaintext_length;
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan') AS round_trip;
-- a random nonce: the same plaintext never encrypts the same way
SELECT ash_replicant._encrypt_for_test('4111 1111 1111 1111', 'regress_crypto.cards', 'pan')
       <> ash_replicant._encrypt_for_test('4111 1111 1111 1111', 'regress_crypto.cards', 'pan') AS nonces_differ;
SELECT count(DISTINCT substring(ash_replicant._encrypt_for_test('x', 'regress_crypto.cards', 'pan') FROM 6 FOR 12))
       AS distinct_nonces FROM generate_series(1, 200);
-- empty, multibyte and long values; a renamed column (card_holder -> holder)
SELECT ash_replicant_decrypt(ash_replicant._encrypt_for_test('', 'regress_crypto.cards', 'pan'),
       'regress_crypto.cards', 'pan') = '' AS empty_round_trip;
SELECT ash_replicant_decrypt(ash_replicant._encrypt_for_test('Zoë Ünïcødé ✓ 東京', 'regress_crypto.cards', 'holder'),
       'regress_crypto.cards', 'holder') AS multibyte_round_trip;
SELECT ash_replicant_decrypt(ash_replicant._encrypt_for_test(repeat('long value ', 100000), 'regress_crypto.cards', 'pan'),
       'regress_crypto.cards', 'pan') = repeat('long value ', 100000) AS long_round_trip;
SELECT ash_replicant_decrypt(ash_replicant._encrypt_for_test('quoted', 'regress_crypto."Odd ""Name"""', 'Pan "Col"'),
       'regress_crypto."Odd ""Name"""', 'Pan "Col"') AS quoted_round_trip;
-- stored values (TOASTed ones too) decrypt straight from the table
INSERT INTO regress_crypto.cards (id, pan, holder)
  VALUES (1, :'ct1', ash_replicant._encrypt_for_test('Ada Lovelace', 'regress_crypto.cards', 'holder')),
         (2, ash_replicant._encrypt_for_test(repeat('z', 100000), 'regress_crypto.cards', 'pan'), NULL);
SELECT id, left(ash_replicant_decrypt(pan, 'regress_crypto.cards', 'pan'), 20) AS pan,
       ash_replicant_decrypt(holder, 'regress_crypto.cards', 'holder') AS holder
  FROM regress_crypto.cards ORDER BY id;
-- NULL in, NULL out (STRICT)
SELECT ash_replicant_decrypt(NULL, 'regress_crypto.cards', 'pan') IS NULL AS strict_null;

---------------------------------------------------------------------------
-- binding: only the column the value was written for
---------------------------------------------------------------------------
-- another encrypted column of the same table, of another table
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'holder');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards_copy', 'pan');
-- unquoted, "t.x"."y" and "t"."x.y" would be the same binding
SELECT ash_replicant._encrypt_for_test('dots', 'regress_crypto."t.x"', 'y') AS ct_dots \gset
SELECT ash_replicant_decrypt(:'ct_dots', 'regress_crypto."t.x"', 'y') AS right_binding;
SELECT ash_replicant_decrypt(:'ct_dots', 'regress_crypto.t', 'x.y');
-- never against a binding the extension does not encrypt into
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'cvv');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'note');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'card_holder');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'nope');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'ctid');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.unmapped', 'pan');
SELECT ash_replicant_decrypt(:'ct1', 999999::oid::regclass, 'pan');
SELECT ash_replicant._encrypt_for_test('x', 'regress_crypto.unmapped', 'pan');
-- a dropped mapping no longer qualifies
SELECT ash_replicant_unmap_table('crypto_sink', 'regress_crypto.cards_copy');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards_copy', 'pan');

-- context tenancy: rows live in per-tenant tables named like the target;
-- the binding is the tenant table's own schema
CREATE SCHEMA regress_tenant_tpl;
CREATE SCHEMA regress_tenant_acme;
CREATE TABLE regress_tenant_tpl.accounts (id int PRIMARY KEY, secret bytea);
CREATE TABLE regress_tenant_acme.accounts (id int PRIMARY KEY, secret bytea);
SELECT ash_replicant_map_table('crypto_sink', 'regress_tenant_tpl.accounts',
       tenant_column => 'org', tenant_strategy => 'context',
       tenant_schema_format => 'regress_tenant_%s',
       sensitive => '{secret}', encrypted => '{secret}') AS mapped_id \gset
SELECT 'context_mapped' AS accepted, r.target, r.source_schema || '.' || r.source_table AS source,
       r.history_strategy, r.append_log, r.upsert_identity, r.tenant_strategy, r.encrypted
  FROM ash_replicant.resources r WHERE r.resource_id = :mapped_id;
SELECT ash_replicant._encrypt_for_test('acme secret', 'regress_tenant_acme.accounts', 'secret') AS ct_acme \gset
SELECT ash_replicant_decrypt(:'ct_acme', 'regress_tenant_acme.accounts', 'secret') AS tenant_round_trip;
SELECT ash_replicant_decrypt(:'ct_acme', 'regress_tenant_tpl.accounts', 'secret');

---------------------------------------------------------------------------
-- tampering: every region of the value is covered
---------------------------------------------------------------------------
-- format version
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 0, 2), 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 0, 0), 'regress_crypto.cards', 'pan');
-- key version: absent (2), zero, above int32
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 4, 2), 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 4, 0), 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 1, 128), 'regress_crypto.cards', 'pan');
-- one flipped bit in the nonce, the ciphertext, the tag
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 5, get_byte(:'ct1'::bytea, 5) # 1),
       'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 20, get_byte(:'ct1'::bytea, 20) # 1),
       'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, length(:'ct1'::bytea) - 1,
       get_byte(:'ct1'::bytea, length(:'ct1'::bytea) - 1) # 128), 'regress_crypto.cards', 'pan');
-- every single-byte change of the value is refused (by SQLSTATE: 55000 is
-- keyring_version_missing, XX001 ciphertext_invalid)
CREATE FUNCTION regress_try_decrypt(v bytea) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN ash_replicant_decrypt(v, 'regress_crypto.cards', 'pan');
EXCEPTION WHEN others THEN
    RETURN SQLSTATE;
END $$;
SELECT regress_try_decrypt(set_byte(:'ct1'::bytea, i, get_byte(:'ct1'::bytea, i) # 255)) AS outcome,
       count(*) AS positions
  FROM generate_series(0, length(:'ct1'::bytea) - 1) AS i
 GROUP BY 1 ORDER BY 1;
-- truncated, extended, empty
SELECT ash_replicant_decrypt(substring(:'ct1'::bytea FROM 1 FOR 32), 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(substring(:'ct1'::bytea FROM 1 FOR length(:'ct1'::bytea) - 1),
       'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(:'ct1'::bytea || '\x00'::bytea, 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt('\x01', 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt('\x', 'regress_crypto.cards', 'pan');
-- a plaintext stored where a ciphertext belongs
SELECT ash_replicant_decrypt(convert_to('4111 1111 1111 1111 and more text', 'UTF8'),
       'regress_crypto.cards', 'pan');

---------------------------------------------------------------------------
-- rotation: add version 2; old values keep decrypting, new ones carry 2
---------------------------------------------------------------------------
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' 'column_encryption 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'
SELECT * FROM ash_replicant_keyring_status() WHERE family = 'column_encryption';
SELECT ash_replicant._encrypt_for_test('4111 1111 1111 1111', 'regress_crypto.cards', 'pan') AS ct2 \gset
SELECT substring(:'ct2'::bytea FROM 2 FOR 4) AS key_version;
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan') AS old_value,
       ash_replicant_decrypt(:'ct2', 'regress_crypto.cards', 'pan') AS new_value;
SELECT id, left(ash_replicant_decrypt(pan, 'regress_crypto.cards', 'pan'), 20) AS pan
  FROM regress_crypto.cards ORDER BY id;
-- relabelling an old value with the new version fails the tag
SELECT ash_replicant_decrypt(set_byte(:'ct1'::bytea, 4, 2), 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(set_byte(:'ct2'::bytea, 4, 1), 'regress_crypto.cards', 'pan');

-- removing a version still referenced fails closed, never "changed"
\! sh "$KEYRING.sh" 600 'column_encryption 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan');
SELECT id, ash_replicant_decrypt(pan, 'regress_crypto.cards', 'pan') IS NOT NULL AS readable
  FROM regress_crypto.cards ORDER BY id;
SELECT ash_replicant_decrypt(:'ct2', 'regress_crypto.cards', 'pan') AS still_current;
-- putting the version back makes it readable again
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' 'column_encryption 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan') AS restored;
-- a wrong key under the right version number: authentication fails
\! sh "$KEYRING.sh" 600 'column_encryption 1 ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' 'column_encryption 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan');
-- no column_encryption family at all: nothing encrypts, nothing decrypts
\! sh "$KEYRING.sh" 600 'message_digest 1 606162636465666768696a6b6c6d6e6f'
SELECT ash_replicant._encrypt_for_test('x', 'regress_crypto.cards', 'pan');
SELECT ash_replicant_decrypt(:'ct2', 'regress_crypto.cards', 'pan');
-- an invalid keyring file: refused as a whole
\! sh "$KEYRING.sh" 644 'column_encryption 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'
SELECT ash_replicant_decrypt(:'ct2', 'regress_crypto.cards', 'pan');
SELECT ash_replicant._encrypt_for_test('x', 'regress_crypto.cards', 'pan');
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' 'column_encryption 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'

---------------------------------------------------------------------------
-- who may decrypt: members of ash_replicant_decrypt only
---------------------------------------------------------------------------
CREATE ROLE regress_crypto_plain;
CREATE ROLE regress_crypto_admin IN ROLE ash_replicant_admin;
CREATE ROLE regress_crypto_monitor IN ROLE ash_replicant_monitor;
CREATE ROLE regress_crypto_reader IN ROLE ash_replicant_decrypt;
-- (every role may resolve the table name: the function privilege decides)
GRANT USAGE ON SCHEMA regress_crypto TO regress_crypto_plain, regress_crypto_admin,
    regress_crypto_monitor, regress_crypto_reader;
GRANT SELECT ON regress_crypto.cards TO regress_crypto_reader;
SELECT r AS role,
       has_function_privilege(r, 'ash_replicant_decrypt(bytea, regclass, text)', 'EXECUTE') AS decrypt,
       has_function_privilege(r, 'ash_replicant._encrypt_for_test(text, regclass, text)', 'EXECUTE') AS encrypt_for_test,
       has_function_privilege(r, 'ash_replicant._crypto_selftest()', 'EXECUTE') AS selftest
  FROM unnest(ARRAY['regress_crypto_plain', 'regress_crypto_admin', 'regress_crypto_monitor',
                    'regress_crypto_reader', 'ash_replicant_admin', 'ash_replicant_monitor',
                    'ash_replicant_decrypt']) AS r;
SET ROLE regress_crypto_plain;
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan');
SET ROLE regress_crypto_admin;
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan');
SELECT ash_replicant._encrypt_for_test('x', 'regress_crypto.cards', 'pan');
SET ROLE regress_crypto_monitor;
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan');
SET ROLE regress_crypto_reader;
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'pan') AS reader_decrypts;
SELECT id, ash_replicant_decrypt(holder, 'regress_crypto.cards', 'holder') AS holder
  FROM regress_crypto.cards WHERE holder IS NOT NULL;
-- the binding rules apply to the decrypt role too
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'cvv');
SELECT ash_replicant_decrypt(:'ct1', 'regress_crypto.cards', 'holder');
-- and it cannot encrypt
SELECT ash_replicant._encrypt_for_test('x', 'regress_crypto.cards', 'pan');
RESET ROLE;
-- the test-only hook refuses non-superusers even if someone grants it
GRANT USAGE ON SCHEMA ash_replicant TO regress_crypto_plain;
GRANT EXECUTE ON FUNCTION ash_replicant._encrypt_for_test(text, regclass, text) TO regress_crypto_plain;
SET ROLE regress_crypto_plain;
SELECT ash_replicant._encrypt_for_test('x', 'regress_crypto.cards', 'pan');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION ash_replicant._encrypt_for_test(text, regclass, text) FROM regress_crypto_plain;
REVOKE USAGE ON SCHEMA ash_replicant FROM regress_crypto_plain;

---------------------------------------------------------------------------
-- cleanup
---------------------------------------------------------------------------
DROP FUNCTION regress_try_decrypt(bytea);
SELECT ash_replicant_drop_sink('crypto_sink');
DROP SCHEMA regress_crypto, regress_tenant_tpl, regress_tenant_acme CASCADE;
DROP ROLE regress_crypto_plain, regress_crypto_admin, regress_crypto_monitor,
    regress_crypto_reader;
ALTER SYSTEM RESET ash_replicant.keyring_file;
SELECT pg_reload_conf();
\! rm -f "$KEYRING" "$KEYRING.sh" "$KEYRING.tmp"
-- leave the database as found (install.sql runs next and creates it afresh)
DROP EXTENSION ash_replicant;
