"""``microagg verify --person-column P --household-column H``: the checks of a release
grouped by person or household (``anonymize`` with the same options; docs/households.md).

* **persons** (``P``): every class (the rows sharing all published QI values; -0.0 and
  0.0 one value here) holds at least k distinct persons, and every person publishes all
  its records in one class.
* **households** (``H``, with the original): the QIs constant within every household of
  the original (household-level) are published identically for all members of each
  household.
* **class means** (``H``, with the original; replaces the check of the same name): a
  household-level QI was aggregated over the households of a first stage, whose classes
  are the rows sharing the published household-level values; it must equal the mean of
  its original values there. A person-level QI: over the whole class, as without ``H``.

These checks read the release's QI, person and household columns (and the original's
QIs) into memory: about 8 bytes a value a row.
"""

from __future__ import annotations

import polars as pl

from ..errors import EngineError
from ..encode.codes import mask_codes
from ..io.source import open_source

TOLERANCE = 1e-9  # times the column's largest |original value| (verify's MEAN_TOLERANCE)


def _read(data, columns, csv=None) -> pl.DataFrame:
    with open_source(data, csv=csv) as src:
        for c in columns:
            if c not in src.columns:
                raise EngineError(f"column {c!r} not found in {src.label}")
        return pl.concat([f for _, f in src.iter_frames(list(dict.fromkeys(columns)), 1 << 20, native=True)])


def entity_checks(result, output, original, qi: list, k: int, person: str | None, house: str | None,
                  csv=None, nominal=(), missing=None) -> None:
    """Add the checks above to ``result`` (a ``VerifyResult``) and update its ``ok``
    (``nominal`` QIs: no means; ``missing``: ``{column: codes}``, left out of the means)."""
    if person is None and house is None:
        return
    for name, col in (("person_column", person), ("household_column", house)):
        if col is not None and col in qi:
            raise EngineError(f"{name} (--{name.replace('_', '-')}): column {col!r} is a quasi-identifier")
    pub = _read(output, [*qi, *[c for c in (person, house) if c]])
    checks = []
    if person is not None:
        checks.append(_persons(pub, qi, k, person))
    if house is not None and original is not None:
        orig = _read(original, [*qi, house], csv)
        hh_qi = [c for c in qi if int(orig.group_by(house).agg(pl.col(c).n_unique()).get_column(c).max()) == 1]
        checks.append(_mates(pub, hh_qi, house))
        means = _means(pub, orig, qi, hh_qi, set(nominal or ()), dict(missing or {}))
        if means is not None:
            result.checks = [c for c in result.checks if c["name"] != "class means"]
            checks.append(means)
    for name, ok, detail in checks:
        result.checks.append({"name": name, "ok": ok, "detail": detail})
    result.ok = all(c["ok"] for c in result.checks)


def _persons(pub: pl.DataFrame, qi: list, k: int, person: str) -> tuple[str, bool, str]:
    pairs = pub.select(*qi, person).unique()
    per_person = pairs.group_by(person).len()
    split = int((per_person.get_column("len") > 1).sum())
    per_class = pairs.group_by(qi).len().get_column("len")
    small = int((per_class < k).sum())
    least = int(per_class.min())
    if split:
        return "persons", False, f"{split:,} person(s) of column {person!r} publish records in more than one class"
    if small:
        return "persons", False, (f"{small:,} of {per_class.len():,} classes hold fewer than k={k} distinct persons "
                                  f"of column {person!r} (the smallest {least})")
    return "persons", True, (f"{per_person.height:,} persons of column {person!r}, each in one class; every class "
                             f"holds {least}.. distinct persons (k={k})")


def _mates(pub: pl.DataFrame, hh_qi: list, house: str) -> tuple[str, bool, str]:
    if not hh_qi:
        return "households", True, f"no QI is constant within the households of column {house!r}"
    differ = pub.group_by(house).agg(pl.struct(hh_qi).n_unique().alias("n")).filter(pl.col("n") > 1)
    if differ.height:
        return "households", False, (f"{differ.height:,} households of column {house!r} publish different "
                                     f"household-level values ({', '.join(hh_qi)}) for their members")
    return "households", True, f"every household of column {house!r} publishes one value of {', '.join(hh_qi)}"


def _means(pub: pl.DataFrame, orig: pl.DataFrame, qi: list, hh_qi: list, nominal=frozenset(), missing=None
           ) -> tuple[str, bool, str] | None:
    pub, orig = _numbers(pub, qi), _numbers(orig, qi)  # (a CSV is read as text: its numbers parsed here)
    numeric = [c for c in qi if orig.schema[c].is_numeric() and pub.schema[c].is_numeric() and c not in nominal]
    for c, codes in (missing or {}).items():  # (declared codes: no part of a mean; a class of codes publishes one)
        if c in numeric:
            pub, orig = (f.with_columns(mask_codes(f.get_column(c), tuple(codes))) for f in (pub, orig))
    if not numeric:
        return None
    both = pub.select(qi).with_columns(orig.select(pl.col(c).alias(f"{c}\0o") for c in numeric))
    bad = []
    for c in numeric:
        mean = both.group_by(hh_qi if c in hh_qi else qi).agg(pl.col(c).first().alias("p"),
                                                             pl.col(f"{c}\0o").mean().alias("m"))
        bound = TOLERANCE * float(orig.get_column(c).abs().max() or 0.0)
        if mean.filter((pl.col("p") - pl.col("m")).abs() > bound).height:
            bad.append(c)
    if bad:
        return "class means", False, f"published values that are not their class's mean: {', '.join(bad)}"
    return "class means", True, (f"every published value of {', '.join(numeric)} is the mean of its class's original "
                                 f"values (household-level {', '.join(hh_qi) or 'none'}: over the rows sharing the "
                                 f"published household-level values)")


def _numbers(frame: pl.DataFrame, qi: list) -> pl.DataFrame:
    """Text columns that hold numbers only (a CSV read as text) as Float64."""
    cast = []
    for c in qi:
        if frame.schema[c] == pl.String:
            x = frame.get_column(c).cast(pl.Float64, strict=False)
            if x.null_count() == frame.get_column(c).null_count():
                cast.append(x)
    return frame.with_columns(cast) if cast else frame
