#!/usr/bin/env python3
"""Where a synchronous standby's commit cycle goes, step by step.

While one client's pgbench commits on the source with a contender as its
synchronous standby (`PARTS=sync SYNC_CLIENTS=1 SYNC_TRACE=1 bash bench/run.sh
latency`), record the system calls that mark each step of one commit's cycle,
in the four processes it passes through, with the kernel's tracepoints (no
ptrace: they run at speed):

  backend recv      the source backend reads pgbench's statement
  backend fsync     its commit's WAL flush (fdatasync, entry and exit)
  walsender wake    the walsender returns from its wait
  BEGIN / COMMIT    its sends of the transaction's first and last message
  worker recv       the apply worker's first read returning data after the COMMIT's send
  worker fsync      the worker's commit's WAL flush (entry and exit)
  worker ack        its first send after that flush (the acknowledgement)
  walsender reply   the walsender's first read returning data after it
  walsender kill    its SetLatch of the waiting backend (kill)
  backend wake      the backend returns from its wait
  backend send      its reply to pgbench
  pgbench recv      pgbench reads it
  pgbench send      and sends the next statement

Printed: each step's duration (p25, p50, p75, mean over the cycles recorded),
the cycle, the contender's part of it (COMMIT send -> walsender reply); how often
the worker read the transaction's first messages before its COMMIT was sent, and
its read -> WAL flush with and without such a read; and from the scheduler's
events, how long each process took from its wake-up to a CPU, its CPU time per
cycle, and the worker's time from its acknowledgement to sleep.  Run once per
contender; compare the files.

  python3 bench/sync_trace.py record DIR [SECONDS]   # during the pgbench run
  python3 bench/sync_trace.py analyze DIR

`record` finds the processes itself (BENCH_SRC_PORT, default 57001): the one
pgbench on this machine, the source backend whose application_name is pgbench,
the one walsender, and the one apply worker (ash_replicant's or native's).
Needs perf and root.
"""
import bisect
import os
import subprocess
import sys

from path_trace import dist, main

EVENTS = ["syscalls:sys_exit_recvfrom", "syscalls:sys_exit_epoll_wait", "syscalls:sys_enter_sendto",
          "syscalls:sys_enter_fdatasync", "syscalls:sys_exit_fdatasync", "syscalls:sys_enter_kill"]
BEGIN_LEN, COMMIT_LEN = "len: 0x00000033", "len: 0x00000038"


def pgrep(pattern):
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def src_q(sql):
    port = os.environ.get("BENCH_SRC_PORT", "57001")
    return subprocess.run(["psql", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "postgres", "-XAtc", sql],
                          capture_output=True, text=True, check=True).stdout.split()


def record(d, seconds):
    os.makedirs(d, exist_ok=True)
    roles = {}
    for pid in pgrep("^pgbench "):
        roles[pid] = "pgbench"
    for pid in src_q("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'"
                     " AND backend_type = 'client backend'"):
        roles[int(pid)] = "backend"
    for pid in src_q("SELECT pid FROM pg_stat_replication"):
        roles[int(pid)] = "walsender"
    for pid in pgrep("ash_replicant pipeline") + pgrep("logical replication worker for subscription"):
        roles[pid] = "worker"
    if sorted(roles.values()) != ["backend", "pgbench", "walsender", "worker"]:
        sys.exit("not a one-client synchronous run: %s" % roles)
    with open(os.path.join(d, "roles.txt"), "w") as f:
        for pid, role in roles.items():
            f.write("%d %s\n" % (pid, role))
    # the system calls in the four processes; the scheduler's events on every CPU (the
    # wake-up of one of them is recorded in its waker's context)
    cmd = ["perf", "record", "-q", "-o", os.path.join(d, "trace.data"), "-p", ",".join(map(str, roles))]
    for e in EVENTS:
        cmd += ["-e", e]
    sched = subprocess.Popen(["perf", "record", "-q", "-a", "-o", os.path.join(d, "sched.data"),
                              "-e", "sched:sched_wakeup", "-e", "sched:sched_switch", "--", "sleep", str(seconds)])
    subprocess.run(cmd + ["--", "sleep", str(seconds)], check=True)
    sched.wait()


def load(d):
    roles = roles_of(d)
    out = subprocess.run(["perf", "script", "-i", os.path.join(d, "trace.data"), "-F", "pid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    ev = {}
    for line in out.splitlines():
        f = line.split()
        role = roles.get(int(f[0]))
        if role is None:
            continue
        t, e, rest = float(f[1].rstrip(":")), f[2].rstrip(":").split(":")[1], " ".join(f[3:])
        if e in ("sys_exit_recvfrom", "sys_exit_epoll_wait"):
            v = int(rest.strip(), 16)
            if v == 0 or v >= 1 << 63:
                continue        # nothing read, or an error (EAGAIN)
            ev.setdefault((role, e + ":bytes"), []).append((t, v))
        if e == "sys_enter_sendto":
            kind = "begin" if BEGIN_LEN in rest else "commit" if COMMIT_LEN in rest else "send"
            ev.setdefault((role, kind), []).append(t)
            if kind != "send":
                ev.setdefault((role, "send"), []).append(t)
            continue
        ev.setdefault((role, e), []).append(t)
    for k in ev:
        ev[k].sort()
    return ev


# (name, role, event): each the first such event after the step before it
STEPS = [
    ("backend fsync start", "backend", "sys_enter_fdatasync"),
    ("backend fsync end", "backend", "sys_exit_fdatasync"),
    ("walsender wake", "walsender", "sys_exit_epoll_wait"),
    ("BEGIN send", "walsender", "begin"),
    ("COMMIT send", "walsender", "commit"),
    ("worker recv", "worker", "sys_exit_recvfrom"),
    ("worker fsync start", "worker", "sys_enter_fdatasync"),
    ("worker fsync end", "worker", "sys_exit_fdatasync"),
    ("worker ack", "worker", "send"),
    ("walsender reply", "walsender", "sys_exit_recvfrom"),
    ("walsender kill", "walsender", "sys_enter_kill"),
    ("backend wake", "backend", "sys_exit_epoll_wait"),
    ("backend send", "backend", "send"),
    ("pgbench recv", "pgbench", "sys_exit_recvfrom"),
    ("pgbench send", "pgbench", "send"),
]


def after(ev, key, t):
    ts = ev.get(key, [])
    i = bisect.bisect_right(ts, t)
    return ts[i] if i < len(ts) else None


def sched(d, roles):
    """Per role: [(woken, on a CPU)] and [(on, off, cpu, state)]."""
    out = subprocess.run(["perf", "script", "-i", os.path.join(d, "sched.data"), "-F", "cpu,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    wakes, runs, oncpu = {}, {}, {}
    pending = {}
    for line in out.splitlines():
        f = line.split()
        cpu, t, e = int(f[0].strip("[]")), float(f[1].rstrip(":")), f[2].rstrip(":")
        kv = dict(x.split("=", 1) for x in f[3:] if "=" in x)
        if e.endswith("sched_wakeup"):
            pid = int(kv.get("pid", -1))
            if pid in roles and pid not in pending:
                pending[pid] = t
        elif e.endswith("sched_switch"):
            prev, nxt = int(kv.get("prev_pid", -1)), int(kv.get("next_pid", -1))
            if prev in roles and prev in oncpu:
                runs.setdefault(roles[prev], []).append((oncpu.pop(prev), t, cpu, kv.get("prev_state", "?")))
            if nxt in roles:
                oncpu[nxt] = t
                if nxt in pending:
                    wakes.setdefault(roles[nxt], []).append((pending.pop(nxt), t))
    return wakes, runs


def roles_of(d):
    roles = {}
    with open(os.path.join(d, "roles.txt")) as f:
        for line in f:
            pid, role = line.split()
            roles[int(pid)] = role
    return roles


def analyze(d):
    ev = load(d)
    starts = ev.get(("backend", "sys_exit_recvfrom"), [])
    cycles = []
    for s, nxt in zip(starts, starts[1:]):
        ts, t, ok = [s], s, True
        for _, role, e in STEPS:
            t = after(ev, (role, e), t)
            if t is None or t > nxt:
                ok = False
                break
            ts.append(t)
        if ok:
            ts.append(nxt)
            cycles.append(ts)
    print("cycles traced: %d of %d statements read by the backend" % (len(cycles), len(starts)))
    names = ["backend recv"] + [n for n, _, _ in STEPS] + ["next backend recv"]
    for i in range(1, len(names)):
        print("  %-42s %s" % ("%s -> %s" % (names[i - 1], names[i]), dist([c[i] - c[i - 1] for c in cycles])))
    print("  %-42s %s" % ("cycle", dist([c[-1] - c[0] for c in cycles])))
    begin, commit, recv, flush, reply = (names.index(x) for x in
                                         ("BEGIN send", "COMMIT send", "worker recv", "worker fsync start",
                                          "walsender reply"))
    print("  %-42s %s" % ("COMMIT send -> walsender reply (contender)",
                          dist([c[reply] - c[commit] for c in cycles])))
    print("  %-42s %s" % ("the rest of the cycle (source, pgbench)",
                          dist([c[-1] - c[0] - (c[reply] - c[commit]) for c in cycles])))
    # did the worker read the transaction's first messages before its COMMIT was sent?
    rx = ev.get(("worker", "sys_exit_recvfrom"), [])
    sizes = dict(ev.get(("worker", "sys_exit_recvfrom:bytes"), []))
    early, idle, early_bytes = [], [], []
    for c in cycles:
        i, j = bisect.bisect_right(rx, c[begin]), bisect.bisect_right(rx, c[commit])
        early.append(j - i)
        if j > i:
            idle.append(c[commit] - rx[j - 1])
            early_bytes.append(sum(sizes.get(t, 0) for t in rx[i:j]))
    print("worker reads between BEGIN send and COMMIT send: none in %d, one or more in %d of %d cycles;"
          " last such read -> COMMIT send %s" % (early.count(0), len(early) - early.count(0), len(early), dist(idle)))
    print("  %-42s %s" % ("bytes read before the COMMIT's send", dist(early_bytes, 1, "bytes")))
    for what, pick in (("without", lambda k: k == 0), ("with", lambda k: k > 0)):
        print("  %-42s %s" % ("worker recv -> fsync start, %s them" % what,
                              dist([c[flush] - c[recv] for c, k in zip(cycles, early) if pick(k)])))
    if not os.path.exists(os.path.join(d, "sched.data")):
        return
    wakes, runs = sched(d, roles_of(d))
    print("woken -> on a CPU, per process:")
    for role in ("pgbench", "backend", "walsender", "worker"):
        print("  %-42s %s" % (role, dist([b - a for a, b in wakes.get(role, [])])))
    print("on a CPU per cycle, per process (runs ending asleep or preempted):")
    n = max(1, len(starts) - 1)
    for role in ("pgbench", "backend", "walsender", "worker"):
        rs = runs.get(role, [])
        busy = sum(b - a for a, b, _, _ in rs)
        pre = sum(1 for _, _, _, st in rs if st.startswith("R"))
        print("  %-42s %7.1f us, %.2f runs, %.3f preempted" % (role, busy / n * 1e6, len(rs) / n, pre / n))
    # the worker after its acknowledgement: how long it stays on a CPU
    acks = ev.get(("worker", "send"), [])
    ends = sorted(b for a, b, _, st in runs.get("worker", []) if not st.startswith("R"))
    post = []
    for t in acks:
        i = bisect.bisect_right(ends, t)
        if i < len(ends) and ends[i] - t < 0.005:
            post.append(ends[i] - t)
    print("  %-42s %s" % ("worker: its send -> asleep", dist(post)))


if __name__ == "__main__":
    main(record, analyze, __doc__, 4)
