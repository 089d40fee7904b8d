-- The keyring file (ash_replicant.keyring_file): format, every refusal by
-- line number without echoing the line, file mode and ownership, reload on
-- change, and who may read the status.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

-- no keyring configured: every family is absent
SHOW ash_replicant.keyring_file;
SELECT * FROM ash_replicant_keyring_status();

-- The file lives in the data directory; the GUC names it relative to it.
-- $KEYRING.sh MODE LINE... rewrites it atomically (temp file + rename) with
-- the given mode; each LINE goes through printf %b (so \r and \t work).
-- It first sleeps 20 ms so that every rewrite has a new mtime.
SELECT current_setting('data_directory') || '/regress_keyring' AS keyring_path \gset
\setenv KEYRING :keyring_path
\! printf '%s\n' 'set -e' 'mode=$1; shift' 'sleep 0.02' 'rm -f "$KEYRING.tmp"' '(umask 077; printf "%b\n" "$@" > "$KEYRING.tmp")' 'chmod "$mode" "$KEYRING.tmp"' 'rm -f "$KEYRING"' 'mv "$KEYRING.tmp" "$KEYRING"' > "$KEYRING.sh"
\! sh "$KEYRING.sh" 600 '# nothing yet'
ALTER SYSTEM SET ash_replicant.keyring_file = 'regress_keyring';
SELECT pg_reload_conf();
-- a new session forks from the reloaded postmaster
\c
\set VERBOSITY terse
SHOW ash_replicant.keyring_file;

-- Probe: the status, or the error it raises, and whether the error text
-- carries any part of the recognizable fake key c0ffee... / wP/u...
CREATE FUNCTION regress_keyring_probe(OUT result text, OUT leaks_key boolean)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT string_agg(format('%s=%s%s', family, active_version, versions), ' '
                      ORDER BY family)
      INTO result FROM ash_replicant_keyring_status();
    leaks_key := false;
EXCEPTION WHEN others THEN
    result := SQLSTATE || ' ' || SQLERRM;
    leaks_key := SQLERRM ~* 'c0ff|ffee|wP/u|base64:[A-Za-z0-9]';
END $$;

-- a file of comments only: no key at all
SELECT * FROM regress_keyring_probe();

---------------------------------------------------------------------------
-- a good file: comments, blank lines, tabs, CRLF, upper/lower-case hex,
-- base64, versions out of order, the largest version
---------------------------------------------------------------------------
\! sh "$KEYRING.sh" 600 '# ash_replicant keyring (regression test)' '' 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' '  column_encryption\t2\t202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F  ' '   # indented comment' 'message_digest 1 base64:EBESExQVFhcYGRobHB0eHw==' 'horizon_provenance 3 404142434445464748494a4b4c4d4e4f50515253\r' 'horizon_provenance 1 base64:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=\r' 'message_digest 2147483647 606162636465666768696a6b6c6d6e6f'
SELECT * FROM ash_replicant_keyring_status();
SELECT * FROM regress_keyring_probe();

---------------------------------------------------------------------------
-- each malformed line refuses the whole file, by line number, and never
-- echoes the line (every bad line carries the fake key c0ffee.../wP/u...)
---------------------------------------------------------------------------
-- unknown family (a typo), and a key written where the family belongs
\! sh "$KEYRING.sh" 600 'column_encryptoin 1 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 '# keys' 'c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff 1 column_encryption'
SELECT * FROM regress_keyring_probe();
-- the key where the version belongs
\! sh "$KEYRING.sh" 600 'column_encryption c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff 1'
SELECT * FROM regress_keyring_probe();
-- versions: zero, negative, signed, decimal, not a number, above int32
\! sh "$KEYRING.sh" 600 'column_encryption 0 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption -1 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption +1 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption 1.0 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption v1 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption 2147483648 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
-- field count: missing version, trailing comment (no inline comments)
\! sh "$KEYRING.sh" 600 'column_encryption c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption 1 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff # first key'
SELECT * FROM regress_keyring_probe();
-- encodings: odd-length hex, a non-hex digit, base64 without its prefix,
-- bad base64 alphabet, base64 without padding, padding inside, empty base64
\! sh "$KEYRING.sh" 600 'message_digest 1 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0f'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'message_digest 1 c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0fg'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'message_digest 1 wP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP8='
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'message_digest 1 base64:wP/uwP/uwP/uwP!uwP/uwP/uwP/uwP/uwP/uwP/uwP8='
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'message_digest 1 base64:wP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP8'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'message_digest 1 base64:wP/uwP/uwP/u=P/uwP/uwP/uwP/uwP/uwP/uwP/uwP8='
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'message_digest 1 base64:'
SELECT * FROM regress_keyring_probe();
-- lengths: 15 bytes, and column_encryption of 16 and 33 bytes (AES-256 = 32)
\! sh "$KEYRING.sh" 600 'snapshot_provenance 1 c0ffeec0ffeec0ffeec0ffeec0ffee'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption 1 c0ffeec0ffeec0ffeec0ffeec0ffeec0'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 600 'column_encryption 1 base64:wP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/uwP/u'
SELECT * FROM regress_keyring_probe();
-- a duplicate version within a family (another family may reuse it), after
-- comments and blank lines: the line numbers count every line
\! sh "$KEYRING.sh" 600 '# header' '' 'message_digest 2 606162636465666768696a6b6c6d6e6f' 'horizon_provenance 2 606162636465666768696a6b6c6d6e6f' '' 'message_digest 2 c0ffeec0ffeec0ffeec0ffeec0ffeec0'
SELECT * FROM regress_keyring_probe();
-- the first bad line is reported (line 3 here, not line 4)
\! sh "$KEYRING.sh" 600 'message_digest 1 606162636465666768696a6b6c6d6e6f' '' 'message_digest 0 c0ffeec0ffeec0ffeec0ffeec0ffeec0' 'unknown_family 1 c0ffeec0ffeec0ffeec0ffeec0ffeec0'
SELECT * FROM regress_keyring_probe();

-- a good file loads again: the refusals left nothing behind
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
SELECT * FROM regress_keyring_probe();
-- and a bad rewrite of a loaded file is not masked by the old keys
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' 'column_encryption 2 c0ffee'
SELECT * FROM regress_keyring_probe();
SELECT * FROM regress_keyring_probe();

---------------------------------------------------------------------------
-- file mode and ownership (like the server's ssl_key_file checks)
---------------------------------------------------------------------------
\! sh "$KEYRING.sh" 640 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 604 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 644 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 610 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
SELECT * FROM regress_keyring_probe();
-- 0400 and 0700 are fine
\! sh "$KEYRING.sh" 400 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
SELECT * FROM regress_keyring_probe();
\! sh "$KEYRING.sh" 700 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' 'message_digest 1 606162636465666768696a6b6c6d6e6f'
SELECT * FROM regress_keyring_probe();
-- chmod of the loaded file is noticed (no rewrite)
\! sleep 0.02; chmod 640 "$KEYRING"
SELECT * FROM regress_keyring_probe();
\! sleep 0.02; chmod 600 "$KEYRING"
SELECT * FROM regress_keyring_probe();
-- symlinks are followed: to a good file, to a file of another owner
-- (root's /etc/passwd), to a directory
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f' && mv "$KEYRING" "$KEYRING.real" && ln -s "$KEYRING.real" "$KEYRING"
SELECT * FROM regress_keyring_probe();
\! sleep 0.02; ln -sfn /etc/passwd "$KEYRING"
SELECT * FROM regress_keyring_probe();
\! sleep 0.02; ln -sfn "$(dirname "$KEYRING")" "$KEYRING"
SELECT * FROM regress_keyring_probe();
-- a missing file
\! rm -f "$KEYRING" "$KEYRING.real"
SELECT * FROM regress_keyring_probe();

---------------------------------------------------------------------------
-- who may read the status
---------------------------------------------------------------------------
\! sh "$KEYRING.sh" 600 'column_encryption 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'
CREATE ROLE regress_keyring_plain;
CREATE ROLE regress_keyring_monitor IN ROLE ash_replicant_monitor;
CREATE ROLE regress_keyring_admin IN ROLE ash_replicant_admin;
CREATE ROLE regress_keyring_decrypt IN ROLE ash_replicant_decrypt;
SET ROLE regress_keyring_plain;
SELECT * FROM ash_replicant_keyring_status();
SET ROLE regress_keyring_decrypt;
SELECT * FROM ash_replicant_keyring_status();
SET ROLE regress_keyring_monitor;
SELECT * FROM ash_replicant_keyring_status();
SET ROLE regress_keyring_admin;
SELECT * FROM ash_replicant_keyring_status();
RESET ROLE;
-- the keyring path is not readable by them either
SET ROLE regress_keyring_admin;
SHOW ash_replicant.keyring_file;
RESET ROLE;

-- the HMAC-SHA-256 helper's known answers (test-only, superuser-only)
SELECT * FROM ash_replicant._crypto_selftest();
SET ROLE regress_keyring_admin;
SELECT * FROM ash_replicant._crypto_selftest();
RESET ROLE;

---------------------------------------------------------------------------
-- cleanup
---------------------------------------------------------------------------
DROP FUNCTION regress_keyring_probe();
DROP ROLE regress_keyring_plain, regress_keyring_monitor, regress_keyring_admin,
    regress_keyring_decrypt;
ALTER SYSTEM RESET ash_replicant.keyring_file;
SELECT pg_reload_conf();
\! rm -f "$KEYRING" "$KEYRING.sh" "$KEYRING.tmp" "$KEYRING.real"
