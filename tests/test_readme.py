"""README.md as a newcomer uses it: every ```sh and ```python block runs as pasted.

The blocks run in README order in one temporary copy of the repository (the files
``git ls-files`` lists), as a reader pasting them one after the other in a fresh clone
would: a later block may use what an earlier one wrote (the Python block reads the
``extract/`` folder the folder example made). Shell blocks run with ``bash -e`` in that
folder, the virtual environment's ``bin`` first on ``PATH`` and ``NUMBA_CACHE_DIR`` the
session's (default: the repository's ``build/numba-cache``: the kernels other tests compiled);
Python blocks run with the environment's interpreter in that folder, from a script file
kept outside it, so ``import engine`` finds the installed package as ``microagg`` does.

A block right below the line ``<!-- not run by tests/test_readme.py: set-up -->`` is not
run: the set-up (creating the environment, ``pip install``, running the whole suite),
which would reinstall the package or recurse into pytest. Only set-up commands may carry
that marker, and they must be the ones ``.ci/run`` runs.

Also: the README has at most 150 lines and every relative link in it names an existing
file (and, for a Markdown file, an existing heading)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"
SKIP_MARKER = "<!-- not run by tests/test_readme.py: set-up -->"
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]'"
TEST = "python -m pytest"
TEST_SLOW = "python -m pytest -m slow"  # the end-to-end runs the default leaves out
MAX_LINES = 150
BLOCK_TIMEOUT = 300  # seconds; the whole README runs in well under a minute on 2 cores


def _blocks(text: str) -> list[tuple[int, str, str, bool]]:
    """``(line, language, code, skipped)`` of each fenced block, ``line`` its opening
    fence's (1-based); ``skipped`` when the line just above the fence is the marker."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.fullmatch(r"```\s*([\w+-]*)\s*", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        assert j < len(lines), f"README.md:{i + 1}: the block never closes"
        skipped = i > 0 and lines[i - 1].strip() == SKIP_MARKER
        out.append((i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n", skipped))
        i = j + 1
    return out


def _runnable(text: str) -> list[tuple[int, str, str]]:
    return [(n, lang, code) for n, lang, code, skipped in _blocks(text)
            if lang in ("sh", "python") and not skipped]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in md.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES}"


def test_relative_links_point_to_existing_files():
    text = README.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links, "no links found: the pattern is wrong"
    broken = []
    for link in links:
        if re.match(r"[a-z][a-z0-9+.-]*:", link) or link.startswith("#"):
            continue  # http(s):, mailto:, or an anchor in the README itself
        path, _, anchor = link.partition("#")
        target = (README.parent / path).resolve()
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no heading '{anchor}' in {path}")
    assert broken == [], "broken links in README.md:\n" + "\n".join(broken)


def test_only_set_up_is_skipped_and_ci_runs_it():
    """The marker skips set-up only, and .ci/run installs and tests as the README says."""
    blocks = _blocks(README.read_text())
    skipped = [code for _, _, code, s in blocks if s]
    assert skipped, f"no block carries {SKIP_MARKER!r}"
    for code in skipped:
        for line in code.strip().splitlines():
            assert line in (INSTALL, TEST, TEST_SLOW), f"a skipped block runs more than set-up: {line!r}"
    commands = [line for code in skipped for line in code.strip().splitlines()]
    assert INSTALL in commands and TEST in commands and TEST_SLOW in commands
    ci = [line.strip() for line in CI.read_text().splitlines() if "pip install" in line]
    assert ci == [f"{INSTALL} && {TEST} && {TEST_SLOW}"], \
        f".ci/run no longer installs and tests as the README says: {ci}"
    assert any("microagg demo" in code for _, lang, code, s in blocks if lang == "sh" and not s)


def _clone(dest: Path) -> Path:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                                timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError) as e:  # an unpacked sdist, no git
        pytest.skip(f"git ls-files failed ({e}): no list of the repository's files")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():  # listed but deleted in the working tree: as a clone would lack it
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.slow
def test_readme_blocks_run_as_pasted(tmp_path):
    blocks = _runnable(README.read_text())
    assert any(lang == "sh" for _, lang, _ in blocks) and any(lang == "python" for _, lang, _ in blocks)
    repo = _clone(tmp_path / "clone")
    bindir = Path(sys.executable).parent  # the virtual environment's bin (not resolved: a symlink)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bindir.parent)
    env["NUMBA_CACHE_DIR"] = str(Path(env.get("NUMBA_CACHE_DIR") or ROOT / "build" / "numba-cache").resolve())
    env.pop("PYTHONPATH", None)
    for line, lang, code in blocks:
        if lang == "sh":
            cmd = ["bash", "-e", "-c", code]
        else:
            script = tmp_path / f"readme_line_{line}.py"
            script.write_text(code)
            cmd = [sys.executable, str(script)]
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
        assert proc.returncode == 0, (
            f"README.md:{line}: the {lang} block exited {proc.returncode}\n--- block\n{code}"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
