#!/usr/bin/env bash
# Install what building and testing ash_replicant needs on Debian 12 (as root).
# Idempotent: installs only what is missing.
set -euo pipefail

# postgresql-15-wal2json: the wal2json decoder's tests (090, 091) run the real plugin
pkgs=(postgresql-15 postgresql-server-dev-15 postgresql-15-wal2json libssl-dev libkrb5-dev
      libipc-run-perl clang-14 llvm-14 libclang-rt-14-dev make gcc perl rsync
      iproute2 postgresql-15-pglogical)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "ash_replicant setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts a default cluster on 5432; our tests use their own clusters.
export PATH="/usr/lib/postgresql/15/bin:$PATH"
command -v pg_config >/dev/null
