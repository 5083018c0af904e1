"""Unix conventions of the ``microagg`` command: ``-`` for the standard input and
output, side outputs (``--report``, ``--json``, ``--html``) to the standard output,
symbolic links written through, special files (``/dev/stdout``) written in place and
never replaced, ``-v`` / ``--log-level``; and the fixes that came with them (help
texts, the QI count of the memory refusal, the public API's type hints).

Most run the command as a pipeline would: ``python -m engine ...`` with pipes."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import typing
from pathlib import Path

import polars as pl
import pytest

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

DATA = Path(__file__).parent / "data"
CENSUS = DATA / "census.csv"
QI = "AFNLWGT,AGI,EMCONTRB,FEDTAX,TAXINC"  # TAXINC beside FEDTAX: a pass-through TAXINC would give FEDTAX back (the leak guard)
ANON = ["--qi", QI, "--k", "3", "--no-progress"]


@pytest.fixture
def sys_tmp(tmp_path):
    """The system's temporary folder of the commands run here (TMPDIR): checked empty."""
    folder = tmp_path / "systmp"
    folder.mkdir()
    return folder


def _cli(args, sys_tmp, *, stdin=None, stdout=subprocess.PIPE, extra_env=None):
    """Run ``python -m engine ARGS``; ``stdin``: bytes or a file; returns the CompletedProcess."""
    env = dict(os.environ, TMPDIR=str(sys_tmp), **(extra_env or {}))
    kw = {"input": stdin} if isinstance(stdin, (bytes, type(None))) else {"stdin": stdin}
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, env=env, timeout=300, **kw)


def _err(proc) -> str:
    return proc.stderr.decode().strip()


def _one_line_error(proc, *words):
    err = _err(proc)
    assert proc.returncode == 2, err
    assert err.startswith("microagg: error: ") and len(err.splitlines()) == 1, err
    for w in words:
        assert str(w) in err, (w, err)


def _fp(path):
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mtime_ns


def _no_temporaries(*folders):
    for f in folders:
        left = [p.name for p in Path(f).iterdir() if "microagg" in p.name or p.name.startswith(".")]
        assert left == [], (f, left)


# ---------------------------------------------------------------- stdin and stdout


def test_stdin_to_stdout_is_the_file_run(tmp_path, sys_tmp):
    """``cat IN | microagg anonymize - -``: the bytes of the file-to-file run on stdout,
    the summary (and only it) on stderr; the stdin copy and the output's temporary
    file are removed (--tmp-dir, and the system's temporary folder without it)."""
    before = _fp(CENSUS)
    out = tmp_path / "out.csv"
    ref = _cli(["anonymize", CENSUS, out, *ANON], sys_tmp)
    assert ref.returncode == 0, _err(ref)
    tmp_dir = tmp_path / "tmpdir"
    tmp_dir.mkdir()
    for extra in ([], ["--tmp-dir", tmp_dir]):
        proc = _cli(["anonymize", "-", "-", *ANON, *extra], sys_tmp, stdin=CENSUS.read_bytes())
        assert proc.returncode == 0, _err(proc)
        assert proc.stdout == out.read_bytes()
        assert "rows 1,080  groups 360" in _err(proc) and "verified: 1,080 rows written" in _err(proc)
    assert _fp(CENSUS) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "systmp", "tmpdir"]
    _no_temporaries(sys_tmp, tmp_dir)


def test_stdin_takes_the_csv_options(tmp_path, sys_tmp):
    """A ``;``-separated latin-1 CSV on stdin, read with --separator and --encoding: the
    same output as the file run with those options."""
    frame = pl.read_csv(CENSUS).head(300).with_columns(pl.lit("Zürich").alias("city"))
    src = tmp_path / "in.csv"
    src.write_bytes(frame.write_csv(separator=";").encode("latin-1"))
    opts = ["--separator", ";", "--encoding", "latin-1", "--quiet"]
    out = tmp_path / "out.csv"
    assert _cli(["anonymize", src, out, *ANON, *opts], sys_tmp).returncode == 0
    with open(src, "rb") as fh:  # (a file as stdin, as a shell redirection gives it)
        proc = _cli(["anonymize", "-", "-", *ANON, *opts], sys_tmp, stdin=fh)
    assert proc.returncode == 0, _err(proc)
    assert proc.stdout == out.read_bytes() and "Zürich" in proc.stdout.decode()
    assert _err(proc) == ""  # --quiet: nothing on stderr either
    _no_temporaries(sys_tmp)


def test_report_to_stdout_is_valid_json(tmp_path, sys_tmp):
    out = tmp_path / "out.parquet"
    proc = _cli(["anonymize", "-", out, *ANON, "--report", "-"], sys_tmp, stdin=CENSUS.read_bytes())
    assert proc.returncode == 0, _err(proc)
    report = json.loads(proc.stdout)
    assert report["rows"] == 1080 and report["input"] == "stdin"
    assert "rows 1,080" in _err(proc)  # the summary: on stderr
    assert pl.read_parquet(out).height == 1080
    # demo: the report on stdout, nothing else there (its key figures go to stderr then)
    proc = _cli(["demo", "--rows", "600", "--report", "-"], sys_tmp)
    assert proc.returncode == 0, _err(proc)
    assert json.loads(proc.stdout)["rows"] == 600
    _no_temporaries(sys_tmp)


def test_demo_output_to_stdout(sys_tmp):
    proc = _cli(["demo", "--rows", "600", "--output", "-"], sys_tmp)
    assert proc.returncode == 0, _err(proc)
    table = pl.read_csv(proc.stdout)
    assert table.height == 600 and "occupation" in table.columns
    assert '"rows": 600' in _err(proc)  # the key figures: not on stdout, which holds the table
    _no_temporaries(sys_tmp)


@pytest.mark.parametrize("argv, words", [
    (["anonymize", CENSUS, "-", *ANON, "--report", "-"], ["--report -", "standard output", "OUTPUT -"]),
    (["anonymize", CENSUS, "-", *ANON, "--report", "/dev/stdout"], ["--report /dev/stdout", "OUTPUT -"]),
    (["demo", "--rows", "600", "--output", "-", "--report", "-"], ["--report -", "--output -"]),
])
def test_stdout_taken_twice_is_refused(argv, words, sys_tmp):
    proc = _cli(argv, sys_tmp)
    _one_line_error(proc, *words)
    assert proc.stdout == b""
    _no_temporaries(sys_tmp)


@pytest.mark.parametrize("argv, words", [
    (["risk", "-", "-", "--qi", QI], ["ORIGINAL and MASKED", "only once"]),
    (["verify", "-", "--qi", QI, "--k", "3", "--original", "-"], ["OUTPUT and --original", "only once"]),
])
def test_stdin_twice_is_refused(argv, words, sys_tmp):
    proc = _cli(argv, sys_tmp, stdin=CENSUS.read_bytes())
    _one_line_error(proc, *words)
    assert proc.stdout == b""


def test_errors_name_stdin_and_write_nothing(tmp_path, sys_tmp):
    out = tmp_path / "out.csv"
    proc = _cli(["anonymize", "-", out, "--qi", "nope", "--k", "3"], sys_tmp, stdin=CENSUS.read_bytes())
    _one_line_error(proc, "column 'nope' not found in stdin")
    proc = _cli(["anonymize", "-", "-", *ANON], sys_tmp, stdin=b"")
    _one_line_error(proc, "stdin")
    assert proc.stdout == b""
    assert not out.exists()
    _no_temporaries(sys_tmp)


def test_verify_and_risk_json_to_stdout(tmp_path, sys_tmp):
    """``verify -`` reads the release from stdin; ``--json -`` of verify, risk and
    profile: the JSON on stdout, the summary on stderr."""
    release = tmp_path / "release.csv"
    assert _cli(["anonymize", CENSUS, release, *ANON, "--quiet"], sys_tmp).returncode == 0
    proc = _cli(["verify", "-", "--qi", QI, "--k", "3", "--json", "-"], sys_tmp, stdin=release.read_bytes())
    assert proc.returncode == 0, _err(proc)
    result = json.loads(proc.stdout)
    assert result["ok"] is True and result["rows"] == 1080 and result["output"] == "stdin"
    assert _err(proc).startswith("verify stdin: PASS")
    # a failing guarantee: exit 1, the JSON still on stdout
    proc = _cli(["verify", release, "--qi", QI, "--k", "4", "--json", "-"], sys_tmp)
    assert proc.returncode == 1 and json.loads(proc.stdout)["ok"] is False
    assert "verify failed" in _err(proc)
    # the original from stdin, the release as a file
    proc = _cli(["risk", "-", release, "--qi", QI, "--json", "-"], sys_tmp, stdin=CENSUS.read_bytes())
    assert proc.returncode == 0, _err(proc)
    assert 0 <= json.loads(proc.stdout)["dbrl"] <= 100
    assert _err(proc).startswith(f"disclosure risk of {release} against stdin")
    proc = _cli(["profile", "-", "--columns", "AGI,FEDTAX", "--json", "-"], sys_tmp, stdin=CENSUS.read_bytes())
    assert proc.returncode == 0, _err(proc)
    assert json.loads(proc.stdout)["columns"] == ["AGI", "FEDTAX"]
    # a Parquet release on stdin is recognized by its bytes
    parquet = tmp_path / "release.parquet"
    pl.read_csv(release).write_parquet(parquet)
    proc = _cli(["verify", "-", "--qi", QI, "--k", "3"], sys_tmp, stdin=parquet.read_bytes())
    assert proc.returncode == 0 and proc.stdout.decode().startswith("verify stdin: PASS"), _err(proc)
    _no_temporaries(sys_tmp)


def test_a_broken_pipe_rolls_the_release_back(tmp_path, sys_tmp):
    """The reader of the standard output goes away: one line, exit 2, and the
    --report committed with the output is rolled back (complete or nothing)."""
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "anonymize", str(CENSUS), "-", *ANON, "--quiet",
                             "--report", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, TMPDIR=str(sys_tmp)))
    proc.stdout.close()  # (before the run ends: the copy finds no reader)
    err = proc.stderr.read().decode().strip()
    assert proc.wait(timeout=300) == 2, err
    assert err.startswith("microagg: error: cannot write standard output") and "Broken pipe" in err, err
    assert len(err.splitlines()) == 1 and not report.exists()
    _no_temporaries(tmp_path, sys_tmp)


# ---------------------------------------------------------------- symbolic links and special files


def test_symlinked_output_and_report_are_written_through(tmp_path, sys_tmp):
    """OUTPUT and --report that are symbolic links: each target replaced by a rename (a
    new inode, nothing half-written), each link kept as it was."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "t.csv").write_text("old output")
    (real / "r.json").write_text("old report")
    out, rep = tmp_path / "out.csv", tmp_path / "report.json"
    out.symlink_to(Path("real") / "t.csv")  # a relative link
    rep.symlink_to(tmp_path / "hop.json")  # a chain of two links, the second absolute
    (tmp_path / "hop.json").symlink_to(real / "r.json")
    inodes = {p: os.stat(p).st_ino for p in (real / "t.csv", real / "r.json")}
    proc = _cli(["anonymize", CENSUS, out, *ANON, "--quiet", "--report", rep], sys_tmp)
    assert proc.returncode == 0, _err(proc)
    assert os.readlink(out) == os.path.join("real", "t.csv") and os.readlink(rep) == str(tmp_path / "hop.json")
    assert os.readlink(tmp_path / "hop.json") == str(real / "r.json")
    assert pl.read_csv(real / "t.csv").height == 1080 and json.loads((real / "r.json").read_text())["rows"] == 1080
    assert all(os.stat(p).st_ino != ino for p, ino in inodes.items())  # renamed onto, not rewritten
    # a dangling link: its target is created
    dangling = tmp_path / "new.csv"
    dangling.symlink_to(real / "created.csv")
    assert _cli(["anonymize", CENSUS, dangling, *ANON, "--quiet"], sys_tmp).returncode == 0
    assert dangling.is_symlink() and pl.read_csv(real / "created.csv").height == 1080
    # --json of verify through a link
    js = tmp_path / "verify.json"
    js.symlink_to(real / "v.json")
    assert _cli(["verify", real / "t.csv", "--qi", QI, "--k", "3", "--json", js], sys_tmp).returncode == 0
    assert js.is_symlink() and json.loads((real / "v.json").read_text())["ok"] is True
    _no_temporaries(tmp_path, real, sys_tmp)


def test_a_symlink_to_the_input_is_still_refused(tmp_path, sys_tmp):
    src = tmp_path / "in.csv"
    src.write_bytes(CENSUS.read_bytes())
    before = _fp(src)
    (tmp_path / "hop.csv").symlink_to(src)
    link = tmp_path / "out.csv"
    link.symlink_to("hop.csv")
    proc = _cli(["anonymize", src, link, *ANON], sys_tmp)
    _one_line_error(proc, "output is the input file", str(link))
    proc = _cli(["anonymize", src, tmp_path / "o.parquet", *ANON, "--report", link], sys_tmp)
    _one_line_error(proc, "--report", "input file")
    with open(src, "ab") as fh:  # ``microagg anonymize in.csv - >> in.csv``
        proc = _cli(["anonymize", src, "-", *ANON], sys_tmp, stdout=fh)
    _one_line_error(proc, "output -", "input file", str(src))
    with open(src, "ab") as fh:
        proc = _cli(["verify", src, "--qi", QI, "--k", "3", "--json", "/dev/stdout"], sys_tmp, stdout=fh)
    _one_line_error(proc, "--json /dev/stdout", "input file")
    assert _fp(src) == before and link.is_symlink() and not (tmp_path / "o.parquet").exists()
    _no_temporaries(tmp_path)


@pytest.mark.skipif(not os.path.islink("/dev/stdout"), reason="/dev/stdout is not a symbolic link here")
def test_dev_stdout_is_written_never_replaced(tmp_path, sys_tmp):
    """``--json /dev/stdout`` (a link to /proc/self/fd/1): the JSON goes to the standard
    output as it is open (a pipe, or a file the shell opened), the summary to stderr,
    and /dev/stdout stays the link it was (as root, too, where /dev is writable)."""
    release = tmp_path / "release.csv"
    assert _cli(["anonymize", CENSUS, release, *ANON, "--quiet"], sys_tmp).returncode == 0
    link = os.readlink("/dev/stdout")
    argv = ["verify", release, "--qi", QI, "--k", "3", "--json", "/dev/stdout"]
    proc = _cli(argv, sys_tmp)
    assert proc.returncode == 0, _err(proc)
    assert json.loads(proc.stdout)["ok"] is True and _err(proc).startswith(f"verify {release}: PASS")
    redirected = tmp_path / "redirected.json"
    with open(redirected, "wb") as fh:  # ``> redirected.json``
        assert _cli(argv, sys_tmp, stdout=fh).returncode == 0
    assert json.loads(redirected.read_text())["ok"] is True
    assert os.path.islink("/dev/stdout") and os.readlink("/dev/stdout") == link
    _no_temporaries(sys_tmp)


def test_special_files_are_written_in_place(tmp_path, sys_tmp):
    """/dev/null and a FIFO as --json: written to, never replaced."""
    release = tmp_path / "release.csv"
    assert _cli(["anonymize", CENSUS, release, *ANON, "--quiet"], sys_tmp).returncode == 0
    null = os.stat("/dev/null")
    proc = _cli(["verify", release, "--qi", QI, "--k", "3", "--json", "/dev/null"], sys_tmp)
    assert proc.returncode == 0, _err(proc)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.stat("/dev/null").st_ino == null.st_ino
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    proc = _cli(["verify", release, "--qi", QI, "--k", "3", "--json", fifo], sys_tmp)
    assert proc.returncode == 0, _err(proc)
    assert json.loads(reader.communicate(timeout=60)[0])["ok"] is True
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _no_temporaries(tmp_path, sys_tmp)


def test_output_targets():
    from engine.io.sink import is_stdout, output_target

    assert output_target("-").kind == "stream" and output_target("-").fd == 1 and is_stdout("-")
    assert output_target("/dev/fd/2").fd == 2 and output_target(f"/proc/{os.getpid()}/fd/5").fd == 5
    assert output_target("/proc/1/fd/1").kind != "stream" or os.getpid() == 1  # another process's
    assert output_target("/dev/null").kind == "special"
    assert output_target("out.csv").kind == "file" and not is_stdout("out.csv") and not is_stdout(None)


def test_the_commit_group_writes_through_links(tmp_path):
    """In process: a link's target replaced, the link kept; a failed run leaves both."""
    from engine.io.sink import atomic_output

    target = tmp_path / "target.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with pytest.raises(RuntimeError):
        with atomic_output(link) as tmp:
            Path(tmp).write_text("half")
            raise RuntimeError("a failure mid-write")
    assert target.read_text() == "old" and link.is_symlink()
    with atomic_output(link) as tmp:
        Path(tmp).write_text("new")
    assert target.read_text() == "new" and link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "target.txt"]


# ---------------------------------------------------------------- logging


def test_verbose_and_log_level(tmp_path, sys_tmp):
    out = tmp_path / "out.csv"
    quiet = _cli(["anonymize", CENSUS, out, *ANON, "--quiet"], sys_tmp)
    assert quiet.returncode == 0 and _err(quiet) == ""  # as before: no log lines
    for argv in (["-v", "anonymize", CENSUS, out, *ANON, "--quiet"],
                 ["anonymize", CENSUS, out, *ANON, "--quiet", "-v"],  # (after the command too)
                 ["--log-level", "info", "anonymize", CENSUS, out, *ANON, "--quiet"]):
        proc = _cli(argv, sys_tmp)
        assert proc.returncode == 0, _err(proc)
        assert "microagg: done: 360 groups" in _err(proc), argv
    for argv in (["-v", "--log-level", "WARNING", "anonymize", CENSUS, out, *ANON, "--quiet"],
                 ["anonymize", CENSUS, out, *ANON, "--quiet", "-vv", "--log-level=ERROR"]):
        proc = _cli(argv, sys_tmp)
        assert proc.returncode == 0 and _err(proc) == "", argv
    proc = _cli(["--log-level", "LOUD", "demo"], sys_tmp)
    assert proc.returncode == 2 and "--log-level" in _err(proc)


def test_global_flags_move_before_the_command():
    from engine.cli import build_parser

    parse = build_parser().parse_args
    args = parse(["-vv", "verify", "x.csv", "--qi", "a", "--k", "3"])
    assert args.verbose == 2 and args.log_level is None
    from engine.cli import _global_flags_first  # (the helper ``main`` runs first)

    moved = _global_flags_first(["verify", "x.csv", "-v", "--qi", "a", "--log-level", "debug", "--k", "3"])
    assert moved == ["-v", "--log-level", "debug", "verify", "x.csv", "--qi", "a", "--k", "3"]
    assert _global_flags_first(["risk", "a", "--", "-v"]) == ["risk", "a", "--", "-v"]


# ---------------------------------------------------------------- the fixes


@pytest.mark.parametrize("name", ["microaggregate", "anonymize", "verify_release", "disclosure_risk"])
def test_public_type_hints_resolve(name):
    import engine

    hints = typing.get_type_hints(getattr(engine, name))
    assert hints and "return" in hints
    for cls in (engine.RunResult, engine.Report, engine.VerifyResult, engine.RiskResult, engine.RunConfig):
        typing.get_type_hints(cls)


def test_help_texts():
    import argparse

    from engine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {(cmd, o): a.help for cmd, p in sub.choices.items() for a in p._actions for o in a.option_strings}
    qi = helps[("anonymize", "--qi")]
    assert "(numeric)" not in qi and "dates" in qi and "nominal" in qi and "ordinal" in qi
    for cmd in ("anonymize", "demo"):
        assert "demo: occupation" not in helps[(cmd, "--sa")]
    assert "-: to stdout" in helps[("anonymize", "--report")] and "-: to stdout" in helps[("verify", "--json")]
    top = parser.format_help()
    assert "--verbose" in top and "--log-level" in top


def test_the_memory_refusal_counts_the_qis_given(tmp_path, sys_tmp):
    """Six mixed-type QIs (encoded as 32 columns) are six in the refusal; so are a
    range release's (published as c_min / c_max) in verify's."""
    from engine.budget import qi_count

    assert qi_count(["age", "sex\x1fF", "sex\x1fM", "education\x1frank", "age\x1fmissing"]) == 3
    src = tmp_path / "adult.parquet"
    pl.read_csv(DATA / "adult.csv").write_parquet(src)
    qi = "age,education,sex,race,marital_status,hours_per_week"
    proc = _cli(["anonymize", src, tmp_path / "o.parquet", "--qi", qi, "--k", "5", "--memory-limit", "64MiB"],
                sys_tmp)
    _one_line_error(proc, "--memory-limit 64MiB", "rows of 6 QIs")
    ranges = tmp_path / "ranges.parquet"
    proc = _cli(["anonymize", CENSUS, ranges, "--qi", QI, "--k", "3", "--method", "mnqia", "--quiet"], sys_tmp)
    assert proc.returncode == 0, _err(proc)
    assert "AGI_min" in pl.read_parquet(ranges).columns
    proc = _cli(["verify", ranges, "--qi", QI, "--k", "3", "--memory-limit", "64MiB"], sys_tmp)
    _one_line_error(proc, "microagg verify", "rows of 5 QIs")
