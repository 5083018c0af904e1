#!/usr/bin/env bash
# Issue 18: a 10M-row census_like run with and without --html, alternating, RUNS runs each
# (default 3; each a fresh microagg process); prints wall, user and system seconds and the
# load per run, then the medians, the median of the pair ratios (with / without, same pair)
# and the CPU seconds (user + sys; the page's worker process is a child: included).
# "others" is the CPU the rest of the machine used during the run, in cores (all cores' busy
# time in /proc/stat minus the run's own user + sys, over its wall): on a shared machine the
# pairs whose two runs both had others < QUIET (default 0.15) are also summarized apart.
# WAIT_QUIET=S: before each pair, wait up to S seconds for a second with under QUIET cores busy.
# BEFORE=TREE: each round also runs --html with the engine of another checkout (mode
# html-before, its own Numba cache: NUMBA_BEFORE, default OUTDIR/numba-before), for a
# before/after comparison in one series.
#   python benchmarks/make_census.py --rows 10000000 DATA   (then)   benchmarks/bench_html.sh DATA OUTDIR
set -euo pipefail
DATA=${1:?usage: bench_html.sh DATA OUTDIR}; OUT=${2:?usage: bench_html.sh DATA OUTDIR}
RUNS=${RUNS:-3}
QUIET=${QUIET:-0.15}
WAIT_QUIET=${WAIT_QUIET:-0}
BEFORE=${BEFORE:-}
QI=age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size,commute_minutes
TIMEFORMAT="%R %U %S"
mkdir -p "$OUT"
LOG="$OUT/bench_html.log"
: > "$LOG"
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }  # all cores' busy jiffies (USER_HZ 100)
wait_quiet() {  # until a second with fewer than QUIET cores busy, at most WAIT_QUIET seconds
  local end=$((SECONDS + WAIT_QUIET)) a b
  while [ $SECONDS -lt $end ]; do
    a=$(busy); sleep 1; b=$(busy)
    awk -v d=$((b - a)) -v q="$QUIET" 'BEGIN{exit !(d / 100 < q)}' && return 0
  done
  return 0
}
if [ -n "${MODES:-}" ]; then read -r -a modes <<< "$MODES"; else modes=(plain html); fi
[ -n "$BEFORE" ] && [ -z "${MODES:-}" ] && modes+=(html-before)
n=${#modes[@]}
for i in $(seq 1 "$RUNS"); do
  [ "$WAIT_QUIET" -gt 0 ] && wait_quiet
  for j in $(seq 0 $((n - 1))); do
    if [ "${ROTATE:-0}" = 1 ]; then mode=${modes[$(( (i + j) % n ))]}; else mode=${modes[$j]}; fi
    case $mode in
      plain) extra=() ;;
      report) extra=(--report "$OUT/run-$mode-$i.json") ;;
      html-only) extra=(--html "$OUT/report.html") ;;
      *) extra=(--html "$OUT/report.html" --report "$OUT/run-$mode-$i.json") ;;
    esac
    env=()
    [ $mode = html-before ] && env=(PYTHONPATH="$BEFORE" NUMBA_CACHE_DIR="${NUMBA_BEFORE:-$OUT/numba-before}")
    rm -f "$OUT/out.parquet" "$OUT/report.html"
    b0=$(busy)
    t=$( { time env "${env[@]}" microagg anonymize "$DATA" "$OUT/out.parquet" --qi $QI --k 5 \
             --memory-limit 1GiB "${extra[@]}" --quiet ; } 2>&1 )
    b1=$(busy)
    others=$(echo "$t" | awk -v d=$((b1 - b0)) '{printf "%.2f", (d / 100 - $2 - $3) / $1}')
    echo "$mode $i wall,user,sys: $t load $(cut -d' ' -f1-3 /proc/loadavg) others $others" | tee -a "$LOG"
  done
done
python - "$LOG" "$QUIET" <<'EOF'
import statistics as st, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[0], []).append((float(f[3]), float(f[4]) + float(f[5]), float(f[-1])))
quiet = float(sys.argv[2])


def summary(mode, keep, what):
    pairs = [(p, h) for p, h in zip(runs["plain"], runs[mode]) if keep(p, h)]
    if not pairs:
        return print(f"{mode}, {what}: no pair")
    w = [st.median(x[k][0] for x in pairs) for k in (0, 1)]
    c = [st.median(x[k][1] for x in pairs) for k in (0, 1)]
    ratios = [h[0] / p[0] for p, h in pairs]
    print(f"{mode}, {what} ({len(pairs)} pairs): wall median without {w[0]:.2f} s, with --html {w[1]:.2f} s "
          f"(ratio of medians {w[1] / w[0]:.3f}); median of pair ratios {st.median(ratios):.3f} "
          f"({', '.join(f'{r:.3f}' for r in ratios)}); target <= 1.05")
    print(f"  CPU s (user+sys) median: without {c[0]:.2f}, with {c[1]:.2f} (+{c[1] - c[0]:.2f}); "
          f"others' cores median {st.median(max(p[2], h[2]) for p, h in pairs):.2f}")


for mode in runs:
    if mode != "plain":
        summary(mode, lambda p, h: True, "all")
        summary(mode, lambda p, h: max(p[2], h[2]) < quiet, f"quiet pairs (others < {quiet} cores in both)")
EOF
