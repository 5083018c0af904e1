"""Issue 41 item 1: the disclosure risk of a nominal QI of many categories holds no
``n x categories`` one-hot matrix. Such a QI is compared by its category's code
(``Layout.coded``, ``kernels.risk.pattern_offset``): the same figures as one-hot, and
a plan that grows with the QIs, not the categories."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from engine.audit import points
from engine.audit.risk import disclosure_risk
from engine.errors import EngineError


def tables(tmp_path, rows=600, cats=40, seed=3, unknown=False, missing=False):
    rng = np.random.default_rng(seed)
    cat = [f"c{x:03d}" for x in rng.integers(0, cats, rows)]
    if missing:
        cat = [None if i % 17 == 0 else c for i, c in enumerate(cat)]
    orig = pl.DataFrame({"age": rng.integers(18, 60, rows), "cat": cat, "w": rng.normal(size=rows)})
    # a release: ages rounded to 5, a third of the categories replaced by their neighbour's
    pub = [c if c is None or i % 3 else cat[(i + 1) % rows] for i, c in enumerate(cat)]
    if unknown:
        pub = ["zzz" if i % 11 == 0 else c for i, c in enumerate(pub)]
    masked = pl.DataFrame({"age": orig["age"] // 5 * 5, "cat": pub, "w": orig["w"].round(0)})
    o, m = tmp_path / "o.parquet", tmp_path / "m.parquet"
    orig.write_parquet(o)
    masked.write_parquet(m)
    return o, m


@pytest.mark.parametrize("unknown,missing", [(False, False), (True, False), (False, True)])
def test_a_coded_nominal_qi_gives_the_one_hot_figures(tmp_path, monkeypatch, unknown, missing):
    o, m = tables(tmp_path, unknown=unknown, missing=missing)
    coded = disclosure_risk(o, m, ["age", "cat", "w"]).to_dict()
    monkeypatch.setattr(points, "ONE_HOT_MAX", 10_000)  # one-hot, as before
    hot = disclosure_risk(o, m, ["age", "cat", "w"]).to_dict()
    for key in ("dbrl", "dbrl_linked", "masked_points", "tied_points", "interval_disclosure",
                "interval_disclosure_sdcmicro", "classes", "prosecutor"):
        assert coded[key] == pytest.approx(hot[key], rel=1e-12), key
    assert 0 < coded["dbrl"] < 1 and 0 < coded["interval_disclosure"] < 1


def test_only_nominal_qis_of_many_categories(tmp_path, monkeypatch):
    o, m = tables(tmp_path, rows=300, cats=30)
    coded = disclosure_risk(o, m, ["cat"]).to_dict()
    monkeypatch.setattr(points, "ONE_HOT_MAX", 10_000)
    hot = disclosure_risk(o, m, ["cat"]).to_dict()
    assert coded["dbrl"] == pytest.approx(hot["dbrl"], rel=1e-12)
    assert coded["interval_disclosure_sdcmicro"] == hot["interval_disclosure_sdcmicro"]


def test_the_risk_plan_grows_with_the_qis_not_the_categories(tmp_path):
    """A limit that one-hot columns (2,000 a row) would need 500 MiB more than is refused
    no longer: the plan counts one column for the QI."""
    few, many = tmp_path / "few", tmp_path / "many"
    few.mkdir()
    many.mkdir()
    needs = []
    for folder, cats in ((few, 20), (many, 2_000)):
        o, m = tables(folder, rows=30_000, cats=cats)
        with pytest.raises(EngineError) as exc:
            disclosure_risk(o, m, ["age", "cat", "w"], memory_limit="16MiB")
        needs.append(int(str(exc.value).split("at least ")[1].split("MiB")[0]))
    assert needs[1] <= needs[0] + 16  # (one-hot: 30,000 x 2,000 x 8 bytes, twice, would be 900 MiB more)
