"""Persons and households: ``--person-column`` and ``--household-column`` (docs/households.md).

k-anonymity counts records; when a person has several records (survey rounds, visits)
or shares a household with others, k records can be fewer than k people, and household
mates can give each other's values back. Both options group *entities* instead of
records, with the existing engine, then publish record by record through the existing
write pass (pass-through columns byte for byte, atomic output, the self-check):

* ``--person-column P``: the input is collapsed to one point per person (a numeric or
  date QI: the mean of the person's records; a categorical QI: its most frequent value,
  ties to the first in sort order; the strata: constant per person, else refused), the
  MDAV family groups these points in memory (groups of at least k persons), and every
  record is published with its person's group: each QI as the group's value over its
  *records* (the record-level mean, or most frequent category), which is what
  ``microagg verify`` checks. All records of a person publish the same QI values,
  including the QIs that vary by record (age across rounds, income per visit): what
  is published for them is the group's mean over all its records.
* ``--household-column H``: the QIs constant within every household of the input
  (state, region, household size: "household-level") are grouped by household in a
  first stage (one point per household, groups of at least k households) and published
  for every record as the stage-1 group's value, so all members of a household publish
  the same household-level values. The other QIs ("person-level") are grouped in a
  second stage within the stage-1 groups (as strata), per record or, with
  ``--person-column``, per person. A published class (household-level values,
  person-level values, strata) is then a stage-2 group: at least k persons. The first
  stage is written to a private temporary file (or kept in memory for an in-memory
  result), the second reads it and writes the release.

The grouping runs on a table held in memory: the input's key, QI and strata columns
(8 bytes a value a row, about) plus the entity table (a row per person or household)
and one label a row. Nominal QIs (``--nominal``, or a labelled file's categories) take
their most frequent code per entity, numeric QIs with declared missing codes the mean of
the values present (an entity of codes only: its most frequent code); the run's
declarations (``io.labelled.with_declarations``) are read here first, so the entity
tables are grouped with them too. Not with ``--scheduler`` (refused), nor with an
ordinal QI ordered by another column (refused: first version).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import polars as pl

from .coordinator import RunResult, run as run_records
from .encode.codes import resolve_missing
from .encode.kinds import is_categorical, is_temporal
from .errors import EngineError
from .io.labelled import file_meta, with_declarations
from .io.sink import output_format
from .io.source import open_source
from .io.tempfiles import private_folder
from .options import OPTIONS, RunConfig
from .passes.partition import strata_columns

STAGE = "__microagg_stage1"  # the stage-1 group of a record, as the second stage's stratum


def run(data, cfg: RunConfig, dest=None, **kw) -> RunResult:
    """``coordinator.run`` for every run; with a person or household column, the
    records grouped by entity (the module's docstring)."""
    if cfg.person_column is None and cfg.household_column is None:
        return run_records(data, cfg, dest, **kw)
    _check_supported(cfg)
    cfg = with_declarations(cfg, file_meta(data))  # (a labelled file's categories and missing codes, as below)
    person, house = cfg.person_column, cfg.household_column
    strata = list(strata_columns(cfg))
    frame = _read(data, cfg, kw.get("names"), kw.get("tmp_dir"), [c for c in (person, house) if c], strata)
    if house is None:
        labels, info = entity_groups(frame, person, list(cfg.qi), strata, cfg)
        result = run_records(data, cfg, dest, given=labels, classes=(tuple(strata), person), **kw)
        result.report.metrics["entities"] = info
        return result
    return _households(data, cfg, dest, frame, strata, kw)


def _check_supported(cfg: RunConfig) -> None:
    column = OPTIONS["person_column" if cfg.person_column is not None else "household_column"].label
    if cfg.scheduler is not None:
        raise EngineError(f"{column} does not run with scheduler (--scheduler) yet: run without it")
    for c, _, by in cfg.ordinal or ():
        if by is not None:
            raise EngineError(f"{column} does not take an ordinal QI ordered by another column (--ordinal "
                              f"{c}=@{by}) yet: give its categories in order")


def _read(data, cfg: RunConfig, names, tmp_dir, keys: list, strata: list) -> pl.DataFrame:
    """The key, QI and strata columns of the input, in memory; keys without nulls."""
    with open_source(data, names=names, csv=cfg.csv, tmp_dir=tmp_dir) as src:
        have = set(src.columns)
        for c in [*keys, *cfg.qi, *strata]:
            if c not in have:
                what = next((OPTIONS[n].label for n in ("person_column", "household_column")
                             if getattr(cfg, n) == c), "column")
                raise EngineError(f"{what}: no column {c!r} in {src.label}")
        cols = list(dict.fromkeys([*keys, *cfg.qi, *strata]))
        frame = pl.concat([f for _, f in src.iter_frames(cols, cfg.chunk_rows, native=True)], rechunk=True)
        label = src.label
    for c in keys:
        nulls = frame.get_column(c).is_null()
        if nulls.any():
            row = int(nulls.arg_max())
            raise EngineError(f"column {c!r} of {label}: row {row + 1} has no value; every record needs its "
                              f"person and household")
    return frame


def household_level(frame: pl.DataFrame, house: str, qi: list) -> list:
    """The QIs constant within every household (a null a value of its own)."""
    counts = frame.group_by(house).agg(pl.col(c).n_unique() for c in qi)
    return [c for c in qi if int(counts.get_column(c).max()) == 1]


def entity_table(frame: pl.DataFrame, key: str, qi: list, strata: list, nominal=(), missing=None
                 ) -> pl.DataFrame:
    """One row per value of ``key``, sorted by it: numeric and date QIs their mean over
    the entity's records (nulls and declared ``missing`` codes left out; an entity of
    codes only: its most frequent code), categorical and ``nominal`` ones their most
    frequent value (a null, a code, a value; ties to the first in sort order), strata
    their one value (else refused)."""
    missing = dict(missing or {})
    modal = [c for c in qi if is_categorical(frame.schema[c]) or c in set(nominal) or c in missing]
    aggs = []
    for c in qi:
        dt = frame.schema[c]
        if is_categorical(dt) or c in set(nominal):
            continue
        if is_temporal(dt):
            aggs.append(pl.col(c).to_physical().mean().round().cast(pl.Int64).cast(dt))
        elif c in missing:
            aggs.append(pl.col(c).filter(~pl.col(c).cast(pl.Float64).is_in([float(v) for v in missing[c]]))
                        .mean().alias(f"{c}\0m"))
        else:
            aggs.append(pl.col(c).mean())
    aggs += [pl.col(s).n_unique().alias(f"{s}\0n") for s in strata] + [pl.col(s).first() for s in strata]
    table = frame.group_by(key).agg(aggs).sort(key)
    for s in strata:
        varies = table.filter(pl.col(f"{s}\0n") > 1)
        if varies.height:
            raise EngineError(f"stratum column {s!r} varies within {key} {varies.get_column(key)[0]!r}: all "
                              f"records of one person or household must lie in one stratum")
    for c in modal:
        modes = (frame.group_by([key, c]).len()
                 .sort([key, "len", c], descending=[False, True, False], nulls_last=True)
                 .group_by(key, maintain_order=True).first().select(key, c))
        table = table.join(modes, on=key, how="left")
        if f"{c}\0m" in table.columns:  # (the mean of the values present, else the most frequent code)
            table = table.with_columns(pl.coalesce(f"{c}\0m", pl.col(c).cast(pl.Float64)).alias(c))
    return table.select(key, *qi, *strata)


def entity_groups(frame: pl.DataFrame, key: str | None, qi: list, strata: list, cfg: RunConfig,
                  given_strata: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Each record's group, the groups formed by the engine on one point per ``key``
    (None: per record) over ``qi``, within ``strata`` (and ``given_strata``, a stratum
    per record); ``(labels, what the report says)``."""
    base = frame.select(*([key] if key else []), *qi, *strata)
    if given_strata is not None:
        base = base.with_columns(pl.Series(STAGE, given_strata, dtype=pl.Int64))
        strata = [*strata, STAGE]
    if key is None:
        table = base.select(*qi, *strata)
    else:
        codes = {c: v for c, v in cfg.missing or () if c in qi}
        table = entity_table(base, key, qi, strata, [c for c in cfg.nominal or () if c in qi],
                             resolve_missing(tuple(codes.items()), {c: ("numeric", base.schema[c]) for c in codes}))
    inner = _inner_cfg(cfg, qi, strata)
    result = run_records(table.select(*qi, *strata), inner, None, ordered=False)  # (its order is not published)
    groups = np.asarray(result.labels, np.int64)
    if key is None:
        labels = groups
    else:
        index = table.get_column(key).search_sorted(frame.get_column(key))
        labels = groups[index.to_numpy()]
    sizes = np.bincount(groups)
    info = {"column": key, "entities": int(table.height), "groups": int(sizes.shape[0]),
            "min_group_entities": int(sizes.min()), "max_group_entities": int(sizes.max())}
    return labels.astype(np.int32), info


def _inner_cfg(cfg: RunConfig, qi: list, strata: list) -> RunConfig:
    """The settings of a grouping run on an entity table: the QIs ``qi``, no side outputs."""
    return dataclasses.replace(
        cfg, qi=tuple(qi), strata=list(strata) or None, person_column=None, household_column=None,
        derived=None, group_column=None, report=None, html=None, risk=False, weight_column=None, drop=None,
        ordinal=tuple(o for o in cfg.ordinal or () if o[0] in qi) or None,
        weights=tuple(w for w in cfg.weights or () if w[0] in qi) or None,
        **_kinds(cfg, qi),
        select_count=min(cfg.select_count, len(qi)) if cfg.select_count else None,
        separator=None, null_values=None, encoding=None, progress=False)


def _stage_cfg(cfg: RunConfig, qi: list, final: bool) -> RunConfig:
    """A stage's settings: its QIs, their derived columns, the side outputs at the end."""
    return dataclasses.replace(
        cfg, qi=tuple(qi), derived=tuple(d for d in cfg.derived or () if d[1] in qi) or None,
        ordinal=tuple(o for o in cfg.ordinal or () if o[0] in qi) or None,
        weights=tuple(w for w in cfg.weights or () if w[0] in qi) or None, **_kinds(cfg, qi),
        select_count=min(cfg.select_count, len(qi)) if cfg.select_count else None,
        **({} if final else {"group_column": None}))


def _kinds(cfg: RunConfig, qi: list) -> dict:
    """``nominal``, ``numeric`` and ``missing`` of the QIs ``qi`` only."""
    return {"nominal": tuple(c for c in cfg.nominal or () if c in qi) or None,
            "numeric": tuple(c for c in cfg.numeric or () if c in qi) or None,
            "missing": tuple((c, v) for c, v in cfg.missing or () if c in qi) or None}


def _households(data, cfg: RunConfig, dest, frame: pl.DataFrame, strata: list, kw: dict) -> RunResult:
    """Stage 1 on the household-level QIs (one point per household), stage 2 on the
    person-level QIs within the stage-1 groups (per person, or per record)."""
    person, house = cfg.person_column, cfg.household_column
    if person is not None:
        homes = frame.group_by(person).agg(pl.col(house).n_unique())
        moved = homes.filter(pl.col(house) > 1)
        if moved.height:
            raise EngineError(f"person {moved.get_column(person)[0]!r} of column {person!r} has records in several "
                              f"households of column {house!r}")
    hh_qi = household_level(frame, house, list(cfg.qi))
    p_qi = [c for c in cfg.qi if c not in hh_qi]
    info = {"household_column": house, "household_level_qi": hh_qi, "person_level_qi": p_qi}
    if not hh_qi:  # nothing shared by the members: persons (or records) as without the household column
        if person is None:
            result = run_records(data, cfg, dest, classes=(tuple(strata), None), **kw)
        else:
            labels, info["persons"] = entity_groups(frame, person, p_qi, strata, cfg)
            result = run_records(data, cfg, dest, given=labels, classes=(tuple(strata), person), **kw)
        result.report.metrics["entities"] = info
        return result
    stage1, info["households"] = entity_groups(frame, house, hh_qi, strata, cfg)
    if not p_qi:
        result = run_records(data, cfg, dest, given=stage1, classes=(tuple(strata), person), **kw)
        result.report.metrics["entities"] = info
        return result
    stage2, info["persons" if person else "records"] = entity_groups(frame, person, p_qi, strata, cfg,
                                                                     given_strata=stage1)
    del frame
    classes = (tuple([*strata, *hh_qi]), person)
    dest_folder = kw.get("tmp_dir") or (os.path.dirname(os.path.abspath(os.fspath(dest)))
                                        if dest is not None and "://" not in os.fspath(dest) else None)
    first_kw = {k: v for k, v in kw.items() if k in ("names", "tmp_dir")}
    with private_folder(dest_folder) as folder:
        middle = None
        if dest is not None:
            middle = os.path.join(folder, "stage1." + ("csv" if output_format(dest) == "csv" else "parquet"))
        first = run_records(data, _stage_cfg(cfg, hh_qi, False), middle, given=stage1,
                            classes=(tuple(strata), person), **first_kw)
        second_in = middle if middle is not None else first.table
        rest = {k: v for k, v in kw.items() if k != "names"}
        plain = dataclasses.replace(_stage_cfg(cfg, p_qi, True), separator=None, null_values=None, encoding=None,
                                    drop=None)  # (stage 1 left them out)
        result = run_records(second_in, plain, dest, given=stage2, classes=classes, **rest)
    _merge_reports(result.report, first.report, cfg)
    result.report.metrics["entities"] = info
    return result


def _merge_reports(rep, first, cfg: RunConfig) -> None:
    """The release's report from its two stages: all QIs, both stages' losses."""
    rep.qi = list(cfg.qi)
    rep.settings = cfg.settings()
    if rep.qi_kinds is not None or first.qi_kinds is not None:  # (both stages' QIs, in --qi's order)
        kinds = {**(first.qi_kinds or {}), **(rep.qi_kinds or {})}
        rep.qi_kinds = {c: kinds[c] for c in cfg.qi if c in kinds}
    if rep.sse is not None and first.sse is not None:
        rep.sse, rep.sst = rep.sse + first.sse, rep.sst + first.sst
        rep.information_loss_percent = 100.0 * rep.sse / rep.sst if rep.sst > 0 else 0.0
    if rep.information_loss_by_qi is not None and first.information_loss_by_qi is not None:
        rep.information_loss_by_qi = {c: {**first.information_loss_by_qi, **rep.information_loss_by_qi}.get(c)
                                      for c in cfg.qi}
    rep.passes = {**{f"stage1_{p}": s for p, s in first.passes.items()}, **rep.passes}
    rep.wall_seconds += first.wall_seconds
    rep.peak_rss_bytes = max(rep.peak_rss_bytes, first.peak_rss_bytes)
