"""Fuzzing ``anonymize`` then ``verify`` (and ``risk``) with Hypothesis.

Random small tables (0-40 rows; int and float columns, some with nulls, NaN, inf
or values near 1e300; a string column that passes through), written as CSV or
Parquet; random QI lists (unknown, repeated, String (nominal) or no names), k from
-1 to rows + 2, and two times in three a block size (2-5 k, or 2-24 rows: the
streaming path; below 2k it is refused). The property:

* a valid input (at least one row; a non-empty list of distinct, known QIs, numeric
  or the String column as a nominal QI, without null, NaN or inf; 2 <= k <= rows, the engine's documented range,
  as k = 1 publishes the data unchanged) exits 0, its output verifies (exit 0,
  with --original, and --mixed with a nominal QI) and its risk can be measured (exit 0), in one block or in several;
* any other input exits 2 and leaves nothing behind: no OUTPUT, no temporary file.

``MICROAGG_DEBUG=1`` makes an internal error raise with its traceback instead of
exiting 1, so Hypothesis shrinks and reports it.
Run with ``--hypothesis-show-statistics`` to see how many examples were valid;
``MICROAGG_FUZZ_EXAMPLES=5000`` for a longer hunt (default 400, about 25 s).
"""

import math
import os
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.cli import main

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

FLOATS = st.one_of(st.integers(-3, 3).map(float), st.floats(-1e6, 1e6, allow_nan=False),
                   st.sampled_from([0.0, -0.0, 1e300, -1e300, 1e-300, 2.5]))
INTS = st.one_of(st.integers(-3, 3), st.integers(-2**53, 2**53))
DIRT = {"int": st.just(None), "float": st.sampled_from([None, math.nan, math.inf, -math.inf])}


@st.composite
def cases(draw):
    # half the cases are built to be valid (dirt may still spoil them), a quarter have only k wrong
    mode = draw(st.sampled_from(["valid", "valid", "bad k", "any"]))
    rows = draw(st.integers(0 if mode == "any" else 1, 40))
    ncols = draw(st.integers(1, 4))
    data, kinds, clean = {}, {}, {}
    for j in range(ncols):
        kind = draw(st.sampled_from(["int", "float"]))
        values = draw(st.lists(INTS if kind == "int" else FLOATS, min_size=rows, max_size=rows))
        if rows and draw(st.integers(0, 4)) == 0:  # one column in five gets missing or non-finite values
            for i in draw(st.lists(st.integers(0, rows - 1), min_size=1, max_size=3)):
                values[i] = draw(DIRT[kind])
        name = f"c{j}"
        data[name] = pl.Series(name, values, dtype=pl.Int64 if kind == "int" else pl.Float64)
        kinds[name] = kind
        # (a missing value is a value of the MDAV family's QIs; a QI missing in every row is refused)
        clean[name] = all(v is None or math.isfinite(v) for v in values) and any(v is not None for v in values)
    tags = draw(st.lists(st.sampled_from(["x", "y z", "", "1"]), min_size=rows, max_size=rows))
    if rows and draw(st.integers(0, 4)) == 0:  # missing values, as in the numeric columns
        for i in draw(st.lists(st.integers(0, rows - 1), min_size=1, max_size=3)):
            tags[i] = None
    data["tag"] = pl.Series("tag", tags, dtype=pl.String)
    clean["tag"] = any(t is not None for t in tags)  # a nominal QI (mixed-type MDAV): not missing everywhere
    frame = pl.DataFrame(list(data.values()))
    if mode != "any":
        # the String column "tag" too: a nominal QI (mixed-type MDAV)
        qi = draw(st.lists(st.sampled_from(list(kinds) + ["tag"]), min_size=1, max_size=4, unique=True))
        bad_k = st.sampled_from([-1, 0, 1, rows + 1, rows + 2])
        k = draw(st.one_of(st.integers(2, 4), st.integers(2, max(2, rows))) if mode == "valid" else bad_k)
    else:
        qi = draw(st.lists(st.sampled_from(list(kinds) + ["tag", "zz"]), min_size=0, max_size=4))
        k = draw(st.integers(-1, rows + 2))
    fmt_in = draw(st.sampled_from(["csv", "parquet"]))
    fmt_out = draw(st.sampled_from(["csv", "parquet"]))
    # most cases stream in blocks (spill, workers' squared errors, narrow/wide records)
    block = draw(st.one_of(st.none(), st.integers(2, 5).map(lambda m: m * max(k, 1)), st.integers(2, 24)))
    return frame, qi, k, fmt_in, fmt_out, clean, block


def _why_invalid(frame, qi, k, clean, block=None, fmt_in=None):
    if frame.height == 0:
        return "no rows"
    if not qi:
        return "empty qi"
    if len(set(qi)) < len(qi):
        return "repeated qi"
    if "zz" in qi:
        return "unknown qi"
    if not all(clean[c] for c in qi):
        return "NaN/inf in a qi, or a qi missing in every row"
    if k < 2:
        return "k < 2"
    if k > frame.height:
        return "k > rows"
    if block is not None and block < 2 * k:
        return "block size < 2k"
    if fmt_in == "csv" and "tag" in qi:
        # a CSV QI whose values are mostly numbers but not all: a typo, refused (docs/inputs.md)
        present = [v for v in frame["tag"].to_list()[:1000] if v is not None]
        numbers = sum(v == "1" for v in present)
        if numbers < len(present) and 2 * numbers > len(present):
            return "mostly numbers in a text qi"
    return None


def _one_to_one(frame: pl.DataFrame, qi) -> str | None:
    """The leak guard's rule, read independently (engine/passes/leak.py): "leak" when a
    passed-through column corresponds one-to-one with a QI of more than one value (null a
    value); "maybe" when the only such pairs are row-unique on both sides (refused only
    when exactly affine: not modelled here, either answer is accepted); else None."""
    found = None
    for p in [c for c in frame.columns if c not in qi]:
        for q in qi:
            nq = frame[q].n_unique()
            if nq <= 1:
                continue
            if frame.select(p, q).unique().height == frame[p].n_unique() == nq:
                if nq == frame.height:
                    found = found or "maybe"
                else:
                    return "leak"
    return found


def _leak_verdict(src, frame: pl.DataFrame, qi, fmt_in: str) -> str | None:
    """``_one_to_one`` under each way the engine may read the input's values (a CSV's
    QIs as numbers, its other columns as text or typed; -0.0 and 0.0 one number): "leak"
    when every reading finds a leak, None when none finds a pair, else "maybe"."""
    if fmt_in != "csv":
        readings = [frame]
    else:
        readings = [pl.read_csv(src, infer_schema_length=0)]
        for infer in (0, None):  # (a QI of text, "tag", stays text)
            try:
                readings.append(pl.read_csv(src, infer_schema_length=infer,
                                            schema_overrides={c: pl.Float64 for c in qi if c != "tag"}))
            except pl.exceptions.PolarsError:
                pass
    verdicts = set()
    for r in readings:
        r = r.with_columns([pl.col(c) + 0.0 for c in qi if r.schema[c].is_float()])  # (-0.0 -> 0.0)
        verdicts.add(_one_to_one(r, qi))
    return verdicts.pop() if len(verdicts) == 1 else "maybe"


@pytest.fixture(autouse=True)
def _debug(monkeypatch):
    monkeypatch.setenv("MICROAGG_DEBUG", "1")


@settings(max_examples=int(os.environ.get("MICROAGG_FUZZ_EXAMPLES", 400)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_anonymize_then_verify(case):
    frame, qi, k, fmt_in, fmt_out, clean, block = case
    why = _why_invalid(frame, qi, k, clean, block, fmt_in)
    event(("valid, blocks" if block is not None and block < frame.height else "valid")
          + (", nominal QI" if "tag" in qi else "") if why is None else f"invalid: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, out = tmp / f"in.{fmt_in}", tmp / f"out.{fmt_out}"
        frame.write_csv(src) if fmt_in == "csv" else frame.write_parquet(src)
        leak = _leak_verdict(src, frame, qi, fmt_in) if why is None and frame.height else None
        why = "leak" if leak == "leak" else why
        qi_arg = ",".join(qi)
        blocks = [] if block is None else ["--block-size", str(block)]
        code = main(["anonymize", str(src), str(out), "--qi", qi_arg, "--k", str(k), "--quiet", "--no-progress",
                     *blocks])
        left = sorted(p.name for p in tmp.iterdir())
        if why is not None or (leak == "maybe" and code == 2):
            assert code == 2, (why, code)
            assert left == [src.name], left
            return
        if leak == "maybe":  # (released: verify's own leak check may read the pair either way)
            return
        assert code == 0
        assert left == sorted([src.name, out.name]), left
        mixed = ["--mixed"] if "tag" in qi else []  # (a categorical QI holds one category, not a set)
        assert main(["verify", str(out), "--qi", qi_arg, "--k", str(k), "--original", str(src), *mixed]) == 0
        assert main(["risk", str(src), str(out), "--qi", qi_arg]) == 0
        assert sorted(p.name for p in tmp.iterdir()) == sorted([src.name, out.name])


def test_strategy_produces_both_kinds():
    """The generator is not degenerate: it yields valid and invalid inputs."""
    seen = set()

    @settings(max_examples=60, deadline=None, database=None)
    @given(cases())
    def probe(case):
        frame, qi, k, *_, clean, block = case
        seen.add(_why_invalid(frame, qi, k, clean, block) is None)

    probe()
    assert seen == {True, False}
