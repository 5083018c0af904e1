"""Issue 28: ``--memory-limit`` holds for every command and option, at the least limit the
tool states (taken from its refusal of 64MiB), measured from outside the process
(``/usr/bin/time -f %M``); the report's peak is the run's true peak, ``--risk``
included; a CSV is refused before its first pass; the limit never changes the output
(the polish runs whatever the limit)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from engine.synth import NUMERIC_QI, census_like

ROOT = Path(__file__).resolve().parents[1]
QI = ",".join(NUMERIC_QI)
LEAST = re.compile(r"microagg: error: --memory-limit (\d+)MiB is below what (this run|microagg \w+) needs "
                   r"\(at least (\d+)MiB for [\d,]+ rows of \d+ QIs[^)]*\); raise it.*")
MiB = 1 << 20


@pytest.fixture(scope="module")
def data():
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        rng = np.random.default_rng(28)
        n = 700_000  # one file, 16 float QIs: what pyarrow pre-buffers of it (86 MB) is no margin's
        pl.DataFrame({f"q{j}": rng.normal(size=n) for j in range(16)}).write_parquet(d / "wide.parquet",
                                                                                     row_group_size=100_000)
        frame = census_like(200_000, seed=28)
        frame.write_parquet(d / "c.parquet")
        census_like(1_000_000, seed=29).write_csv(d / "big.csv")
        yield d


def _microagg(*args):
    """(process, peak RSS in bytes) of ``microagg ARGS`` measured by ``/usr/bin/time``, the
    child's parent (not this test process's inherited high-water mark)."""
    if not os.path.exists("/usr/bin/time"):
        pytest.skip("/usr/bin/time is needed to measure a child's peak RSS")
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as fh:
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", fh.name, sys.executable, "-m", "engine",
                               *map(str, args)], capture_output=True, text=True, cwd=ROOT)
        return proc, int(fh.read().split()[-1]) * 1024


def _least(*args) -> int:
    """The least limit (MiB) the command states when refusing 64MiB: one line, exit 2."""
    proc, _ = _microagg(*args, "--memory-limit", "64MiB")
    assert proc.returncode == 2, proc.stderr
    line, = proc.stderr.strip().splitlines()
    m = LEAST.fullmatch(line)
    assert m, line
    return int(m.group(3))


def _at_least(*args):
    least = _least(*args)
    proc, peak = _microagg(*args, "--memory-limit", f"{least}MiB")
    assert proc.returncode in (0, 1), proc.stderr
    assert peak <= least * MiB, f"peak RSS {peak / MiB:.0f} MiB above the accepted limit {least} MiB"
    return proc, peak, least


def test_one_large_parquet_file_stays_under_the_least_limit(data, tmp_path):
    """Item 1: pyarrow pre-buffers every column chunk of a Parquet file it reads (and its
    allocator keeps them): a single large file went past the limit the tool named."""
    out = tmp_path / "o.parquet"
    qi = ",".join(f"q{j}" for j in range(16))
    proc, peak, least = _at_least("anonymize", data / "wide.parquet", out, "--qi", qi, "--k", "5",
                                  "--polish-rounds", "0", "--threads", "2", "--report", tmp_path / "r.json",
                                  "--quiet")
    assert proc.returncode == 0
    report = json.loads((tmp_path / "r.json").read_text())
    # the report's peak is the kernel's high-water mark of the run: what /usr/bin/time saw
    assert abs(report["peak_rss_bytes"] - peak) <= 16 * MiB, (report["peak_rss_bytes"] / MiB, peak / MiB)


def test_risk_counts_in_the_limit_and_in_the_reported_peak(data, tmp_path):
    """Item 2: ``--risk`` runs after the run in the same process; its kd-tree is planned in
    the least limit, and ``peak_rss_bytes`` includes it."""
    out, rep = tmp_path / "o.parquet", tmp_path / "r.json"
    proc, peak, least = _at_least("anonymize", data / "c.parquet", out, "--qi", QI, "--k", "5", "--threads", "2",
                                  "--risk", "--report", rep, "--quiet")
    assert proc.returncode == 0
    report = json.loads(rep.read_text())
    assert report["risk"] is not None
    assert abs(report["peak_rss_bytes"] - peak) <= 16 * MiB, (report["peak_rss_bytes"] / MiB, peak / MiB)
    assert report["peak_rss_bytes"] <= least * MiB


@pytest.mark.parametrize("command", ["risk", "verify", "profile"])
def test_the_audit_commands_take_the_limit(data, tmp_path, command):
    """Item 2: ``microagg risk``, ``verify`` and ``profile`` take ``--memory-limit``: refused
    with one line naming the least limit, and under it at that limit."""
    release = tmp_path / "o.parquet"
    proc, _ = _microagg("anonymize", data / "c.parquet", release, "--qi", QI, "--k", "5", "--polish-rounds", "0",
                        "--quiet")
    assert proc.returncode == 0, proc.stderr
    args = {"risk": ["risk", data / "c.parquet", release, "--qi", QI],
            "verify": ["verify", release, "--qi", QI, "--k", "5", "--original", data / "c.parquet"],
            "profile": ["profile", data / "c.parquet", "--columns", QI]}[command]
    proc, _, _ = _at_least(*args)
    assert proc.returncode == 0, proc.stderr


def test_a_csv_is_refused_before_its_first_pass(data, tmp_path):
    """Item 3: below the least limit a CSV is refused before it is opened, inferred or
    counted (those steps grow with the file): the refusing process stays at what the bare
    process holds, far under the limit it refuses; the figure is the plan's own."""
    out = tmp_path / "o.parquet"
    t = time.perf_counter()
    proc, peak = _microagg("anonymize", data / "big.csv", out, "--qi", QI, "--k", "5", "--polish-rounds", "0",
                           "--memory-limit", "224MiB", "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert LEAST.fullmatch(proc.stderr.strip()), proc.stderr
    assert peak <= 224 * MiB, f"the refusal itself peaked at {peak / MiB:.0f} MiB, above the 224 MiB refused"
    assert time.perf_counter() - t < 20
    assert list(tmp_path.iterdir()) == []


def test_the_polish_runs_under_any_limit_and_the_output_is_the_same(data, tmp_path):
    """Item 4: the default polish (and the seam polish) runs under a limit as without one:
    at the least limit the bytes are those of the run without a limit."""
    free, out = tmp_path / "free.parquet", tmp_path / "o.parquet"
    proc, _ = _microagg("anonymize", data / "c.parquet", free, "--qi", QI, "--k", "5", "--threads", "2",
                        "--report", tmp_path / "free.json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "free.json").read_text())["polish"]["seam_rounds"] >= 1
    proc, _, least = _at_least("anonymize", data / "c.parquet", out, "--qi", QI, "--k", "5", "--threads", "2",
                               "--report", tmp_path / "r.json", "--quiet")
    assert proc.returncode == 0
    polish = json.loads((tmp_path / "r.json").read_text())["polish"]
    assert polish and polish["seam_rounds"] >= 1 and "seams_skipped" not in polish
    assert out.read_bytes() == free.read_bytes()
