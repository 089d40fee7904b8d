#!/usr/bin/env bash
# Developer helper: build this tree into a PRIVATE copy of the PostgreSQL
# installation and run TAP tests against it, without touching the shared
# extension directory (other sessions install other builds there).
#   bash tools/prove_private.sh NAME test/t/010_x.pl [more tests...]
# NAME picks /tmp/NAMEpg (the private installation, copied from the system's
# PostgreSQL 15 on first use) and /tmp/NAME_run (a postgres-owned copy of the
# tree where the tests run).  Extra prove options: PROVE_FLAGS.
set -euo pipefail
name=$1; shift
cd "$(dirname "$0")/.."
root=$(pwd)
inst=/tmp/${name}pg
pgi=$inst/usr/lib/postgresql/15
if [ ! -x "$pgi/bin/pg_config" ]; then
    mkdir -p "$inst/usr/lib/postgresql" "$inst/usr/share/postgresql"
    cp -a /usr/lib/postgresql/15 "$inst/usr/lib/postgresql/"
    cp -a /usr/share/postgresql/15 "$inst/usr/share/postgresql/"
fi
# pg_config of the copy resolves its include directory next to itself
if [ ! -e "$inst/usr/include/postgresql" ]; then
    mkdir -p "$inst/usr/include"
    ln -s /usr/include/postgresql "$inst/usr/include/postgresql"
fi
run=/tmp/${name}_run
mkdir -p "$run"
rsync -a --delete --exclude .git --exclude tmp_check --exclude /results --exclude /log "$root/" "$run/"
chown -R postgres: "$run" "$inst"
as_pg() { runuser -u postgres -- env PATH="$pgi/bin:$PATH" ASH_LONG="${ASH_LONG:-}" ASH_SEED="${ASH_SEED:-}" ASH_SOAK_FAULTS="${ASH_SOAK_FAULTS:-}" "$@"; }
as_pg make -C "$run" -s -j2 PG_CONFIG="$pgi/bin/pg_config" >/dev/null
make -C "$run" -s install PG_CONFIG="$pgi/bin/pg_config" >/dev/null
chown -R postgres: "$inst"
cd "$run"
rm -rf tmp_check
as_pg env TESTDIR="$run" PG_REGRESS="$pgi/lib/pgxs/src/test/regress/pg_regress" \
    prove ${PROVE_FLAGS:-} -I "$pgi/lib/pgxs/src/test/perl" -I test/t "$@"
