"""Initial-load workloads of the benchmark (WORKLOADS=L1,L8; bench/run.sh initial-load).

What they measure: copying rows that already exist in the source, before any
streaming.  L1 is one table of 10,000,000 rows, L8 eight tables of 1,000,000
rows (SCALE multiplies both); 134 bytes per row in the heap (a bigint primary key, ints, a
bigint, two texts, a numeric, two timestamptz).  The source tables are filled
once per workload (then frozen and analyzed, so no contender pays for hint
bits) and every contender copies them, one at a time, into a fresh empty set of
destination tables (dropped and created again, primary keys included):

  native     CREATE SUBSCRIPTION ... WITH (copy_data = true) -- the apply worker
             starts table-sync workers (max_sync_workers_per_subscription, 2 by
             default), each COPYing one table; timed from CREATE SUBSCRIPTION
             until every pg_subscription_rel row of it is 'r' (ready)
  pglogical  pglogical.create_subscription(synchronize_data := true); timed
             until the subscription's sync and every table's are 'r' (ready) in
             pglogical.local_sync_status
  ash        ash_replicant_configure_pipeline(go_forward_only => false,
             snapshot => 'v1'), then ash_replicant_start; timed from the start
             until ash_replicant.stat_pipelines.snapshot_phase = 'complete'
             (n/a on a build without that column); the pipeline worker and its
             helper copiers (ash_replicant.snapshot_workers, 2 by default) copy
             one table each at a time

Then every destination table's content hash (bench.py's) must equal the
source's.  Memory of the contender's processes is sampled from /proc every
50 ms: "worker" is ash_replicant's pipeline worker, native's and pglogical's
apply worker; "sync" the other processes that write the copied rows
(ash_replicant's helper copiers, native's table-sync workers, pglogical's copy
backend); `host cpu s` is the busy CPU time of the whole host during
the measurement (both servers and everything else running: noisy on a shared
machine).
"""
import os
import subprocess
import tempfile
import time

import psycopg2

import bench as B
from bench import q, q1, log

COLS = ("id bigint NOT NULL, account int NOT NULL, qty int NOT NULL, ref bigint NOT NULL, status text NOT NULL,"
        " note text NOT NULL, amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL,"
        " updated_at timestamptz NOT NULL")
GEN = ("g, (g % 100003)::int, (g % 1000)::int, g * 7919, (ARRAY['new', 'paid', 'shipped', 'closed'])[1 + (g % 4)::int],"
       " md5(g::text) || ' ' || left(md5((g # 1234567)::text), 15), round((g % 1000003) / 100.0, 2),"
       " timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',"
       " timestamptz '2024-01-01 00:00:00+00' + (g + g % 86400) * interval '1 second'")
HASH = "ROW(id, account, qty, ref, status, note, amount, created_at, updated_at)"

# ash_replicant seconds against native's: what the figures are read against (printed, not asserted)
TARGETS = {"L1": 1.0, "L8": 1.3}
# tables copied at once by each contender (both at their default, 2, when unset):
# ash_replicant.snapshot_workers (ASH_COPIERS) and max_sync_workers_per_subscription
# (NATIVE_COPIERS); COPIERS sets both
COPIER_GUCS = {g: os.environ.get(e) or os.environ.get("COPIERS")
               for g, e in (("ash_replicant.snapshot_workers", "ASH_COPIERS"),
                            ("max_sync_workers_per_subscription", "NATIVE_COPIERS"))}
# rows per incremental chunk (chunk_rows) for ash_incr; unset: the product's default (1000)
INCR_CHUNK_ROWS = os.environ.get("INCR_CHUNK_ROWS")
INCR_MAX_PENDING = os.environ.get("INCR_MAX_PENDING")
# rounds of every contender on one fill of the source, in alternating order (forward,
# then reversed, ...): paired runs for ratios on a machine whose speed drifts by 20 %
LOAD_ROUNDS = int(os.environ.get("LOAD_ROUNDS", "1"))
LOAD_VACUUM = os.environ.get("LOAD_VACUUM", "1") != "0"
# a write load on the source while each contender copies: RATE inserts a second into a
# table no publication holds (pgbench, 2 sessions), "/async" committed with
# synchronous_commit = off (bench/README.md, "Initial load from a busy source")
LOAD_NOISE = os.environ.get("LOAD_NOISE", "")


class Noise:
    """pgbench writing to bench_noise on the source for the duration of a with block."""

    def __init__(self, src):
        rate, _, mode = LOAD_NOISE.partition("/")
        self.rate, self.asynchronous = int(rate), mode == "async"
        q(src, "CREATE TABLE IF NOT EXISTS bench_noise (id bigserial PRIMARY KEY, v text)")
        self.script = os.path.join(tempfile.mkdtemp(prefix="noise"), "noise.sql")
        with open(self.script, "w") as f:
            f.write("INSERT INTO bench_noise (v) VALUES ('noise');\n")
        os.chmod(os.path.dirname(self.script), 0o755)
        os.chmod(self.script, 0o644)

    def __enter__(self):
        opts = "PGOPTIONS=-c synchronous_commit=%s" % ("off" if self.asynchronous else "on")
        self.p = subprocess.Popen(["runuser", "-u", "postgres", "--", "env", opts,
                                   os.path.join(B.PGBIN, "pgbench"), "-n", "-h", "127.0.0.1", "-p", str(B.SRC_PORT),
                                   "-U", "postgres", "-c", "2", "-j", "1", "-R", str(self.rate), "-T", "100000",
                                   "-f", self.script, "postgres"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)   # connected and writing before the contender starts
        return self

    def __exit__(self, *exc):
        self.p.terminate()
        self.p.wait()
        return False


class LoadWorkload(B.Workload):
    """The source tables of one initial-load workload (content_hash is the streaming workloads')."""

    def __init__(self, name):
        self.name = name
        self.pub = "pub_" + name.lower()
        self.hash_row = HASH
        if name == "L1":
            self.tables, self.per_table = ["bench.l1"], B.sc(10_000_000)
        else:
            self.tables, self.per_table = ["bench.l8_%d" % i for i in range(1, 9)], B.sc(1_000_000)
        self.rows = self.per_table * len(self.tables)
        self.desc = "%d table%s of %s rows" % (len(self.tables), "s" if len(self.tables) > 1 else "",
                                               format(self.per_table, ","))

    def create(self, conn):
        for t in self.tables:
            q(conn, "DROP TABLE IF EXISTS %s" % t)
            q(conn, "CREATE TABLE %s (%s, PRIMARY KEY (id))" % (t, COLS))

    def setup(self, src):
        """Fill the source (the key is built after the rows, as a bulk load would), freeze it."""
        q(src, "DROP PUBLICATION IF EXISTS %s" % self.pub)
        q(src, "SET synchronous_commit = off")
        for i, t in enumerate(self.tables):
            q(src, "DROP TABLE IF EXISTS %s" % t)
            q(src, "CREATE TABLE %s (%s)" % (t, COLS))
            # L8's tables hold consecutive key ranges: eight different contents
            q(src, "INSERT INTO %s SELECT %s FROM generate_series(%d::bigint, %d) g"
              % (t, GEN, i * self.per_table + 1, (i + 1) * self.per_table))
            q(src, "ALTER TABLE %s ADD PRIMARY KEY (id)" % t)
            # LOAD_VACUUM=0: left as loaded (hint bits unset), analyzed only
            q(src, ("VACUUM (FREEZE, ANALYZE) %s" if LOAD_VACUUM else "ANALYZE %s") % t)
        q(src, "CREATE PUBLICATION %s FOR TABLE %s" % (self.pub, ", ".join(self.tables)))
        q(src, "CHECKPOINT")

    def fresh_dest(self, dst):
        """An empty destination table set, created again for each contender."""
        self.create(dst)
        q(dst, "CHECKPOINT")

    def hashes(self, conn):
        return {t: tuple(self.content_hash(conn, t)) for t in self.tables}


def host_cpu_s():
    """Busy CPU seconds of the whole host since boot (/proc/stat: user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")


def sample(procs, pids, before=False):
    """Record /proc status of (role, pid) pairs: peak VmHWM and RssAnon, CPU seconds (a
    process already there before the start counts from its first sample)."""
    for role, pid in pids:
        st = B.proc_status(pid)
        if not st:
            continue
        p = procs.setdefault(pid, {"role": role, "VmHWM": 0, "RssAnon": 0,
                                   "cpu0": st["cpu_s"] if before else 0.0})
        p["VmHWM"] = max(p["VmHWM"], st.get("VmHWM", 0))
        p["RssAnon"] = max(p["RssAnon"], st.get("RssAnon", 0))
        p["cpu_s"] = st["cpu_s"]


def by_role(procs):
    out = {}
    for p in procs.values():
        r = out.setdefault(p["role"], {"processes": 0, "peak_rss_kb": 0, "peak_anon_kb": 0, "cpu_s": 0.0})
        r["processes"] += 1
        r["peak_rss_kb"] = max(r["peak_rss_kb"], p["VmHWM"])
        r["peak_anon_kb"] = max(r["peak_anon_kb"], p["RssAnon"])
        r["cpu_s"] = round(r["cpu_s"] + p.get("cpu_s", 0.0) - p["cpu0"], 2)
    return out


def timed_load(src, start, phase, pids, check=None):
    """Call start(), then poll phase() -> (label, done) every 50 ms until done.  Returns
    the seconds, when each phase label was first seen, memory and CPU of the processes
    by role (pids() -> [(role, pid)] on the destination; "source": the source's
    backends and walsenders serving the copy) and the host's busy CPU seconds meanwhile."""
    timeout = 300 + 3000 * B.SCALE
    seen, procs = {}, {}
    def all_pids():
        return pids() + [("source", p) for (p,) in
                         q(src, "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                                " AND backend_type IN ('client backend', 'walsender')")]
    sample(procs, all_pids(), before=True)
    cpu0 = host_cpu_s()
    t0 = time.monotonic()
    start()
    next_check = t0 + 0.5
    while True:
        label, done = phase()
        now = time.monotonic()
        seen.setdefault(label, round(now - t0, 3))
        if done:
            secs = now - t0
            break
        sample(procs, all_pids())
        if check and now >= next_check:
            check()
            next_check = now + 0.5
        if now - t0 > timeout:
            raise B.Failed("timeout after %ds in phase %s" % (timeout, label))
        time.sleep(B.POLL)
    host = host_cpu_s() - cpu0
    sample(procs, all_pids())
    return {"seconds": secs, "phases": seen, "processes": by_role(procs), "host_cpu_s": round(host, 2)}


class AshLoad(B.Ash):
    """ash_replicant with snapshot => 'v1': the worker creates the slot and copies the
    mapped tables before it streams."""

    def prepare(self, src, dst):
        if not q1(dst, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'ash_replicant.stat_pipelines'::regclass"
                       " AND attname = 'snapshot_phase' AND NOT attisdropped"):
            raise B.NotAvailable("this build has no snapshot support (ash_replicant.stat_pipelines.snapshot_phase)")
        sysid = q1(src, "SELECT system_identifier::text FROM pg_control_system()")
        q(dst, "SELECT ash_replicant_create_sink(%s, slot_name => %s, initial_state => 'snapshot')",
          (self.slot, self.slot))
        for t in self.w.tables:
            schema, table = t.split(".")
            self.map_table(dst, t, schema, table, {})
        q(dst, "SELECT ash_replicant_configure_pipeline(%s, connection => %s, publication => %s,"
               " source_system_identifier => %s, source_database => 'postgres',"
               " go_forward_only => false, snapshot => 'v1')",
          (self.slot, B.SRC_DSN, self.w.pub, sysid))
        # no slot here: the worker creates it along with the snapshot it copies

    def cleanup(self, src, dst):
        if q1(dst, "SELECT count(*) FROM ash_replicant.sinks WHERE sink_name = %s", (self.slot,)):
            super().cleanup(src, dst)   # stop, wait for the worker, drop the sink and the slot
        else:
            B.Contender.cleanup(self, src, dst)

    def measure(self, src, dst):
        def start():
            try:
                q(dst, "SELECT ash_replicant_start(%s)", (self.slot,))
            except psycopg2.Error as e:
                raise B.Failed("start refused: %s" % str(e).strip().splitlines()[0])

        def phase():
            st = self.stats(dst) or {}
            p = st.get("snapshot_phase")
            label = p or "-"
            if st.get("snapshot_tables_total") is not None:
                label += " %s/%s tables" % (st.get("snapshot_tables_copied"), st["snapshot_tables_total"])
            return label, p == "complete"

        def pids():
            # the pipeline worker copies too, with helper copiers (ash_replicant.snapshot_workers)
            pid = self.status(dst)[2]
            return ([("worker", pid)] if pid else []) + \
                [("sync", p) for p, _ in B.server_processes("dest", "ash_replicant snapshot")]

        def check():
            state, reason, _ = self.status(dst)
            if state in ("halted", "misconfigured"):
                raise B.Failed("pipeline %s/%s" % (state, reason))

        m = timed_load(src, start, phase, pids, check)
        m["ash_stats"] = self.stats(dst)
        if q1(dst, "SELECT to_regclass('ash_replicant.stat_snapshot_tables') IS NOT NULL"):
            m["ash_snapshot_tables"] = q(dst, "SELECT source_schema || '.' || source_table, state, rows_copied, copied_at"
                                              " FROM ash_replicant.stat_snapshot_tables WHERE sink_name = %s ORDER BY 4",
                                         (self.slot,))
        return m

    def stats(self, dst):
        """The pipeline's row of ash_replicant.stat_pipelines, by column name (the columns vary by build)."""
        with dst.cursor() as cur:
            cur.execute("SELECT * FROM ash_replicant.stat_pipelines WHERE sink_name = %s", (self.slot,))
            row = cur.fetchone()
            return dict(zip([d[0] for d in cur.description], row)) if row else None


class AshIncrLoad(AshLoad):
    """ash_replicant with snapshot => 'incremental' (contender ash_incr): the worker
    streams from the start and copies the tables chunk by chunk (chunk_rows, default
    1000), every mapping keeping provenance (its two columns added to the fresh
    destination tables).  Timed like ash: until snapshot_phase = 'complete'."""
    name, short = "ash_replicant", "ashi"

    def __init__(self, w, rep):
        super().__init__(w, rep)
        self.variant = "incremental"

    snapshot = "incremental"

    def prepare(self, src, dst):
        """Every mapping keeps provenance: its two columns added to the fresh
        destination table, snapshot_provenance on."""
        sysid = q1(src, "SELECT system_identifier::text FROM pg_control_system()")
        q(dst, "SELECT ash_replicant_create_sink(%s, slot_name => %s, initial_state => 'snapshot')",
          (self.slot, self.slot))
        for t in self.w.tables:
            schema, table = t.split(".")
            q(dst, "ALTER TABLE %s ADD COLUMN replica_fingerprint bytea, ADD COLUMN replica_seen_attempt bytea" % t)
            self.map_table(dst, t, schema, table, {"snapshot_provenance": True})
        q(dst, "SELECT ash_replicant_configure_pipeline(%s, connection => %s, publication => %s,"
               " source_system_identifier => %s, source_database => 'postgres',"
               " go_forward_only => false, snapshot => %s"
               + (", chunk_rows => %d" % int(INCR_CHUNK_ROWS)
                  if INCR_CHUNK_ROWS and self.snapshot == "incremental" else "")
               + (", max_pending_chunks => %d" % int(INCR_MAX_PENDING)
                  if INCR_MAX_PENDING and self.snapshot == "incremental" else "") + ")",
          (self.slot, B.SRC_DSN, self.w.pub, sysid, self.snapshot))


class AshProvLoad(AshIncrLoad):
    """ash_replicant with snapshot => 'v1' and every mapping keeping provenance
    (contender ash_prov): v1's copy plus the fingerprint and seen-mark of each row,
    the cost snapshot_provenance adds to v1 (and the floor of ash_incr)."""
    name, short = "ash_replicant", "ashp"

    def __init__(self, w, rep):
        super().__init__(w, rep)
        self.variant = "provenance"

    snapshot = "v1"


class NativeLoad(B.Native):
    """CREATE SUBSCRIPTION ... WITH (copy_data = true), table-sync workers at their default count."""

    def __init__(self, w, rep):
        super().__init__(w, rep, streaming=False)

    def prepare(self, src, dst):
        pass   # CREATE SUBSCRIPTION, which creates the slot, is the timed start

    def measure(self, src, dst):
        # the launcher starts apply workers at most once per wal_retrieve_retry_interval (5 s)
        wait = B.LAST_NATIVE_START[0] + 5.5 - time.monotonic()
        if wait > 0:
            time.sleep(wait)

        def start():
            B.LAST_NATIVE_START[0] = time.monotonic()
            q(dst, "CREATE SUBSCRIPTION %s CONNECTION %%s PUBLICATION %s WITH (copy_data = true, slot_name = %%s)"
              % (self.sub, self.w.pub), (B.SRC_DSN, self.slot))

        def phase():
            states = q(dst, "SELECT r.srsubstate, count(*) FROM pg_subscription_rel r"
                            " JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = %s"
                            " GROUP BY 1 ORDER BY 1", (self.sub,))
            label = " ".join("%s:%d" % (s, n) for s, n in states) or "-"
            return label, label == "r:%d" % len(self.w.tables)

        def pids():
            return [("sync" if relid else "apply", pid) for pid, relid in
                    q(dst, "SELECT pid, relid FROM pg_stat_subscription WHERE subname = %s AND pid IS NOT NULL",
                      (self.sub,))]

        m = timed_load(src, start, phase, pids)
        # every table copied (none left in i or d): 'r' comes when the apply worker next looks
        copied = [t for label, t in m["phases"].items() if "i:" not in label and "d:" not in label]
        m["copied_s"] = min(copied) if copied else None
        return m

    def cleanup(self, src, dst):
        super().cleanup(src, dst)
        # a sync interrupted by a failure leaves its own slot behind
        for (slot,) in q(src, "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'pg\\_%\\_sync\\_%'"):
            B.drop_slot(src, slot)


class PglogicalLoad(B.Pglogical):
    """pglogical.create_subscription(synchronize_data := true)."""

    def prepare(self, src, dst):
        if not B.PGLOGICAL_OK:
            raise B.NotAvailable(B.PGLOGICAL_WHY or "pglogical not set up")
        q(src, "SELECT pglogical.create_replication_set(%s)", (self.set,))
        for t in self.w.tables:
            q(src, "SELECT pglogical.replication_set_add_table(%s, %s::regclass, synchronize_data := false)",
              (self.set, t))

    def measure(self, src, dst):
        def start():
            q(dst, "SELECT pglogical.create_subscription(subscription_name := %s, provider_dsn := %s,"
                   " replication_sets := ARRAY[%s], synchronize_structure := false, synchronize_data := true,"
                   " forward_origins := '{}')", (self.sub, B.SRC_DSN, self.set))

        def phase():
            # one row for the subscription (sync_relname NULL), one per table once it is known
            rows = q(dst, "SELECT coalesce(l.sync_relname, '(subscription)'), l.sync_status"
                          " FROM pglogical.local_sync_status l JOIN pglogical.subscription s ON s.sub_id = l.sync_subid"
                          " WHERE s.sub_name = %s", (self.sub,))
            st = dict(rows)
            ready = [t for t in self.w.tables if st.get(t.split(".")[1]) == "r"]
            label = "subscription:%s tables-ready:%d" % (st.get("(subscription)", "-"), len(ready))
            return label, st.get("(subscription)") == "r" and len(ready) == len(self.w.tables)

        def pids():
            # the apply worker copies through a client connection of its own to this server
            # (application_name <subscription>_copy): that backend writes the rows
            return [("apply", pid) for pid, _ in B.server_processes("dest", "pglogical apply")] + \
                [("sync", pid) for (pid,) in q(dst, "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                               (self.sub + "_copy",))]

        m = timed_load(src, start, phase, pids)
        st = q(dst, "SELECT slot_name FROM pglogical.show_subscription_status(%s)", (self.sub,))
        self.real_slot = st[0][0] if st else None
        return m


def make_load_contenders(w, rep):
    kinds = {"ash": AshLoad, "ash_incr": AshIncrLoad, "ash_prov": AshProvLoad, "native": NativeLoad, "pglogical": PglogicalLoad}
    skipped = [c for c in B.CONTENDERS if c not in kinds]
    if skipped:
        log("  %s: no initial-load variant, skipped" % ",".join(skipped))
    return [kinds[c](w, rep) for c in B.CONTENDERS if c in kinds]


def run_load(wn, rep):
    w = LoadWorkload(wn)
    src, dst = B.connect(B.SRC_PORT), B.connect(B.DST_PORT)
    log("%s rep %d: initial load of %d rows (%s)" % (wn, rep, w.rows, w.desc))
    t0 = time.monotonic()
    w.setup(src)
    size = q(src, "SELECT sum(pg_relation_size(c))::bigint, sum(pg_total_relation_size(c))::bigint"
                  " FROM unnest(%s::regclass[]) c", (w.tables,))[0]
    src_hash = w.hashes(src)
    log("  source filled in %.1fs: %.0f MB heap (%.0f bytes/row), %.0f MB with the keys"
        % (time.monotonic() - t0, size[0] / 1e6, size[0] / w.rows, size[1] / 1e6))
    results = []
    if any(COPIER_GUCS.values()):
        for g, n in COPIER_GUCS.items():
            if n:
                q(dst, "ALTER SYSTEM SET %s = %d" % (g, int(n)))
        q(dst, "SELECT pg_reload_conf()")
        time.sleep(1)   # the reload reaches the backends asynchronously
    copiers = [q1(dst, "SELECT current_setting(%s)", (g,))
               for g in ("ash_replicant.snapshot_workers", "max_sync_workers_per_subscription")]
    for rnd in range(1, LOAD_ROUNDS + 1):
        # a round's own slot and sink names: a dropped sink's checkpoint is kept
        # (docs/sql-api-sinks.md), and a later sink of the same slot name binds to it
        contenders = make_load_contenders(w, rep if LOAD_ROUNDS == 1 else rep * 100 + rnd)
        if rnd % 2 == 0:
            contenders.reverse()
        rs, src, dst = run_round(wn, w, rep, rnd, contenders, src, dst, size, src_hash, copiers)
        results += rs
    for r in results:
        B.emit(r)
        B.ALL.append(r)
    q(src, "DROP PUBLICATION IF EXISTS %s" % w.pub)
    for t in w.tables:
        q(src, "DROP TABLE IF EXISTS %s" % t)
        q(dst, "DROP TABLE IF EXISTS %s" % t)
    src.close()
    dst.close()


def run_round(wn, w, rep, rnd, contenders, src, dst, size, src_hash, copiers):
    """One round: each contender copies the filled source once; ratios within the round."""
    results = []
    for c in contenders:
        r = {"type": "result", "workload": wn, "contender": c.name, "variant": c.variant, "rep": rep, "round": rnd,
             "loadavg_1m": os.getloadavg()[0], "scale": B.SCALE, "rows": w.rows, "tables": len(w.tables),
             "heap_bytes": size[0], "total_bytes": size[1],
             "copiers": int(copiers[1] if isinstance(c, NativeLoad) else copiers[0])}
        if c.variant == "incremental":
            r["chunk_rows"] = int(INCR_CHUNK_ROWS or 1000)
            r["max_pending_chunks"] = int(INCR_MAX_PENDING or 4)

        def body():
            w.fresh_dest(dst)   # before prepare: ash_replicant maps the tables by their oid
            c.prepare(src, dst)
            lsn0 = q1(dst, "SELECT pg_current_wal_lsn()")
            if LOAD_NOISE:
                with Noise(src):
                    m = c.measure(src, dst)
                r["load_noise"] = LOAD_NOISE
            else:
                m = c.measure(src, dst)
            r.update(m)
            # the destination's WAL written while the contender ran (the copy, its index, catalogs)
            r["dest_wal_bytes"] = int(q1(dst, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,)))
            r["rows_per_s"] = w.rows / m["seconds"]
            r["mb_per_s"] = size[0] / 1e6 / m["seconds"]
            main = m["processes"].get("worker") or m["processes"].get("apply") or {}
            r["peak_rss_kb"], r["peak_anon_kb"] = main.get("peak_rss_kb"), main.get("peak_anon_kb")
            sync = m["processes"].get("sync") or {}
            r["source_cpu_s"] = (m["processes"].get("source") or {}).get("cpu_s")
            r["dest_cpu_s"] = round(sum(v["cpu_s"] for k, v in m["processes"].items() if k != "source"), 2)
            r["sync_peak_rss_kb"], r["sync_peak_anon_kb"] = sync.get("peak_rss_kb"), sync.get("peak_anon_kb")
            h = w.hashes(dst)
            bad = [t for t in w.tables if h[t] != src_hash[t]]
            r["hash_source"], r["hash_dest"] = src_hash, h
            r["status"] = "hash_mismatch" if bad else "ok"
            if bad:
                r["note"] = "content differs: " + ", ".join("%s (%s rows, source %s)" % (t, h[t][0], src_hash[t][0])
                                                           for t in bad)
        B.guarded(r, "%s-%s-%s" % (wn, c.short, rep if LOAD_ROUNDS == 1 else "%s.%s" % (rep, rnd)), body)
        src, dst = B.cleanup_contender(c, src, dst)
        results.append(r)
        log("  %-18s %s" % (c.label() + (" x%d" % r["copiers"] if len(w.tables) > 1 else ""), ("%.2fs  %.0f rows/s  cpu s: host %s source %s dest %s  VmHWM kB: worker %s"
                                         " sync %s  %s"
                                         % (r["seconds"], r["rows_per_s"], r.get("host_cpu_s"), r.get("source_cpu_s"),
                                            r.get("dest_cpu_s"), r.get("peak_rss_kb"), r.get("sync_peak_rss_kb"),
                                            r["status"]))
                                        if "seconds" in r else "%s: %s" % (r["status"], r.get("note"))))
    ok = {(x["contender"], x.get("variant")): x for x in results if x["status"] == "ok"}
    for r in results:
        if r["status"] == "ok":
            for name, key in (("native", "vs_native"), ("pglogical", "vs_pglogical")):
                if (name, None) in ok:
                    r[key] = ok[(name, None)]["seconds"] / r["seconds"]
            # a variant's seconds over v1's in the same round (incremental within 2x of v1)
            if r.get("variant") and ("ash_replicant", None) in ok:
                r["vs_v1"] = r["seconds"] / ok[("ash_replicant", None)]["seconds"]
        if r["contender"] == "ash_replicant" and r.get("variant") is None:
            r["target_vs_native"] = TARGETS[wn]
            r["target_met"] = r["vs_native"] >= TARGETS[wn] if "vs_native" in r else None
    return results, src, dst


def fmt_loads(rows):
    """The initial-load table: medians over repetitions (per-run seconds listed when more than one)."""
    hdr = ["workload", "contender", "runs ok", "seconds", "per run", "copied at s", "rows/s", "MB/s", "vs native",
           "vs pglogical", "vs v1",
           "target", "host cpu s", "source cpu s", "dest cpu s", "dest WAL MB", "worker VmHWM MB", "worker anon MB", "sync VmHWM MB",
           "status"]
    keys = []
    for r in rows:
        if (r["workload"], r["contender"], r.get("variant")) not in keys:
            keys.append((r["workload"], r["contender"], r.get("variant")))
    lines = []
    for k in keys:
        rs = [r for r in rows if (r["workload"], r["contender"], r.get("variant")) == k]
        ok = [r for r in rs if r["status"] == "ok"]
        bad = sorted(set(r["status"] + (": " + B.short_note(r["note"]) if r.get("note") else "")
                         for r in rs if r["status"] != "ok"))
        status = "ok" if not bad else "; ".join(bad)

        def med(key, fmt, scale=1.0):
            xs = [r[key] for r in ok if r.get(key) is not None]
            return fmt % (B.median(xs) / scale) if xs else "-"

        target = "-"
        if k[1] == "ash_replicant" and k[2] is None:
            vn = [r["vs_native"] for r in ok if r.get("vs_native") is not None]
            target = ">= %.2f" % TARGETS[k[0]] + ((" met" if B.median(vn) >= TARGETS[k[0]] else " not met") if vn else "")
        lines.append([k[0], k[1] + ("(%s)" % k[2] if k[2] else ""), "%d/%d" % (len(ok), len(rs)), med("seconds", "%.2f"),
                      ", ".join("%.2f" % r["seconds"] for r in ok) if len(ok) > 1 else "-", med("copied_s", "%.2f"),
                      med("rows_per_s", "%.0f"), med("mb_per_s", "%.1f"), med("vs_native", "%.2f"),
                      med("vs_pglogical", "%.2f"), med("vs_v1", "%.2f"), target, med("host_cpu_s", "%.1f"), med("source_cpu_s", "%.1f"),
                      med("dest_cpu_s", "%.1f"), med("dest_wal_bytes", "%.0f", 1e6),
                      med("peak_rss_kb", "%.0f", 1024), med("peak_anon_kb", "%.1f", 1024),
                      med("sync_peak_rss_kb", "%.0f", 1024), status])
    return ("Initial load (rows already in the source): seconds from the start call until every table is synchronized;"
            " vs native = native seconds / seconds, vs pglogical = pglogical seconds / seconds (>1: faster);"
            " vs v1 = seconds / v1's seconds of the same round (a variant's cost, >1: slower);"
            " target = ash_replicant vs native, printed, not asserted; copied at s (native) = every table copied,"
            " before the apply worker marks them ready; MB/s = source heap MB / seconds; source cpu s = the source's"
            " backends and walsenders serving the contender, dest cpu s = its destination processes\n" + B.table(hdr, lines))
