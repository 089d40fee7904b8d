#!/usr/bin/env bash
# Apply-throughput benchmark: ash_replicant vs PostgreSQL native logical
# replication vs pglogical 2 vs the decoding ceiling.  Run as root on Debian 12:
#
#     bash bench/run.sh                 # SCALE=1, every workload and contender
#     SCALE=0.1 bash bench/run.sh       # quick run
#     bash bench/run.sh initial-load    # initial load (snapshots): WORKLOADS=L1,L8,
#                                       # CONTENDERS=ash,native,pglogical (bench/initial_load.py)
#     bash bench/run.sh multi           # aggregate catch-up of N pipelines vs N native
#                                       # subscriptions, N source databases (bench/multi.py)
#     bash bench/run.sh latency         # commit-to-visible latency at fixed rates and the
#                                       # source's commit latency with a synchronous standby,
#                                       # CONTENDERS=ash,native (bench/latency.py: its knobs
#                                       # PARTS, LAT_LOADS, LAT_SECONDS, SYNC_CLIENTS, ...)
#
# Knobs (environment):
#   SCALE=1            row counts multiplier
#   WORKLOADS=W1,W2,W3,W4,W5  (also L1,L8: initial load of rows already in the source;
#                      L1 one 10M-row table, L8 eight 1M-row tables; contenders ash, native, pglogical)
#   CONTENDERS=ceiling,floor,ash,native,pglogical
#                      floor = bench/floor_reader: ash_replicant's paced reading
#                      with no apply, the walsender's bound for such a reader;
#                      also: ashbin, nativebin, floorbin (binary transfer), ashw2j
#                      (ash_replicant with decoder => 'wal2json'), ashpgl
#                      (decoder => 'pglogical'), ashstream,
#                      ashstreambin (streaming => true; W4 only), recvlogical
#                      (pg_recvlogical into /dev/null: the walsender's cost for
#                      a reader that keeps its TCP window open; not a ceiling)
#   FLOOR_ARGS=        "PAUSE_MS [RCVBUF_BYTES]" for floor_reader (30 262144)
#   REPEAT=1           measure each workload this many times (fresh WAL each time)
#   PROFILE=0          1: perf record the apply worker of ash and native during W1
#   PROFILE_SENDER=0   1 (with PROFILE=1): perf record the source walsender instead
#   BENCH_DIR=/tmp/ash_bench   BENCH_SRC_PORT=57001   BENCH_DST_PORT=57002
#   MIN_WAL_SIZE=2GB   each cluster's WAL segment pool, filled before measuring
#   KEEP=0             1: leave the clusters running at the end
#
#   BENCH_INST=/tmp/ash_bench_inst  private PostgreSQL + extension install used by the clusters
#
# Results: bench/results/<date>-scale<S>.jsonl (one JSON object per measurement)
# and a table printed at the end (also saved as .txt next to the .jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."

driver=bench/bench.py
if [ "${1:-}" = initial-load ]; then
    shift
    export WORKLOADS=${WORKLOADS:-L1,L8} CONTENDERS=${CONTENDERS:-ash,native,pglogical}
elif [ "${1:-}" = multi ]; then
    # N pipelines vs N native subscriptions into one destination (bench/multi.py:
    # MULTI_N=1,2,4,8, ROWS=200000 per source database, MULTI_SOURCES=databases
    # (all on one source server) or servers (a source server per database))
    shift
    export CONTENDERS=${CONTENDERS:-ash,native}
    driver=bench/multi.py
elif [ "${1:-}" = latency ]; then
    shift
    export CONTENDERS=${CONTENDERS:-ash,native}
    driver=bench/latency.py
fi

if [ "$(id -u)" != 0 ]; then
    echo "bench/run.sh: run as root (it installs packages and runs clusters as postgres)" >&2
    exit 2
fi

bash tools/setup.sh
export PATH="/usr/lib/postgresql/15/bin:$PATH"

need=()
dpkg-query -W -f='${Status}' python3-psycopg2 2>/dev/null | grep -q 'install ok installed' || need+=(python3-psycopg2)
case ",${CONTENDERS:-pglogical}," in *,pglogical,*)
    dpkg-query -W -f='${Status}' postgresql-15-pglogical 2>/dev/null | grep -q 'install ok installed' || need+=(postgresql-15-pglogical) ;;
esac
command -v gdb >/dev/null || need+=(gdb)   # backtraces of crashed workers
if [ "${PROFILE:-0}" = 1 ]; then
    command -v perf >/dev/null || need+=(linux-perf)
fi
if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || true
    for p in "${need[@]}"; do
        # pglogical and perf are optional: the driver marks them n/a when absent
        apt-get install -y -qq --no-install-recommends "$p" >/dev/null ||
            echo "bench: could not install $p (continuing; dependent contenders become n/a)"
    done
fi

# A private copy of the PostgreSQL installation with this tree's build of the
# extension: other sessions may `make install` a different build into the
# shared $libdir while we measure, and a server loads a replaced .so into new
# processes (the pipeline worker among them).  PostgreSQL is relocatable, so
# initdb/postgres run from the copy find their lib and share directories in it.
inst=${BENCH_INST:-/tmp/ash_bench_inst}
# PGXS reads PROFILE as extra compiler flags: keep ours out of it
env -u PROFILE make -s -j2 >/dev/null
rm -rf "$inst"
mkdir -p "$inst/usr/lib/postgresql" "$inst/usr/share/postgresql"
cp -a /usr/lib/postgresql/15 "$inst/usr/lib/postgresql/"
cp -a /usr/share/postgresql/15 "$inst/usr/share/postgresql/"
env -u PROFILE make -s install DESTDIR="$inst" >/dev/null
cc -O2 -Wall -Werror -I"$(pg_config --includedir)" bench/floor_reader.c -lpq -o "$inst/floor_reader"
chmod -R a+rX "$inst"
export BENCH_PGBIN="$inst/usr/lib/postgresql/15/bin"
export BENCH_FLOOR_READER="$inst/floor_reader"

exec /usr/bin/python3 -u "$driver" "$@"
