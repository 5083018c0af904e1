#!/usr/bin/env bash
# Issue 18: a 10M-row census_like run with and without --html, alternating, RUNS runs each
# (default 3; each a fresh microagg process); prints wall, user and system seconds and the
# load per run, then the medians, the median of the pair ratios (with / without, same pair)
# and the CPU seconds (user + sys; the page's worker process is a child: included).
#   python benchmarks/make_census.py --rows 10000000 DATA   (then)   benchmarks/bench_html.sh DATA OUTDIR
set -euo pipefail
DATA=${1:?usage: bench_html.sh DATA OUTDIR}; OUT=${2:?usage: bench_html.sh DATA OUTDIR}
RUNS=${RUNS:-3}
QI=age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size,commute_minutes
TIMEFORMAT="%R %U %S"
mkdir -p "$OUT"
LOG="$OUT/bench_html.log"
: > "$LOG"
for i in $(seq 1 "$RUNS"); do
  for mode in plain html; do
    extra=()
    [ $mode = html ] && extra=(--html "$OUT/report.html" --report "$OUT/run-html-$i.json")
    rm -f "$OUT/out.parquet" "$OUT/report.html"
    t=$( { time microagg anonymize "$DATA" "$OUT/out.parquet" --qi $QI --k 5 --memory-limit 1GiB \
             "${extra[@]}" --quiet ; } 2>&1 )
    echo "$mode $i wall,user,sys: $t load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
  done
done
python - "$LOG" <<'EOF'
import statistics as st, sys
runs = {"plain": [], "html": []}
for line in open(sys.argv[1]):
    f = line.split()
    runs[f[0]].append((float(f[3]), float(f[4]) + float(f[5])))
med = {m: (st.median(w for w, _ in r), st.median(c for _, c in r)) for m, r in runs.items()}
ratios = [h[0] / p[0] for p, h in zip(runs["plain"], runs["html"])]
print(f"wall median: without {med['plain'][0]:.2f} s, with --html {med['html'][0]:.2f} s "
      f"(ratio of medians {med['html'][0] / med['plain'][0]:.3f}); median of pair ratios "
      f"{st.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)}); target <= 1.05")
print(f"CPU s (user+sys) median: without {med['plain'][1]:.2f}, with {med['html'][1]:.2f} "
      f"(+{med['html'][1] - med['plain'][1]:.2f})")
EOF
