"""Time from a signal to the exit of `microagg anonymize` on a census-like table, per pass
(docs/notes/cli-signals-side-outputs.md, "Measurements").

    python benchmarks/signal_latency.py INPUT [--sig INT|TERM] [--delay S] [--passes a,b,risk] [--extra "..."]

One run per pass: the signal is sent ``delay`` seconds after the progress line first
names the pass ("risk": after the write pass's line ends, i.e. into ``--risk``).
INPUT: e.g. ``engine.synth.census_like(3_000_000, seed=3).write_parquet(p, row_group_size=100_000)``."""
import argparse, os, select, signal, subprocess, sys, tempfile, time, shutil

QI = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size,commute_minutes"
ap = argparse.ArgumentParser()
ap.add_argument("input"); ap.add_argument("--sig", default="INT"); ap.add_argument("--delay", type=float, default=0.5)
ap.add_argument("--passes", default="profile,partition,aggregate,stitch,write"); ap.add_argument("--risk", action="store_true")
ap.add_argument("--extra", default="")
ap.add_argument("--tmp", default=None, help="folder for the runs (default: the system temporary folder)")
a = ap.parse_args()
sig = getattr(signal, f"SIG{a.sig}")
for name in a.passes.split(","):
    d = tempfile.mkdtemp(dir=a.tmp)
    extra = a.extra.split() + (["--risk", "--report", f"{d}/r.json"] if a.risk or name == "risk" else [])
    cmd = ["microagg", "anonymize", a.input, f"{d}/o.parquet", "--qi", QI, "--k", "5", "--progress", "--tmp-dir", d] + extra
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    buf = b""; t0 = time.monotonic(); seen = None
    want = f"\r{name:<10} [".encode() if name != "risk" else None
    while True:
        r, _, _ = select.select([p.stderr], [], [], 0.02)
        if r:
            chunk = os.read(p.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
        if seen is None:
            if want is not None and want in buf:
                seen = time.monotonic()
            elif want is None and b"\rwrite      [" in buf and buf.rstrip(b" ").endswith(b"\n"):
                seen = time.monotonic()
        if seen is not None and time.monotonic() - seen >= a.delay:
            break
        if p.poll() is not None:
            break
    if p.poll() is not None:
        print(f"{name}: run ended before the signal ({p.returncode})"); continue
    sent = time.monotonic(); p.send_signal(sig)
    while p.poll() is None:
        r, _, _ = select.select([p.stderr], [], [], 0.01)
        if r:
            buf += os.read(p.stderr.fileno(), 65536)
    lat = time.monotonic() - sent
    rest = p.stderr.read(); buf += rest
    last = buf.decode(errors="replace").strip().splitlines()[-1][-90:]
    print(f"{name:10s} signal at {sent - t0:6.2f} s, exit {p.returncode} after {lat:5.2f} s  | {last}", flush=True)
    shutil.rmtree(d, ignore_errors=True)
