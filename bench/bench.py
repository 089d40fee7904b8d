#!/usr/bin/python3
"""Apply-throughput benchmark driver (called by bench/run.sh as root).

For each workload: create the source table and publication, position one
replication slot per contender (all before the workload, so each consumes the
same WAL), run the workload with every consumer stopped, append a marker
transaction, then start the contenders one at a time and time each from start
until the marker row is visible on the destination (every earlier source
transaction is then applied: all contenders apply in commit order), then
check that the mirror's content hash equals the source's.

Contenders: ceiling (pg_logical_slot_get_binary_changes on the source: decoding
alone), ash (ash_replicant pipeline), native (CREATE SUBSCRIPTION), pglogical,
recvlogical (pg_recvlogical into /dev/null; optional, not a ceiling: see the class),
floor (bench/floor_reader: ash_replicant's paced reading with no apply -- the
walsender's bound for such a consumer; optional).

Workloads L1 and L8 (initial load of rows already in the source, no streaming)
are bench/initial_load.py's: main() hands them to it.
"""
import datetime
import json
import os
import platform
import pwd
import shutil
import signal
import subprocess
import sys
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PGBIN = os.environ.get("BENCH_PGBIN", "/usr/lib/postgresql/15/bin")

SCALE = float(os.environ.get("SCALE", "1"))
WORKLOADS = [w.strip().upper() for w in os.environ.get("WORKLOADS", "W1,W2,W3,W4,W5").split(",") if w.strip()]
CONTENDERS = [c.strip() for c in os.environ.get("CONTENDERS", "ceiling,floor,ash,native,pglogical").split(",") if c.strip()]
REPEAT = int(os.environ.get("REPEAT", "1"))
LOADS = ("L1", "L8")   # initial-load workloads: bench/initial_load.py
PROFILE = os.environ.get("PROFILE", "0") == "1"
PROFILE_SENDER = os.environ.get("PROFILE_SENDER", "0") == "1"   # profile the source walsender instead
BASE = os.environ.get("BENCH_DIR", "/tmp/ash_bench")
SRC_PORT = int(os.environ.get("BENCH_SRC_PORT", "57001"))
DST_PORT = int(os.environ.get("BENCH_DST_PORT", "57002"))
KEEP = os.environ.get("KEEP", "0") == "1"
POLL = 0.05
MARKER_POLL = float(os.environ.get("BENCH_MARKER_POLL", "0.01"))   # visibility is measured to this

STAMP = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
RESULTS_DIR = os.path.join(HERE, "results")
os.makedirs(RESULTS_DIR, exist_ok=True)
OUT = os.path.join(RESULTS_DIR, "%s-scale%s.jsonl" % (STAMP, SCALE))

SRC_DSN = "host=127.0.0.1 port=%d dbname=postgres user=postgres" % SRC_PORT
DST_DSN = "host=127.0.0.1 port=%d dbname=postgres user=postgres" % DST_PORT

PG = pwd.getpwnam("postgres")


def log(msg):
    print("[%s] %s" % (datetime.datetime.now().strftime("%H:%M:%S"), msg), flush=True)


def emit(obj):
    with open(OUT, "a") as f:
        f.write(json.dumps(obj, default=str) + "\n")


def as_pg(args, check=True, **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--", "env", "PATH=%s:%s" % (PGBIN, os.environ["PATH"])] + args,
                          check=check, **kw)


def connect(port):
    c = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                         application_name="bench")
    c.autocommit = True
    with c.cursor() as cur:
        cur.execute("SET TimeZone = 'UTC'")
    return c


def q(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        if cur.description is None:
            return None
        return cur.fetchall()


def q1(conn, sql, args=None):
    rows = q(conn, sql, args)
    return rows[0][0] if rows else None


def proc_status(pid):
    """VmHWM, VmRSS, RssAnon (kB) and CPU seconds (user+system) of a process, or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            text = f.read()
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except (OSError, TypeError):
        return None
    out = parse_status(text)
    # fields after the ")" of the command name: utime is the 12th, stime the 13th
    fields = stat.rsplit(")", 1)[1].split()
    out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def parse_status(text):
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS", "RssAnon", "RssShmem", "RssFile"):
            out[k] = int(v.split()[0])
    return out


def server_processes(cluster, *needles):
    """(pid, title) of the processes of our cluster "source" or "dest" whose title contains
    one of needles (other clusters on this host, e.g. other benchmark runs, are not ours)."""
    try:
        with open(os.path.join(BASE, cluster, "postmaster.pid")) as f:
            postmaster = f.readline().strip()
    except OSError:
        return []
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                if f.read().rsplit(")", 1)[1].split()[1] != postmaster:
                    continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if any(n in title for n in needles):
            out.append((int(d), title))
    return out


# ---------------------------------------------------------------------------
# clusters

def stop_cluster(name):
    d = os.path.join(BASE, name)
    if os.path.exists(os.path.join(d, "postmaster.pid")):
        as_pg(["pg_ctl", "-D", d, "-m", "immediate", "stop"], check=False,
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


PGLOGICAL_OK = False
PGLOGICAL_WHY = None


def fill_wal_pool(conn):
    """Give a new cluster the pool of WAL segments a running server keeps (min_wal_size).

    A fresh cluster has one segment and creates (and zero-fills) each next one as WAL
    reaches it; a checkpoint then recycles them for later use.  Without this, the first
    contender of a run pays for creating the segments (LWLock WALWrite and IO
    WALInitWrite waits while a copy writes 1-2 GB) and every later one reuses them.
    One non-transactional logical message per megabyte, then a checkpoint."""
    mb = int(q1(conn, "SELECT pg_size_bytes(current_setting('min_wal_size')) / 1048576"))
    t0 = time.monotonic()
    q(conn, "SELECT count(pg_logical_emit_message(false, 'bench', repeat('x', 1048576)))"
            " FROM generate_series(1, %s)", (mb,))
    q(conn, "CHECKPOINT")
    log("WAL segment pool of %d MB filled on port %s in %.1fs" % (mb, conn.info.port, time.monotonic() - t0))


def cluster_conf(port, shared_buffers, min_wal):
    """The settings every benchmark cluster has (appended to its postgresql.conf)."""
    return """
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
port = %d
shared_buffers = %s
max_wal_size = 20GB
min_wal_size = %s
checkpoint_timeout = 30min
max_replication_slots = 32
max_wal_senders = 32
max_worker_processes = 32
max_logical_replication_workers = 8
autovacuum = off
log_line_prefix = '%%m [%%p] %%b '
""" % (BASE, port, shared_buffers, min_wal)


def setup_clusters():
    global PGLOGICAL_OK, PGLOGICAL_WHY
    for n in ("source", "dest"):
        stop_cluster(n)
    shutil.rmtree(BASE, ignore_errors=True)
    os.makedirs(BASE)
    os.chown(BASE, PG.pw_uid, PG.pw_gid)

    want_pgl = "pglogical" in CONTENDERS or "ashpgl" in CONTENDERS
    have_pgl = os.path.exists(os.path.join(PGBIN, "..", "lib", "pglogical.so"))
    if want_pgl and not have_pgl:
        PGLOGICAL_WHY = "postgresql-15-pglogical not installable"
    use_pgl = want_pgl and have_pgl

    keyring = os.path.join(BASE, "keyring")
    with open(keyring, "w") as f:
        f.write("column_encryption 1 %s\n" % ("ab" * 32))
        f.write("snapshot_provenance 1 %s\n" % ("cd" * 32))   # initial load, ash_incr
    os.chown(keyring, PG.pw_uid, PG.pw_gid)
    os.chmod(keyring, 0o600)

    for name, port in (("source", SRC_PORT), ("dest", DST_PORT)):
        d = os.path.join(BASE, name)
        # SRC_CHECKSUMS=1: a source with data checksums (a read that sets a
        # page's hint bits after a checkpoint writes its image to the WAL)
        checksums = ["--data-checksums"] if name == "source" and os.environ.get("SRC_CHECKSUMS") == "1" else []
        as_pg(["initdb", "-D", d, "-U", "postgres", "-A", "trust", "--locale=C", "-E", "UTF8"] + checksums,
              stdout=subprocess.DEVNULL)
        # MIN_WAL_SIZE: the segment pool filled before measuring (2GB); smaller
        # on a disk without room for it, the workload's WAL still within it
        conf = cluster_conf(port, "512MB", os.environ.get("MIN_WAL_SIZE", "2GB"))
        if name == "source":
            conf += "wal_level = logical\nsynchronous_commit = off\n"
            if use_pgl:
                conf += "shared_preload_libraries = 'pglogical'\n"
            # PostgreSQL 15.19+ (security fix) only lets approved libraries be output plugins
            plugins = ["pgoutput", "test_decoding"] + (["pglogical_output"] if use_pgl else []) \
                + (["wal2json"] if "ashw2j" in CONTENDERS else [])
            with open(os.path.join(d, "postgresql.conf")) as f:
                if len(plugins) > 2 and "output_plugin_libraries" in f.read():
                    conf += "output_plugin_libraries = '%s'\n" % ", ".join(plugins)
        else:
            # pglogical wants it on both; same for every contender.  DST_WAL_LEVEL=replica
            # (PostgreSQL's default; no pglogical contender): a destination that feeds no
            # logical decoding itself
            dst_level = os.environ.get("DST_WAL_LEVEL", "logical")
            if dst_level not in ("logical", "replica") or (dst_level != "logical" and use_pgl):
                raise SystemExit("DST_WAL_LEVEL: logical, or replica without a pglogical contender")
            conf += "wal_level = %s\n" % dst_level
            conf += "shared_preload_libraries = '%s'\n" % ("ash_replicant,pglogical" if use_pgl else "ash_replicant")
            conf += "ash_replicant.database = 'postgres'\n"
            conf += "ash_replicant.keyring_file = '%s'\n" % keyring
        with open(os.path.join(d, "postgresql.conf"), "a") as f:
            f.write(conf)
        as_pg(["pg_ctl", "-D", d, "-c", "-l", os.path.join(BASE, name + ".log"), "-w", "start"],
              stdout=subprocess.DEVNULL)

    src, dst = connect(SRC_PORT), connect(DST_PORT)
    for conn in (src, dst):
        fill_wal_pool(conn)
    q(src, "CREATE SCHEMA bench")
    q(src, "CREATE TABLE bench.marker (id int PRIMARY KEY, note text)")
    q(dst, "CREATE SCHEMA bench")
    q(dst, "CREATE TABLE bench.marker (id int PRIMARY KEY, note text)")
    q(dst, "CREATE EXTENSION ash_replicant")
    q(dst, "CREATE SCHEMA ash5")

    if use_pgl:
        try:
            try:
                PGL_GUC = q1(src, "SHOW output_plugin_libraries")
            except psycopg2.Error:
                PGL_GUC = "(GUC output_plugin_libraries does not exist on %s)" % q1(src, "SHOW server_version")
            log("pglogical: SHOW output_plugin_libraries -> %s" % PGL_GUC)
            q(src, "CREATE EXTENSION pglogical")
            q(src, "SELECT pglogical.create_node(node_name := 'provider', dsn := %s)", (SRC_DSN,))
            q(dst, "CREATE EXTENSION pglogical")
            q(dst, "SELECT pglogical.create_node(node_name := 'subscriber', dsn := %s)", (DST_DSN,))
            PGLOGICAL_OK = True
            emit({"type": "note", "pglogical_version": q1(dst, "SELECT extversion FROM pg_extension WHERE extname='pglogical'"),
                  "output_plugin_libraries": PGL_GUC})
        except psycopg2.Error as e:
            PGLOGICAL_WHY = "pglogical setup failed: %s" % str(e).strip().splitlines()[0]
            log(PGLOGICAL_WHY)
    src.close()
    dst.close()


# ---------------------------------------------------------------------------
# workloads

COLS7 = "id bigint PRIMARY KEY, a int NOT NULL, b bigint NOT NULL, t text NOT NULL, n numeric(12,2) NOT NULL, ts timestamptz NOT NULL, f boolean NOT NULL"
GEN7 = "g, (g % 100000)::int, g * 1000003, left(md5(g::text), 30), round((g % 100000) / 7.0, 2), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', g % 2 = 0"
COLS5 = "id bigint PRIMARY KEY, tenant_id text NOT NULL, a int NOT NULL, b bigint NOT NULL, t text NOT NULL, n numeric(12,2) NOT NULL, ts timestamptz NOT NULL, f boolean NOT NULL"
COLS5_ASH = "id bigint PRIMARY KEY, tenant_id text NOT NULL, a int NOT NULL, b bigint NOT NULL, t bytea, n numeric(12,2) NOT NULL, ts timestamptz NOT NULL, f boolean NOT NULL"
GEN5 = "g, 'tenant_' || (g % 10), (g % 100000)::int, g * 1000003, left(md5(g::text), 30), round((g % 100000) / 7.0, 2), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', g % 2 = 0"
HASH7 = "ROW(id, a, b, t, n, ts, f)"
HASH5 = "ROW(id, tenant_id, a, b, n, ts, f)"   # t is encrypted on the ash mirror


def sc(n):
    return max(1, int(round(n * SCALE)))


class Workload:
    def __init__(self, name):
        self.name = name
        self.table = "bench." + name.lower()
        self.pub = "pub_" + name.lower()
        self.cols = COLS5 if name == "W5" else COLS7
        self.hash_row = HASH5 if name == "W5" else HASH7
        self.prepop = 0
        if name == "W1":
            self.rows, self.desc = sc(1_000_000), "inserts, 1,000 rows per transaction"
        elif name == "W2":
            self.rows, self.desc = sc(100_000), "single-row insert transactions"
        elif name == "W3":
            self.rows, self.desc = sc(300_000) // 10 * 10, "60% update / 20% insert / 20% delete, 10 ops per transaction"
            self.prepop = sc(100_000)
        elif name == "W4":
            self.rows, self.desc = sc(2_000_000), "one transaction"
        elif name == "W5":
            self.rows, self.desc = sc(1_000_000), "as W1, tenant-scoped mirror with one encrypted column"
        else:
            raise SystemExit("unknown workload %s" % name)
        # the table ash_replicant writes (W5: its own shape); others write self.table
        self.ash_target = "ash5.w5" if name == "W5" else self.table

    def setup(self, src, dst):
        t = self.table
        q(src, "DROP PUBLICATION IF EXISTS %s" % self.pub)
        q(src, "DROP TABLE IF EXISTS %s" % t)
        q(src, "CREATE TABLE %s (%s)" % (t, self.cols))
        q(dst, "DROP TABLE IF EXISTS %s, %s_seed" % (t, t))
        q(dst, "CREATE TABLE %s (%s)" % (t, self.cols))
        if self.name == "W5":
            # tenancy and sensitive columns need the whole old row (inserts only here: no WAL cost)
            q(src, "ALTER TABLE %s REPLICA IDENTITY FULL" % t)
            q(dst, "DROP TABLE IF EXISTS ash5.w5")
            q(dst, "CREATE TABLE ash5.w5 (%s)" % COLS5_ASH)
        gen = GEN5 if self.name == "W5" else GEN7
        if self.name in ("W1", "W2", "W5"):
            q(src, """CREATE OR REPLACE PROCEDURE %s_load(first bigint, n bigint, per_xact int)
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
END $p$""" % (t, t, gen))
        if self.name == "W3":
            q(src, "INSERT INTO %s SELECT %s FROM generate_series(1::bigint, %d) g" % (t, GEN7, self.prepop))
            q(src, "VACUUM ANALYZE %s" % t)
            q(src, """CREATE OR REPLACE PROCEDURE bench.w3_run(pre bigint, nxacts int)
LANGUAGE plpgsql AS $p$
DECLARE next_del bigint := 1; next_ins bigint := pre + 1; r bigint; op text;
        pattern constant text := 'uiuduuiudu';
BEGIN
  PERFORM setseed(0.42);
  FOR x IN 1..nxacts LOOP
    FOR k IN 1..10 LOOP
      op := substr(pattern, k, 1);
      IF op = 'u' THEN
        r := next_del + floor(random() * (next_ins - next_del))::bigint;
        UPDATE bench.w3 SET a = a + 1, t = left(md5(random()::text), 30), ts = ts + interval '1 minute'
         WHERE id = r;
      ELSIF op = 'i' THEN
        INSERT INTO bench.w3 SELECT %s FROM generate_series(next_ins, next_ins) g;
        next_ins := next_ins + 1;
      ELSE
        DELETE FROM bench.w3 WHERE id = next_del;
        next_del := next_del + 1;
      END IF;
    END LOOP;
    COMMIT;
  END LOOP;
END $p$""" % GEN7)
            # mirror pre-populated identically: COPY source -> destination, plus a seed copy
            with src.cursor() as sc_, dst.cursor() as dc:
                import io
                buf = io.StringIO()
                sc_.copy_expert("COPY %s TO STDOUT" % t, buf)
                buf.seek(0)
                dc.copy_expert("COPY %s FROM STDIN" % t, buf)
            q(dst, "CREATE TABLE %s_seed AS SELECT * FROM %s" % (t, t))
            q(dst, "VACUUM ANALYZE %s" % t)
        q(src, "CREATE PUBLICATION %s FOR TABLE %s, bench.marker" % (self.pub, t))

    def run(self, src):
        t = self.table
        if self.name == "W1":
            q(src, "CALL %s_load(1, %d, 1000)" % (t, self.rows))
        elif self.name == "W5":
            q(src, "CALL %s_load(1, %d, 1000)" % (t, self.rows))
        elif self.name == "W2":
            q(src, "CALL %s_load(1, %d, 1)" % (t, self.rows))
        elif self.name == "W3":
            q(src, "CALL bench.w3_run(%d, %d)" % (self.prepop, self.rows // 10))
        elif self.name == "W4":
            q(src, "SET synchronous_commit = off")
            q(src, "INSERT INTO %s SELECT %s FROM generate_series(1::bigint, %d) g" % (t, GEN7, self.rows))

    def reset_dest(self, dst, target):
        q(dst, "TRUNCATE bench.marker, %s" % target)
        if self.name == "W3":
            q(dst, "INSERT INTO %s SELECT * FROM %s_seed" % (target, self.table))
            q(dst, "VACUUM ANALYZE %s" % target)
        q(dst, "CHECKPOINT")

    def content_hash(self, conn, target):
        return q(conn, "SELECT count(*), coalesce(sum(('x' || substr(md5(%s::text), 1, 15))::bit(60)::bigint), 0)::text FROM %s"
                 % (self.hash_row, target))[0]


# ---------------------------------------------------------------------------
# contenders

class Failed(Exception):
    pass


class NotAvailable(Exception):
    pass


def drop_slot(src, slot, timeout=60):
    t_end = time.time() + timeout
    while True:
        row = q(src, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if not row:
            return
        if row[0][0] is None:
            try:
                q(src, "SELECT pg_drop_replication_slot(%s)", (slot,))
                return
            except psycopg2.Error:
                pass
        if time.time() > t_end:
            if row[0][0] is not None:
                q(src, "SELECT pg_terminate_backend(%s)", (row[0][0],))
            t_end = time.time() + 10
        time.sleep(0.2)


def wait_slot_inactive(src, slot, timeout=60):
    t_end = time.time() + timeout
    while time.time() < t_end:
        if q1(src, "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)) is False:
            return
        time.sleep(0.1)
    raise Failed("slot %s stayed active" % slot)


class Perf:
    def __init__(self, pid, tag):
        self.data = os.path.join(RESULTS_DIR, "%s-perf-%s.data" % (STAMP, tag))
        self.txt = os.path.join(RESULTS_DIR, "%s-perf-%s.txt" % (STAMP, tag))
        self.p = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(pid), "-o", self.data],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
        with open(self.txt, "w") as f:
            for args in (["--no-children", "--sort", "dso,symbol"], ["--children", "--sort", "symbol"]):
                r = subprocess.run(["perf", "report", "-i", self.data, "--stdio", "-g", "none",
                                    "--percent-limit", "0.7"] + args, capture_output=True, text=True)
                f.write("### perf report %s\n" % " ".join(args))
                f.write("\n".join(l for l in r.stdout.splitlines() if l.strip() and not l.startswith("#")) + "\n\n")
        if os.environ.get("KEEP_PERF") != "1":
            try:
                os.unlink(self.data)
            except OSError:
                pass
        return self.txt


MEMDUMP_KB = 60 * 1024


def memdump_extract(logpos, pid, tag):
    """The memory-context dump that pg_log_backend_memory_contexts wrote for pid."""
    with open(os.path.join(BASE, "dest.log"), errors="replace") as f:
        f.seek(logpos)
        lines = [l.split(" LOG:  ", 1)[-1] for l in f.read().splitlines()
                 if "[%d]" % pid in l and ("level:" in l or "Grand total" in l or "more child contexts" in l)]
    out = os.path.join(RESULTS_DIR, "%s-memctx-%s.txt" % (STAMP, tag))
    with open(out, "w") as f:
        f.write("# memory contexts of pid %d (%s), logged when its RssAnon passed %d MB\n" % (pid, tag, MEMDUMP_KB // 1024))
        f.write("\n".join(lines) + "\n")
    return out


def timed_apply(w, dst, marker_id, start, pid_of, check=None, timeout=None, profile_tag=None, memdump_tag=None,
                src=None, slot=None):
    """Start a contender and wait for the marker row.  Returns (seconds, pid, mem, anon, profile);
    mem["sender_cpu_s"] is the CPU of the source walsender serving `slot` (when src and slot are given)."""
    timeout = timeout or (120 + 1500 * SCALE)
    logpos = os.path.getsize(os.path.join(BASE, "dest.log"))
    dumped = False
    t0 = time.monotonic()
    start()
    pid, mem, anon_max, perf = None, None, 0, None
    sender, sender_cpu = None, None
    next_check = t0 + 0.5
    while True:
        now = time.monotonic()
        if q1(dst, "SELECT count(*) FROM bench.marker WHERE id = %s", (marker_id,)):
            secs = now - t0
            break
        if pid is None:
            pid = pid_of()
            if pid and profile_tag and not PROFILE_SENDER:
                perf = Perf(pid, profile_tag)
        if slot and sender is None:
            sender = q1(src, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            if sender and profile_tag and PROFILE_SENDER:
                perf = Perf(sender, profile_tag + "-sender")
        if sender:
            sst = proc_status(sender)
            if sst:
                sender_cpu = sst["cpu_s"]
        if pid:
            st = proc_status(pid)
            if st:
                mem = st
                anon_max = max(anon_max, st.get("RssAnon", 0))
                if memdump_tag and not dumped and st.get("RssAnon", 0) >= MEMDUMP_KB:
                    q(dst, "SELECT pg_log_backend_memory_contexts(%s)", (pid,))
                    dumped = True
        if check and now >= next_check:
            check()
            next_check = now + 0.5
        if now - t0 > timeout:
            raise Failed("timeout after %ds" % timeout)
        time.sleep(MARKER_POLL)
    confirmed = None
    if slot and getattr(w, "end_lsn", None):
        # until the source holds the acknowledgement too: the slot's
        # confirmed_flush_lsn at the workload's end LSN (WAL kept until then)
        while time.monotonic() - t0 < timeout and time.monotonic() - t0 - secs < 60:
            if q1(src, "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                  (w.end_lsn, slot)):
                confirmed = time.monotonic() - t0
                break
            time.sleep(0.002)
    if pid is None:
        pid = pid_of()
    st = proc_status(pid) if pid else None
    if st:
        mem = st
        anon_max = max(anon_max, st.get("RssAnon", 0))
    if sender and proc_status(sender):
        sender_cpu = proc_status(sender)["cpu_s"]
    if mem is not None:
        mem["sender_cpu_s"] = sender_cpu
    else:
        mem = {}
    mem["confirmed_s"] = confirmed
    prof = perf.stop() if perf else None
    if dumped:
        time.sleep(0.5)
        prof = (prof + " " if prof else "") + memdump_extract(logpos, pid, memdump_tag)
    return secs, pid, mem, anon_max, prof


class Contender:
    name = "?"
    variant = None

    def __init__(self, w, rep):
        self.w, self.rep = w, rep
        self.slot = "%s_%s_%d" % (self.short, w.name.lower(), rep) + (("_" + self.variant.replace("+", "_")) if self.variant else "")

    def label(self):
        return self.name + ("(%s)" % self.variant if self.variant else "")

    plugin = "pgoutput"

    def prepare(self, src, dst):
        q(src, "SELECT pg_create_logical_replication_slot(%s, %s)", (self.slot, self.plugin))

    def cleanup(self, src, dst):
        drop_slot(src, self.slot)


class Ceiling(Contender):
    name, short = "ceiling", "ceil"

    def measure(self, src, dst, marker_id):
        c = connect(SRC_PORT)
        t0 = time.monotonic()
        n = q1(c, "SELECT count(*) FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL,"
                  " 'proto_version', '1', 'publication_names', %s)", (self.slot, self.w.pub))
        secs = time.monotonic() - t0
        st = parse_status(q1(c, "SELECT pg_read_file('/proc/self/status')"))
        c.close()
        return {"seconds": secs, "messages": n, "mem": st, "peak_anon_kb": None, "verified": "n/a (decode only)"}


class Reader(Contender):
    """A process that reads the slot's stream and applies nothing; timed until it exits
    at the workload's end LSN.  Its seconds are what the source's walsender needs to
    decode and send the workload to a reader of that kind."""

    def command(self):
        raise NotImplementedError

    def measure(self, src, dst, marker_id):
        t0 = time.monotonic()
        p = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sender, sender_cpu, st = None, None, None
        while p.poll() is None:
            if sender is None:
                sender = q1(src, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            if sender:
                sst = proc_status(sender)
                sender_cpu = sst["cpu_s"] if sst else sender_cpu
            cst = proc_status(p.pid)
            st = cst or st
            if time.monotonic() - t0 > 120 + 1500 * SCALE:
                p.kill()
                raise Failed("%s timed out" % self.name)
            time.sleep(POLL / 5)
        secs = time.monotonic() - t0
        out = p.stdout.read().decode(errors="replace").strip()
        err = p.stderr.read().decode(errors="replace").strip()
        if p.returncode != 0:
            raise Failed("%s exited %d: %s" % (self.name, p.returncode, err.splitlines()[-1] if err else ""))
        mem = dict(st or {})
        mem["sender_cpu_s"] = sender_cpu
        res = {"seconds": secs, "mem": mem, "peak_anon_kb": None, "verified": "n/a (no apply)"}
        if out.startswith("{"):
            res["reader"] = json.loads(out.splitlines()[-1])
        return res


class Recvlogical(Reader):
    """pg_recvlogical reading the stream into /dev/null: no apply at all, yet not a
    ceiling -- it reads every message as it arrives, which keeps the source's TCP
    window open, and the walsender then sends each message as a segment of its own
    (twice the sender CPU an applying consumer costs it).  Shows that regime."""
    name, short = "pg_recvlogical", "rlog"

    def command(self):
        return [os.path.join(PGBIN, "pg_recvlogical"), "-h", "127.0.0.1", "-p", str(SRC_PORT), "-U", "postgres",
                "-d", "postgres", "--slot", self.slot, "--start", "--no-loop", "-f", "/dev/null", "-F", "0",
                "-o", "proto_version=1", "-o", "publication_names=%s" % self.w.pub, "-E", self.w.end_lsn]


FLOOR_READER = os.environ.get("BENCH_FLOOR_READER", os.path.join(BASE, "floor_reader"))


class Floor(Reader):
    """bench/floor_reader: reads with ash_replicant's pacing (256 kB receive buffer; a
    30 ms pause with the window clamped whenever a backlog of 64 kB or more was
    drained, or at a COMMIT with nothing more received while a backlog streams) and
    applies nothing.  The walsender serving it does what it does for
    ash_replicant, so its seconds are the bound for any consumer reading this way:
    ash_replicant's seconds minus these are what its apply adds to the wall clock."""
    name, short = "floor", "floor"

    def __init__(self, w, rep, binary=False):
        self.binary = binary
        self.variant = "binary" if binary else None
        super().__init__(w, rep)

    def command(self):
        opts = "proto_version '3', publication_names '\"%s\"', messages 'true'" % self.w.pub
        if self.binary:
            opts += ", binary 'true'"
        return [FLOOR_READER, "host=127.0.0.1 port=%d dbname=postgres user=postgres replication=database" % SRC_PORT,
                self.slot, opts, self.w.end_lsn] + os.environ.get("FLOOR_ARGS", "").split()


class Ash(Contender):
    name, short = "ash_replicant", "ash"

    def __init__(self, w, rep, binary=False, streaming=False, decoder="pgoutput"):
        self.binary = binary
        self.streaming = streaming
        self.decoder = decoder
        self.plugin = "pglogical_output" if decoder == "pglogical" else decoder
        self.variant = "+".join(v for v, on in (("stream", streaming), ("binary", binary),
                                                ("wal2json", decoder == "wal2json"),
                                                ("pglogical", decoder == "pglogical")) if on) or None
        super().__init__(w, rep)

    def prepare(self, src, dst):
        w = self.w
        sysid = q1(src, "SELECT system_identifier::text FROM pg_control_system()")
        q(dst, "SELECT ash_replicant_create_sink(%s, slot_name => %s)", (self.slot, self.slot))
        extra = {}
        if w.name == "W5":
            extra = dict(tenant_column="tenant_id", tenant_strategy="attribute",
                         sensitive=["t"], encrypted=["t"])
        self.map_table(dst, w.ash_target, w.table.split(".")[0], w.table.split(".")[1], extra)
        self.map_table(dst, "bench.marker", "bench", "marker", {})
        if self.decoder == "pglogical":
            if not PGLOGICAL_OK:
                raise NotAvailable(PGLOGICAL_WHY or "pglogical not set up")
            rset = "set_" + self.slot
            q(src, "SELECT pglogical.create_replication_set(%s)", (rset,))
            for t in (w.table, "bench.marker"):
                q(src, "SELECT pglogical.replication_set_add_table(%s, %s::regclass, synchronize_data := false)",
                  (rset, t))
            q(dst, "SELECT ash_replicant_configure_pipeline(%s, connection => %s, decoder => 'pglogical',"
                   " replication_sets => %s, source_system_identifier => %s, source_database => 'postgres')",
              (self.slot, SRC_DSN, [rset], sysid))
        elif self.decoder == "wal2json":
            q(dst, "SELECT ash_replicant_configure_pipeline(%s, connection => %s, decoder => 'wal2json',"
                   " tables => %s, source_system_identifier => %s, source_database => 'postgres')",
              (self.slot, SRC_DSN, [w.table, "bench.marker"], sysid))
        else:
            q(dst, "SELECT ash_replicant_configure_pipeline(%s, connection => %s, publication => %s,"
                   " source_system_identifier => %s, source_database => 'postgres', binary_transfer => %s,"
                   " streaming => %s)",
              (self.slot, SRC_DSN, w.pub, sysid, self.binary, self.streaming))
        super().prepare(src, dst)

    def map_table(self, dst, target, sschema, stable, extra):
        args = ", ".join("%s => %%s" % k for k in extra)
        try:
            q(dst, "SELECT ash_replicant_map_table(%%s, %%s::regclass, source_table => %%s, source_schema => %%s%s)"
                   % ((", " + args) if args else ""), [self.slot, target, stable, sschema] + list(extra.values()))
            self.mapped_by = "ash_replicant_map_table"
            return
        except psycopg2.Error as e:
            msg = str(e).strip().splitlines()[0]
            if "not built yet" not in msg:
                raise NotAvailable("map_table refused: %s" % msg)
        # ash_replicant_map_table is still a stub: register the mapping directly
        cols = ["sink_name", "target", "source_schema", "source_table"] + list(extra)
        vals = [self.slot, target, sschema, stable] + list(extra.values())
        q(dst, "INSERT INTO ash_replicant.resources (%s) VALUES (%%s, %%s::regclass%s)"
               % (", ".join(cols), "".join(", %s" for _ in vals[2:])), vals)
        self.mapped_by = "direct insert into ash_replicant.resources (map_table is a stub)"

    def status(self, dst):
        r = q(dst, "SELECT state, reason, worker_pid FROM ash_replicant_status(%s)", (self.slot,))
        return r[0] if r else (None, None, None)

    def measure(self, src, dst, marker_id):
        w = self.w
        w.reset_dest(dst, w.ash_target)

        def start():
            try:
                q(dst, "SELECT ash_replicant_start(%s)", (self.slot,))
            except psycopg2.Error as e:
                msg = str(e).strip().splitlines()[0]
                if w.name == "W5":
                    raise NotAvailable("not implemented: start refused: %s" % msg)
                raise Failed("start refused: %s" % msg)

        def pid_of():
            return self.status(dst)[2]

        def check():
            state, reason, _ = self.status(dst)
            if state in ("halted", "misconfigured"):
                if w.name == "W5" and reason in ("mapping_unsupported", "keyring_missing_family"):
                    raise NotAvailable("not implemented: %s/%s" % (state, reason))
                raise Failed("pipeline %s/%s" % (state, reason))

        tag = "%s-%s" % ("ash" + (self.decoder if self.decoder != "pgoutput" else ""), w.name) if PROFILE else None
        secs, pid, mem, anon, prof = timed_apply(w, dst, marker_id, start, pid_of, check, profile_tag=tag,
                                                 memdump_tag="ash-%s-%d" % (w.name, self.rep),
                                                 src=src, slot=self.slot)
        stats = q(dst, "SELECT applied_transactions, applied_changes, batches, applied_lsn::text"
                       " FROM ash_replicant.stat_pipelines WHERE sink_name = %s", (self.slot,))
        ck = q(dst, "SELECT commit_lsn::text, end_lsn::text FROM ash_replicant.checkpoints WHERE slot_name = %s",
               (self.slot,))
        res = {"seconds": secs, "pid": pid, "mem": mem, "peak_anon_kb": anon, "profile": prof,
               "mapped_by": getattr(self, "mapped_by", None),
               "ash_stats": dict(zip(["applied_transactions", "applied_changes", "batches", "applied_lsn"], stats[0])) if stats else None,
               "checkpoint": dict(zip(["commit_lsn", "end_lsn"], ck[0])) if ck else None}
        return res

    def cleanup(self, src, dst):
        # stop (retrying across a destination crash-restart), wait for the worker, drop the sink
        t_end = time.time() + 90
        while True:
            try:
                dst = alive(dst, DST_PORT)
                q(dst, "SELECT ash_replicant_stop(%s)", (self.slot,))
                st = self.status(dst)
                if st[2] is None or not os.path.exists("/proc/%d" % st[2]):
                    q(dst, "SELECT ash_replicant_drop_sink(%s)", (self.slot,))
                    break
            except psycopg2.Error as e:
                if time.time() > t_end:
                    log("  drop_sink %s: %s" % (self.slot, str(e).strip().splitlines()[0]))
                    break
            if time.time() > t_end:
                log("  ash_replicant worker of %s did not stop" % self.slot)
                break
            time.sleep(0.2)
        if self.decoder == "pglogical":
            try:
                q(src, "SELECT pglogical.drop_replication_set(%s)", ("set_" + self.slot,))
            except psycopg2.Error as e:
                log("  drop_replication_set: %s" % str(e).strip().splitlines()[0])
        super().cleanup(src, dst)


LAST_NATIVE_START = [-100.0]


class Native(Contender):
    name, short = "native", "nat"

    def __init__(self, w, rep, streaming, binary=False):
        self.streaming = streaming
        self.binary = binary
        self.variant = "+".join(v for v, on in (("stream", streaming), ("binary", binary)) if on) or None
        super().__init__(w, rep)
        self.sub = "sub_" + self.slot

    def prepare(self, src, dst):
        super().prepare(src, dst)
        q(dst, "CREATE SUBSCRIPTION %s CONNECTION %%s PUBLICATION %s WITH (copy_data = false, create_slot = false,"
               " slot_name = %%s, enabled = false, streaming = %s, binary = %s)"
          % (self.sub, self.w.pub, "on" if self.streaming else "off", "true" if self.binary else "false"),
          (SRC_DSN, self.slot))

    def measure(self, src, dst, marker_id):
        w = self.w
        w.reset_dest(dst, w.table)

        # The logical replication launcher starts apply workers at most once per
        # wal_retrieve_retry_interval (5s): wait it out so the timing does not
        # include that throttle when two native runs follow each other.
        wait = LAST_NATIVE_START[0] + 5.5 - time.monotonic()
        if wait > 0:
            time.sleep(wait)

        def start():
            LAST_NATIVE_START[0] = time.monotonic()
            q(dst, "ALTER SUBSCRIPTION %s ENABLE" % self.sub)

        def pid_of():
            return q1(dst, "SELECT pid FROM pg_stat_subscription WHERE subname = %s AND relid IS NULL", (self.sub,))

        tag = "native-%s" % w.name if PROFILE else None
        secs, pid, mem, anon, prof = timed_apply(w, dst, marker_id, start, pid_of, profile_tag=tag,
                                                 src=src, slot=self.slot)
        return {"seconds": secs, "pid": pid, "mem": mem, "peak_anon_kb": anon, "profile": prof}

    def cleanup(self, src, dst):
        try:
            q(dst, "ALTER SUBSCRIPTION %s DISABLE" % self.sub)
            t_end = time.time() + 30
            while time.time() < t_end and q1(dst, "SELECT pid FROM pg_stat_subscription WHERE subname = %s AND pid IS NOT NULL", (self.sub,)):
                time.sleep(0.1)
            q(dst, "ALTER SUBSCRIPTION %s SET (slot_name = NONE)" % self.sub)
            q(dst, "DROP SUBSCRIPTION %s" % self.sub)
        except psycopg2.Error as e:
            log("  drop subscription %s: %s" % (self.sub, e))
        super().cleanup(src, dst)


class Pglogical(Contender):
    name, short = "pglogical", "pgl"

    def __init__(self, w, rep):
        super().__init__(w, rep)
        self.sub = self.slot
        self.set = "set_" + self.slot
        self.real_slot = None

    def prepare(self, src, dst):
        if not PGLOGICAL_OK:
            raise NotAvailable(PGLOGICAL_WHY or "pglogical not set up")
        q(src, "SELECT pglogical.create_replication_set(%s)", (self.set,))
        q(src, "SELECT pglogical.replication_set_add_table(%s, %s::regclass, synchronize_data := false)",
          (self.set, self.w.table))
        q(src, "SELECT pglogical.replication_set_add_table(%s, 'bench.marker'::regclass, synchronize_data := false)",
          (self.set,))
        q(dst, "SELECT pglogical.create_subscription(subscription_name := %s, provider_dsn := %s,"
               " replication_sets := ARRAY[%s], synchronize_structure := false, synchronize_data := false,"
               " forward_origins := '{}')", (self.sub, SRC_DSN, self.set))
        t_end = time.time() + 60
        while True:
            st = q(dst, "SELECT status, slot_name FROM pglogical.show_subscription_status(%s)", (self.sub,))
            if st and st[0][0] == "replicating":
                self.real_slot = st[0][1]
                break
            if time.time() > t_end:
                raise Failed("pglogical subscription did not reach replicating: %s" % (st,))
            time.sleep(0.2)
        q(dst, "SELECT pglogical.alter_subscription_disable(%s, true)", (self.sub,))
        wait_slot_inactive(src, self.real_slot)

    def measure(self, src, dst, marker_id):
        w = self.w
        w.reset_dest(dst, w.table)
        before = set(self.apply_pids())

        def start():
            q(dst, "SELECT pglogical.alter_subscription_enable(%s, true)", (self.sub,))

        def pid_of():
            pids = [p for p in self.apply_pids() if p not in before]
            return pids[0] if pids else None

        secs, pid, mem, anon, prof = timed_apply(w, dst, marker_id, start, pid_of, src=src, slot=self.real_slot)
        return {"seconds": secs, "pid": pid, "mem": mem, "peak_anon_kb": anon, "pglogical_slot": self.real_slot}

    @staticmethod
    def apply_pids():
        return [pid for pid, _ in server_processes("dest", "pglogical apply")]

    def cleanup(self, src, dst):
        try:
            q(dst, "SELECT pglogical.drop_subscription(%s, true)", (self.sub,))
        except psycopg2.Error as e:
            log("  pglogical drop_subscription: %s" % str(e).strip().splitlines()[0])
        if self.real_slot:
            drop_slot(src, self.real_slot)
        try:
            q(src, "SELECT pglogical.drop_replication_set(%s)", (self.set,))
        except psycopg2.Error:
            pass


def make_contenders(w, rep):
    out = []
    for c in CONTENDERS:
        if c == "ceiling":
            out.append(Ceiling(w, rep))
        elif c == "recvlogical":
            out.append(Recvlogical(w, rep))
        elif c == "floor":
            out.append(Floor(w, rep))
        elif c == "floorbin":
            out.append(Floor(w, rep, binary=True))
        elif c == "ash":
            out.append(Ash(w, rep))
        elif c == "ashbin":
            out.append(Ash(w, rep, binary=True))
        elif c == "ashw2j":
            out.append(Ash(w, rep, decoder="wal2json"))
        elif c == "ashpgl":
            out.append(Ash(w, rep, decoder="pglogical"))
        elif c == "ashstream":
            # streaming of in-progress transactions only changes W4
            if w.name == "W4":
                out.append(Ash(w, rep, streaming=True))
        elif c == "ashstreambin":
            if w.name == "W4":
                out.append(Ash(w, rep, binary=True, streaming=True))
        elif c == "native":
            if w.name == "W4":
                out.append(Native(w, rep, True))
            out.append(Native(w, rep, False))
        elif c == "nativebin":
            out.append(Native(w, rep, False, binary=True))
        elif c == "pglogical":
            out.append(Pglogical(w, rep))
        else:
            raise SystemExit("unknown contender %s" % c)
    return out


# ---------------------------------------------------------------------------

ALL = []
MARKER = [0]


def alive(conn, port, timeout=120):
    """The same connection if it still works, else a new one once the server is back."""
    try:
        q(conn, "SELECT 1")
        return conn
    except psycopg2.Error:
        pass
    t_end = time.time() + timeout
    while True:
        try:
            return connect(port)
        except psycopg2.OperationalError:
            if time.time() > t_end:
                raise
            time.sleep(0.5)


def crash_report(logpos, tag):
    """Scan the destination log written since logpos for a crashed process; if a
    core file is there, save a backtrace.  Returns a note or None."""
    logf = os.path.join(BASE, "dest.log")
    with open(logf, errors="replace") as f:
        f.seek(logpos)
        new = f.read()
    crashed = [l.split(" LOG:  ", 1)[-1] for l in new.splitlines() if "terminated by signal" in l]
    if not crashed:
        return None
    note = "destination crash: " + crashed[0]
    core = os.path.join(BASE, "dest", "core")
    if os.path.exists(core) and not shutil.which("gdb"):
        note += " (core file left in %s; install gdb for a backtrace)" % core
    elif os.path.exists(core):
        out = os.path.join(RESULTS_DIR, "%s-crash-%s.txt" % (STAMP, tag))
        r = subprocess.run(["gdb", "-batch", "-ex", "bt full", os.path.join(PGBIN, "postgres"), core],
                           capture_output=True, text=True)
        with open(out, "w") as f:
            f.write("# %s\n# %s\n" % (tag, crashed[0]))
            f.write("\n".join(l for l in r.stdout.splitlines() if not l.startswith("[New LWP")))
        try:
            os.unlink(core)
        except OSError:
            pass
        note += " (backtrace: bench/results/%s)" % os.path.basename(out)
    return note


def tcp_counters():
    """Host-wide TCP counters (/proc/net/snmp, /proc/net/netstat): segments sent, retransmitted, and
    segments a full receive buffer dropped.  During a measurement the replication connection is
    nearly all the traffic; how the walsender's messages were cut into segments is what its CPU
    depends on (one segment per change when the consumer keeps the window open)."""
    vals = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for hdr, val in zip(lines[::2], lines[1::2]):
            names, nums = hdr.split()[1:], val.split()[1:]
            prefix = hdr.split(":")[0]
            for n, v in zip(names, nums):
                vals[prefix + n] = int(v)
    return {"tcp_segments": vals.get("TcpOutSegs"), "tcp_retrans": vals.get("TcpRetransSegs"),
            "tcp_rcvq_drops": vals.get("TcpExtTCPRcvQDrop")}


def guarded(r, tag, body):
    """Run body(), a measurement that fills the result r: its n/a or failure, or a
    destination process that crashed meanwhile (tag names the backtrace file),
    becomes r's status and note."""
    logpos = os.path.getsize(os.path.join(BASE, "dest.log"))
    try:
        body()
    except NotAvailable as e:
        r.update(status="n/a", note=str(e))
    except Failed as e:
        r.update(status="failed", note=str(e))
    except psycopg2.Error as e:
        r.update(status="failed", note=str(e).strip().splitlines()[0])
    crash = crash_report(logpos, tag)
    if crash:
        r.update(status="crashed", note=crash + ("; " + r["note"] if r.get("note") else ""))


def cleanup_contender(c, src, dst):
    """Stop and drop contender c; returns working connections (a crash restarts a server)."""
    src, dst = alive(src, SRC_PORT), alive(dst, DST_PORT)
    try:
        c.cleanup(src, dst)
    except Exception as e:  # noqa: keep measuring the others
        log("  cleanup %s: %s" % (c.label(), e))
    return alive(src, SRC_PORT), alive(dst, DST_PORT)


def run_workload(w, rep):
    src, dst = connect(SRC_PORT), connect(DST_PORT)
    log("%s rep %d: %d changes (%s)%s" % (w.name, rep, w.rows, w.desc,
                                           ", %d pre-populated rows" % w.prepop if w.prepop else ""))
    w.setup(src, dst)
    contenders = make_contenders(w, rep)
    na = {}
    for c in contenders:
        try:
            c.prepare(src, dst)
        except NotAvailable as e:
            na[c] = str(e)
        except (Failed, psycopg2.Error) as e:
            na[c] = "prepare failed: %s" % str(e).strip().splitlines()[0]
            log("  %s prepare failed: %s" % (c.label(), na[c]))
    MARKER[0] += 1
    marker_id = MARKER[0]
    lsn0 = q1(src, "SELECT pg_current_wal_insert_lsn()")
    t0 = time.monotonic()
    w.run(src)
    q(src, "INSERT INTO bench.marker VALUES (%s, %s)", (marker_id, "%s rep %d" % (w.name, rep)))
    gen_secs = time.monotonic() - t0
    lsn1 = q1(src, "SELECT pg_current_wal_insert_lsn()")
    w.end_lsn = lsn1
    wal_bytes = q1(src, "SELECT pg_wal_lsn_diff(%s, %s)::bigint", (lsn1, lsn0))
    q(src, "CHECKPOINT")
    log("  workload generated in %.1fs, %.0f MB WAL, end LSN %s" % (gen_secs, wal_bytes / 1e6, lsn1))
    src_hash = w.content_hash(src, w.table)

    results = []
    for c in contenders:
        r = {"type": "result", "workload": w.name, "contender": c.name, "variant": c.variant, "rep": rep,
             "loadavg_1m": os.getloadavg()[0],
             "scale": SCALE, "changes": w.rows, "source_end_lsn": lsn1, "wal_bytes": wal_bytes,
             "workload_seconds": round(gen_secs, 3)}
        if c in na:
            r.update(status="n/a", note=na[c])
        elif w.name == "W5" and c.name in ("native", "pglogical") and \
                any(x["contender"] == "ash_replicant" and x["status"] != "ok" for x in results):
            r.update(status="n/a", note="skipped: ash_replicant n/a for W5 (native/pglogical W5 = W1 shape)")
        else:
            def body():
                tcp0 = tcp_counters()
                m = c.measure(src, dst, marker_id)
                tcp1 = tcp_counters()
                r.update({k: tcp1[k] - tcp0[k] for k in tcp0 if tcp0[k] is not None and tcp1[k] is not None})
                mem = m.pop("mem") or {}
                r.update(m)
                r["peak_rss_kb"] = mem.get("VmHWM")
                r["rss_anon_kb"] = mem.get("RssAnon")
                # CPU the apply process used (start-up included): steadier than
                # wall-clock seconds on a loaded machine
                r["apply_cpu_s"] = mem.get("cpu_s")
                # CPU of the source walsender decoding and sending for this contender
                r["sender_cpu_s"] = mem.get("sender_cpu_s")
                # until the slot's confirmed_flush_lsn reached the end LSN as well
                r["confirmed_seconds"] = mem.get("confirmed_s")
                r["rows_per_s"] = w.rows / m["seconds"]
                if c.name in ("ceiling", "pg_recvlogical", "floor"):
                    r["status"] = "ok"
                else:
                    target = w.ash_target if c.name == "ash_replicant" else w.table
                    h = w.content_hash(dst, target)
                    r["hash_source"], r["hash_dest"] = list(src_hash), list(h)
                    r["status"] = "ok" if tuple(h) == tuple(src_hash) else "hash_mismatch"
            guarded(r, "%s-%s-%s" % (w.name, c.short, rep), body)
        src, dst = cleanup_contender(c, src, dst)
        results.append(r)
        log("  %-18s %s" % (c.label(), ("%.2fs  %.0f rows/s  cpu %s s  sender cpu %s s  VmHWM %s kB  anon %s kB  %s" % (
            r["seconds"], r["rows_per_s"], r.get("apply_cpu_s"), r.get("sender_cpu_s"), r.get("peak_rss_kb"),
            r.get("peak_anon_kb"), r["status"]))
            if "seconds" in r else "%s: %s" % (r["status"], r.get("note"))))

    ok = lambda name: [x for x in results if x["contender"] == name and x["status"] == "ok"]
    nat = ok("native")
    ceil = ok("ceiling")
    binary = lambda x: "binary" in (x.get("variant") or "")
    # the floor reader of the same transfer mode (the walsender's work differs)
    floor = {binary(x): x for x in ok("floor")}
    best = min(nat, key=lambda x: x["seconds"]) if nat else None
    for r in results:
        if r["status"] != "ok":
            continue
        if best:
            r["vs_native"] = best["seconds"] / r["seconds"]
            r["native_best_variant"] = best["variant"] or "streaming off"
        conf = [x for x in nat if x.get("confirmed_seconds")]
        if conf and r.get("confirmed_seconds"):
            r["vs_native_confirmed"] = min(x["confirmed_seconds"] for x in conf) / r["confirmed_seconds"]
        if ceil:
            r["vs_ceiling"] = ceil[0]["seconds"] / r["seconds"]
        if binary(r) in floor and r["contender"] != "ceiling":
            r["vs_floor"] = floor[binary(r)]["seconds"] / r["seconds"]
    for r in results:
        emit(r)
        ALL.append(r)
    q(src, "DROP PUBLICATION IF EXISTS %s" % w.pub)
    q(src, "DROP TABLE IF EXISTS %s" % w.table)
    q(dst, "DROP TABLE IF EXISTS %s, %s_seed" % (w.table, w.table))
    src.close()
    dst.close()


def short_note(n):
    if "terminated by signal 11" in n:
        i = n.find("backtrace: ")
        return "SIGSEGV in the pipeline worker" + ((" (" + n[i:n.index(")", i)] + ")") if i >= 0 else "")
    return n if len(n) <= 90 else n[:87] + "..."


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fmt_summary(rows):
    """Median over repetitions, with the spread (max-min)/median of the seconds."""
    keys = []
    for r in rows:
        k = (r["workload"], r["contender"], r.get("variant"))
        if k not in keys:
            keys.append(k)
    hdr = ["workload", "contender", "runs ok", "median s", "spread", "rows/s", "vs native", "confirmed s",
           "vs native confirmed", "vs ceiling", "vs floor", "cpu s", "sender cpu s", "tcp segs", "VmHWM MB", "anon MB", "status"]
    lines = []
    for k in keys:
        rs = [r for r in rows if (r["workload"], r["contender"], r.get("variant")) == k]
        ok = [r for r in rs if r["status"] == "ok"]
        name = k[1] + ("(%s)" % k[2] if k[2] else "")
        if not ok:
            lines.append([k[0], name, "0/%d" % len(rs), "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-",
                          rs[0]["status"] + ((": " + short_note(rs[0]["note"])) if rs[0].get("note") else "")])
            continue
        secs = [r["seconds"] for r in ok]
        med = median(secs)
        vn = [r["vs_native"] for r in ok if r.get("vs_native") is not None]
        vc = [r["vs_ceiling"] for r in ok if r.get("vs_ceiling") is not None]
        cs = [r["confirmed_seconds"] for r in ok if r.get("confirmed_seconds") is not None]
        vnc = [r["vs_native_confirmed"] for r in ok if r.get("vs_native_confirmed") is not None]
        vf = [r["vs_floor"] for r in ok if r.get("vs_floor") is not None]
        hwm = [r["peak_rss_kb"] for r in ok if r.get("peak_rss_kb")]
        anon = [r["peak_anon_kb"] for r in ok if r.get("peak_anon_kb")]
        cpu = [r["apply_cpu_s"] for r in ok if r.get("apply_cpu_s") is not None]
        scpu = [r["sender_cpu_s"] for r in ok if r.get("sender_cpu_s") is not None]
        segs = [r["tcp_segments"] for r in ok if r.get("tcp_segments") is not None]
        lines.append([k[0], name, "%d/%d" % (len(ok), len(rs)), "%.2f" % med,
                      "%.0f%%" % (100 * (max(secs) - min(secs)) / med) if len(secs) > 1 else "-",
                      "%.0f" % (ok[0]["changes"] / med),
                      "%.2f" % median(vn) if vn else "-", "%.2f" % median(cs) if cs else "-",
                      "%.2f" % median(vnc) if vnc else "-", "%.2f" % median(vc) if vc else "-",
                      "%.2f" % median(vf) if vf else "-",
                      "%.2f" % median(cpu) if cpu else "-", "%.2f" % median(scpu) if scpu else "-",
                      "%d" % median(segs) if segs else "-",
                      "%.0f" % (max(hwm) / 1024) if hwm else "-", "%.1f" % (max(anon) / 1024) if anon else "-",
                      "ok" if len(ok) == len(rs) else "some runs: " + ", ".join(sorted(set(r["status"] for r in rs if r["status"] != "ok")))])
    return table(hdr, lines)


def table(hdr, lines):
    w = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(hdr)]
    out = ["| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(hdr)) + " |",
           "|" + "|".join("-" * (x + 2) for x in w) + "|"]
    for l in lines:
        out.append("| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(l)) + " |")
    return "\n".join(out)


def fmt_table(rows):
    hdr = ["workload", "contender", "rep", "changes", "seconds", "rows/s", "vs native", "confirmed s",
           "vs native confirmed", "vs ceiling", "vs floor", "cpu s", "sender cpu s", "tcp segs", "drops", "VmHWM MB", "anon MB", "status"]
    lines = []
    for r in rows:
        f = lambda k, fmt: (fmt % r[k]) if r.get(k) is not None else "-"
        lines.append([r["workload"], r["contender"] + ("(%s)" % r["variant"] if r.get("variant") else ""),
                      str(r["rep"]), str(r["changes"]), f("seconds", "%.2f"), f("rows_per_s", "%.0f"),
                      f("vs_native", "%.2f"), f("confirmed_seconds", "%.2f"), f("vs_native_confirmed", "%.2f"),
                      f("vs_ceiling", "%.2f"), f("vs_floor", "%.2f"),
                      f("apply_cpu_s", "%.2f"),
                      f("sender_cpu_s", "%.2f"), f("tcp_segments", "%d"), f("tcp_rcvq_drops", "%d"),
                      ("%.0f" % (r["peak_rss_kb"] / 1024)) if r.get("peak_rss_kb") else "-",
                      ("%.1f" % (r["peak_anon_kb"] / 1024)) if r.get("peak_anon_kb") else "-",
                      r["status"] + ((": " + short_note(r["note"])) if r.get("note") else "")])
    return table(hdr, lines)


def main():
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    meta = {"type": "meta", "date": datetime.datetime.now().isoformat(timespec="seconds"), "scale": SCALE,
            "workloads": WORKLOADS, "contenders": CONTENDERS, "repeat": REPEAT, "nproc": os.cpu_count(),
            "mem_gb": round(mem_gb, 1), "loadavg_start": os.getloadavg(), "kernel": platform.release(),
            "git": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()}
    log("bench: SCALE=%s workloads=%s contenders=%s repeat=%d; load %.2f %.2f %.2f; results %s"
        % (SCALE, ",".join(WORKLOADS), ",".join(CONTENDERS), REPEAT, *os.getloadavg(), OUT))
    setup_clusters()
    c = connect(DST_PORT)
    meta["server_version"] = q1(c, "SELECT version()")
    c.close()
    emit(meta)
    t0 = time.monotonic()
    try:
        for rep in range(1, REPEAT + 1):
            for wn in WORKLOADS:
                if wn in LOADS:
                    import initial_load   # bench/initial_load.py: it imports this module as "bench"
                    initial_load.run_load(wn, rep)
                else:
                    run_workload(Workload(wn), rep)
    finally:
        emit({"type": "end", "elapsed_s": round(time.monotonic() - t0, 1), "loadavg_end": os.getloadavg()})
        if not KEEP:
            for n in ("source", "dest"):
                stop_cluster(n)
    streamed = [r for r in ALL if r["workload"] not in LOADS]
    loads = [r for r in ALL if r["workload"] in LOADS]
    table = ""
    if streamed:
        table = ("vs native = native-best seconds / seconds (>1 faster than native); vs ceiling = decode-only"
                 " seconds / seconds; vs floor = floor-reader seconds (same transfer mode) / seconds\n")
        table += fmt_table(streamed)
        if REPEAT > 1:
            table += "\n\nMedian of %d runs (spread = (max-min)/median of the seconds; VmHWM/anon: max):\n" % REPEAT
            table += fmt_summary(streamed)
    if loads:
        import initial_load
        table += ("\n\n" if table else "") + initial_load.fmt_loads(loads)
    print()
    print("SCALE=%s  (%s, %d cores, PostgreSQL %s)" % (SCALE, meta["date"], meta["nproc"],
                                                       meta["server_version"].split()[1]))
    print(table)
    with open(OUT[:-len(".jsonl")] + ".txt", "w") as f:
        f.write("SCALE=%s %s\n%s\n" % (SCALE, meta["date"], table))
    log("total %.0fs; results in %s" % (time.monotonic() - t0, OUT))


if __name__ == "__main__":
    sys.modules["bench"] = sys.modules[__name__]   # one module, whoever imports it (initial_load)
    main()
