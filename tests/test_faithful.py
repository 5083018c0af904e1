"""Issue 28, items 5, 6 and 8: time zones, Arrow types and metadata kept, exact date means,
pandas Categoricals of numbers as categories; and a fuzz test comparing the API's output for
pandas, Polars and Arrow inputs with the CLI's on the same data written to Parquet."""

from __future__ import annotations

import datetime
import subprocess
import sys

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import engine
from engine.cli import main


def _madrid(periods=300, start="2021-01-10"):
    """Hourly times in Madrid, the rows shuffled (in time order a record's position would
    give its t back, and the guard refuses such an input: ``passes.leak``)."""
    df = pd.DataFrame({"x": np.arange(float(periods)) % 7,
                       "t": pd.date_range(start, periods=periods, freq="h", tz="Europe/Madrid")})
    return df.iloc[np.random.default_rng(0).permutation(periods)].reset_index(drop=True)


def _row_of(df, when):
    """The position of the row whose t is ``when`` (Madrid time)."""
    return int(np.flatnonzero(df["t"] == pd.Timestamp(when, tz="Europe/Madrid"))[0])


def test_pandas_time_zone_is_not_relabelled():
    df = _madrid()
    out = engine.microaggregate(df, qi=["x", "t"], k=3).table
    assert out["t"].dtype == df["t"].dtype
    # the group {00:00, 07:00, 14:00}+01:00 publishes its mean 07:00+01:00 (not 06:00)
    assert out["t"].iloc[_row_of(df, "2021-01-10 00:00")] == pd.Timestamp("2021-01-10 07:00", tz="Europe/Madrid")
    ref = engine.microaggregate(pl.from_pandas(df), qi=["x", "t"], k=3).table
    assert out["t"].tolist() == ref["t"].to_pandas().tolist()


def test_pandas_time_zone_across_the_spring_gap():
    df = _madrid(periods=120, start="2021-03-26")  # 2021-03-28 02:00-03:00 does not exist in Madrid
    out = engine.microaggregate(df, qi=["x", "t"], k=3).table
    assert out["t"].dtype == df["t"].dtype


def test_arrow_time_zone_is_kept():
    df = _madrid()
    t = pa.table(df)
    out = engine.microaggregate(t, qi=["x", "t"], k=3).table
    assert out.schema.field("t").type == pa.timestamp("us", tz="Europe/Madrid")
    utc = datetime.datetime(2021, 1, 10, 6, tzinfo=datetime.timezone.utc)
    assert out.column("t")[_row_of(df, "2021-01-10 00:00")].as_py() == utc


def _wide_table(n=30):
    t = pa.table({
        "x": pa.array(np.arange(n, dtype=float) % 7),  # (repeating: no pass-through column is its twin)
        "l": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int32())),
        "b": pa.array([bytes([i]) for i in range(n)], pa.binary()),
        "d": pa.array(["a", "b", "c"] * (n // 3)).dictionary_encode(),
        "tm": pa.array([i * 1000 for i in range(n)], pa.time64("us")),
        "ls": pa.array([str(i) for i in range(n)], pa.large_string()),
        "s": pa.array([str(i) for i in range(n)], pa.string()),
    })
    t = t.replace_schema_metadata({"owner": "me"})
    i = t.schema.get_field_index("s")
    return t.set_column(i, t.schema.field("s").with_metadata({"unit": "cm"}), t.column("s"))


def test_parquet_pass_through_keeps_arrow_types_and_metadata(tmp_path):
    t = _wide_table()
    pq.write_table(t, tmp_path / "in.parquet")
    p = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(tmp_path / "in.parquet"),
                        str(tmp_path / "out.parquet"), "--qi", "x", "--k", "3", "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = pq.read_table(tmp_path / "out.parquet")
    want = pq.read_schema(tmp_path / "in.parquet")
    assert out.schema.equals(want, check_metadata=True), (out.schema, want)
    assert out.drop_columns(["x"]).equals(pq.read_table(tmp_path / "in.parquet").drop_columns(["x"]))


def test_arrow_table_to_parquet_keeps_types(tmp_path):
    t = _wide_table().append_column("sec", pa.array(list(range(30)), pa.timestamp("s")))
    engine.anonymize(t, tmp_path / "o.parquet", ["x"], k=3)
    out = pq.read_table(tmp_path / "o.parquet")
    for f in t.schema:
        if f.name not in ("x", "sec"):
            assert out.schema.field(f.name).type == f.type, f.name
    assert out.schema.metadata[b"owner"] == b"me"


def test_pandas_index_is_kept_through_parquet(tmp_path):
    df = pd.DataFrame({"x": np.arange(30.0)}, index=pd.RangeIndex(100, 130))
    df.to_parquet(tmp_path / "ri.parquet")
    engine.anonymize(str(tmp_path / "ri.parquet"), tmp_path / "ri_o.parquet", ["x"], k=3)
    assert pd.read_parquet(tmp_path / "ri_o.parquet").index.equals(df.index)
    named = pd.DataFrame({"x": np.arange(30.0)}, index=pd.Index(np.random.default_rng(1).permutation(30), name="id"))
    named.to_parquet(tmp_path / "ni.parquet")
    engine.anonymize(str(tmp_path / "ni.parquet"), tmp_path / "ni_o.parquet", ["x"], k=3)
    back = pd.read_parquet(tmp_path / "ni_o.parquet")
    assert back.index.equals(named.index) and list(back.columns) == ["x"]
    engine.anonymize(named, tmp_path / "ni_api.parquet", ["x"], k=3)
    assert pd.read_parquet(tmp_path / "ni_api.parquet").index.equals(named.index)
    engine.anonymize(df, tmp_path / "ri_api.parquet", ["x"], k=3)
    assert pd.read_parquet(tmp_path / "ri_api.parquet").index.equals(df.index)


def test_mean_of_equal_datetimes_is_exact():
    ns = pl.Series("t", [1_600_000_000_123_456_789] * 3 + [1_700_000_000_987_654_321] * 3, dtype=pl.Datetime("ns"))
    f = pl.DataFrame({"t": ns, "x": [1.0, 1, 1, 2, 2, 2]})
    assert engine.microaggregate(f, qi=["t", "x"], k=3).table["t"].to_list() == ns.to_list()
    us = pl.Series("t", [datetime.datetime(9999, 12, 31, 23, 59, 59, 999999)] * 3
                   + [datetime.datetime(9999, 1, 1, 0, 0, 0, 1)] * 3, dtype=pl.Datetime("us"))
    f = pl.DataFrame({"t": us, "x": [1.0, 1, 1, 2, 2, 2]})
    assert engine.microaggregate(f, qi=["t", "x"], k=3).table["t"].to_list() == us.to_list()


def test_mean_of_datetimes_rounds_half_to_even():
    v = [1_600_000_000_000_000_001, 1_600_000_000_000_000_002]
    f = pl.DataFrame({"t": pl.Series(v * 2, dtype=pl.Datetime("ns")), "x": [0.0] * 4})
    out = engine.microaggregate(f, qi=["t", "x"], k=2).table["t"].cast(pl.Int64).to_list()
    assert set(out) <= {1_600_000_000_000_000_002}  # 1.5 -> 2 (even)


def test_pandas_categorical_of_numbers_is_a_category():
    df = pd.DataFrame({"x": np.arange(30.0), "c": pd.Categorical(np.arange(30) % 4 * 10)})
    r = engine.microaggregate(df, qi=["x", "c"], k=3)
    assert r.report.metrics["mixed"]["kinds"]["c"] == "nominal"
    assert r.table["c"].dtype == df["c"].dtype
    assert set(r.table["c"].astype(int)) <= {0, 10, 20, 30}


# --- fuzz: API (pandas, Polars, Arrow) against the CLI on the same data in Parquet ----------

@st.composite
def _frames(draw):
    n = draw(st.integers(6, 40))
    tz = draw(st.sampled_from([None, "UTC", "Europe/Madrid", "America/New_York"]))
    unit = draw(st.sampled_from(["ms", "us", "ns"]))
    base = draw(st.integers(0, 2_000_000_000))
    secs = draw(st.lists(st.integers(0, 400 * 86400), min_size=n, max_size=n))
    xs = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
    cats = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n))
    k = draw(st.integers(2, 4))
    t = pl.Series("t", [(base + s) * 1000 for s in secs], dtype=pl.Int64).cast(pl.Datetime("ms"))
    t = t.cast(pl.Datetime(unit))
    if tz is not None:
        t = t.dt.replace_time_zone("UTC").dt.convert_time_zone(tz)
    frame = pl.DataFrame({"x": pl.Series(xs, dtype=pl.Float64), "t": t, "c": cats,
                          "keep": [f"r{i}" for i in range(n)]})
    return frame, k


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_frames())
def test_api_inputs_agree_with_the_cli(tmp_path_factory, case):
    frame, k = case
    tmp = tmp_path_factory.mktemp("fz")
    qi = ["x", "t", "c"]
    frame.write_parquet(tmp / "in.parquet")
    # the command in this process (the test of the command in a process of its own is above)
    assert main(["anonymize", str(tmp / "in.parquet"), str(tmp / "o.parquet"), "--qi", ",".join(qi), "--k", str(k),
                 "--quiet"]) == 0
    cli = pl.read_parquet(tmp / "o.parquet")
    got_pl = engine.microaggregate(frame, qi=qi, k=k).table
    assert got_pl.equals(cli)
    got_pa = engine.microaggregate(frame.to_arrow(), qi=qi, k=k).table
    assert pl.from_arrow(got_pa).equals(cli)
    assert got_pa.schema.field("t").type == frame.to_arrow().schema.field("t").type
    pdf = frame.to_pandas()
    got_pd = engine.microaggregate(pdf, qi=qi, k=k).table
    assert got_pd["t"].dtype == pdf["t"].dtype
    assert got_pd["t"].tolist() == cli["t"].to_pandas().tolist()
    assert got_pd["x"].tolist() == cli["x"].to_list() and got_pd["c"].tolist() == cli["c"].to_list()
