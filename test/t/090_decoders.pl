# One judgement for every decoder (docs/sql-api-sinks.md#decoders): the same
# mirror scenarios under each decoder of %decoders, against the real output
# plugin, consumed by a non-superuser replication role (LOGIN REPLICATION,
# SELECT on the tables, pg_read_all_settings) of a source whose
# output_plugin_libraries lists the plugin.
#
# Per decoder, a fresh source/destination pair runs:
#   state mirror  types (built-in, enum, domains, arrays, bytea, json),
#                 out-of-line TOAST values left unchanged by updates, key
#                 changes, REPLICA IDENTITY FULL, on_truncate 'mirror';
#                 a destination kill -9 mid-workload with a write audit on
#                 both ends (effect-once: per key as many writes as the
#                 source made)
#   a snapshot (v1) of rows that predate the slot; an incremental snapshot
#   copied in chunks while a workload of updates, deletes, inserts and key
#   changes on the same table streams (stale and destination-only rows
#   retired); attribute and context
#   tenancy, encryption of a sensitive column, SCD2 history, an append log
#   with logical messages (where a route may take them: pgoutput only;
#   pglogical delivers none, wal2json cuts their content at a zero byte)
# Each mirror must equal its source (content hash and row count), and the
# state-mirror tables' hashes must be equal across decoders.  Then the
# decoder-specific verdicts: preflight's output_plugin check, and what each
# decoder does with a NULL float (pgoutput and pglogical mirror it;
# wal2json halts decoder_value_ambiguous: it writes NaN as null too).
#
# A decoder is one entry of %decoders (its source settings, and the pipeline
# settings naming its table set); ASH_DECODERS=pgoutput,wal2json,pglogical picks them.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my %decoders = (
	pgoutput => {
		src_conf => '',
		# create the table set on the source; return setup_pipeline's settings
		table_set => sub {
			my ($src, $sink, @tables) = @_;
			$src->safe_psql('postgres',
				"CREATE PUBLICATION pub_$sink FOR TABLE " . join(', ', @tables));
			return (publication => "pub_$sink");
		},
		plugin => 'pgoutput',
		null_float => 'mirrored',
	},
	wal2json => {
		src_conf => "output_plugin_libraries = 'pgoutput, wal2json'\n",
		table_set => sub {
			my ($src, $sink, @tables) = @_;
			return (decoder => 'wal2json', tables => [ map { "public.$_" } @tables ]);
		},
		plugin => 'wal2json',
		null_float => 'decoder_value_ambiguous',
		# message routes are refused: wal2json cuts content at a zero byte (091)
		no_messages => 1,
	},
	pglogical => {
		src_conf => "shared_preload_libraries = 'pglogical'\n"
		  . "output_plugin_libraries = 'pgoutput, pglogical_output'\n",
		# a replication set per sink (docs/pglogical.md)
		table_set => sub {
			my ($src, $sink, @tables) = @_;
			pglogical_source($src);
			$src->safe_psql('postgres', "SELECT pglogical.create_replication_set('set_$sink')");
			pglogical_add($src, "set_$sink", $_) for @tables;
			return (decoder => 'pglogical', replication_sets => ["set_$sink"]);
		},
		plugin => 'pglogical_output',
		null_float => 'mirrored',
		no_messages => 1,	# pglogical delivers no logical messages
	},
);
my @run = split /,/, ($ENV{ASH_DECODERS} // 'pgoutput,wal2json,pglogical');

# pglogical on the source, once: the extension, a node, and read access to
# its catalog for the pipeline's role (coverage, census, doctor)
sub pglogical_source
{
	my ($src) = @_;
	return if $src->safe_psql('postgres',
		"SELECT count(*) FROM pg_extension WHERE extname = 'pglogical'") eq '1';
	$src->safe_psql('postgres', q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node(node_name := 'src', dsn := 'dbname=postgres');
GRANT USAGE ON SCHEMA pglogical TO mirror;
GRANT SELECT ON pglogical.replication_set, pglogical.replication_set_table,
	pglogical.local_node, pglogical.node, pglogical.tables TO mirror;
});
	return;
}

# pglogical adds a table to a set that replicates updates and deletes only
# under a key index: a REPLICA IDENTITY FULL table is added under its primary
# key (or a unique index made for the moment on its first NOT NULL column)
# and set FULL again
sub pglogical_add
{
	my ($src, $set, $table) = @_;
	my ($ident, $pk, $col) = split /\|/, $src->safe_psql('postgres', qq{
		SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
			(SELECT attname FROM pg_attribute WHERE attrelid = c.oid AND attnum > 0 AND attnotnull
			 AND NOT attisdropped ORDER BY attnum LIMIT 1)
		FROM pg_class c WHERE c.oid = '$table'::regclass});
	my $add = "SELECT pglogical.replication_set_add_table('$set', '$table')";
	if ($ident ne 'f')
	{
		$src->safe_psql('postgres', $add);
	}
	elsif ($pk eq 't')
	{
		$src->safe_psql('postgres', "ALTER TABLE $table REPLICA IDENTITY DEFAULT; $add;"
			  . " ALTER TABLE $table REPLICA IDENTITY FULL");
	}
	else
	{
		$src->safe_psql('postgres', "CREATE UNIQUE INDEX pgl_tmp ON $table ($col);"
			  . " ALTER TABLE $table REPLICA IDENTITY USING INDEX pgl_tmp; $add;"
			  . " ALTER TABLE $table REPLICA IDENTITY FULL; DROP INDEX pgl_tmp");
	}
	return;
}

my $keyring_key = '0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';

# what each decoder's mirror holds, to compare across decoders
my %hashes;

# Deterministic workloads (no random, no time): equal sources, equal mirrors.
my $types_ddl = q{
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN money2 AS numeric(12,2);
CREATE TABLE types (id integer PRIMARY KEY, i2 smallint, i8 bigint, num numeric(14,4) NOT NULL,
	f4 real NOT NULL, f8 double precision NOT NULL, t text, vc varchar(20), ch char(5), b boolean,
	by bytea, j json, jb jsonb, ts timestamptz, d date, tm time, iv interval, u uuid,
	arr integer[], tarr text[], e mood, pi posint, m2 money2, ip inet, bits varbit, o oid);
CREATE TABLE toast (id integer PRIMARY KEY, n integer NOT NULL, big text);
ALTER TABLE toast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE keys (id integer PRIMARY KEY, v text);
CREATE TABLE fullid (a integer NOT NULL UNIQUE, b text);
ALTER TABLE fullid REPLICA IDENTITY FULL;
CREATE TABLE trunc (id integer PRIMARY KEY, v text);
CREATE TABLE items (id bigint PRIMARY KEY, grp integer NOT NULL, val text);
};
my $types_dst_ddl = $types_ddl;
$types_dst_ddl =~ s/CREATE TABLE fullid \(a integer NOT NULL UNIQUE, b text\);/CREATE TABLE fullid (a integer PRIMARY KEY, b text);/;
$types_dst_ddl .= AshTest::write_audit_sql('items', 'bigint');
my $types_src_ddl = $types_ddl . AshTest::write_audit_sql('items', 'bigint');
my @mirror_tables = qw(types toast keys fullid trunc items);

my $types_work = q{
INSERT INTO types VALUES
 (1, 1, 9223372036854775807, 12345678.1234, 1.5, 1e-300, E'line\nnext\ttab "q" \\ back é 😀', 'varchar', 'ab',
  true, '\x00ff10', '{"a": [1, 2.5, "x"]}', '{"b": {"c": null}}', '2026-01-02 03:04:05.123456+02',
  '2026-02-28', '23:59:59.999999', '1 year 2 mons 3 days 04:05:06', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{1,NULL,3}', '{"a b","c,d",NULL}', 'happy', 7, 12.34, '10.0.0.1/8', B'1011', 4000000000),
 (2, -32768, -1, -0.0001, -3.25e+20, 2.5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (3, 0, 0, 0, 0, 0, '', '', '', false, '', 'null', '[]', 'infinity', '-infinity', '00:00', '0', NULL,
  '{}', '{}', 'sad', 1, 0, '::1', B'', 0);
UPDATE types SET t = t || ' updated', jb = '{"n": 1}' WHERE id = 1;
UPDATE types SET num = 99, f8 = 1.0000000000000002 WHERE id = 2;
DELETE FROM types WHERE id = 3;
INSERT INTO toast SELECT g, 0, repeat(md5(g::text), 400) FROM generate_series(1, 5) g;
UPDATE toast SET n = n + 1;
UPDATE toast SET big = big || 'tail' WHERE id = 2;
UPDATE toast SET n = n + 1, id = id + 100 WHERE id = 3;
DELETE FROM toast WHERE id = 4;
INSERT INTO keys SELECT g, 'k' || g FROM generate_series(1, 10) g;
UPDATE keys SET id = id + 100 WHERE id <= 3;
UPDATE keys SET id = 200, v = 'moved' WHERE id = 101;
DELETE FROM keys WHERE id = 102;
INSERT INTO fullid VALUES (1, 'a'), (2, NULL), (3, 'c');
UPDATE fullid SET b = 'b' WHERE a = 2;
UPDATE fullid SET a = 30 WHERE a = 3;
DELETE FROM fullid WHERE a = 1;
INSERT INTO trunc SELECT g, 'before' FROM generate_series(1, 5) g;
TRUNCATE trunc;
INSERT INTO trunc VALUES (9, 'after');
};

# The items workload: transactions of inserts, updates, key changes and
# deletes, to run while the destination is killed.
my $items_work = '';
{
	my $next = 1;
	for my $x (1 .. 400)
	{
		my @s;
		push @s, "INSERT INTO items SELECT g, g % 7, md5(g::text) FROM generate_series($next, " . ($next + 49) . ") g";
		$next += 50;
		my $lo = 1 + ($x * 37) % ($next - 50);
		push @s, "UPDATE items SET grp = grp + 1, val = md5(val) WHERE id BETWEEN $lo AND " . ($lo + 20);
		push @s, "UPDATE items SET id = id + 1000000 WHERE id = " . ($next - 10) if $x % 5 == 0;
		push @s, "DELETE FROM items WHERE id BETWEEN " . ($lo + 30) . " AND " . ($lo + 33) if $x % 3 == 0;
		$items_work .= "BEGIN;\n" . join(";\n", @s) . ";\nCOMMIT;\n";
	}
}

for my $dec (@run)
{
	my $d = $decoders{$dec} or BAIL_OUT("unknown decoder $dec");
	note "=== decoder $dec ===";
	# a source time zone with a half-hour offset: commit times cross it
	my ($src, $dst) = AshTest::start_pair(name_prefix => "${dec}_", log_statement => 'none',
		src_conf => $d->{src_conf} . "timezone = 'America/St_Johns'\ntrack_commit_timestamp = on\n",
		dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
	AshTenancy::write_keyring($dst, 'keyring', 'message_digest 1 ' . AshTenancy::key_hex(9),
		'column_encryption 1 ' . AshTenancy::key_hex(1),
		'snapshot_provenance 1 ' . AshTenancy::key_hex(3));

	# the pipeline's role: no superuser
	$src->safe_psql('postgres', q{
CREATE ROLE mirror LOGIN REPLICATION;
GRANT pg_read_all_settings TO mirror;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO mirror;
});
	my $conn = "host=127.0.0.1 port=" . $src->port . " dbname=postgres user=mirror";

	$src->safe_psql('postgres', $types_src_ddl);
	$dst->safe_psql('postgres', $types_dst_ddl);

	# ---------------------------------------------------------------
	# state mirror
	# ---------------------------------------------------------------
	my $sink = "mir_$dec";
	AshTest::setup_pipeline($src, $dst, sink => $sink, connection => $conn,
		$d->{table_set}->($src, $sink, @mirror_tables),
		source_role => 'mirror', ignored_message_prefixes => ['evmsg'],
		maps => [ [ 'types' ], [ 'toast' ], [ 'keys' ], [ 'fullid' ],
			[ 'trunc', on_truncate => 'mirror' ], [ 'items' ] ]);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: state mirror streams")
	  or BAIL_OUT("$dec: pipeline never streamed");
	is($src->safe_psql('postgres', "SELECT plugin FROM pg_replication_slots WHERE slot_name = '$sink'"),
		$d->{plugin}, "$dec: the slot uses plugin $d->{plugin}");
	is($dst->safe_psql('postgres',
			"SELECT verdict FROM ash_replicant_preflight('$sink') WHERE check_name = 'output_plugin'"),
		'pass', "$dec: preflight finds the plugin allowed");

	$src->safe_psql('postgres', $types_work);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: types workload applied");
	AshTest::assert_mirror_equal($src, $dst, [qw(types toast keys fullid trunc)], name => "$dec: mirror");
	# completeness as ash_replicant_verify judges it, at a position the pipeline applied
	is($dst->safe_psql('postgres',
			"SELECT string_agg(source_table || ':' || verdict, ',' ORDER BY source_table)"
			  . " FROM ash_replicant_verify('$sink')"),
		join(',', map { "$_:match" } sort('ash_marker_' . $sink, @mirror_tables)),
		"$dec: ash_replicant_verify: every mapped table matches");

	# items under destination kills: effect-once
	my $w = AshTest::start_workload($src, $items_work, timeout => 300);
	for my $k (1 .. 2)
	{
		AshTest::poll($dst, "SELECT count(*) > " . ($k * 2000) . " FROM items", 't');
		AshTest::crash_restart($dst);
	}
	ok(AshTest::finish_workload($w), "$dec: items workload completed");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: caught up after kill -9");
	AshTest::assert_mirror_equal($src, $dst, ['items'], name => "$dec: after kill -9");
	AshTest::assert_mirror_equal($src, $dst,
		['(SELECT id, count(*) AS writes FROM items_audit GROUP BY id)'], order_by => 'id',
		name => "$dec: per-key write events (none applied twice, none lost)");

	for my $t (@mirror_tables)
	{
		$hashes{$dec}{$t} = AshTest::table_hash($dst, $t);
	}

	snapshot($dec, $d, $src, $dst, $conn);
	incremental($dec, $d, $src, $dst, $conn);
	features($dec, $d, $src, $dst, $conn);
	history($dec, $d, $src, $dst, $conn);
	append_log($dec, $d, $src, $dst, $conn);

	# ---------------------------------------------------------------
	# what differs: a NULL float
	# ---------------------------------------------------------------
	$src->safe_psql('postgres', "INSERT INTO keys VALUES (500, 'before null float')");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: caught up before the NULL float");
	$src->safe_psql('postgres', q{
ALTER TABLE types ALTER COLUMN f4 DROP NOT NULL;
INSERT INTO types (id, num, f4, f8) VALUES (10, 1, NULL, 1);
});
	$dst->safe_psql('postgres', 'ALTER TABLE types ALTER COLUMN f4 DROP NOT NULL');
	if ($d->{null_float} eq 'mirrored')
	{
		AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: a NULL float is mirrored");
		AshTest::assert_mirror_equal($src, $dst, ['types'], name => "$dec: NULL float");
	}
	else
	{
		AshTest::wait_status($dst, $sink, 'halted', $d->{null_float},
			name => "$dec: a NULL float halts $d->{null_float}");
		is($dst->safe_psql('postgres', 'SELECT count(*) FROM types WHERE id = 10'), '0',
			"$dec: nothing of the halted transaction is applied");
	}

	$src->stop;
	$dst->stop;
}

# ---------------------------------------------------------------------------
# A snapshot (v1) of rows that predate the slot, then the stream.
# ---------------------------------------------------------------------------
sub snapshot
{
	my ($dec, $d, $src, $dst, $conn) = @_;
	my $sink = "snap_$dec";

	AshTest::both($src, $dst, 'CREATE TABLE pre (id integer PRIMARY KEY, v text, big text)');
	$src->safe_psql('postgres', q{
ALTER TABLE pre ALTER COLUMN big SET STORAGE EXTERNAL;
INSERT INTO pre SELECT g, 'v' || g, CASE WHEN g % 100 = 0 THEN repeat(md5(g::text), 200) END
	FROM generate_series(1, 3000) g;
});
	AshTest::setup_pipeline($src, $dst, sink => $sink, connection => $conn,
		$d->{table_set}->($src, $sink, 'pre'),
		source_role => 'mirror', ignored_message_prefixes => ['evmsg'],
		maps => [ ['pre'] ], pipeline_extra => "snapshot => 'v1'");
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: snapshot copied, stream follows") or return;
	$src->safe_psql('postgres', q{
UPDATE pre SET v = v || '+' WHERE id % 7 = 0;
DELETE FROM pre WHERE id % 11 = 0;
INSERT INTO pre VALUES (5000, 'new', NULL);
});
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: changes after the snapshot applied");
	AshTest::assert_mirror_equal($src, $dst, ['pre'], name => "$dec: snapshot and stream");
	$hashes{$dec}{pre} = AshTest::table_hash($dst, 'pre');
	return;
}

# ---------------------------------------------------------------------------
# An incremental snapshot: chunks copied between streamed transactions that
# change the table being copied (the stream's transaction ids decide which
# of a chunk's keys it leaves to the chunk).
# ---------------------------------------------------------------------------
sub incremental
{
	my ($dec, $d, $src, $dst, $conn) = @_;
	my $sink = "incr_$dec";
	my $cols = 'id integer PRIMARY KEY, v text NOT NULL, n integer NOT NULL DEFAULT 0, big text';

	$src->safe_psql('postgres', qq{
CREATE TABLE inc ($cols);
ALTER TABLE inc ALTER COLUMN big SET STORAGE EXTERNAL;
INSERT INTO inc SELECT g, 'v' || g, 0, CASE WHEN g % 500 = 0 THEN repeat(md5(g::text), 200) END
	FROM generate_series(1, 40000) g;
});
	$dst->safe_psql('postgres', qq{
CREATE TABLE inc ($cols, replica_fingerprint bytea, replica_seen_attempt bytea);
INSERT INTO inc (id, v) VALUES (3, 'stale'), (900000, 'the source lacks it');
});
	AshTest::setup_pipeline($src, $dst, sink => $sink, connection => $conn,
		$d->{table_set}->($src, $sink, 'inc'), marker => 0,
		source_role => 'mirror', ignored_message_prefixes => ['evmsg'],
		maps => [ [ 'inc', snapshot_provenance => 'true' ] ],
		pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 250");
	AshTest::wait_slot_consistent($src, $dst, $sink);
	my $w = AshTest::start_workload($src, q{
DO $$
BEGIN
	FOR i IN 1 .. 300 LOOP
		UPDATE inc SET n = n + 1, v = 'u' || i WHERE id = (i * 67) % 40000 + 1;
		DELETE FROM inc WHERE id = (i * 131) % 40000 + 1;
		INSERT INTO inc VALUES (40000 + i, 'new' || i, 0, NULL);
		UPDATE inc SET id = id + 100000 WHERE id = (i * 37) % 40000 + 1;
		UPDATE inc SET n = n + 1 WHERE id = (i * 500) % 40000 + 500;	-- TOAST left unchanged
		COMMIT;
		PERFORM pg_sleep(0.005);
	END LOOP;
END $$;
}, timeout => 300);
	ok(AshTest::finish_workload($w), "$dec: incremental: the workload completed");
	my ($last) = AshTest::commit_tracked($src, "UPDATE inc SET v = 'last' WHERE id = 2");
	ok(AshTest::wait_lsn($src, $dst, $sink, $last), "$dec: incremental: caught up");
	ok(AshTest::poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints"
			  . " WHERE slot_name = '$sink'", 't'), "$dec: incremental: the snapshot completed");
	AshTest::assert_mirror_equal($src, $dst, ['(SELECT id, v, n, big FROM inc)'], order_by => 'id',
		name => "$dec: incremental snapshot and stream");
	return;
}

# ---------------------------------------------------------------------------
# Attribute and context tenancy, an encrypted sensitive column.
# ---------------------------------------------------------------------------
sub features
{
	my ($dec, $d, $src, $dst, $conn) = @_;
	my $sink = "feat_$dec";

	$src->safe_psql('postgres', q{
CREATE TABLE accounts (tenant text NOT NULL, id integer NOT NULL, name text,
	balance numeric NOT NULL DEFAULT 0, PRIMARY KEY (tenant, id));
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE TABLE vault (id integer PRIMARY KEY, tenant text NOT NULL, secret text, note text);
ALTER TABLE vault REPLICA IDENTITY FULL;
CREATE TABLE cards (id integer PRIMARY KEY, holder text, pan text);
CREATE TABLE th (id integer PRIMARY KEY);
});
	$dst->safe_psql('postgres', q{
CREATE TABLE th (id integer PRIMARY KEY);
CREATE TABLE accounts (tenant text NOT NULL, id integer PRIMARY KEY, name text,
	balance numeric NOT NULL DEFAULT 0);
CREATE TABLE vault (id integer PRIMARY KEY, tenant text NOT NULL, secret text, note text);
CREATE SCHEMA acme;
CREATE SCHEMA globex;
CREATE TABLE acme.vault (LIKE public.vault INCLUDING ALL);
CREATE TABLE globex.vault (LIKE public.vault INCLUDING ALL);
CREATE TABLE cards (id integer PRIMARY KEY, holder text, pan bytea);
CREATE ROLE reader LOGIN;
GRANT ash_replicant_decrypt TO reader;
GRANT SELECT ON cards TO reader;
});
	AshTest::setup_pipeline($src, $dst, sink => $sink, connection => $conn,
		$d->{table_set}->($src, $sink, qw(accounts vault cards th)),
		source_role => 'mirror', ignored_message_prefixes => ['evmsg'],
		maps => [
			[ 'accounts', tenant_column => 'tenant', tenant_strategy => 'attribute' ],
			[ 'vault', tenant_column => 'tenant', tenant_strategy => 'context' ],
			[ 'cards', sensitive => ['pan'], encrypted => ['pan'] ], [ 'th' ] ]);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: tenancy and encryption pipeline streams")
	  or return;

	$src->safe_psql('postgres', q{
INSERT INTO accounts SELECT (ARRAY['acme','globex'])[g % 2 + 1], g, 'acct ' || g, g * 10
	FROM generate_series(1, 10) g;
UPDATE accounts SET balance = balance + 1 WHERE id % 3 = 0;
UPDATE accounts SET tenant = 'acme' WHERE id = 1;
UPDATE accounts SET tenant = 'globex', id = 20 WHERE id = 2;
DELETE FROM accounts WHERE id = 4;
INSERT INTO vault SELECT g, (ARRAY['acme','globex'])[g % 2 + 1], 'secret ' || g, 'note ' || g
	FROM generate_series(1, 6) g;
UPDATE vault SET note = 'changed' WHERE id = 2;
DELETE FROM vault WHERE id = 3;
INSERT INTO cards SELECT g, 'holder ' || g, '4111 1111 1111 ' || lpad(g::text, 4, '0')
	FROM generate_series(1, 5) g;
UPDATE cards SET holder = 'renamed' WHERE id = 1;
UPDATE cards SET pan = NULL WHERE id = 2;
DELETE FROM cards WHERE id = 5;
});
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: tenancy and encryption applied");
	AshTest::assert_mirror_equal($src, $dst, ['accounts'], name => "$dec: attribute tenancy");
	for my $t (qw(acme globex))
	{
		AshTenancy::assert_same($src, 'vault', "tenant = '$t'", $dst, "$t.vault",
			"$dec: context tenancy: $t.vault");
		$hashes{$dec}{"$t.vault"} = AshTest::table_hash($dst, "$t.vault", 'id');
	}
	$hashes{$dec}{accounts} = AshTest::table_hash($dst, 'accounts');
	my $plain = $dst->safe_psql('postgres',
		"SET ROLE reader; SELECT id, holder, ash_replicant_decrypt(pan, 'public.cards', 'pan') FROM cards ORDER BY id");
	is($plain, $src->safe_psql('postgres', 'SELECT id, holder, pan FROM cards ORDER BY id'),
		"$dec: the encrypted column decrypts to the source values");
	is($dst->safe_psql('postgres',
			"SELECT count(*) FROM cards WHERE position(convert_to('4111', 'UTF8') in pan) > 0"),
		'0', "$dec: no plaintext in the encrypted column");
	$hashes{$dec}{'cards (decrypted)'} = $plain;

	# on_truncate 'halt' (the default): the TRUNCATE is not applied
	$src->safe_psql('postgres', 'INSERT INTO th VALUES (1)');
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: caught up before the TRUNCATE");
	$src->safe_psql('postgres', 'TRUNCATE th; INSERT INTO th VALUES (2)');
	AshTest::wait_status($dst, $sink, 'halted', 'source_truncate',
		name => "$dec: TRUNCATE of a table with on_truncate 'halt' halts source_truncate");
	is($dst->safe_psql('postgres', 'SELECT string_agg(id::text, \',\') FROM th'), '1',
		"$dec: the truncating transaction is not applied");
	return;
}

# ---------------------------------------------------------------------------
# SCD2 history: versions, TOAST left unchanged, a key change, commit times.
# ---------------------------------------------------------------------------
sub history
{
	my ($dec, $d, $src, $dst, $conn) = @_;
	my $sink = "hist_$dec";

	$src->safe_psql('postgres', q{
CREATE TABLE acct (id integer PRIMARY KEY, grp integer, val text, big text);
ALTER TABLE acct ALTER COLUMN big SET STORAGE EXTERNAL;
});
	$dst->safe_psql('postgres', q{
CREATE TABLE acct_hist (
	version_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id integer NOT NULL, grp integer, val text, big text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	valid_from_ts timestamptz, valid_to_ts timestamptz, is_current boolean,
	UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX acct_hist_open ON acct_hist (id) WHERE valid_to_lsn IS NULL;
});
	AshTest::setup_pipeline($src, $dst, sink => $sink, connection => $conn,
		$d->{table_set}->($src, $sink, 'acct'),
		source_role => 'mirror', ignored_message_prefixes => ['evmsg'],
		maps => [ [ 'acct_hist', source_table => 'acct', history_strategy => 'scd2',
			history_business_key => ['id'], history_valid_from_ts_column => 'valid_from_ts',
			history_valid_to_ts_column => 'valid_to_ts', history_current_column => 'is_current',
			on_truncate => 'close' ] ]);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: SCD2 pipeline streams") or return;

	for my $stmt (
		"INSERT INTO acct SELECT g, g, 'v' || g, repeat(md5(g::text), 300) FROM generate_series(1, 6) g",
		"UPDATE acct SET grp = grp + 10 WHERE id <= 3",
		"UPDATE acct SET big = 'small' WHERE id = 2",
		"UPDATE acct SET id = 60 WHERE id = 6",
		"DELETE FROM acct WHERE id = 5",
		"INSERT INTO acct VALUES (5, 55, 're', 'again')",
		"UPDATE acct SET val = val || '!' WHERE id IN (1, 5)",
		"TRUNCATE acct",
		"INSERT INTO acct VALUES (7, 7, 'after truncate', 'x')")
	{
		$src->safe_psql('postgres', $stmt);
	}
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: SCD2 workload applied");

	# open versions: the source rows, valid from their row's commit time
	is($dst->safe_psql('postgres', q{SET TimeZone = 'UTC';
		SELECT string_agg(row(id, grp, val, md5(big), valid_from_ts, is_current)::text, E'\n' ORDER BY id)
		FROM acct_hist WHERE valid_to_lsn IS NULL}),
		$src->safe_psql('postgres', q{SET TimeZone = 'UTC';
		SELECT string_agg(row(id, grp, val, md5(big), pg_xact_commit_timestamp(xmin), true)::text, E'\n' ORDER BY id)
		FROM acct}),
		"$dec: open versions equal the source rows, valid from their commit time");
	# windows: contiguous where a key changed, never overlapping
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM acct_hist a JOIN acct_hist b
		ON a.id = b.id AND b.valid_from_lsn = a.valid_to_lsn AND b.valid_from_ts = a.valid_to_ts
		AND NOT a.is_current AND b.valid_from_ts > a.valid_from_ts}),
		'6', "$dec: six updates close a version where the next begins (LSN and time)");
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM acct_hist WHERE valid_to_lsn IS NULL}), '1',
		"$dec: on_truncate 'close' closed every version (one opened since)");
	is($dst->safe_psql('postgres', q{SELECT count(*) FROM acct_hist a
		WHERE (a.valid_to_lsn IS NULL) <> (a.valid_to_ts IS NULL) OR a.valid_to_lsn <= a.valid_from_lsn
		OR EXISTS (SELECT 1 FROM acct_hist b WHERE b.id = a.id AND b.version_id <> a.version_id
			AND b.valid_from_lsn >= a.valid_from_lsn
			AND b.valid_from_lsn < coalesce(a.valid_to_lsn, 9223372036854775807))}),
		'0', "$dec: no version window is open-ended wrongly or overlaps another");
	$hashes{$dec}{acct_hist} = $dst->safe_psql('postgres', q{
		SELECT string_agg(row(id, grp, val, md5(big), valid_to_lsn IS NULL, is_current)::text, E'\n'
			ORDER BY id, valid_from_lsn)
		FROM acct_hist});
	return;
}

# ---------------------------------------------------------------------------
# An append log: every change and every logical message, in order.
# ---------------------------------------------------------------------------
sub append_log
{
	my ($dec, $d, $src, $dst, $conn) = @_;
	my $sink = "log_$dec";
	my $marker = AshTest::marker_table($sink);
	my $structural = AshTest::append_log_columns();
	my $axes = 'UNIQUE (' . AshTest::append_log_axes() . ')';

	$src->safe_psql('postgres', qq{
CREATE TABLE ev (id integer PRIMARY KEY, grp integer, val text, big text);
ALTER TABLE ev ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE ev REPLICA IDENTITY FULL;
CREATE TABLE $marker (id bigint PRIMARY KEY, note text);
ALTER TABLE $marker REPLICA IDENTITY FULL;
});
	$dst->safe_psql('postgres', qq{
CREATE TABLE ev_log ($structural, id integer, grp integer, val text, big text, $axes);
CREATE TABLE $marker ($structural, id bigint, note text, $axes);
});
	my %ts = $d->{table_set}->($src, $sink, 'ev', $marker);
	my ($sysid, $db) = AshTest::source_identity($src);
	my $ts_sql = join('', map {
		my $v = $ts{$_};
		", $_ => " . (ref $v ? AshTest::text_array_literal(@$v) : AshTest::lit($v)) } sort keys %ts);
	for my $stmt (
		"SELECT ash_replicant_create_sink('$sink', sink_kind => 'append_log', initial_state => 'go_forward')",
		"SELECT ash_replicant_map_table('$sink', 'ev_log'::regclass, source_table => 'ev', append_log => true, on_truncate => 'append')",
		"SELECT ash_replicant_map_table('$sink', '$marker'::regclass, append_log => true)",
		($d->{no_messages} ? () :
			"SELECT ash_replicant_add_message_route('$sink', 'evmsg', 'ev_log'::regclass, '1 day'::interval)"),
		"SELECT ash_replicant_configure_pipeline('$sink', " . AshTest::lit($conn) . "$ts_sql,"
		  . " source_system_identifier => '$sysid', source_database => '$db', census => '{\"interval_ms\": 1000}')",
		"SELECT ash_replicant_start('$sink')")
	{
		my ($rc, $out, $err) = $dst->psql('postgres', $stmt);
		BAIL_OUT("$dec: append-log setup failed: " . substr($stmt, 0, 60) . ": $err") if $rc;
	}
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: append-log pipeline streams") or return;

	for my $stmt (
		"INSERT INTO ev SELECT g, g, 'v' || g, repeat(md5(g::text), 300) FROM generate_series(1, 4) g",
		"UPDATE ev SET val = 'u' || id WHERE id <= 2",
		($d->{no_messages} ? "DELETE FROM ev WHERE id = 3" :
			"BEGIN; SELECT pg_logical_emit_message(true, 'evmsg', 'in tx'); DELETE FROM ev WHERE id = 3; COMMIT"),
		($d->{no_messages} ? () : "SELECT pg_logical_emit_message(false, 'evmsg', 'not in tx')"),
		"TRUNCATE ev",
		"INSERT INTO ev VALUES (9, 9, 'after', 'x')")
	{
		$src->safe_psql('postgres', $stmt);
	}
	AshTest::wait_caught_up($src, $dst, $sink, name => "$dec: append-log workload applied");
	my $log = $dst->safe_psql('postgres', q{
		SELECT string_agg(concat_ws('|', operation, ordinal, id, grp, val, md5(big), message_prefix,
			convert_from(message_content, 'UTF8')), E'\n' ORDER BY commit_lsn, ordinal)
		FROM ev_log});
	my @events = split /\n/, $log;
	# the row events alone, comparable with a decoder that delivers no messages
	$hashes{$dec}{'ev_log rows'} = $dst->safe_psql('postgres', q{
		SELECT string_agg(concat_ws('|', operation, id, grp, val, md5(big)), E'\n' ORDER BY commit_lsn, ordinal)
		FROM ev_log WHERE message_prefix IS NULL});
	if ($d->{no_messages})
	{
		is(scalar(@events), 9, "$dec: the append log holds every change (9 events)") or diag $log;
		return;
	}
	is(scalar(@events), 11, "$dec: the append log holds every change and message (11 events)")
	  or diag $log;
	like($log, qr/\|evmsg\|in tx\n.*\|evmsg\|not in tx/s, "$dec: both logical messages logged in order");
	$hashes{$dec}{ev_log} = $log;
	return;
}

# the same source changes give the same mirror, whatever the decoder (the
# append log with its logical messages among the decoders that deliver them)
if (@run > 1)
{
	my %keys = map { %{ $hashes{$_} // {} } } @run;
	for my $t (sort keys %keys)
	{
		my @with = grep { exists $hashes{$_}{$t} } @run;
		next if @with < 2;
		my %seen = map { $hashes{$_}{$t} => 1 } @with;
		is(scalar(keys %seen), 1, "$t: equal mirrors under " . join(' and ', @with))
		  or diag join("\n", map { "$_: $hashes{$_}{$t}" } @with);
	}
}

done_testing();
