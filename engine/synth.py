"""A seeded, census-like synthetic table (the demo's data and the benchmarks').

Numeric quasi-identifiers are driven by a few shared latent factors (age, skill,
region), so they are correlated the way census variables are: earnings rise
with education and age, hours and income move together, some incomes are zero.
"""

from __future__ import annotations

import numpy as np
import polars as pl

NUMERIC_QI = ("age", "education_years", "hours_per_week", "wage_income", "other_income",
              "property_tax", "household_size", "commute_minutes")
CATEGORICAL = ("sex", "region", "occupation")
_REGIONS = ("north", "south", "east", "west", "central")
_OCCUPATIONS = ("clerical", "craft", "executive", "farming", "health", "professional",
                "sales", "service", "technical", "transport")


def census_like(rows: int, seed: int = 0, offset: int = 0) -> pl.DataFrame:
    """``rows`` rows; row ids start at ``offset``. Same (rows, seed) -> same table."""
    rng = np.random.default_rng([seed, offset])
    n = int(rows)
    age = np.clip(rng.gamma(6.0, 7.0, n) + 16, 16, 95)
    skill = rng.normal(0, 1, n)
    region = rng.integers(0, len(_REGIONS), n)
    urban = (region == 4) | (rng.random(n) < 0.4)
    edu = np.clip(np.round(12 + 2.5 * skill + rng.normal(0, 1.2, n)), 0, 22)
    working = rng.random(n) < np.clip(1.1 - np.abs(age - 42) / 40, 0.05, 0.97)
    hours = np.where(working, np.clip(np.round(38 + 6 * skill + rng.normal(0, 8, n)), 1, 99), 0)
    wage = np.where(working, np.exp(9.6 + 0.09 * (edu - 12) + 0.012 * np.minimum(age - 16, 30)
                                    + 0.01 * (hours - 38) + rng.normal(0, 0.45, n)), 0.0)
    wage = np.round(wage, -1)
    other = np.where(rng.random(n) < 0.25 + 0.004 * (age - 16),
                     np.round(np.exp(7.5 + 0.5 * skill + rng.normal(0, 1.0, n)), -1), 0.0)
    prop = np.round(np.maximum(0, 0.012 * (wage + other) * np.exp(rng.normal(0, 0.3, n))
                               + np.where(urban, 900, 400) + rng.normal(0, 150, n)))
    hh = np.clip(np.round(1 + rng.poisson(1.6, n) - (age > 65) * rng.integers(0, 2, n)), 1, 12)
    commute = np.where(working, np.clip(np.round(rng.gamma(2.0, 11.0, n) + 10 * urban), 0, 180), 0)
    sex = rng.integers(0, 2, n)
    occ = np.clip((skill * 2.2 + 5 + rng.normal(0, 1.8, n)).astype(np.int64), 0, len(_OCCUPATIONS) - 1)
    return pl.DataFrame({
        "person_id": np.arange(offset, offset + n, dtype=np.int64),
        "age": np.round(age).astype(np.int64),
        "sex": pl.Series(np.array(["female", "male"])[sex]),
        "region": pl.Series(np.array(_REGIONS)[region]),
        "occupation": pl.Series(np.array(_OCCUPATIONS)[occ]),
        "education_years": edu.astype(np.int64),
        "hours_per_week": hours.astype(np.int64),
        "wage_income": wage,
        "other_income": other,
        "property_tax": prop,
        "household_size": hh.astype(np.int64),
        "commute_minutes": commute.astype(np.int64),
    })


def census_extract(rows: int, seed: int = 0, offset: int = 0, missing: bool = True) -> pl.DataFrame:
    """A census extract as statistical offices hold them: ``census_like``'s people with
    51 states, 30 industries, 3,000 municipalities nested in 12 regions (the stratum), 440
    occupations (ISCO-like four-digit codes, ``occupation_code`` beside its label
    ``occupation``: a code column one-to-one with its label), and (``missing``) missing
    values where real extracts have them: hours worked for everyone out of work, some
    wage incomes, marital statuses and municipalities. Same (rows, seed) -> same table."""
    base = census_like(rows, seed, offset)
    rng = np.random.default_rng([seed, offset, 29])
    n = base.height
    region = rng.integers(0, 12, n)
    # municipalities nested in regions, sizes skewed (a few cities, many villages)
    muni = region * 250 + np.minimum(rng.zipf(1.3, n) - 1, 249)
    skill = (base["education_years"].to_numpy() - 12) / 2.5
    occ = np.clip((skill * 60 + 220 + rng.normal(0, 70, n)).astype(np.int64), 0, 439)
    working = base["hours_per_week"].to_numpy() > 0
    marital = rng.choice(np.array(["single", "married", "divorced", "widowed"]), n, p=[0.4, 0.45, 0.1, 0.05])
    t = base.select("person_id", "age", "sex", "education_years", "hours_per_week", "wage_income").with_columns(
        pl.Series("state", np.array([f"S{s:02d}" for s in range(51)])[rng.integers(0, 51, n)]),
        pl.Series("industry", np.array([f"I{s:02d}" for s in range(30)])[rng.integers(0, 30, n)]),
        pl.Series("region", np.array([f"R{r:02d}" for r in range(12)])[region]),
        pl.Series("municipality", np.array([f"M{m:04d}" for m in range(3000)])[muni]),
        pl.Series("occupation", np.array([f"occupation {o:03d}" for o in range(440)])[occ]),
        pl.Series("occupation_code", (1000 + 19 * np.arange(440))[occ]),
        pl.Series("marital_status", marital),
    )
    if not missing:
        return t
    gap = rng.random((3, n))
    return t.with_columns(
        pl.Series("hours_per_week", np.where(working, base["hours_per_week"].to_numpy(), -1)).replace(-1, None),
        pl.when(pl.Series(gap[0] < 0.03)).then(None).otherwise(pl.col("wage_income")).alias("wage_income"),
        pl.when(pl.Series(gap[1] < 0.02)).then(None).otherwise(pl.col("marital_status")).alias("marital_status"),
        pl.when(pl.Series(gap[2] < 0.005)).then(None).otherwise(pl.col("municipality")).alias("municipality"),
    )
