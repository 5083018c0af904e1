"""Mixed-type QIs end to end: Adult through the CLI (CSV and Parquet), one-line errors."""

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from engine.cli import main

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
ADULT_QI = "age,education,sex,race,marital_status,hours_per_week"


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_adult_mixed(tmp_path, suffix, capsys):
    out = tmp_path / f"adult.{suffix}"
    rc = main(["anonymize", str(DATA / "adult.csv"), str(out), "--qi", ADULT_QI, "--k", "5",
               "--ordinal", "education=@education_num", "--derived", "education_num=education", "--block-size", "40000",
               "--quiet"])
    assert rc == 0
    src = pl.read_csv(DATA / "adult.csv")
    got = pl.read_parquet(out) if suffix == "parquet" else pl.read_csv(out)
    assert got.height == src.height and got.columns == src.columns
    qi = ADULT_QI.split(",")
    assert got.group_by(qi).len()["len"].min() >= 5
    for c in ["education", "sex", "race", "marital_status"]:
        assert got.schema[c] == pl.String
        assert set(got[c].unique().to_list()) <= set(src[c].unique().to_list())
    for c in ["workclass", "fnlwgt", "income"]:
        assert got[c].to_list() == src[c].to_list()
    # education_num (education's code) follows the published education (--derived, engine.passes.leak)
    codes = dict(src.select("education", "education_num").unique().iter_rows())
    assert got["education_num"].to_list() == [codes[e] for e in got["education"].to_list()]
    assert got["age"].dtype == pl.Float64


def test_adult_unordered_string_qi_is_nominal(tmp_path):
    """Without --ordinal every String QI is nominal: the command of the issue runs."""
    out = tmp_path / "o.parquet"
    assert main(["anonymize", str(DATA / "adult.csv"), str(out), "--qi", ADULT_QI, "--k", "5",
                 "--derived", "education_num=education", "--block-size", "40000", "--quiet"]) == 0
    assert pl.read_parquet(out).group_by(ADULT_QI.split(",")).len()["len"].min() >= 5


@pytest.mark.parametrize("extra,msg", [
    (["--ordinal", "education="], "microagg: error: ordinal (--ordinal): the order of column 'education' is empty"),
    (["--ordinal", "education=Bachelors,HS-grad"], "microagg: error: column 'education' has the value"),
    (["--weights", "age=0"], "microagg: error: weights (--weights): the weight of column 'age' must be a positive"),
    (["--method", "maxent", "--sa", "income", "--weights", "age=2"],
     "microagg: error: weights (--weights) does not apply to method maxent"),
])
def test_cli_bad_mixed_input(tmp_path, extra, msg):
    out = tmp_path / "o.parquet"
    proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(DATA / "adult.csv"), str(out),
                           "--qi", ADULT_QI, "--k", "5", *extra], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(msg), lines
    assert not out.exists()
