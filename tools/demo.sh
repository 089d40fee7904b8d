#!/usr/bin/env bash
# ash_replicant demo: two throwaway clusters on loopback, a source schema with
# tenants and a sensitive column, a pipeline mirroring a live workload, and
# ash_replicant_status() shown healthy.  Run as root on Debian 12:
#     bash tools/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
export PATH="/usr/lib/postgresql/15/bin:$PATH"
make -s -j2 >/dev/null
make -s install >/dev/null

base=${ASH_DEMO_DIR:-/tmp/ash_replicant_demo}
src_port=${ASH_DEMO_SOURCE_PORT:-55401}
dst_port=${ASH_DEMO_DEST_PORT:-55402}
as_pg() { runuser -u postgres -- env PATH="$PATH" "$@"; }

cleanup() {
    as_pg pg_ctl -D "$base/source" -m immediate stop >/dev/null 2>&1 || true
    as_pg pg_ctl -D "$base/dest" -m immediate stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup
rm -rf "$base"; mkdir -p "$base"; chown postgres: "$base"

echo "== 1. two throwaway clusters on 127.0.0.1:$src_port (source) and :$dst_port (destination)"
as_pg initdb -D "$base/source" -U postgres -A trust >/dev/null
as_pg initdb -D "$base/dest" -U postgres -A trust >/dev/null
cat >>"$base/source/postgresql.conf" <<CONF
port = $src_port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$base'
wal_level = logical
CONF
cat >>"$base/dest/postgresql.conf" <<CONF
port = $dst_port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$base'
shared_preload_libraries = 'ash_replicant'
ash_replicant.database = 'postgres'
CONF
as_pg pg_ctl -D "$base/source" -l "$base/source.log" -w start >/dev/null
as_pg pg_ctl -D "$base/dest" -l "$base/dest.log" -w start >/dev/null

src() { as_pg psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$src_port" -U postgres -d postgres "$@"; }
dst() { as_pg psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$dst_port" -U postgres -d postgres "$@"; }

echo "== 2. source schema: 1000 existing orders of three tenants, with a sensitive card number"
src <<'SQL'
CREATE SCHEMA shop;
CREATE TABLE shop.orders (
    id bigint PRIMARY KEY,
    tenant_id text NOT NULL,
    customer text NOT NULL,
    amount numeric(12,2) NOT NULL,
    card_number text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE shop.orders REPLICA IDENTITY FULL;
CREATE PUBLICATION shop_pub FOR TABLE shop.orders;
INSERT INTO shop.orders (id, tenant_id, customer, amount, card_number)
SELECT g, (ARRAY['acme','globex','initech'])[1 + g % 3], 'customer ' || g, g * 1.25,
       '4111-0000-0000-' || lpad(g::text, 4, '0')
  FROM generate_series(1, 1000) g;
SQL

echo "== 3. destination: the extension, an operator-created target (no card numbers), a sink"
sysid=$(src -Atc "SELECT system_identifier FROM pg_control_system()")
dst <<SQL
CREATE EXTENSION ash_replicant;
CREATE SCHEMA shop;
CREATE TABLE shop.orders (
    id bigint PRIMARY KEY,
    tenant_id text NOT NULL,
    customer text NOT NULL,
    amount numeric(12,2) NOT NULL,
    updated_at timestamptz NOT NULL
);
SELECT ash_replicant_create_sink('shop', slot_name => 'shop_orders');
-- the sensitive card number never leaves the source: declared sensitive and skipped
SELECT ash_replicant_map_table('shop', 'shop.orders',
        sensitive => ARRAY['card_number'], skip => ARRAY['card_number']);
SELECT ash_replicant_configure_pipeline('shop',
        connection => 'host=127.0.0.1 port=$src_port dbname=postgres user=postgres',
        publication => 'shop_pub',
        source_system_identifier => '$sysid',
        source_database => 'postgres',
        go_forward_only => false, snapshot => 'v1',   -- copy the existing orders first
        census => '{"interval_ms": 2000}');
SELECT ash_replicant_start('shop');
-- from here on every source commit is mirrored (and the existing rows are copied)
SELECT ash_replicant_wait_for_slot('shop');
SQL

echo "   waiting for the snapshot of the existing orders and the stream (status healthy)"
for i in $(seq 1 120); do
    [ "$(dst -Atc "SELECT state FROM ash_replicant_status('shop')")" = "healthy" ] && break
    sleep 0.5
done
dst -c "SELECT * FROM ash_replicant_status();"
dst -c "SELECT sink_name, source_schema, source_table, state, rows_copied, rows_estimate FROM ash_replicant.stat_snapshot_tables;"

echo "== 4. a live workload on the source: 15 seconds of pgbench (2 clients)"
cat >"$base/workload.sql" <<'SQL'
\set id random(1, 5000)
\set amt random(1, 100000)
BEGIN;
INSERT INTO shop.orders (id, tenant_id, customer, amount, card_number)
  VALUES (:id + 1000, (ARRAY['acme','globex','initech'])[1 + :id % 3], 'new ' || :id, :amt / 100.0, '4111-9999-9999-0000')
  ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount, updated_at = now();
UPDATE shop.orders SET amount = amount + 1, updated_at = now() WHERE id = :id;
DELETE FROM shop.orders WHERE id = :id + 3000 AND :amt % 7 = 0;
COMMIT;
SQL
chown postgres: "$base/workload.sql"
as_pg pgbench -n -h 127.0.0.1 -p "$src_port" -U postgres -c 2 -T 15 -f "$base/workload.sql" postgres 2>&1 | grep -E 'transactions actually processed|tps' || true

echo "== 5. wait until the mirror has caught up, then compare by content hash"
q="SELECT count(*) || ' rows, md5 ' || md5(string_agg(concat_ws('|', id, tenant_id, customer, amount, updated_at), ',' ORDER BY id)) FROM shop.orders"
want=$(src -Atc "$q")
for i in $(seq 1 120); do
    [ "$(dst -Atc "$q")" = "$want" ] && break
    sleep 0.5
done
echo "   source:      $(src -Atc "$q")"
echo "   destination: $(dst -Atc "$q")"
echo "   card numbers on the destination: $(dst -Atc "SELECT count(*) FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'card_number'") columns"

echo "== 6. status"
for i in $(seq 1 60); do
    [ "$(dst -Atc "SELECT state FROM ash_replicant_status('shop')")" = "healthy" ] && break
    sleep 0.5
done
dst -c "SELECT * FROM ash_replicant_status();"
dst -c "SELECT sink_name, state, snapshot_phase, snapshot_rows_copied, applied_transactions, applied_changes, lag_bytes, last_census_verdict FROM ash_replicant.stat_pipelines;"
echo "(logs: $base/source.log $base/dest.log; clusters are stopped on exit)"
