#!/usr/bin/env python3
"""Aggregate catch-up throughput of N pipelines into one destination, side by side
with N native subscriptions (bench/README.md, "Many pipelines").

For each N in MULTI_N (default 1,2,4,8): N source databases m1..mN on the source
server, each with its own table public.w<k> (W1's shape) and publication.  Both
contenders' slots exist before the backlog is written, so both consume the same
backlog: ROWS rows per database in 1,000-row transactions, then one marker row per
database.  Then

  ash     N sinks (one pipeline each, targets ash.w<k>) started at once;
  native  N subscriptions (targets public.w<k>) enabled at once

and each is timed until every database's marker is visible at the destination.
The first to go alternates between repetitions, and before each both servers
are checkpointed and the kernel's dirty pages written (settle()).
Reported per contender and N: wall seconds, aggregate rows/s (N * ROWS / seconds),
the CPU seconds of every destination process over the interval (and as a share of
one core), the CPU seconds of the source's walsenders, and for ash the ratio to
N x its single-pipeline rate (the scaling target: within 10 % of rate(1) x
min(N, cores) where the source is not the limit).

With MULTI_SOURCES=servers each source database m<k> lives on a source server of
its own (cluster source<k> on port BENCH_SRC_PORT + 10 + k; m1 on the main source):
the topology of a destination fed by many source servers, where no walsender reads
another database's WAL.  The default, MULTI_SOURCES=databases, puts every source
database on one server, whose walsenders each read the WAL of all N.

Run through bench/run.sh (it builds a private install): bash bench/run.sh multi
Knobs: MULTI_N=1,2,4,8   ROWS=200000 (x SCALE)   REPEAT=1   MULTI_SOURCES=databases
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402

MULTI_N = [int(x) for x in os.environ.get("MULTI_N", "1,2,4,8").split(",") if x.strip()]
ROWS = B.sc(int(os.environ.get("ROWS", "200000")))
REPEAT = B.REPEAT
CORES = os.cpu_count() or 1
OUT = os.path.join(B.RESULTS_DIR, "%s-multi.jsonl" % B.STAMP)
GEN = B.GEN7
DB_FMT = "m%d"
SOURCES = os.environ.get("MULTI_SOURCES", "databases")
if SOURCES not in ("databases", "servers"):
    sys.exit("MULTI_SOURCES must be databases or servers")


def source_of(k):
    """(cluster name, port) of the server holding source database k."""
    if SOURCES == "databases" or k == 1:
        return "source", B.SRC_PORT
    return "source%d" % k, B.SRC_PORT + 10 + k


def source_servers():
    """Every source server this run uses."""
    return sorted({source_of(k) for k in range(1, max(MULTI_N) + 1)}, key=lambda x: x[1])


def emit(obj):
    with open(OUT, "a") as f:
        f.write(json.dumps(obj, default=str) + "\n")


def connect_db(port, db):
    import psycopg2
    c = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname=db,
                         application_name="bench")
    c.autocommit = True
    return c


def dsn(port, db):
    return "host=127.0.0.1 port=%d dbname=%s user=postgres" % (port, db)


class CpuMeter:
    """CPU seconds the cluster's processes (postmaster children whose title holds a
    needle) use from start() on: per process, its last sample minus its CPU at
    start (0 for a process started since), so a process that exits meanwhile (a
    worker of the contender measured before) neither subtracts nor is lost."""

    def __init__(self, clusters, *needles):
        self.clusters, self.needles = clusters, needles or ("",)
        self.base, self.last = {}, {}

    def _read(self):
        out = {}
        for cluster in self.clusters:
            for pid, _ in B.server_processes(cluster, *self.needles):
                st = B.proc_status(pid)
                if st:
                    out[pid] = st["cpu_s"]
        return out

    def start(self):
        self.base = self._read()
        self.last = dict(self.base)

    def sample(self):
        self.last.update(self._read())

    def used(self):
        return sum(cpu - self.base.get(pid, 0.0) for pid, cpu in self.last.items())


def setup():
    for name, _ in source_servers():
        B.stop_cluster(name)   # a kept run's; setup_clusters removes their directories
    B.setup_clusters()
    dst = B.connect(B.DST_PORT)
    # N native apply workers start together only if the launcher may start them
    # back to back (wal_retrieve_retry_interval throttles it, 5 s by default)
    for k, v in (("max_logical_replication_workers", "20"), ("max_worker_processes", "48"),
                 ("wal_retrieve_retry_interval", "'100ms'"), ("max_replication_slots", "48"),
                 ("max_wal_senders", "48")):
        B.q(dst, "ALTER SYSTEM SET %s = %s" % (k, v))
    dst.close()
    src = B.connect(B.SRC_PORT)
    for k, v in (("max_replication_slots", "48"), ("max_wal_senders", "48"), ("max_connections", "200")):
        B.q(src, "ALTER SYSTEM SET %s = %s" % (k, v))
    src.close()
    for name in ("source", "dest"):
        B.as_pg(["pg_ctl", "-D", os.path.join(B.BASE, name), "-l", os.path.join(B.BASE, name + ".log"),
                 "-w", "restart"], stdout=B.subprocess.DEVNULL)
    for name, port in source_servers():
        if name != "source":
            add_source_server(name, port)
    dst = B.connect(B.DST_PORT)
    B.q(dst, "CREATE SCHEMA ash")
    dst.close()


def add_source_server(name, port):
    """One more source server (MULTI_SOURCES=servers), configured as bench.py's
    source but for its memory and WAL pool: ROWS rows of one database fit."""
    d = os.path.join(B.BASE, name)
    B.as_pg(["initdb", "-D", d, "-U", "postgres", "-A", "trust", "--locale=C", "-E", "UTF8"],
            stdout=B.subprocess.DEVNULL)
    with open(os.path.join(d, "postgresql.conf"), "a") as f:
        f.write(B.cluster_conf(port, "128MB", "256MB") + "wal_level = logical\nsynchronous_commit = off\n")
    B.as_pg(["pg_ctl", "-D", d, "-l", os.path.join(B.BASE, name + ".log"), "-w", "start"],
            stdout=B.subprocess.DEVNULL)
    c = B.connect(port)
    B.fill_wal_pool(c)
    c.close()


def ash_sink(n, rep, k):
    # a fresh name per round: the checkpoint of a dropped sink stays behind
    return "a%d_%d_%d" % (n, rep, k)


def native_sub(n, rep, k):
    return "n%d_%d_%d" % (n, rep, k)


def prepare_round(n, rep):
    """Databases, tables, publications, both contenders' slots; the backlog; markers."""
    dst = B.connect(B.DST_PORT)
    names = []
    for k in range(1, n + 1):
        db = DB_FMT % k
        t = "w%d" % k
        port = source_of(k)[1]
        names.append((k, db, t, ash_sink(n, rep, k), native_sub(n, rep, k)))
        src = B.connect(port)
        sysid = B.q1(src, "SELECT system_identifier::text FROM pg_control_system()")
        B.q(src, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
        B.q(src, "CREATE DATABASE %s" % db)
        src.close()
        s = connect_db(port, db)
        B.q(s, "CREATE TABLE %s (%s)" % (t, B.COLS7))
        B.q(s, "CREATE PUBLICATION pub FOR TABLE %s" % t)
        B.q(s, """CREATE PROCEDURE load(first bigint, n bigint, per_xact int)
LANGUAGE plpgsql AS $p$
DECLARE i bigint := first; last bigint;
BEGIN
  SET LOCAL synchronous_commit = off;
  WHILE i < first + n LOOP
    last := least(i + per_xact, first + n) - 1;
    INSERT INTO %s SELECT %s FROM generate_series(i, last) g;
    COMMIT;
    i := i + per_xact;
  END LOOP;
END $p$""" % (t, GEN))
        s.close()
        for schema in ("ash", "public"):
            B.q(dst, "DROP TABLE IF EXISTS %s.%s" % (schema, t))
            B.q(dst, "CREATE TABLE %s.%s (%s)" % (schema, t, B.COLS7))
        # ash: a go-forward pipeline holds its slot, stopped until measured
        sink = ash_sink(n, rep, k)
        sub = native_sub(n, rep, k)
        B.q(dst, "SELECT ash_replicant_create_sink(%s, slot_name => %s)", (sink, sink))
        B.q(dst, "SELECT ash_replicant_map_table(%s, %s::regclass, source_schema => 'public', source_table => %s)",
            (sink, "ash." + t, t))
        B.q(dst, "SELECT ash_replicant_configure_pipeline(%s, connection => %s, publication => 'pub',"
                 " source_system_identifier => %s, source_database => %s)", (sink, dsn(port, db), sysid, db))
        B.q(dst, "SELECT ash_replicant_start(%s)", (sink,))
        # native: its slot, the subscription disabled
        s = connect_db(port, db)
        B.q(s, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (sub,))
        s.close()
        B.q(dst, "CREATE SUBSCRIPTION %s CONNECTION %%s PUBLICATION pub WITH (copy_data = false,"
                 " create_slot = false, slot_name = %%s, enabled = false)" % sub, (dsn(port, db), sub))
    # every ash slot exists, then stop them: the backlog waits in both slots
    deadline = time.time() + 120
    for k, db, t, sink, sub in names:
        s = connect_db(source_of(k)[1], db)
        while not B.q1(s, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s"
                          " AND confirmed_flush_lsn IS NOT NULL", (sink,)):
            if time.time() > deadline:
                raise B.Failed("ash slots not created")
            time.sleep(0.2)
        s.close()
    for k, db, t, sink, sub in names:
        B.q(dst, "SELECT ash_replicant_stop(%s)", (sink,))
    deadline = time.time() + 60
    while B.q1(dst, "SELECT count(*) FROM ash_replicant_status() WHERE worker_pid IS NOT NULL"):
        if time.time() > deadline:
            raise B.Failed("ash workers did not stop")
        time.sleep(0.1)
    for k, db, t, sink, sub in names:
        s = connect_db(source_of(k)[1], db)
        B.q(s, "CALL load(1, %d, 1000)" % ROWS)
        B.q(s, "INSERT INTO %s SELECT %s FROM generate_series(%d::bigint, %d) g" % (t, GEN, ROWS + 1, ROWS + 1))
        s.close()
    dst.close()
    return names


def settle():
    """Every server checkpointed and the kernel's dirty pages written: the
    backlog's WAL (and the last contender's writes) are not flushed during the
    next contender's interval."""
    for port in [p for _, p in source_servers()] + [B.DST_PORT]:
        c = B.connect(port)
        B.q(c, "CHECKPOINT")
        c.close()
    os.sync()
    time.sleep(1)


def measure(kind, names, n):
    dst = B.connect(B.DST_PORT)
    marker = ROWS + 1
    schema = "ash" if kind == "ash" else "public"
    dest_cpu = CpuMeter(["dest"])
    sender_cpu = CpuMeter([name for name, _ in source_servers()], "walsender")
    dest_cpu.start()
    sender_cpu.start()
    next_sample = 0.0
    t0 = time.monotonic()
    for k, db, t, sink, sub in names:
        if kind == "ash":
            B.q(dst, "SELECT ash_replicant_start(%s)", (sink,))
        else:
            B.q(dst, "ALTER SUBSCRIPTION %s ENABLE" % sub)
    pending = set(names)
    timeout = 300 + 60 * n * ROWS / 200000
    while pending:
        for item in list(pending):
            if B.q1(dst, "SELECT count(*) FROM %s.%s WHERE id = %%s" % (schema, item[2]), (marker,)):
                pending.discard(item)
        if kind == "ash":
            bad = B.q(dst, "SELECT sink_name, state, reason FROM ash_replicant_status()"
                           " WHERE state IN ('halted', 'misconfigured')")
            if bad:
                raise B.Failed("pipeline %s" % (bad,))
        # processes may end before the last marker: sample them while they live
        if time.monotonic() >= next_sample:
            dest_cpu.sample()
            sender_cpu.sample()
            next_sample = time.monotonic() + 0.25
        if time.monotonic() - t0 > timeout:
            raise B.Failed("timeout after %ds" % timeout)
        time.sleep(B.POLL)
    secs = time.monotonic() - t0
    dest_cpu.sample()
    sender_cpu.sample()
    rows = []
    for k, db, t, sink, sub in names:
        rows.append(B.q1(dst, "SELECT count(*) FROM %s.%s" % (schema, t)))
    # stop, so the next contender has the machine to itself
    for k, db, t, sink, sub in names:
        if kind == "ash":
            B.q(dst, "SELECT ash_replicant_stop(%s)", (sink,))
        else:
            B.q(dst, "ALTER SUBSCRIPTION %s DISABLE" % sub)
    deadline = time.time() + 60
    while time.time() < deadline:
        live = B.q1(dst, "SELECT count(*) FROM ash_replicant_status() WHERE worker_pid IS NOT NULL") + \
            B.q1(dst, "SELECT count(*) FROM pg_stat_subscription WHERE pid IS NOT NULL") + \
            len(B.server_processes("dest", "ash_replicant pipeline", "logical replication worker"))
        if not live:
            break
        time.sleep(0.1)
    dst.close()
    ok = all(r == ROWS + 1 for r in rows)
    return {"seconds": secs, "rows_per_s": n * ROWS / secs, "dest_cpu_s": dest_cpu.used(),
            "dest_cpu_cores": dest_cpu.used() / secs, "sender_cpu_s": sender_cpu.used(), "complete": ok,
            "loadavg": os.getloadavg()}


def cleanup_round(names):
    dst = B.connect(B.DST_PORT)
    for k, db, t, sink, sub in names:
        B.q(dst, "SELECT ash_replicant_drop_sink(%s)", (sink,))
        B.q(dst, "ALTER SUBSCRIPTION %s SET (slot_name = NONE)" % sub)
        B.q(dst, "DROP SUBSCRIPTION %s" % sub)
        src = B.connect(source_of(k)[1])
        B.q(src, "DROP DATABASE %s WITH (FORCE)" % db)   # its slots go with it
        src.close()
    dst.close()


def main():
    B.log("multi: N in %s, %d rows per database, %d cores, sources on %s, results %s"
          % (MULTI_N, ROWS, CORES, "one server" if SOURCES == "databases" else "a server each", OUT))
    setup()
    emit({"type": "config", "multi_n": MULTI_N, "rows_per_db": ROWS, "cores": CORES, "repeat": REPEAT,
          "sources": SOURCES, "loadavg_at_start": os.getloadavg()})
    results = []
    for n in MULTI_N:
        for rep in range(REPEAT):
            names = prepare_round(n, rep)
            # the first to go alternates between repetitions
            for kind in ("ash", "native") if rep % 2 == 0 else ("native", "ash"):
                settle()
                B.log("N=%d rep %d: %s" % (n, rep + 1, kind))
                try:
                    r = measure(kind, names, n)
                except B.Failed as e:
                    r = {"failed": str(e)}
                r.update({"type": "result", "contender": kind, "n": n, "rep": rep + 1})
                emit(r)
                results.append(r)
                B.log("  %s" % json.dumps(r, default=str))
            cleanup_round(names)

    def med(kind, n, key):
        xs = [r[key] for r in results if r["contender"] == kind and r["n"] == n and key in r]
        return statistics.median(xs) if xs else None

    def paired(n):
        """Median over the repetitions of ash's rate / native's in the same repetition."""
        by_rep = {}
        for r in results:
            if r["n"] == n and "rows_per_s" in r:
                by_rep.setdefault(r["rep"], {})[r["contender"]] = r["rows_per_s"]
        xs = sorted(v["ash"] / v["native"] for v in by_rep.values() if "ash" in v and "native" in v)
        return "%.2f (%.2f-%.2f)" % (statistics.median(xs), xs[0], xs[-1]) if xs else "-"

    single = med("ash", MULTI_N[0], "rows_per_s") if MULTI_N and MULTI_N[0] == 1 else None
    lines = ["%-3s %-8s %9s %12s %10s %9s %10s %9s %-18s %s" % (
        "N", "contender", "seconds", "rows/s", "dest CPU s", "dest cores", "sender s", "vs native",
        "paired (range)", "vs 1 x min(N,cores)")]
    for n in MULTI_N:
        nat = med("native", n, "rows_per_s")
        for kind in ("ash", "native"):
            rps = med(kind, n, "rows_per_s")
            if rps is None:
                lines.append("%-3d %-8s failed" % (n, kind))
                continue
            vs_nat = "%.2f" % (rps / nat) if kind == "ash" and nat else "-"
            vs_lin = "%.2f" % (rps / (single * min(n, CORES))) if kind == "ash" and single else "-"
            lines.append("%-3d %-8s %9.2f %12s %10.2f %9.2f %10.2f %9s %-18s %s" % (
                n, kind, med(kind, n, "seconds"), "{:,.0f}".format(rps), med(kind, n, "dest_cpu_s"),
                med(kind, n, "dest_cpu_cores"), med(kind, n, "sender_cpu_s"), vs_nat,
                paired(n) if kind == "ash" else "-", vs_lin))
    text = "\n".join(lines)
    print(text)
    with open(OUT.replace(".jsonl", ".txt"), "w") as f:
        f.write("multi: %d rows per database, %d cores, REPEAT=%d, MULTI_SOURCES=%s (medians)\n%s\n"
                % (ROWS, CORES, REPEAT, SOURCES, text))
    if not B.KEEP:
        for name in ["dest"] + [name for name, _ in source_servers()]:
            B.stop_cluster(name)


if __name__ == "__main__":
    main()
