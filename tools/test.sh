#!/usr/bin/env bash
# Set up, build, install and run every ash_replicant test (pg_regress + TAP).
# Run as root on Debian 12:  bash tools/test.sh
# Environment: TAP="test/t/010_x.pl ..." to run a subset of TAP tests,
#              REGRESS="a b" for a subset of pg_regress tests,
#              ASH_LONG=1 for the long fault/fuzz variants,
#              PROVE_JOBS=N TAP files at a time (2),
#              ASH_FILE_LIMIT=S seconds a TAP file may run before it fails
#              (1200; 3600 with ASH_LONG).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
export PATH="/usr/lib/postgresql/15/bin:$PATH"

# The server's extension directory is shared by everything on this machine:
# hold the install lock for the whole run so nothing replaces our library
# while the tests use it.
exec 9>/tmp/ash_install.lock
flock 9

# initdb refuses root: build and test as postgres in a copy it owns.
work=${ASH_TEST_DIR:-/tmp/ash_replicant_test}
rm -rf "$work"
mkdir -p "$work"
rsync -a --exclude .git --exclude tmp_check --exclude /results --exclude /log "$root/" "$work/"
chown -R postgres: "$work"

log="$work/test-output.log"
# children never inherit the lock: a server a killed test leaves behind must
# not hold it for everyone else
as_pg() { runuser -u postgres -- env PATH="$PATH" ASH_LONG="${ASH_LONG:-}" "$@" 9>&-; }

if ! as_pg make -C "$work" -s -j2 >"$work/build.log" 2>&1; then
    cat "$work/build.log"; echo "build failed"; echo "0 passed, 1 failed"; exit 1
fi
# Update scripts are found by name: scripts another tree installed would add
# update paths this tree does not have (test 070 follows every path).
# Install exactly this tree's scripts, and on exit take away the ones this
# run added, so a tree without them is not handed ours.
extdir="$(pg_config --sharedir)/extension"
stale=$(cd "$extdir" 2>/dev/null && ls ash_replicant--*.sql 2>/dev/null)
for f in $stale; do
    [ -f "sql/$f" ] || rm -f "$extdir/$f"
done
added=$(for f in sql/ash_replicant--*.sql; do [ -f "$extdir/${f#sql/}" ] || echo "${f#sql/}"; done)
trap 'for f in $added; do rm -f "$extdir/$f"; done' EXIT
make -C "$work" -s install >/dev/null 9>&- || { echo "install failed"; echo "0 passed, 1 failed"; exit 1; }

regress_args=()
[ -n "${REGRESS:-}" ] && regress_args+=("REGRESS=$REGRESS")
tap_args=()
[ -n "${TAP:-}" ] && tap_args+=("TAP=$TAP")
[ -n "${PROVE_JOBS:-}" ] && tap_args+=("PROVE_JOBS=$PROVE_JOBS")

set +e
as_pg make -C "$work" installcheck TAP_TESTS= "${regress_args[@]}" 2>&1 | tee "$log"
rc_regress=${PIPESTATUS[0]}
as_pg make -C "$work" installcheck REGRESS= "${tap_args[@]}" 2>&1 | tee -a "$log"
rc_tap=${PIPESTATUS[0]}

if [ -f "$work/regression.diffs" ]; then
    echo "=== regression.diffs ==="; cat "$work/regression.diffs"
fi
# prove's "Test Summary Report" names the files that failed, also those that
# failed no subtest (a die, a non-zero exit, a missing plan).  Show their logs
# and then the report itself, last, where a reader of the output's end finds
# them.
if [ $rc_tap -ne 0 ]; then
    report=$(sed -n '/^Test Summary Report/,/^Files=/p' "$log")
    failed_files=$(printf '%s\n' "$report" | grep -oE '^test/t/[^ ]+\.pl' | sort -u)
    [ -n "$failed_files" ] || failed_files=$(grep -oE 'test/t/[^ ]+\.pl \.+ (Dubious|Failed)' "$log" | cut -d' ' -f1 | sort -u)
    for t in $failed_files; do
        f="$work/tmp_check/log/regress_log_$(basename "$t" .pl)"
        [ -f "$f" ] || continue
        echo "=== tail of $f ==="; tail -n 150 "$f"
        for s in "$work/tmp_check/log/$(basename "$t" .pl)"_*.log; do
            [ -f "$s" ] || continue
            echo "=== faults in $s ==="
            grep -E 'PANIC|FATAL|ERROR|TRAP|terminated by signal|exited with exit code' "$s" | tail -n 30
        done
        # the failed checks with their got/expected, nearest the end
        echo "=== failed checks in $f ==="
        grep -E -A 6 '(^|\) )not ok [0-9]+' "$f" | head -n 80
    done
    [ -n "$failed_files" ] || for f in "$work"/tmp_check/log/regress_log_*; do
        [ -f "$f" ] || continue
        echo "=== tail of $f ==="; tail -n 40 "$f"
    done
    # a digest of each failed file, short enough to survive a reader that
    # keeps only the output's end: its seed, first failed checks, and the
    # halts and worker crashes its servers logged
    for t in $failed_files; do
        b=$(basename "$t" .pl)
        f="$work/tmp_check/log/regress_log_$b"
        [ -f "$f" ] || continue
        echo "=== digest of $b ==="
        grep -m 3 -oE '(seed|ASH_SEED=)[ =]?[0-9]+' "$f" | head -n 1
        grep -m 4 -E '(^|\) )not ok [0-9]+' "$f" | cut -c1-200
        for s in "$work/tmp_check/log/${b}"_*.log; do
            [ -f "$s" ] || continue
            grep -E 'event=pipeline\.(halt|worker_crashed|session_end)|event=snapshot\.(copier_failed|publication_gap)|terminated by signal' "$s" |
                tail -n 6 | sed "s|^|$(basename "$s" .log): |" | cut -c1-240
        done
    done
    echo "=== TAP files that failed ==="
    printf '%s\n' "${report:-(prove printed no summary report)}"
fi

# pg_regress: "ok N - name" / "not ok"; prove: "Files=.., Tests=N" and failures.
r_pass=$(grep -cE '^ok [0-9]+ +- ' "$log" || true)
r_fail=$(grep -cE '^not ok [0-9]+ +- ' "$log" || true)
# PG15's pg_regress prints "test name ... ok" lines instead
r_pass=$((r_pass + $(grep -cE '^(test | )?[a-z0-9_]+ +\.\.\. ok' "$log" || true)))
r_fail=$((r_fail + $(grep -cE '^(test | )?[a-z0-9_]+ +\.\.\. FAILED' "$log" || true)))
t_total=$(grep -oE 'Tests=[0-9]+' "$log" | tail -1 | cut -d= -f2)
t_failed=$(grep -oE 'Failed [0-9]+/[0-9]+ subtests' "$log" | awk '{split($2,a,"/"); s+=a[1]} END {print s+0}')
t_total=${t_total:-0}
t_pass=$((t_total - t_failed))
if [ $rc_tap -ne 0 ] && [ "$t_failed" -eq 0 ]; then t_failed=1; fi
if [ $rc_regress -ne 0 ] && [ "$r_fail" -eq 0 ]; then r_fail=1; fi
echo "pg_regress: $r_pass passed, $r_fail failed; TAP: $t_pass passed, $t_failed failed"
# Fault/attack tests print "# ash-proof: faults_injected=N checks=M" (the
# fuzzer "fuzz_inputs=N checks=M"); diag, so prove shows it on stderr, which
# the log captures.
read -r p_faults p_fuzz p_checks < <(grep -oE 'ash-proof: (faults_injected|fuzz_inputs)=[0-9]+ checks=[0-9]+' "$log" |
    awk -F'[= ]' '{if ($2 == "fuzz_inputs") z += $3; else f += $3; c += $5} END {print f+0, z+0, c+0}')
echo "fault proof: $p_faults faults injected, $p_fuzz fuzz inputs, $p_checks checks made"
echo "$((r_pass + t_pass)) passed, $((r_fail + t_failed)) failed"
[ $rc_regress -eq 0 ] && [ $rc_tap -eq 0 ]
