#!/usr/bin/env python3
"""Where a paired latency run's time goes, transaction by transaction.

While `CONTENDERS=pair bash bench/run.sh latency` runs a load, record the system
calls that mark each step of a source transaction's way to the mirror, for both
contenders at once, with the kernel's tracepoints (no ptrace, so the processes run
at speed):

  walsender wake   the source's walsender returns from its wait (the commit's WAL
                   was flushed; WalSndWakeup sets the walsenders' latches in
                   their slot order)
  BEGIN send       its first message of the transaction (pgoutput BEGIN, 51 bytes
                   with the CopyData framing)
  COMMIT send      its COMMIT (56 bytes)
  recv             the apply worker's first read returning data after that
  visible          the worker's ProcArrayEndTransaction(), where its commit
                   becomes visible (a uprobe on the server binary)

Each native transaction is matched with ash_replicant's by the time of its BEGIN
send (the nearest, closer than half the median gap between two transactions); printed: per step, ash_replicant's time minus native's (p25, p50, p75, mean),
each contender's own step times, and how many reads each worker made per commit.

  python3 bench/path_trace.py record DIR [SECONDS]   # during the load (6 s)
  python3 bench/path_trace.py analyze DIR

TRACE_MARKS (a comma-separated list of the server's functions, e.g.
StartTransactionCommand,CommitTransactionCommand, or LIB.so:function of a library
in the server's lib directory) adds a uprobe on each in both workers; the analysis then prints, per contender, when the first call of each
after the read of a transaction came (from that read, and to the visible commit).

`record` finds the processes itself: the one ash_replicant pipeline worker and the
one native apply worker on this machine, and the walsenders from the source's
pg_stat_replication (BENCH_SRC_PORT, default 57001). Needs perf and root.
"""
import bisect
import os
import subprocess
import sys

EVENTS = ["syscalls:sys_exit_recvfrom", "syscalls:sys_exit_epoll_wait", "syscalls:sys_enter_sendto"]
VISIBLE = "probe_postgres:ProcArrayEndTransaction"
MARKS = [m for m in os.environ.get("TRACE_MARKS", "").split(",") if m]
BEGIN_LEN, COMMIT_LEN = "len: 0x00000033", "len: 0x00000038"


def pgrep(pattern):
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    if len(out) != 1:
        sys.exit("expected one process matching %r, found %d" % (pattern, len(out)))
    return int(out[0])


def record(d, seconds):
    os.makedirs(d, exist_ok=True)
    port = os.environ.get("BENCH_SRC_PORT", "57001")
    roles = {pgrep("ash_replicant pipeline"): "ash", pgrep("logical replication worker for subscription"): "native"}
    rows = subprocess.run(["psql", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "postgres", "-XAtc",
                           "SELECT pid, application_name FROM pg_stat_replication"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    for line in filter(None, rows):
        pid, app = line.split("|", 1)
        roles[int(pid)] = "ws_ash" if app.startswith("ash_replicant") else "ws_native"
    if sorted(roles.values()) != ["ash", "native", "ws_ash", "ws_native"]:
        sys.exit("not a paired run: %s" % roles)
    with open(os.path.join(d, "roles.txt"), "w") as f:
        for pid, role in roles.items():
            f.write("%d %s\n" % (pid, role))
    exe = os.readlink("/proc/%d/exe" % next(p for p, r in roles.items() if r == "ash"))
    # a mark is the server's function, or LIB.so:function of a library beside it
    libdir = os.path.join(os.path.dirname(os.path.dirname(exe)), "lib")
    probes = [(exe, VISIBLE)]
    for m in MARKS:
        lib, _, fn = m.rpartition(":")
        path = os.path.join(libdir, lib) if lib else exe
        probes.append((path, "probe_%s:%s" % (os.path.basename(path).split(".")[0], fn)))
    with open(os.path.join(d, "marks.txt"), "w") as f:
        f.write("\n".join(p.split(":")[1] for _, p in probes[1:]))
    for path, p in probes:
        subprocess.run(["perf", "probe", "-q", "-d", p], capture_output=True)
        subprocess.run(["perf", "probe", "-q", "-x", path, "--add", p.split(":")[1]], check=True)
    probes = [p for _, p in probes]
    cmd = ["perf", "record", "-q", "-o", os.path.join(d, "trace.data"), "-p", ",".join(map(str, roles))]
    for e in EVENTS + probes:
        cmd += ["-e", e]
    try:
        subprocess.run(cmd + ["--", "sleep", str(seconds)], check=True)
    finally:
        for p in probes:
            subprocess.run(["perf", "probe", "-q", "-d", p], capture_output=True)


def load(d):
    roles = {}
    with open(os.path.join(d, "roles.txt")) as f:
        for line in f:
            pid, role = line.split()
            roles[int(pid)] = role
    out = subprocess.run(["perf", "script", "-i", os.path.join(d, "trace.data"), "-F", "pid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    ev = {r: [] for r in roles.values()}
    for line in out.splitlines():
        f = line.split()
        ev[roles[int(f[0])]].append((float(f[1].rstrip(":")), f[2].rstrip(":").split(":")[1], " ".join(f[3:])))
    return ev


def sender_txns(ev):
    """(wake, BEGIN send, COMMIT send) of each transaction a walsender sent."""
    res, wake, begin = [], None, None
    for t, e, r in ev:
        if e == "sys_exit_epoll_wait" and r.strip() != "0x0":
            wake = t
        elif e == "sys_enter_sendto" and BEGIN_LEN in r:
            begin = t
        elif e == "sys_enter_sendto" and COMMIT_LEN in r and begin is not None:
            res.append((wake if wake is not None and wake <= begin else begin, begin, t))
            begin = None
    return res


def worker(ev):
    data = [t for t, e, r in ev if e == "sys_exit_recvfrom" and not r.strip().startswith("0xffff")]
    commits = [t for t, e, r in ev if e == "ProcArrayEndTransaction"]
    reads, per = 0, []
    for t, e, r in ev:
        if e == "sys_exit_recvfrom" and not r.strip().startswith("0xffff"):
            reads += 1
        elif e == "ProcArrayEndTransaction":
            per.append(reads)
            reads = 0
    marks = {}
    for t, e, r in ev:
        if e != "ProcArrayEndTransaction" and not e.startswith("sys_"):
            marks.setdefault(e, []).append(t)
    return data, commits, (sum(per) / len(per) if per else 0.0), marks


def mark_offsets(chains, w, marks):
    """Per mark: (from the read, to the visible commit) of its first call between the two."""
    out = []
    for m in marks:
        ts = w[3].get(m, [])
        since, until = [], []
        for c in chains:
            i = bisect.bisect_left(ts, c[3])
            if i < len(ts) and ts[i] <= c[4]:
                since.append(ts[i] - c[3])
                until.append(c[4] - ts[i])
        out.append((m, since, until))
    return out


def dist(xs, scale=1e6, unit="us"):
    """p25, p50, p75 and mean of xs (seconds, printed in µs unless told)."""
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return "n=0"
    return "p25 %7.1f  p50 %7.1f  p75 %7.1f  mean %7.1f %s" % (
        xs[n // 4] * scale, xs[n // 2] * scale, xs[3 * n // 4] * scale, sum(xs) / n * scale, unit)


def analyze(d):
    ev = load(d)
    path = os.path.join(d, "marks.txt")
    marks = [m for m in open(path).read().split("\n") if m] if os.path.exists(path) else []
    sa, sn = sender_txns(ev["ws_ash"]), sender_txns(ev["ws_native"])
    wa, wn = worker(ev["ash"]), worker(ev["native"])

    def chain(tx, w):
        data, commits = w[0], w[1]
        i, j = bisect.bisect_left(data, tx[2]), bisect.bisect_left(commits, tx[2])
        if i >= len(data) or j >= len(commits) or commits[j] - tx[0] > 0.01:
            return None
        return tx + (data[i], commits[j])

    begins = [x[1] for x in sa]
    # the same source transaction: BEGINs closer than half the usual gap between two
    gaps = sorted(b - a for a, b in zip(begins, begins[1:]))
    tolerance = gaps[len(gaps) // 2] / 2 if gaps else 0.0008
    pairs = []
    for tx in sn:
        i = bisect.bisect_left(begins, tx[1])
        near = [k for k in (i - 1, i) if 0 <= k < len(sa)]
        if not near:
            continue
        k = min(near, key=lambda k: abs(begins[k] - tx[1]))
        if abs(begins[k] - tx[1]) > tolerance:
            continue
        ca, cn = chain(sa[k], wa), chain(tx, wn)
        if ca and cn:
            pairs.append((ca, cn))
    steps = ["walsender wake", "wake -> BEGIN send", "BEGIN -> COMMIT send", "COMMIT send -> recv",
             "recv -> visible"]
    print("transactions matched: %d (native's walsender sent %d, ash_replicant's %d)" % (len(pairs), len(sn), len(sa)))
    print("ash_replicant minus native:")
    for s, name in enumerate(steps):
        if s == 0:
            xs = [a[0] - n[0] for a, n in pairs]
        else:
            xs = [(a[s] - a[s - 1]) - (n[s] - n[s - 1]) for a, n in pairs]
        print("  %-22s %s" % (name, dist(xs)))
    print("  %-22s %s" % ("total", dist([a[4] - n[4] for a, n in pairs])))
    for who, idx, w in (("ash_replicant", 0, wa), ("native", 1, wn)):
        print("%s (reads returning data per transaction made visible: %.2f):" % (who, w[2]))
        for s in range(1, 5):
            print("  %-22s %s" % (steps[s], dist([p[idx][s] - p[idx][s - 1] for p in pairs])))
        for m, since, until in mark_offsets([p[idx] for p in pairs], w, marks):
            print("  recv -> %-14s %s (in %d)" % (m[:14], dist(since), len(since)))
            print("  %-14s -> visible %s" % (m[:14], dist(until)))


def main(record_fn, analyze_fn, usage, seconds):
    """The tracers' command line: record DIR [SECONDS] | analyze DIR."""
    if len(sys.argv) >= 3 and sys.argv[1] == "record":
        record_fn(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else seconds)
    elif len(sys.argv) == 3 and sys.argv[1] == "analyze":
        analyze_fn(sys.argv[2])
    else:
        sys.exit(usage)


if __name__ == "__main__":
    main(record, analyze, __doc__, 6)
