#!/usr/bin/env bash
# Issue 18: a 10M-row census_like run with and without --html, alternating, 3 runs each
# (each a fresh microagg process); prints wall, user and system seconds and the load.
#   python benchmarks/make_census.py --rows 10000000 DATA   (then)   benchmarks/bench_html.sh DATA OUTDIR
set -euo pipefail
DATA=${1:?usage: bench_html.sh DATA OUTDIR}; OUT=${2:?usage: bench_html.sh DATA OUTDIR}
QI=age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size,commute_minutes
TIMEFORMAT="%R %U %S"
mkdir -p "$OUT"
for i in 1 2 3; do
  for mode in plain html; do
    extra=()
    [ $mode = html ] && extra=(--html "$OUT/report.html" --report "$OUT/run-html-$i.json")
    rm -f "$OUT/out.parquet" "$OUT/report.html"
    t=$( { time microagg anonymize "$DATA" "$OUT/out.parquet" --qi $QI --k 5 --memory-limit 1GiB \
             "${extra[@]}" --quiet ; } 2>&1 )
    echo "$mode $i wall,user,sys: $t load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
