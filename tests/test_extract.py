"""A census extract as statistical offices hold them, end to end (``engine.synth.census_extract``):
missing values (hours worked for everyone out of work, some incomes, marital statuses,
municipalities), 3,000 municipalities, 440 occupations, a region stratum and a code
column (``occupation_code``) beside its label.

Through the CLI, the API and ``--scheduler local``: the leak guard catches the code
column; with it declared derived the release is k-anonymous with nulls as values, no
group spans two regions, and ``verify`` passes it without extra flags."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import engine
from engine.cli import main
from engine.synth import census_extract

QI = ["age", "sex", "education_years", "hours_per_week", "wage_income", "marital_status", "municipality",
      "occupation"]
K = 5


@pytest.fixture(scope="module")
def extract(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("extract") / "extract.parquet"
    census_extract(12_000, seed=3).write_parquet(path, row_group_size=1000)
    return path


def _cli(src, out, *extra) -> list[str]:
    return ["anonymize", str(src), str(out), "--qi", ",".join(QI), "--k", str(K), "--strata", "region", "--quiet",
            "--no-progress", *extra]


def _check(out: pl.DataFrame, original: pl.DataFrame) -> None:
    assert out.group_by(QI).len()["len"].min() >= K  # (Polars: null is a value)
    assert out.height == original.height
    for c in ("person_id", "region", "state", "industry"):
        assert out[c].equals(original[c])
    # the derived code follows the published label, one code a label
    pairs = out.select("occupation", "occupation_code").unique()
    assert pairs["occupation"].n_unique() == pairs.height
    truth = dict(original.select("occupation", "occupation_code").unique().iter_rows())
    assert all(truth[o] == c for o, c in pairs.iter_rows())
    for c in ("hours_per_week", "wage_income", "marital_status", "municipality"):
        assert out[c].null_count() > 0  # a group of rows all missing a value publishes it missing


def test_cli_leak_guard_then_derived_release_verifies(extract, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    assert main(_cli(extract, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'occupation_code'" in err[0] and "'occupation'" in err[0] and "--derived" in err[0]
    assert not out.exists()
    assert main(_cli(extract, out, "--derived", "occupation_code=occupation", "--group-column", "g")) == 0
    original, res = pl.read_parquet(extract), pl.read_parquet(out)
    _check(res.drop("g"), original)
    assert res.group_by("g").agg(pl.col("region").n_unique())["region"].max() == 1  # no group spans two regions
    assert res.group_by("g").len()["len"].min() >= K
    capsys.readouterr()
    plain = tmp_path / "plain.parquet"
    assert main(_cli(extract, plain, "--derived", "occupation_code=occupation")) == 0
    assert main(["verify", str(plain), "--qi", ",".join(QI), "--k", str(K), "--original", str(extract)]) == 0


def test_api_equals_cli(extract, tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(_cli(extract, a, "--derived", "occupation_code=occupation")) == 0
    report = engine.anonymize(str(extract), str(b), qi=QI, k=K, strata=["region"],
                              derived={"occupation_code": "occupation"})
    assert a.read_bytes() == b.read_bytes()
    missing = report.metrics["mixed"]["missing_values"]
    assert set(missing) == {"hours_per_week", "wage_income", "marital_status", "municipality"}
    assert report.metrics["mixed"]["encoding"]["municipality"].startswith("embedded")
    _check(pl.read_parquet(b), pl.read_parquet(extract))


@pytest.mark.slow
def test_scheduler_local_equals_local_run(extract, tmp_path):
    pytest.importorskip("distributed")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    common = dict(qi=QI, k=K, strata=["region"], derived={"occupation_code": "occupation"}, block_size=3000)
    engine.anonymize(str(extract), str(a), **common)
    engine.anonymize(str(extract), str(b), scheduler="local", tmp_dir=str(tmp_path), **common)
    assert a.read_bytes() == b.read_bytes()
