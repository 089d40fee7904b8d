#!/usr/bin/python3
"""Latency benchmark (bash bench/run.sh latency; see bench/README.md, "Latency" and
"Synchronous standby").  Uses bench.py's clusters and contenders.

Part "rates": a steady load on the source at a fixed rate of row changes (inserts)
per second, in single-row or 10-row transactions, for LAT_SECONDS (60); for every
row, the time from its source commit to its visibility on the destination.
  - source: each row carries src_ts = clock_timestamp() taken by the INSERT, just
    before its COMMIT (synchronous_commit = on for the load: the PostgreSQL
    default; the bench clusters' own setting is off, which would hand every
    change to the WAL writer's schedule first -- a logical walsender sends only
    flushed WAL; a load written RATExROWS/async commits that way, for a rate the
    source cannot reach with a flush per commit).  The load runs as server-side
    procedures, paced against the clock (LAT_CLIENTS sessions sharing the rate).
  - destination: a poller queries the mirror every LAT_POLL_MS (1 ms) for the rows
    it has not seen yet, each with clock_timestamp() - src_ts computed by the
    destination server at that moment (both clusters run on this host: one clock).
    A row is visible from its destination commit on, so the figure is its latency
    rounded up to the next poll (the poll interval is measured and reported).
    Nothing is added to the mirror (no trigger, no default): a trigger or a
    default would capture the time the row was *written*, which for a contender
    that commits several source transactions as one destination transaction is
    earlier than the time it becomes visible, and either one changes ash_replicant's
    apply path (its bulk insert path and gathered updates need a table without
    triggers or defaults).  Both contenders write the same table shape.
  - meanwhile, every 200 ms: ash_replicant.stat_pipelines' lag_bytes and
    lag_seconds (ash_replicant), and for both contenders the slot's
    pg_current_wal_lsn() - confirmed_flush_lsn and pg_stat_replication's
    write/flush/replay lag on the source.
Contenders one after the other for each load (the order alternates between loads),
each with a fresh table on both sides, started and warmed up (a first row visible)
before the load starts; or, contender "pair", ash_replicant and native at the same
time on the same load (two slots on one publication, each its own target table, one
poller statement asking both tables, which one first alternating between polls):
both see the same commits on the same machine at the same moment, which a busy
machine's drift between two runs cannot bias.

Part "sync": the source's commit latency with the contender as its synchronous
standby (synchronous_standby_names naming the replication connection's
application_name: 'ash_replicant <sink>' for ash_replicant, the subscription
name for native), measured with pgbench on the source (an INSERT per
transaction, SYNC_CLIENTS 1 and 8, SYNC_SECONDS 30 each).  "none" is the same
pgbench without a synchronous standby (the local commit alone); native runs
twice: at its default (the subscription's synchronous_commit = off) and with
synchronous_commit = on, which PostgreSQL's documentation advises for a
subscription serving synchronous replication.  Once the contender is the
synchronous standby, SYNC_WARM_S (2) seconds of the same pgbench with one client
go unmeasured: the moment the setting changed under a running pipeline, which
ash_replicant notices from the stream (its first commit or two held up to 20 ms);
reported apart (warm-up commits over 10 ms, and the slowest).

Knobs: PARTS=rates,sync  LAT_LOADS=1000x1,1000x10,10000x1,10000x10 (rows
per second x rows per transaction, /async: the load commits with synchronous_commit =
off)  LAT_SECONDS=60  LAT_CLIENTS (load sessions; default: one per 500 transactions
per second, at most 8)  LAT_POLL_MS=1  CONTENDERS=ash,native (also: pair --
ash_replicant and native at once; PAIR_ASH names the ash variant, default ash --,
nativesync, and the diagnostic ash variants ashbatch1 -- batch_max_transactions =
1 --, ashnocensus and ashbinary -- binary_transfer = true)  LAT_TRACE=1 (paired:
bench/path_trace.py; TRACE_MARKS, LAT_TRACE_KEEP=1 keeps its recording)
SYNC_TRACE=1 (one-client synchronous runs: bench/sync_trace.py, SYNC_TRACE_S=4)
SYNC_CONTENDERS=none,ash,native,nativesync  SYNC_CLIENTS=1,8  SYNC_SECONDS=30  SYNC_WARM_S=2
REPEAT=1, and bench.py's BENCH_DIR, BENCH_SRC_PORT, BENCH_DST_PORT, KEEP.
Results: bench/results/<date>-latency.{jsonl,txt}.
"""
import datetime
import glob
import math
import os
import re
import shutil
import subprocess
import threading
import time

import bench as B
from bench import q, q1, log

PARTS = [p.strip() for p in os.environ.get("PARTS", "rates,sync").split(",") if p.strip()]


def parse_load(spec):
    """RATExROWS[/async]: rows per second, rows per transaction, the load's commits
    asynchronous (synchronous_commit = off) or not."""
    head, _, mode = spec.strip().lower().partition("/")
    rate, per = (int(x) for x in head.split("x"))
    if mode not in ("", "async"):
        raise SystemExit("latency: bad load %r" % spec)
    return rate, per, mode == "async"


LOADS = [parse_load(l) for l in os.environ.get("LAT_LOADS", "1000x1,1000x10,10000x1,10000x10").split(",")
         if l.strip()]
SECONDS = float(os.environ.get("LAT_SECONDS", "60"))
CLIENTS = int(os.environ["LAT_CLIENTS"]) if os.environ.get("LAT_CLIENTS") else None
if not os.environ.get("CONTENDERS"):
    B.CONTENDERS = ["ash", "native"]
POLL_MS = float(os.environ.get("LAT_POLL_MS", "1"))
PAIR_ASH = os.environ.get("PAIR_ASH", "ash")   # the ash_replicant variant "pair" runs beside native
SYNC_WARM_S = int(os.environ.get("SYNC_WARM_S", "2"))
SYNC_CONTENDERS = [c.strip() for c in os.environ.get("SYNC_CONTENDERS", "none,ash,native,nativesync").split(",")
                   if c.strip()]
SYNC_CLIENTS = [int(c) for c in os.environ.get("SYNC_CLIENTS", "1,8").split(",") if c.strip()]
SYNC_SECONDS = int(os.environ.get("SYNC_SECONDS", "30"))
SAMPLE_S = 0.2
# paired loads: trace each transaction's path for 6 s from the load's 10th second
# (bench/path_trace.py; perf and root), the analysis into results/<date>-trace-<load>-<rep>.txt
TRACE = os.environ.get("LAT_TRACE", "0") == "1"
# one-client synchronous runs: trace each commit's cycle for SYNC_TRACE_S s from the run's
# 3rd second (bench/sync_trace.py; perf and root), into results/<date>-synctrace-<kind>-<rep>.txt
SYNC_TRACE = os.environ.get("SYNC_TRACE", "0") == "1"
SYNC_TRACE_S = float(os.environ.get("SYNC_TRACE_S", "4"))

B.OUT = os.path.join(B.RESULTS_DIR, "%s-latency.jsonl" % B.STAMP)
PATH_TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "path_trace.py")
SYNC_TRACER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sync_trace.py")

# the mirror: bench.py's 7 columns plus the source's timestamp of the insert
COLS = B.COLS7 + ", src_ts timestamptz NOT NULL"
GEN = ("nextval('bench.lat_seq'), (g % 100000)::int, g * 1000003, left(md5(g::text), 30),"
       " round((g % 100000) / 7.0, 2), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',"
       " g % 2 = 0, clock_timestamp()")


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def host_busy():
    """Busy and total CPU jiffies of the host (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6], sum(v[:8])


def pct(xs, p):
    """The p-th percentile (nearest rank) of sorted xs."""
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, int(math.ceil(p / 100.0 * len(xs))) - 1))]


def dist(xs, nd=2):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return {"n": len(xs), "mean": round(sum(xs) / len(xs), nd), "p50": round(pct(xs, 50), nd),
            "p90": round(pct(xs, 90), nd), "p99": round(pct(xs, 99), nd), "p99.9": round(pct(xs, 99.9), nd),
            "max": round(xs[-1], nd)}


class Load(B.Workload):
    """Stands in for bench.py's workload object: the names its contenders use."""

    def __init__(self, name, table, pub):
        self.name, self.table, self.pub, self.ash_target = name, table, pub, table


class LatAsh(B.Ash):
    """ash_replicant: a fresh sink whose slot is created just before the start, at its
    defaults, or (diagnostic variants, to tell where the time goes) with
    batch_max_transactions = 1 (no batch holds two source transactions, so the worker
    never lingers for the next one) or with the census off."""
    kind = "ash"

    def __init__(self, w, rep, batch1=False, nocensus=False, binary=False):
        self.batch1, self.nocensus, self.binary = batch1, nocensus, binary
        super().__init__(w, rep)
        if batch1 or nocensus or binary:
            self.variant = ("batch_max_transactions=1" if batch1 else "census off" if nocensus
                            else "binary_transfer")
            self.slot += "_b1" if batch1 else "_nc" if nocensus else "_bin"

    def prepare(self, src, dst):
        sysid = q1(src, "SELECT system_identifier::text FROM pg_control_system()")
        q(dst, "SELECT ash_replicant_create_sink(%%s, slot_name => %%s%s)"
          % (", batch_max_transactions => 1" if self.batch1 else ""), (self.slot, self.slot))
        self.map_table(dst, getattr(self, "target", self.w.table), "bench", self.w.table.split(".")[1], {})
        self.map_table(dst, "bench.marker", "bench", "marker", {})
        q(dst, "SELECT ash_replicant_configure_pipeline(%%s, connection => %%s, publication => %%s,"
               " source_system_identifier => %%s, source_database => 'postgres'%s%s)"
          % (", census => '{\"enabled\": false}'" if self.nocensus else "",
             ", binary_transfer => true" if self.binary else ""),
          (self.slot, B.SRC_DSN, self.w.pub, sysid))
        B.Contender.prepare(self, src, dst)

    def start(self, src, dst):
        q(dst, "SELECT ash_replicant_start(%s)", (self.slot,))

    def appname(self):
        return "ash_replicant " + self.slot

    def pid(self, dst):
        return self.status(dst)[2]

    def check(self, dst):
        state, reason, _ = self.status(dst)
        if state in ("halted", "misconfigured"):
            raise B.Failed("pipeline %s/%s" % (state, reason))

    def counters(self, dst):
        with dst.cursor() as cur:
            cur.execute("SELECT applied_transactions, applied_changes, batches, reconnects"
                        " FROM ash_replicant.stat_pipelines WHERE sink_name = %s", (self.slot,))
            r = cur.fetchone()
        return dict(zip(("applied_transactions", "applied_changes", "batches", "reconnects"), r)) if r else {}


class LatNative(B.Native):
    """A subscription at its defaults (streaming off, binary off, synchronous_commit off), or
    with synchronous_commit = on (variant "sync")."""
    kind = "native"

    def __init__(self, w, rep, sync_commit=None):
        self.sync_commit = sync_commit
        super().__init__(w, rep, streaming=False)
        if sync_commit:
            self.variant = "synchronous_commit=" + sync_commit
            self.slot += "_sc"
            self.sub = "sub_" + self.slot

    def prepare(self, src, dst):
        B.Contender.prepare(self, src, dst)
        opts = "copy_data = false, create_slot = false, slot_name = %s, enabled = false"
        if self.sync_commit:
            opts += ", synchronous_commit = '%s'" % self.sync_commit
        q(dst, "CREATE SUBSCRIPTION %s CONNECTION %%s PUBLICATION %s WITH (%s)" % (self.sub, self.w.pub, opts),
          (B.SRC_DSN, self.slot))

    def start(self, src, dst):
        # the launcher starts apply workers at most once per wal_retrieve_retry_interval
        wait = B.LAST_NATIVE_START[0] + 5.5 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        B.LAST_NATIVE_START[0] = time.monotonic()
        q(dst, "ALTER SUBSCRIPTION %s ENABLE" % self.sub)

    def appname(self):
        return self.sub

    def pid(self, dst):
        return q1(dst, "SELECT pid FROM pg_stat_subscription WHERE subname = %s AND relid IS NULL", (self.sub,))

    def check(self, dst):
        pass

    def counters(self, dst):
        return {}


def make(kind, w, rep):
    if kind == "ash":
        return LatAsh(w, rep)
    if kind == "ashbatch1":
        return LatAsh(w, rep, batch1=True)
    if kind == "ashnocensus":
        return LatAsh(w, rep, nocensus=True)
    if kind == "ashbinary":
        return LatAsh(w, rep, binary=True)
    if kind == "native":
        return LatNative(w, rep)
    if kind == "nativesync":
        return LatNative(w, rep, sync_commit="on")
    raise SystemExit("latency: unknown contender %s" % kind)


def start_and_warm(c, src, dst, table, insert_sql):
    """Start contender c and wait until a row inserted after the start is visible: it
    streams.  Returns the seconds that took."""
    c.prepare(src, dst)
    t0 = time.monotonic()
    c.start(src, dst)
    q(src, insert_sql)
    while not q1(dst, "SELECT count(*) FROM %s" % table):
        c.check(dst)
        if time.monotonic() - t0 > 120:
            raise B.Failed("no row visible 120 s after the start")
        time.sleep(0.05)
    return time.monotonic() - t0


class Sampler(threading.Thread):
    """Every SAMPLE_S: the slot's unconfirmed WAL and pg_stat_replication's lags on the
    source, and (ash_replicant) stat_pipelines' lag_bytes and lag_seconds."""

    def __init__(self, c):
        super().__init__(daemon=True)
        self.c, self.stop, self.rows, self.error = c, threading.Event(), [], None
        self.census = []   # ash_replicant: when each census run ended (epoch seconds)

    def run(self):
        try:
            src, dst = B.connect(B.SRC_PORT), B.connect(B.DST_PORT)
            t0 = time.monotonic()
            while not self.stop.is_set():
                r = {"t": round(time.monotonic() - t0, 2)}
                row = q(src, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::float8,"
                             " extract(epoch FROM r.write_lag)::float8, extract(epoch FROM r.flush_lag)::float8,"
                             " extract(epoch FROM r.replay_lag)::float8"
                             " FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid"
                             " WHERE s.slot_name = %s", (self.c.slot,))
                if row:
                    r.update(zip(("slot_unconfirmed_bytes", "write_lag_s", "flush_lag_s", "replay_lag_s"), row[0]))
                if self.c.kind == "ash":
                    row = q(dst, "SELECT lag_bytes::float8, lag_seconds, extract(epoch FROM last_census_at)::float8"
                                 " FROM ash_replicant.stat_pipelines WHERE sink_name = %s", (self.c.slot,))
                    if row:
                        r.update(zip(("ash_lag_bytes", "ash_lag_seconds"), row[0][:2]))
                        if row[0][2] is not None and row[0][2] not in self.census:
                            self.census.append(row[0][2])
                self.rows.append(r)
                self.stop.wait(SAMPLE_S)
            src.close()
            dst.close()
        except Exception as e:  # noqa: reported with the result
            self.error = str(e)

    def summary(self):
        out = {}
        for k in ("ash_lag_bytes", "ash_lag_seconds", "slot_unconfirmed_bytes", "write_lag_s", "flush_lag_s",
                  "replay_lag_s"):
            xs = [r[k] for r in self.rows if r.get(k) is not None]
            if xs:
                out[k] = dist(xs, 4)
        out["samples"] = len(self.rows)
        out["series"] = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if v is not None}
                         for r in self.rows]
        return out


def proc_cpu(pid):
    st = B.proc_status(pid) if pid else None
    return st["cpu_s"] if st else None


# ---------------------------------------------------------------------------
# part "rates"

LOAD_PROC = """CREATE OR REPLACE PROCEDURE bench.lat_load(txn_rate float8, per int, secs float8)
LANGUAGE plpgsql AS $p$
DECLARE
  t0 timestamptz := clock_timestamp();
  done bigint := 0;
  el float8;
BEGIN
  -- paced against the clock: catch up at once when behind, else sleep until the next is due
  LOOP
    el := extract(epoch FROM clock_timestamp() - t0);
    EXIT WHEN el >= secs;
    IF done >= floor(el * txn_rate) + 1 THEN
      PERFORM pg_sleep(done / txn_rate - el);
      CONTINUE;
    END IF;
    INSERT INTO bench.lat SELECT %s FROM generate_series(1, per) g;
    COMMIT;
    done := done + 1;
  END LOOP;
END $p$""" % GEN


def warm_up(cs, src, dst):
    """Start the contenders cs and wait until a row inserted after the start is visible
    in every one's target: they stream.  Returns the seconds that took."""
    for c in cs:
        c.prepare(src, dst)
    t0 = time.monotonic()
    for c in cs:
        c.start(src, dst)
        # paired: the source wakes its walsenders in the order they connected
        # (WalSndWakeup walks WalSndCtl->walsnds), so the next contender starts
        # only once this one's walsender streams
        while len(cs) > 1 and not q1(src, "SELECT active_pid IS NOT NULL FROM pg_replication_slots"
                                          " WHERE slot_name = %s", (c.slot,)):
            c.check(dst)
            if time.monotonic() - t0 > 120:
                raise B.Failed("%s: no walsender 120 s after the start" % c.slot)
            time.sleep(0.05)
    # the warm-up row has id 0; the load's ids start at 1
    q(src, "INSERT INTO bench.lat SELECT %s FROM generate_series(0, 0) g"
      % GEN.replace("nextval('bench.lat_seq')", "0"))
    for c in cs:
        while not q1(dst, "SELECT count(*) FROM %s" % c.target):
            c.check(dst)
            if time.monotonic() - t0 > 120:
                raise B.Failed("no row visible 120 s after the start")
            time.sleep(0.05)
    return time.monotonic() - t0


def run_rate(rate, per, asynchronous, kind, rep, order):
    """One load against one contender, or (kind "pair") against ash_replicant and native
    at once: two slots on the same publication, each contender's own target table, one
    poller asking both tables in one statement (which one first alternates), so both
    see the same source commits under the same conditions of the machine."""
    txn_rate = rate / per
    nclients = CLIENTS or min(8, max(1, int(math.ceil(txn_rate / 500.0))))
    name = "%dx%d%s" % (rate, per, "/async" if asynchronous else "")
    w = Load(name.replace("/", "_"), "bench.lat", "pub_lat")
    paired = kind == "pair"
    cs = [make(k, w, rep) for k in ((PAIR_ASH, "native") if paired else (kind,))]
    for c in cs:
        c.target = "ashlat.lat" if paired and c.kind == "ash" else "bench.lat"
    rs = []
    for c in cs:
        rs.append({"type": "result", "part": "rates", "load": name, "rows_per_s": rate, "rows_per_txn": per,
                   "source_synchronous_commit": "off" if asynchronous else "on",
                   "contender": c.name + ("(%s)" % c.variant if c.variant else ""), "paired": paired,
                   "rep": rep, "order": order, "seconds": SECONDS, "clients": nclients,
                   "poll_ms": POLL_MS, "uptime_before": uptime(), "loadavg_before": os.getloadavg()})
    r0 = rs[0]
    src, dst = B.connect(B.SRC_PORT), B.connect(B.DST_PORT)
    log("%s rep %d: %d rows/s in %d-row transactions (synchronous_commit %s) for %.0f s, %s, %d load session(s)"
        % (name, rep, rate, per, r0["source_synchronous_commit"], SECONDS,
           " and ".join(r["contender"] for r in rs) + (", paired" if paired else ""), nclients))

    def body():
        q(src, "DROP PUBLICATION IF EXISTS pub_lat")
        q(src, "DROP TABLE IF EXISTS bench.lat")
        q(src, "DROP SEQUENCE IF EXISTS bench.lat_seq")
        q(src, "CREATE SEQUENCE bench.lat_seq")
        q(src, "CREATE TABLE bench.lat (%s)" % COLS)
        q(src, LOAD_PROC)
        q(src, "CREATE PUBLICATION pub_lat FOR TABLE bench.lat, bench.marker")
        q(dst, "CREATE SCHEMA IF NOT EXISTS ashlat")
        for c in cs:
            q(dst, "DROP TABLE IF EXISTS %s" % c.target)
            q(dst, "CREATE TABLE %s (%s)" % (c.target, COLS))
        q(dst, "TRUNCATE bench.marker")
        q(src, "CHECKPOINT")
        q(dst, "CHECKPOINT")
        # paired: which contender starts first (its walsender and worker are created
        # first) alternates with `order`, as the sequential runs alternate who goes first
        warm = round(warm_up(cs[::-1] if paired and order == 2 else cs, src, dst), 2)
        time.sleep(2)   # let the start-up work (census, first replies) pass
        pids = [c.pid(dst) for c in cs]
        # the order the source wakes the walsenders in (pg_stat_replication lists them so)
        wal_order = [a for (a,) in q(src, "SELECT application_name FROM pg_stat_replication")]
        for r in rs:
            r["walsender_order"] = wal_order
        if paired:
            log("  walsenders, in the order the source wakes them: %s" % ", ".join(wal_order))
        senders = [q1(src, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (c.slot,))
                   for c in cs]
        cpu0 = [(proc_cpu(p), proc_cpu(s)) for p, s in zip(pids, senders)]
        ctr0 = [c.counters(dst) for c in cs]
        busy0 = host_busy()
        lsn0 = q1(src, "SELECT pg_current_wal_lsn()")
        samplers = [Sampler(c) for c in cs]
        for sm in samplers:
            sm.start()
            stoppers.append(sm.stop)

        errors = []

        def load():
            conn = None
            try:
                conn = B.connect(B.SRC_PORT)
                q(conn, "SET synchronous_commit = %s" % r0["source_synchronous_commit"])
                q(conn, "CALL bench.lat_load(%s, %s, %s)", (txn_rate / nclients, per, SECONDS))
            except Exception as e:  # noqa
                errors.append(str(e).strip().splitlines()[0])
            finally:
                if conn:
                    conn.close()

        threads = [threading.Thread(target=load, daemon=True) for _ in range(nclients)]
        if TRACE and paired:
            trace_dir = os.path.join(B.BASE, "trace-%s-%d" % (w.name, rep))
            tracer = threading.Timer(min(10.0, SECONDS / 3), subprocess.run, args=(
                ["/usr/bin/python3", PATH_TRACE, "record", trace_dir, "6"],),
                kwargs={"env": dict(os.environ, BENCH_SRC_PORT=str(B.SRC_PORT)), "check": False})
            tracer.daemon = True
            tracer.start()
        t_load = time.monotonic()
        for t in threads:
            t.start()

        # the poller: rows not seen yet, each with its age by the destination's clock.  Ids
        # come from one sequence: all ids <= low are seen; above it, `above` holds the seen ones
        # (several load sessions commit slightly out of id order).  Paired: one statement asks
        # both targets, the first of them alternating from poll to poll.
        k = len(cs)
        lat, per_sec = [[] for _ in cs], [{} for _ in cs]
        low, above = [0] * k, [set() for _ in cs]
        polls = []
        pc = B.connect(B.DST_PORT)
        cur = pc.cursor()
        poll_pid = q1(pc, "SELECT pg_backend_pid()")
        pcpu0, dcpu0 = proc_cpu(poll_pid), sum(os.times()[:2])
        last = time.monotonic()
        expected = None
        deadline = None
        next_check = last + 0.5
        npoll = 0
        parts = ["SELECT %d, id, extract(epoch FROM clock_timestamp() - src_ts)::float8 * 1000,"
                 " extract(epoch FROM src_ts)::float8 FROM %s WHERE id > %%s" % (j, c.target)
                 for j, c in enumerate(cs)]
        while True:
            order_now = list(range(k)) if npoll % 2 == 0 else list(range(k))[::-1]
            npoll += 1
            cur.execute(" UNION ALL ".join(parts[j] for j in order_now), [low[j] for j in order_now])
            for j, i, ms, ts in cur.fetchall():
                if i not in above[j]:
                    above[j].add(i)
                    lat[j].append(ms)
                    n_max = per_sec[j].setdefault(int(ts), [0, 0.0])
                    n_max[0] += 1
                    n_max[1] = max(n_max[1], ms)
            for j in range(k):
                while low[j] + 1 in above[j]:
                    low[j] += 1
                    above[j].discard(low[j])
            now = time.monotonic()
            polls.append(now - last)
            last = now
            if expected is None and not any(t.is_alive() for t in threads):
                t_end = now
                expected = q1(src, "SELECT count(*) FROM bench.lat WHERE id > 0")
                deadline = now + 120
            if expected is not None and all(len(x) >= expected for x in lat):
                break
            if deadline and now > deadline:
                raise B.Failed("%s of %d rows visible 120 s after the load ended"
                               % ("/".join(str(len(x)) for x in lat), expected))
            if now >= next_check:
                for c in cs:
                    c.check(dst)
                next_check = now + 0.5
            time.sleep(POLL_MS / 1000.0)
        caught_up_after = time.monotonic() - t_end
        if TRACE and paired:
            tracer.join()
            analysis = subprocess.run(["/usr/bin/python3", PATH_TRACE, "analyze", trace_dir],
                                      capture_output=True, text=True)
            out = os.path.join(B.RESULTS_DIR, "%s-trace-%s-%d.txt" % (B.STAMP, w.name, rep))
            with open(out, "w") as fh:
                fh.write("# %s rep %d, walsenders woken in the order: %s\n%s%s"
                         % (name, rep, ", ".join(wal_order), analysis.stdout, analysis.stderr))
            r0["trace"] = os.path.basename(out)
            if analysis.returncode == 0 and os.environ.get("LAT_TRACE_KEEP") != "1":  # else kept
                shutil.rmtree(trace_dir, ignore_errors=True)
        pcpu1, dcpu1 = proc_cpu(poll_pid), sum(os.times()[:2])
        pc.close()
        for sm in samplers:
            sm.stop.set()
            sm.join(5)
        busy1 = host_busy()
        if errors:
            raise B.Failed("load: " + errors[0])
        wal = q1(src, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)::bigint", (lsn0,))
        # the load as it ran: rows per second over its whole seconds (first and last partial out)
        persec = [n for (n,) in q(src, "SELECT count(*) FROM bench.lat WHERE id > 0 GROUP BY"
                                       " date_trunc('second', src_ts) ORDER BY date_trunc('second', src_ts)")][1:-1]
        span = q1(src, "SELECT extract(epoch FROM max(src_ts) - min(src_ts))::float8 FROM bench.lat WHERE id > 0")
        hsql = ("SELECT count(*)::text || '/' || coalesce(sum(hashtext(ROW(id, a, b, t, n, ts, f, src_ts)::text)"
                "::bigint), 0)::text FROM %s")
        hs = q1(src, hsql % "bench.lat")
        for j, (c, r, sm) in enumerate(zip(cs, rs, samplers)):
            cpu1 = (proc_cpu(pids[j]), proc_cpu(senders[j]))
            ctr1 = c.counters(dst)
            r.update({"warmup_s": warm, "rows": expected, "load_wall_s": round(t_end - t_load, 2),
                      "achieved_rows_per_s": round(expected / span, 1) if span else None,
                      "rows_per_s_each_second": {"min": min(persec), "max": max(persec)} if persec else None,
                      "wal_bytes": wal, "latency_ms": dist(lat[j]),
                      "poll_interval_ms": dist([p * 1000 for p in polls]),
                      # share of the rows by latency, ms: where the distribution's weight is
                      "latency_share": {"<%s" % b: round(sum(1 for x in lat[j] if x < b) / len(lat[j]), 4)
                                        for b in (2, 5, 10, 20, 30, 50, 100, 1000)} if lat[j] else None,
                      "caught_up_after_load_s": round(caught_up_after, 2), "lag": sm.summary(),
                      # by second of the source's clock: [epoch second, rows, max latency ms]; and when
                      # ash_replicant's census runs ended (the worker applies nothing while one runs)
                      "per_second": [[s, v[0], round(v[1], 1)] for s, v in sorted(per_sec[j].items())],
                      "census_at": [round(x, 3) for x in sm.census],
                      "lag_sampler_error": sm.error,
                      "apply_cpu_s": round(cpu1[0] - cpu0[j][0], 2) if None not in (cpu0[j][0], cpu1[0]) else None,
                      "sender_cpu_s": round(cpu1[1] - cpu0[j][1], 2) if None not in (cpu0[j][1], cpu1[1]) else None,
                      "host_busy_cpu_pct": round(100.0 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 1),
                      # what the measuring costs: the poller's backend (both contenders' when
                      # paired), and this driver (poller and samplers)
                      "poller_backend_cpu_s": round(pcpu1 - pcpu0, 2) if None not in (pcpu0, pcpu1) else None,
                      "driver_cpu_s": round(dcpu1 - dcpu0, 2)})
            if ctr0[j] and ctr1:
                d = {x: ctr1[x] - ctr0[j][x] for x in ctr1}
                r["ash_counters"] = d
                if d.get("batches"):
                    r["txns_per_batch"] = round(d["applied_transactions"] / d["batches"], 2)
            r["status"] = "ok" if hs == q1(dst, hsql % c.target) else "hash_mismatch"

    stoppers = []
    B.guarded(r0, "%s-%s-%d" % (name, "pair" if paired else cs[0].short, rep), body)
    for r in rs[1:]:
        if r0.get("status") not in (None, "ok", "hash_mismatch"):
            r.update(status=r0["status"], note=r0.get("note"))
    for s in stoppers:
        s.set()
    for c in cs:
        src, dst = B.cleanup_contender(c, src, dst)
    for r in rs:
        r["uptime_after"] = uptime()
        r["loadavg_after"] = os.getloadavg()
        B.emit(r)
        B.ALL.append(r)
        if r["status"] == "ok":
            L = r["latency_ms"]
            log("  %-30s latency ms p50 %.1f p99 %.1f max %.1f; %.0f rows/s; poll p50 %.2f ms; load %s"
                % (r["contender"] + (" (paired)" if paired else ""), L["p50"], L["p99"], L["max"],
                   r["achieved_rows_per_s"] or 0, r["poll_interval_ms"]["p50"],
                   " ".join("%.2f" % x for x in r["loadavg_after"])))
        else:
            log("  %s: %s: %s" % (r["contender"], r["status"], r.get("note")))
    src.close()
    dst.close()


# ---------------------------------------------------------------------------
# part "sync"

SYNC_SCRIPT = """\\set aid random(1, 100000)
\\set delta random(-5000, 5000)
INSERT INTO bench.sb (aid, delta, mtime) VALUES (:aid, :delta, CURRENT_TIMESTAMP);
"""


def set_sync_names(src, names):
    if names:
        q(src, "ALTER SYSTEM SET synchronous_standby_names = %s", (names,))
    else:
        q(src, "ALTER SYSTEM RESET synchronous_standby_names")
    q(src, "SELECT pg_reload_conf()")
    t_end = time.time() + 10
    while q1(src, "SHOW synchronous_standby_names") != (names or ""):
        if time.time() > t_end:
            raise B.Failed("synchronous_standby_names not reloaded")
        time.sleep(0.05)


def pgbench(clients, workdir, seconds=None):
    """Run pgbench on the source (SYNC_SECONDS); returns tps, average latency and
    per-transaction latencies (ms) from its log."""
    for f in glob.glob(os.path.join(workdir, "pgb*")):
        os.unlink(f)
    script = os.path.join(workdir, "insert.sql")
    with open(script, "w") as f:
        f.write(SYNC_SCRIPT)
    os.chmod(script, 0o644)
    env_opts = "PGOPTIONS=-c synchronous_commit=on"
    p = B.as_pg(["env", env_opts, "pgbench", "-n", "-h", "127.0.0.1", "-p", str(B.SRC_PORT), "-U", "postgres",
                 "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
                 "-T", str(seconds or SYNC_SECONDS),
                 "-f", script, "-l", "--log-prefix=%s" % os.path.join(workdir, "pgb"), "postgres"],
                check=False, capture_output=True, text=True, cwd=workdir)
    if p.returncode != 0:
        raise B.Failed("pgbench exited %d: %s" % (p.returncode, (p.stderr.strip().splitlines() or [""])[-1]))
    out = p.stdout
    tps = float(re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out).group(1))
    avg = float(re.search(r"latency average = ([0-9.]+) ms", out).group(1))
    xacts = int(re.search(r"number of transactions actually processed: (\d+)", out).group(1))
    lats = []
    for fn in glob.glob(os.path.join(workdir, "pgb.*")):
        with open(fn) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    lats.append(int(parts[2]) / 1000.0)
    return tps, avg, xacts, lats


SYNC_RUNS = {}  # contender kind -> runs so far


def run_sync(kind, rep):
    workdir = os.path.join(B.BASE, "pgbench")
    os.makedirs(workdir, exist_ok=True)
    os.chown(workdir, B.PG.pw_uid, B.PG.pw_gid)
    src, dst = B.connect(B.SRC_PORT), B.connect(B.DST_PORT)
    w = Load("sb", "bench.sb", "pub_sb")
    c = None if kind == "none" else make(kind, w, rep)
    SYNC_RUNS[kind] = SYNC_RUNS.get(kind, 0) + 1
    if c is not None and SYNC_RUNS[kind] > 1:
        # a name of its own each time a contender runs again: a sink re-created over its
        # kept checkpoint would resume it, and halt on the publication re-created under it
        c.slot += "_%d" % SYNC_RUNS[kind]
        if isinstance(c, LatNative):
            c.sub = "sub_" + c.slot
    label = "none (no synchronous standby)" if c is None else c.name + ("(%s)" % c.variant if c.variant else "")
    base = {"type": "result", "part": "sync", "contender": label, "rep": rep, "seconds": SYNC_SECONDS}
    rows = []
    log("sync rep %d: %s" % (rep, label))
    setup = dict(base, clients=None, uptime_before=uptime())
    warm = {}

    def prepare():
        q(src, "DROP PUBLICATION IF EXISTS pub_sb")
        q(src, "DROP TABLE IF EXISTS bench.sb")
        q(src, "CREATE TABLE bench.sb (id bigserial PRIMARY KEY, aid int NOT NULL, delta int NOT NULL,"
               " mtime timestamptz NOT NULL)")
        q(src, "CREATE PUBLICATION pub_sb FOR TABLE bench.sb, bench.marker")
        q(dst, "DROP TABLE IF EXISTS bench.sb")
        q(dst, "CREATE TABLE bench.sb (id bigint PRIMARY KEY, aid int NOT NULL, delta int NOT NULL,"
               " mtime timestamptz NOT NULL)")
        if c is not None:
            start_and_warm(c, src, dst, "bench.sb", "INSERT INTO bench.sb (aid, delta, mtime) VALUES (0, 0, now())")
            set_sync_names(src, '"%s"' % c.appname())
            t_end = time.time() + 30
            while q1(src, "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                     (c.appname(),)) != "sync":
                if time.time() > t_end:
                    raise B.Failed("%s did not become the synchronous standby" % c.appname())
                time.sleep(0.1)
            if SYNC_WARM_S > 0:
                # the first commits after the setting changed, not measured: ash_replicant
                # read the setting when its session started, before it was listed, and
                # switches to acknowledging each commit on the stream's evidence (a
                # deferred acknowledgement answered at once has it read the setting
                # again; the commits until then held up to 20 ms each;
                # docs/operations.md); reported here, apart
                wt, wa, wx, wl = pgbench(1, workdir, SYNC_WARM_S)
                warm.update({"seconds": SYNC_WARM_S, "transactions": wx, "max_ms": round(max(wl), 2),
                             "over_10ms": sum(1 for x in wl if x > 10)})
        q(src, "CHECKPOINT")
        q(dst, "CHECKPOINT")
        time.sleep(2)

    B.guarded(setup, "sync-%s-%d" % (kind, rep), prepare)
    if setup.get("status") not in (None, "ok"):
        rows.append(setup)
    else:
        for n in SYNC_CLIENTS:
            r = dict(base, clients=n, uptime_before=uptime(), loadavg_before=os.getloadavg())

            def body():
                if c is not None:
                    c.check(dst)
                sampler = Sampler(c) if c is not None else None
                if sampler:
                    sampler.start()
                    stoppers.append(sampler.stop)
                busy0 = host_busy()
                pid = c.pid(dst) if c is not None else None
                tracer, trace_dir = None, os.path.join(B.BASE, "synctrace")
                if SYNC_TRACE and c is not None and n == 1:
                    shutil.rmtree(trace_dir, ignore_errors=True)

                    def trace():
                        time.sleep(3)
                        subprocess.run(["/usr/bin/python3", SYNC_TRACER, "record", trace_dir, str(SYNC_TRACE_S)],
                                       env=dict(os.environ, BENCH_SRC_PORT=str(B.SRC_PORT)))
                    tracer = threading.Thread(target=trace)
                    tracer.start()
                cpu0 = proc_cpu(pid)
                tps, avg, xacts, lats = pgbench(n, workdir)
                cpu1 = proc_cpu(pid)
                if tracer is not None:
                    tracer.join()
                    analysis = subprocess.run(["/usr/bin/python3", SYNC_TRACER, "analyze", trace_dir],
                                              capture_output=True, text=True)
                    out = os.path.join(B.RESULTS_DIR, "%s-synctrace-%s-%d.txt" % (B.STAMP, kind, SYNC_RUNS[kind]))
                    with open(out, "w") as fh:
                        fh.write("# %s rep %d, one client\n%s%s" % (label, rep, analysis.stdout, analysis.stderr))
                    r["trace"] = os.path.basename(out)
                busy1 = host_busy()
                if sampler:
                    sampler.stop.set()
                    sampler.join(5)
                    r["lag"] = sampler.summary()
                if c is not None:
                    # every committed transaction is already applied: check it is there
                    ns = q1(src, "SELECT count(*) FROM bench.sb")
                    nd = q1(dst, "SELECT count(*) FROM bench.sb")
                    r["rows_source"], r["rows_dest_at_return"] = ns, nd
                    if nd != ns:
                        raise B.Failed("destination has %d of the %d rows when pgbench returned" % (nd, ns))
                    r["sync_state"] = q1(src, "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                                         (c.appname(),))
                r.update({"tps": tps, "latency_avg_ms": avg, "transactions": xacts, "latency_ms": dist(lats, 3),
                          "warmup": warm or None,
                          "apply_cpu_s": round(cpu1 - cpu0, 2) if None not in (cpu0, cpu1) else None,
                          "host_busy_cpu_pct": round(100.0 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 1),
                          "status": "ok"})

            stoppers = []
            B.guarded(r, "sync-%s-%d-c%d" % (kind, rep, n), body)
            for s in stoppers:
                s.set()
            r["uptime_after"] = uptime()
            r["loadavg_after"] = os.getloadavg()
            rows.append(r)
            if r["status"] == "ok":
                log("  %d client(s): %.0f tps, latency avg %.3f ms p50 %.3f p99 %.3f ms; load %s"
                    % (n, r["tps"], r["latency_avg_ms"], r["latency_ms"]["p50"], r["latency_ms"]["p99"],
                       " ".join("%.2f" % x for x in r["loadavg_after"])))
            else:
                log("  %d client(s): %s: %s" % (n, r["status"], r.get("note")))
    try:
        src = B.alive(src, B.SRC_PORT)
        set_sync_names(src, None)
    except Exception as e:  # noqa
        log("  reset synchronous_standby_names: %s" % e)
    if c is not None:
        src, dst = B.cleanup_contender(c, src, dst)
    for r in rows:
        B.emit(r)
        B.ALL.append(r)
    src.close()
    dst.close()


# ---------------------------------------------------------------------------

def f(v, fmt):
    return fmt % v if v is not None else "-"


def fmt_rates(rows):
    hdr = ["load", "contender", "rep", "rows/s done", "p50 ms", "p90 ms", "p99 ms", "max ms", "vs native p50",
           "vs native p99", "poll p50/p99 ms", "ash lag_bytes p50/p99/max", "ash lag_seconds p50/p99/max",
           "slot unconfirmed bytes p50/p99", "txns/batch", "apply cpu s", "sender cpu s", "poller cpu s", "host busy %",
           "load 1m before/after", "status"]
    lines = []
    for r in rows:
        L = r.get("latency_ms") or {}
        nat = [x for x in rows if x["load"] == r["load"] and x["rep"] == r["rep"] and x["contender"] == "native"
               and x["status"] == "ok" and x.get("paired") == r.get("paired")]
        vs50 = vs99 = "-"
        if nat and L and r["contender"] != "native":
            vs50 = "%.2f" % (L["p50"] / nat[0]["latency_ms"]["p50"])
            vs99 = "%.2f" % (L["p99"] / nat[0]["latency_ms"]["p99"])
        lag = r.get("lag") or {}
        ab, asec, sb = lag.get("ash_lag_bytes"), lag.get("ash_lag_seconds"), lag.get("slot_unconfirmed_bytes")
        P = r.get("poll_interval_ms") or {}
        lines.append([r["load"], r["contender"] + (" (paired)" if r.get("paired") else ""), str(r["rep"]), f(r.get("achieved_rows_per_s"), "%.0f"),
                      f(L.get("p50"), "%.1f"), f(L.get("p90"), "%.1f"), f(L.get("p99"), "%.1f"), f(L.get("max"), "%.1f"),
                      vs50, vs99, "%s/%s" % (f(P.get("p50"), "%.2f"), f(P.get("p99"), "%.2f")),
                      "%s/%s/%s" % (f(ab and ab["p50"], "%.0f"), f(ab and ab["p99"], "%.0f"), f(ab and ab["max"], "%.0f"))
                      if ab else "-",
                      "%s/%s/%s" % (f(asec["p50"], "%.3f"), f(asec["p99"], "%.3f"), f(asec["max"], "%.3f")) if asec else "-",
                      "%s/%s" % (f(sb["p50"], "%.0f"), f(sb["p99"], "%.0f")) if sb else "-",
                      f(r.get("txns_per_batch"), "%.1f"), f(r.get("apply_cpu_s"), "%.1f"), f(r.get("sender_cpu_s"), "%.1f"),
                      f(r.get("poller_backend_cpu_s"), "%.1f"), f(r.get("host_busy_cpu_pct"), "%.0f"),
                      "%.2f/%.2f" % (r["loadavg_before"][0], r["loadavg_after"][0]),
                      r["status"] + ((": " + B.short_note(r["note"])) if r.get("note") else "")])
    return B.table(hdr, lines)


def fmt_sync(rows):
    hdr = ["clients", "contender", "rep", "tps", "avg ms", "p50 ms", "p99 ms", "max ms", "avg vs native best",
           "p99 vs native best", "warm-up commits > 10 ms / max ms", "flush_lag p50 ms", "apply cpu s", "host busy %", "load 1m before/after", "status"]
    lines = []
    for r in sorted(rows, key=lambda x: (x["clients"] or 0, x["rep"])):
        L = r.get("latency_ms") or {}
        nat = [x for x in rows if x["clients"] == r["clients"] and x["rep"] == r["rep"] and x["status"] == "ok"
               and x["contender"].startswith("native")]
        best = min(nat, key=lambda x: x["latency_avg_ms"]) if nat else None
        va = vp = "-"
        if best and L and r["contender"].startswith("ash"):
            va = "%.2f" % (r["latency_avg_ms"] / best["latency_avg_ms"])
            vp = "%.2f" % (L["p99"] / best["latency_ms"]["p99"])
        fl = ((r.get("lag") or {}).get("flush_lag_s") or {}).get("p50")
        lines.append([str(r["clients"] or "-"), r["contender"], str(r["rep"]), f(r.get("tps"), "%.0f"),
                      f(r.get("latency_avg_ms"), "%.3f"), f(L.get("p50"), "%.3f"), f(L.get("p99"), "%.3f"),
                      f(L.get("max"), "%.1f"), va, vp,
                      "%d / %.1f" % (r["warmup"]["over_10ms"], r["warmup"]["max_ms"]) if r.get("warmup") else "-",
                      f(fl * 1000 if fl is not None else None, "%.2f"),
                      f(r.get("apply_cpu_s"), "%.1f"), f(r.get("host_busy_cpu_pct"), "%.0f"),
                      "%.2f/%.2f" % (r["loadavg_before"][0], r["loadavg_after"][0]) if r.get("loadavg_before") else "-",
                      r.get("status", "?") + ((": " + B.short_note(r["note"])) if r.get("note") else "")])
    return B.table(hdr, lines)


def main():
    meta = {"type": "meta", "bench": "latency", "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "parts": PARTS, "loads": ["%dx%d%s" % (a, b, "/async" if c else "") for a, b, c in LOADS], "seconds": SECONDS, "clients": CLIENTS,
            "poll_ms": POLL_MS, "contenders": B.CONTENDERS, "sync_contenders": SYNC_CONTENDERS,
            "sync_clients": SYNC_CLIENTS, "sync_seconds": SYNC_SECONDS, "sync_warm_s": SYNC_WARM_S,
            "repeat": B.REPEAT,
            "nproc": os.cpu_count(), "uptime_start": uptime(), "loadavg_start": os.getloadavg(),
            "git": subprocess.run(["git", "-C", B.REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()}
    log("latency bench: parts %s; %s; results %s" % (",".join(PARTS), meta["uptime_start"], B.OUT))
    B.setup_clusters()
    c = B.connect(B.DST_PORT)
    meta["server_version"] = q1(c, "SELECT version()")
    c.close()
    B.emit(meta)
    t0 = time.monotonic()
    try:
        for rep in range(1, B.REPEAT + 1):
            if "rates" in PARTS:
                kinds = [k for k in B.CONTENDERS if k in ("ash", "ashbatch1", "ashnocensus", "ashbinary",
                                                          "native", "nativesync", "pair")]
                for i, (rate, per, asynchronous) in enumerate(LOADS):
                    # alternate who goes first, so a drift of the machine's load hits both
                    order = kinds if (i + rep) % 2 == 1 else kinds[::-1]
                    for n, kind in enumerate(order):
                        run_rate(rate, per, asynchronous, kind, rep,
                                 1 + (i + rep) % 2 if kind == "pair" else n + 1)
            if "sync" in PARTS:
                for kind in (SYNC_CONTENDERS if rep % 2 == 1 else SYNC_CONTENDERS[::-1]):
                    run_sync(kind, rep)
    finally:
        B.emit({"type": "end", "elapsed_s": round(time.monotonic() - t0, 1), "uptime_end": uptime(),
                "loadavg_end": os.getloadavg()})
        if not B.KEEP:
            for n in ("source", "dest"):
                B.stop_cluster(n)
    text = "%s  (%d cores, PostgreSQL %s, git %s)\nuptime at start: %s\nuptime at end:   %s\n" % (
        meta["date"], meta["nproc"], meta["server_version"].split()[1], meta["git"], meta["uptime_start"], uptime())
    rates = [r for r in B.ALL if r["part"] == "rates"]
    syncs = [r for r in B.ALL if r["part"] == "sync"]
    if rates:
        text += ("\nCommit-to-visible latency, %.0f s per load (ms from the source row's insert, just before its"
                 " commit, to the poll that first saw it on the destination); vs native = ratio of the"
                 " percentiles (< 1: lower than native); lag columns sampled every %.1f s during the run\n"
                 % (SECONDS, SAMPLE_S)) + fmt_rates(rates) + "\n"
    if syncs:
        text += ("\nSynchronous standby: pgbench on the source (one INSERT per transaction, synchronous_commit = on,"
                 " %d s per run); vs native best = ratio to the lower-latency native variant\n" % SYNC_SECONDS) + \
            fmt_sync(syncs) + "\n"
    print()
    print(text)
    with open(B.OUT[:-len(".jsonl")] + ".txt", "w") as fh:
        fh.write(text)
    log("total %.0fs; results in %s" % (time.monotonic() - t0, B.OUT))


if __name__ == "__main__":
    main()
