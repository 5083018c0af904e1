"""Side outputs (``--report``, ``--json``) and OUTPUT: never over an input or each other,
checked before any work, committed together (issue 14, defects 4, 5, 6 and 8).

Every failure here is one line ``microagg: error: ...`` with exit 2, nothing at OUTPUT
or at the side output, and the input unchanged (bytes and mtime)."""

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

ROOT = Path(__file__).resolve().parents[1]


def _fp(path):
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mtime_ns


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, err.strip()


def _one_line_error(code, err, *words):
    assert code == 2, err
    assert err.startswith("microagg: error: ") and len(err.splitlines()) == 1, err
    for w in words:
        assert str(w) in err, (w, err)


def _ours(folder):
    return sorted(p.name for p in Path(folder).iterdir() if "microagg" in p.name)


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(5)
    n = 300
    frame = pl.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.integers(0, 50, n),
                          "s": rng.choice(["u", "v", "w"], n), "id": np.arange(n)})
    src = tmp_path / "in.parquet"
    frame.write_parquet(src)
    return frame, src


ANON = ["--qi", "a,b,c", "--k", "3", "--quiet", "--no-progress"]


# ---------------------------------------------------------------- defect 4: side outputs over inputs


@pytest.mark.parametrize("case", ["report=input", "report=output", "report=hardlink-of-input",
                                  "report=symlink-to-input", "report=hardlink-of-existing-output",
                                  "output=hardlink-of-input", "output=symlink-to-input"])
def test_anonymize_refuses_a_side_output_or_output_that_is_an_input(table, tmp_path, capsys, case):
    _, src = table
    out = tmp_path / "out.parquet"
    before = _fp(src)
    link = tmp_path / "link.parquet"
    report = None
    if case == "report=input":
        report, words = src, ["--report", str(src)]
    elif case == "report=output":
        report, words = out, ["--report", "OUTPUT"]
    elif case == "report=hardlink-of-input":
        os.link(src, link)
        report, words = link, ["--report", str(link), str(src)]
    elif case == "report=symlink-to-input":
        link.symlink_to(src)
        report, words = link, ["--report", str(link)]
    elif case == "report=hardlink-of-existing-output":
        out.write_bytes(b"old output")
        os.link(out, link)
        report, words = link, ["--report", "OUTPUT"]
    elif case == "output=hardlink-of-input":
        os.link(src, link)
        out, words = link, ["output is the input file", str(link)]
    else:
        link.symlink_to(src)
        out, words = link, ["output is the input file", str(link)]
    extra = ["--report", report] if report is not None else []
    code, err = _run(["anonymize", src, out, *ANON, *extra], capsys)
    _one_line_error(code, err, *words)
    assert _fp(src) == before
    if case == "report=hardlink-of-existing-output":
        assert out.read_bytes() == b"old output"
    elif not case.startswith("output="):
        assert not out.exists()
    assert _ours(tmp_path) == []


def test_side_outputs_of_verify_risk_profile_and_demo(table, tmp_path, capsys):
    frame, src = table
    out = tmp_path / "out.parquet"
    assert _run(["anonymize", src, out, *ANON], capsys)[0] == 0
    fps = {p: _fp(p) for p in (src, out)}
    link = tmp_path / "hard.parquet"
    os.link(out, link)
    cases = [
        (["verify", out, "--qi", "a,b,c", "--k", "3", "--json", out], "--json"),
        (["verify", out, "--qi", "a,b,c", "--k", "3", "--original", src, "--json", src], "--json"),
        (["verify", out, "--qi", "a,b,c", "--k", "3", "--json", link], "--json"),
        (["risk", src, out, "--qi", "a,b,c", "--json", src], "--json"),
        (["risk", src, out, "--qi", "a,b,c", "--json", link], "--json"),
        (["profile", src, "--columns", "a,b", "--json", src], "--json"),
        (["demo", "--rows", "500", "--output", out, "--report", out, "--quiet"], "--report"),
    ]
    for argv, option in cases:
        code, err = _run(argv, capsys)
        _one_line_error(code, err, option)
        assert {p: _fp(p) for p in (src, out)} == fps, argv
    assert _ours(tmp_path) == []


def test_same_file_compares_inodes(tmp_path):
    from engine.io.sink import same_file

    a = tmp_path / "a"
    a.write_text("x")
    os.link(a, tmp_path / "b")
    (tmp_path / "c").symlink_to(a)
    (tmp_path / "d").write_text("x")
    assert same_file(a, tmp_path / "b") and same_file(a, tmp_path / "c") and same_file(a, tmp_path / "sub" / ".." / "a")
    assert not same_file(a, tmp_path / "d") and not same_file(a, tmp_path / "missing")


# ---------------------------------------------------------------- defect 5: OUTPUT and report together


@pytest.mark.parametrize("case", ["missing folder", "under a file", "a folder", "proc"])
@pytest.mark.parametrize("method", ["mdav", "mnqia"])
def test_an_unwritable_report_is_refused_before_any_work(table, tmp_path, capsys, monkeypatch, case, method):
    _, src = table
    out = tmp_path / "out.parquet"
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "adir").mkdir()
    report, words = {
        "missing folder": (tmp_path / "nope" / "r.json", ["--report folder does not exist"]),
        "under a file": (tmp_path / "file.txt" / "r.json", ["--report folder is not a folder"]),
        "a folder": (tmp_path / "adir", ["--report is a folder"]),
        "proc": (Path("/proc/microagg-test-report.json"), ["cannot create a temporary file in /proc"]),
    }[case]
    import engine.coordinator

    def no_work(*a, **kw):
        raise AssertionError("the run started")

    monkeypatch.setattr(engine.coordinator, "plan_budget", no_work)
    before = _fp(src)
    code, err = _run(["anonymize", src, out, *ANON, "--method", method, "--report", report], capsys)
    _one_line_error(code, err, *words)
    assert not out.exists() and _fp(src) == before and _ours(tmp_path) == []


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("method", ["mdav", "maxent", "mnqia"])
@pytest.mark.parametrize("existing", [False, True])
def test_report_rename_failure_rolls_output_back(table, tmp_path, capsys, monkeypatch, method, existing):
    """The report's rename fails after OUTPUT's: OUTPUT is rolled back (a file it
    replaced is restored byte for byte), exit 2, no temporary left."""
    _, src = table
    out = tmp_path / "out.parquet"
    report = tmp_path / "report.json"
    if existing:
        out.write_bytes(b"the previous output")
        report.write_text("the previous report")
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: _enospc() if str(b).endswith(".json") else real(a, b))
    extra = ["--sa", "s"] if method == "maxent" else []
    code, err = _run(["anonymize", src, out, *ANON, "--method", method, *extra, "--report", report], capsys)
    _one_line_error(code, err, str(report), "No space left on device")
    if existing:
        assert out.read_bytes() == b"the previous output" and report.read_text() == "the previous report"
    else:
        assert not out.exists() and not report.exists()
    assert _ours(tmp_path) == []


def test_report_and_output_both_in_place(table, tmp_path, capsys):
    _, src = table
    out, report = tmp_path / "out.csv", tmp_path / "r.json"
    out.write_text("old")
    code, err = _run(["anonymize", src, out, *ANON, "--report", report, "--risk"], capsys)
    assert code == 0, err
    rep = json.loads(report.read_text())
    assert rep["rows"] == 300 and rep["risk"]["rows"] == 300
    assert pl.read_csv(out).height == 300
    assert sorted(os.listdir(tmp_path)) == ["in.parquet", "out.csv", "r.json"]


@pytest.mark.parametrize("method", ["mdav", "mnqia"])
def test_a_failing_risk_step_leaves_nothing(table, tmp_path, capsys, monkeypatch, method):
    """--risk reads the temporary output before the commit: its failure leaves no OUTPUT."""
    _, src = table
    out, report = tmp_path / "out.parquet", tmp_path / "r.json"
    import engine.audit.risk

    def fail(*a, **kw):
        raise engine.EngineError("risk failed on purpose")

    monkeypatch.setattr(engine.audit.risk, "disclosure_risk", fail)
    code, err = _run(["anonymize", src, out, *ANON, "--method", method, "--risk", "--report", report], capsys)
    _one_line_error(code, err, "risk failed on purpose")
    assert not out.exists() and not report.exists() and _ours(tmp_path) == []


def test_api_anonymize_report_and_risk_are_atomic(table, tmp_path, monkeypatch):
    _, src = table
    out, report = tmp_path / "out.parquet", tmp_path / "r.json"
    rep = engine.anonymize(src, out, ["a", "b", "c"], 3, risk=True, report=report)
    assert json.loads(report.read_text())["risk"] == rep.risk and rep.risk["rows"] == 300
    os.unlink(out), os.unlink(report)
    with pytest.raises(engine.EngineError, match="report"):
        engine.anonymize(src, out, ["a", "b", "c"], 3, report=src)
    import engine.audit.risk as risk_module

    monkeypatch.setattr(risk_module, "disclosure_risk", lambda *a, **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        engine.anonymize(src, out, ["a", "b", "c"], 3, risk=True, report=report)
    assert not out.exists() and not report.exists() and _ours(tmp_path) == []


def test_commit_group_rolls_back_on_interrupt(tmp_path, monkeypatch):
    from engine.io.sink import CommitGroup

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    real = os.replace

    def interrupt(src, dst):
        if str(dst) == str(b):
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        with CommitGroup() as g:
            for p in (a, b):
                Path(g.add(p)).write_text("new")
            g.commit()
    assert a.read_text() == "old a" and not b.exists() and sorted(os.listdir(tmp_path)) == ["a.txt"]


# ---------------------------------------------------------------- defect 6: interrupts in kernels


def test_an_interrupt_inside_a_kernel_is_an_interrupt(table, tmp_path, capsys, monkeypatch):
    """A signal handler that raises while Numba-compiled code runs gives ``SystemError:
    CPUDispatcher(...) returned a result with an exception set`` (caused by the
    KeyboardInterrupt): 130 (143 for SIGTERM), nothing left."""
    _, src = table
    out = tmp_path / "out.parquet"
    import engine.cli
    import engine.audit.risk

    for exc, code_wanted in [(KeyboardInterrupt(), 130), (engine.cli.Terminated(), 143)]:
        def kernel(*a, exc=exc, **kw):
            try:
                raise exc
            except KeyboardInterrupt as e:
                raise SystemError("CPUDispatcher(build_kdtree) returned a result with an exception set") from e

        monkeypatch.setattr(engine.audit.risk, "build_kdtree", kernel)
        code, err = _run(["anonymize", src, out, *ANON, "--risk"], capsys)
        assert code == code_wanted, err
        assert "no partial output left" in err and "internal error" not in err
        assert not out.exists() and _ours(tmp_path) == []


# ---------------------------------------------------------------- defect 8: one-line errors


@pytest.mark.parametrize("method", ["maxent", "mnqia"])
def test_threads_zero_with_the_sensitive_methods(table, tmp_path, capsys, method):
    _, src = table
    out = tmp_path / "out.parquet"
    extra = ["--sa", "s"] if method == "maxent" else []
    code, err = _run(["anonymize", src, out, *ANON, "--method", method, *extra, "--threads", "0"], capsys)
    _one_line_error(code, err, "threads")
    assert not out.exists()


@pytest.mark.parametrize("kind", ["duration", "list", "binary"])
@pytest.mark.parametrize("method", ["mdav", "maxent", "mnqia"])
def test_csv_output_of_unwritable_columns_is_refused_up_front(table, tmp_path, capsys, monkeypatch, kind, method):
    frame, _ = table
    col = {"duration": pl.duration(seconds=pl.col("id")), "list": pl.concat_list("id", "id"),
           "binary": pl.col("s").cast(pl.Binary)}[kind]
    src = tmp_path / "odd.parquet"
    frame.with_columns(col.alias("odd")).write_parquet(src)
    import engine.coordinator

    def no_work(*a, **kw):
        raise AssertionError("the run started")

    monkeypatch.setattr(engine.coordinator, "plan_budget", no_work)
    out = tmp_path / "out.csv"
    extra = ["--sa", "s"] if method == "maxent" else []
    code, err = _run(["anonymize", src, out, *ANON, "--method", method, *extra], capsys)
    _one_line_error(code, err, "'odd'", "CSV")
    assert not out.exists() and _ours(tmp_path) == []


def test_a_long_output_name_works_and_a_too_long_one_is_one_line(table, tmp_path, capsys):
    _, src = table
    out = tmp_path / ("o" * 240 + ".parquet")  # 248 bytes: the temporary file's name is shortened
    code, err = _run(["anonymize", src, out, *ANON], capsys)
    assert code == 0, err
    assert pl.read_parquet(out).height == 300
    too_long = tmp_path / ("o" * 300 + ".parquet")
    code, err = _run(["anonymize", src, too_long, *ANON], capsys)
    _one_line_error(code, err, "too long")
    code, err = _run(["anonymize", src, tmp_path / "r.parquet", *ANON, "--report", tmp_path / ("r" * 300)], capsys)
    _one_line_error(code, err, "--report", "too long")
    assert _ours(tmp_path) == []


@pytest.mark.parametrize("argv", [["profile", "{src}", "--columns", "a,b", "--width", "1e-300"],
                                  ["anonymize", "{src}", "{out}", *ANON, "--select", "emad", "--select-count", "1",
                                   "--width", "1e-300"]], ids=["profile", "anonymize-select"])
def test_a_tiny_width_is_one_line(table, tmp_path, capsys, argv):
    _, src = table
    out = tmp_path / "out.parquet"
    code, err = _run([a.format(src=src, out=out) for a in argv], capsys)
    _one_line_error(code, err, "width 1e-300 is too small")
    assert not out.exists()


def _strict_json(text):
    def refuse(name):
        raise ValueError(f"invalid JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("blocks", [False, True])
def test_huge_values_give_finite_json(table, tmp_path, capsys, blocks):
    """±1.5e308: SSE and SST in units of the column's power-of-two scale, so finite; the
    information loss is that of the same table scaled down by 2^1000 (exactly)."""
    frame, _ = table
    big = frame.with_columns(pl.when(pl.col("a") > 0).then(1.5e308).otherwise(-1.5e308).alias("a"))
    ils = []
    for name, f in [("big", big), ("small", big.with_columns(pl.col("a") * 2.0 ** -1000))]:
        src = tmp_path / f"{name}.parquet"
        f.write_parquet(src)
        report = tmp_path / f"{name}.json"
        extra = ["--block-size", "100", "--leaf-size", "0"] if blocks else []
        code, err = _run(["anonymize", src, tmp_path / f"o-{name}.parquet", *ANON, *extra, "--report", report],
                         capsys)
        assert code == 0, err
        rep = _strict_json(report.read_text())
        assert all(np.isfinite([rep["sse"], rep["sst"], rep["information_loss_percent"]]))
        ils.append(rep["information_loss_percent"])
    assert ils[0] == pytest.approx(ils[1], rel=1e-12)


@pytest.mark.parametrize("method", ["maxent", "mnqia"])
def test_huge_span_with_range_methods_is_one_line(table, tmp_path, capsys, method):
    frame, _ = table
    src = tmp_path / "big.parquet"
    frame.with_columns(pl.when(pl.col("a") > 0).then(1.5e308).otherwise(-1.5e308).alias("a")).write_parquet(src)
    extra = ["--sa", "s"] if method == "maxent" else []
    out, report = tmp_path / "out.parquet", tmp_path / "r.json"
    code, err = _run(["anonymize", src, out, *ANON, "--method", method, *extra, "--report", report], capsys)
    _one_line_error(code, err, "column 'a'", "too wide")
    assert not out.exists() and not report.exists()


def test_json_writers_refuse_non_finite_numbers():
    from engine.errors import VerificationError
    from engine.report import json_text

    assert json.loads(json_text({"a": 1.0})) == {"a": 1.0}
    with pytest.raises(VerificationError, match=r"x\.y = inf"):
        json_text({"x": {"y": float("inf")}})
    with pytest.raises(VerificationError, match=r"nan"):
        json_text([1.0, float("nan")])


# ---------------------------------------------------------------- --version, py.typed, start-up


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"microagg {version('microagg-engine')}"
    assert engine.__version__ == version("microagg-engine")


def test_py_typed_is_shipped():
    from importlib.resources import files

    assert files("engine").joinpath("py.typed").is_file()
    text = (ROOT / "pyproject.toml").read_text()
    assert 'engine = ["py.typed"]' in text


def test_the_license_is_an_spdx_expression():
    """A license as a TOML table is deprecated by setuptools (builds stop after 2027-02-18):
    an SPDX string, with the setuptools that reads it (77, PEP 639)."""
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "MIT"
    requires = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    assert requires == ["setuptools>=77"]


def test_import_engine_loads_no_heavy_library():
    code = ("import sys, engine; from engine.cli import entry; "
            "print(sorted(m for m in ('polars', 'numba', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def _microagg():
    script = Path(sys.executable).parent / "microagg"
    return [str(script)] if script.exists() else [sys.executable, "-m", "engine"]


def _cpu_seconds(pid: int) -> float:
    """The process's own CPU time so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The signal is sent when the command has used ``cpu`` seconds of CPU (and as much wall
# time), not after a wall-clock delay: on a machine loaded by other jobs the interpreter
# may take more than a quarter of a second to start, and before it runs the package's
# first line (its start-up, some 30 ms of CPU, and the site's .pth files) Python's own
# handler is in place: that window is not the command's. From ``engine/__init__.py`` on,
# the command exits 130 with its one line, during the imports and the first compile too.
@pytest.mark.parametrize("cpu", [0.1, 0.25, 0.5, 0.9])
@pytest.mark.parametrize("how", ["script", "module"])
def test_sigint_in_the_first_second_is_quiet(tmp_path, cpu, how):
    cmd = _microagg() if how == "script" else [sys.executable, "-m", "engine"]
    out = tmp_path / "out.parquet"
    proc = subprocess.Popen([*cmd, "demo", "--rows", "300000", "--output", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    start = time.monotonic()
    while proc.poll() is None and (_cpu_seconds(proc.pid) < cpu or time.monotonic() - start < cpu):
        time.sleep(0.002)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    err = err.decode()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "interrupted" in err.strip().splitlines()[-1], err
    assert not out.exists() and _ours(tmp_path) == []
    assert took < 10, took  # (about a second on an idle machine; 10 s allows for a loaded one)


def test_the_package_installs_no_handler_unless_it_is_the_command():
    """``import engine`` in a program leaves its signal handlers alone; the command's
    first line (the package's import) installs its own."""
    code = "import signal, engine; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "True"
    code = ("import signal, sys; sys.argv[0] = '/x/microagg'; import engine; "
            "print(signal.getsignal(signal.SIGINT).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "_quit_at_once"


def test_a_swallowed_signal_still_stops_the_commit(table, tmp_path, capsys, monkeypatch):
    """A handler's exception raised inside a ctypes callback (Numba's object cache while
    it compiles) is printed as unraisable and lost; the noted signal stops the run at
    the commit: 143, nothing at OUTPUT or the report."""
    _, src = table
    out, report = tmp_path / "out.parquet", tmp_path / "r.json"
    from engine import coordinator, errors

    real = coordinator.release_memory
    monkeypatch.setattr(coordinator, "release_memory",
                        lambda: (errors.received_signals.append(signal.SIGTERM), real()))
    code, err = _run(["anonymize", src, out, *ANON, "--report", report], capsys)
    assert code == 143, err
    assert not out.exists() and not report.exists() and _ours(tmp_path) == []


def test_an_error_after_a_signal_is_the_signal(table, tmp_path, capsys, monkeypatch):
    """An interrupt turned into another error by the code it hit (an extension module
    whose import was interrupted prints it and raises ImportError): 130, not 1."""
    _, src = table
    out = tmp_path / "out.parquet"
    from engine import coordinator, errors

    def interrupted_import(*a, **kw):
        errors.received_signals.append(signal.SIGINT)
        raise ImportError("numba._devicearray failed to import")

    monkeypatch.setattr(coordinator, "plan_budget", interrupted_import)
    code, err = _run(["anonymize", src, out, *ANON], capsys)
    assert code == 130, err
    assert "internal error" not in err and not out.exists() and _ours(tmp_path) == []
    assert errors.received_signals == []  # not carried into the next command or API call


def test_a_rust_panic_after_a_signal_is_the_signal(table, tmp_path, capsys, monkeypatch):
    """An interrupt raised in Python code that Polars' Rust code called back makes Rust
    panic (pyo3's PanicException, a BaseException): after a signal that is the
    signal's doing: 130, nothing written. Without a signal the panic is not hidden."""
    _, src = table
    out = tmp_path / "out.parquet"
    from engine import coordinator, errors

    class PanicException(BaseException):  # (as pyo3_runtime's)
        pass

    def panics(*a, **kw):
        errors.received_signals.append(signal.SIGINT)
        raise PanicException("called `Result::unwrap()` on an `Err` value: KeyboardInterrupt")

    monkeypatch.setattr(coordinator, "plan_budget", panics)
    code, err = _run(["anonymize", src, out, *ANON], capsys)
    assert code == 130, err
    assert not out.exists() and _ours(tmp_path) == []
    assert errors.received_signals == []

    def panics_alone(*a, **kw):
        raise PanicException("a bug")

    monkeypatch.setattr(coordinator, "plan_budget", panics_alone)
    with pytest.raises(PanicException):
        main([str(a) for a in ["anonymize", src, out, *ANON]])


@pytest.mark.parametrize("package", ["numpy", "polars", "numba"])
def test_the_interrupt_waits_outside_code_rust_may_call(package, monkeypatch):
    """The handler does not raise while the main thread runs NumPy's or Polars' Python
    code (Rust may have called it: an exception there panics) or Numba's: it tries
    again 20 ms later; in our own code it raises."""
    import importlib
    import types

    from engine import cli, errors

    mod = importlib.import_module(package)
    frame = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=mod.__file__))
    ours = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=cli.__file__))
    timers = []
    monkeypatch.setattr(cli.signal, "setitimer", lambda which, seconds: timers.append(seconds))
    monkeypatch.setattr(errors, "received_signals", [signal.SIGINT])
    monkeypatch.setattr(cli, "received_signals", errors.received_signals)
    cli._delivery.clear()
    cli._delivery["unsafe"] = cli._unsafe_code()
    try:
        cli._deliver(frame)  # deferred: no exception
        assert timers == [cli._RETRY_SECONDS]
        with pytest.raises(KeyboardInterrupt):
            cli._deliver(ours)
    finally:
        cli._delivery.clear()


def test_a_signal_before_the_command_is_not_lost(table, tmp_path, capsys):
    """A signal noted by ``entry``'s handler before ``main`` (its interrupt swallowed by an
    extension module's import, which turns it into an ImportError that ``entry`` ignores)
    stops the run: 130, nothing written. It used to be cleared when the command began, and
    the run exited 0."""
    _, src = table
    out = tmp_path / "out.parquet"
    from engine import errors

    errors.received_signals.append(signal.SIGINT)
    code, err = _run(["anonymize", src, out, *ANON], capsys)
    assert code == 130, err
    assert not out.exists() and _ours(tmp_path) == []
    assert errors.received_signals == []
