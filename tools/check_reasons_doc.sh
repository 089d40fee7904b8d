#!/usr/bin/env bash
# Check that every reason code of src/errors.c has its runbook section in
# docs/reasons.md: a heading line "### <code>" (GitHub anchor #<code>).
#
#   bash tools/check_reasons_doc.sh [DOC [ERRORS_C]]
#
# DOC defaults to docs/reasons.md, ERRORS_C to src/errors.c (both relative
# to the repository root).  Exit 0 when every code has its section; exit 1
# listing the codes without one (or when no code or no document could be
# read, so the check cannot pass vacuously).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
doc=${1:-$root/docs/reasons.md}
errors_c=${2:-$root/src/errors.c}

if [ ! -r "$doc" ]; then
    echo "check_reasons_doc: cannot read $doc" >&2
    exit 1
fi
if [ ! -r "$errors_c" ]; then
    echo "check_reasons_doc: cannot read $errors_c" >&2
    exit 1
fi

# the reason table's entries: {"code", ASH_REASON_...}
mapfile -t codes < <(grep -oE '\{"[a-z0-9_]+", *ASH_REASON_[A-Z_]+\}' "$errors_c" |
    sed -E 's/^\{"([a-z0-9_]+)".*/\1/')
if [ ${#codes[@]} -eq 0 ]; then
    echo "check_reasons_doc: no reason codes found in $errors_c" >&2
    exit 1
fi

missing=()
for code in "${codes[@]}"; do
    grep -qxF "### $code" "$doc" || missing+=("$code")
done

if [ ${#missing[@]} -gt 0 ]; then
    echo "check_reasons_doc: ${#missing[@]} reason code(s) of $(basename "$errors_c") without a \"### <code>\" section in $doc:" >&2
    printf '  %s\n' "${missing[@]}" >&2
    exit 1
fi
echo "check_reasons_doc: all ${#codes[@]} reason codes documented"
