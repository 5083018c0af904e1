"""First use: what compiles (one specialization per kernel) and the notice that says so."""

import io
import os
import subprocess
import sys
import textwrap

import pytest
from numba import njit

import engine.progress as progress
from engine import cli
from engine.progress import COMPILE_NOTICE, CompileNotice

HERE = os.path.dirname(os.path.abspath(__file__))


def _fresh_kernel():
    # a new function every call: compiles on its first call (no cache)
    @njit
    def f(x):
        return x + 1

    return f


def test_notice_once_when_compiling_takes_a_while():
    out = io.StringIO()
    with CompileNotice(enabled=True, stream=out, after=0.0):
        _fresh_kernel()(1)
        _fresh_kernel()(2)
    assert out.getvalue() == COMPILE_NOTICE + "\n"


def test_no_notice_when_short_disabled_or_nothing_compiles():
    f = _fresh_kernel()
    f(1)
    out = io.StringIO()
    with CompileNotice(enabled=True, stream=out, after=0.0):
        f(2)  # compiled already: nothing compiles
    with CompileNotice(enabled=True, stream=out, after=60.0):
        _fresh_kernel()(1)  # compiles, but not for long
    with CompileNotice(enabled=False, stream=out, after=0.0):
        _fresh_kernel()(1)
    assert out.getvalue() == ""
    _fresh_kernel()(1)  # the listeners are gone after the blocks
    assert out.getvalue() == ""


def test_cli_prints_the_notice_unless_quiet(monkeypatch, capsys):
    import engine.synth

    real = engine.synth.census_like

    def compiling_census_like(*a, **kw):  # a kernel compiles during the command
        _fresh_kernel()(1)
        return real(*a, **kw)

    monkeypatch.setattr(engine.synth, "census_like", compiling_census_like)
    monkeypatch.setattr(progress, "COMPILE_NOTICE_AFTER", 0.0)
    assert cli.main(["demo", "--rows", "60"]) == 0
    assert capsys.readouterr().err.count(COMPILE_NOTICE) == 1
    assert cli.main(["demo", "--rows", "60", "--quiet"]) == 0
    assert COMPILE_NOTICE not in capsys.readouterr().err
    monkeypatch.setattr(engine.synth, "census_like", real)
    assert cli.main(["demo", "--rows", "60"]) == 0  # nothing compiles (warm)
    assert COMPILE_NOTICE not in capsys.readouterr().err


_RUNS = textwrap.dedent("""
    import sys
    sys.path.insert(0, {bench!r})
    import polars as pl
    from engine import cli
    from compile_log import specializations
    census, adult, out = {census!r}, {adult!r}, {out!r}
    qi = ",".join(pl.read_csv(census, n_rows=1).columns)
    pl.read_csv(adult, n_rows=1500).drop("education_num").write_csv(out + "/adult.csv")  # (leak guard)
    runs = [["demo", "--rows", "6000", "--block-size", "2000", "--method", m] for m in
            ("mdav", "mdav-single", "vmdav", "ivmdav")]
    runs.append(["demo", "--rows", "6000", "--block-size", "2000", "--refine", "local"])
    for m in ("mdav", "mdav-single", "vmdav", "ivmdav", "ama"):
        runs.append(["anonymize", census, out + "/c.parquet", "--qi", qi, "--k", "3", "--method", m])
    for extra in (["--refine", "local"], ["--refine", "ga"], ["--risk"], ["--select", "emad", "--select-count", "3"]):
        runs.append(["anonymize", census, out + "/c.parquet", "--qi", qi, "--k", "3", *extra])
    runs.append(["anonymize", out + "/adult.csv", out + "/a.parquet", "--qi", "age,education,sex", "--sa", "income",
                 "--epsilon", "0.5", "--k", "5", "--method", "maxent"])
    runs.append(["anonymize", out + "/adult.csv", out + "/m.parquet", "--qi", "age,fnlwgt,hours_per_week",
                 "--k", "5", "--method", "mnqia"])
    for argv in runs:
        assert cli.main(argv + ["--quiet"]) == 0, argv
    assert cli.main(["verify", out + "/c.parquet", "--qi", qi, "--k", "3", "--original", census]) == 0
    for name, sigs in specializations().items():
        if name not in ALLOWED:
            print("SPEC", name, "|", " || ".join(sigs))
""")

# specializations that follow the data, each compiled only by the runs that need it:
# group labels are int32 in the blocked path (memory) and int64 in the exact one; a
# column's sums by its own dtype; the parallel loop's index (find_rows) is unsigned
_ALLOWED = ("engine.kernels.groups.accumulate_group_sums", "engine.kernels.groups.count_labels",
            "engine.kernels.groups.gather_columns", "engine.kernels.groups.column_sums", "engine.kernels.risk._cmp",
            "engine.kernels.search.windows._window_round")  # (one per --refine mode: the other optimizer never compiles)


@pytest.mark.slow
def test_each_kernel_compiles_once_per_run_type(tmp_path):
    """A run of every method and option leaves one specialization per kernel, none
    of them for a literal argument: each extra one is a compilation of its own on
    first use (seconds). A new process, so that only the commands' calls count."""
    script = f"ALLOWED = {_ALLOWED!r}\n" + _RUNS.format(
        bench=os.path.join(HERE, "..", "benchmarks"), census=os.path.join(HERE, "data", "census.csv"),
        adult=os.path.join(HERE, "data", "adult.csv"), out=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    extra = [line for line in p.stdout.splitlines() if line.startswith("SPEC ")]
    assert not extra, "kernels with several or literal specializations:\n" + "\n".join(extra)
