"""The benchmark tables' releases, byte for byte as they were before the layout changed.

``tests/data/golden.json`` holds the SHA-256 of each release written by the code
before the option table, the release job and the encoding layer were introduced
(the same commands, CSV output with a group column). A refactor that changes a
single byte of any of them fails here, naming the case."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest

from engine.cli import main

DATA = Path(__file__).resolve().parent / "data"
GOLDEN = json.loads((DATA / "golden.json").read_text())
ADULT_MIXED = ["--qi", "age,education,sex,race,marital_status,hours_per_week", "--ordinal", "education=@education_num",
               "--k", "5"]
CASES = {
    "census_mdav_k3": ["census.csv", "--qi", "ALL", "--k", "3"],
    "census_vmdav_k5": ["census.csv", "--qi", "ALL", "--k", "5", "--method", "vmdav"],
    "census_mdav_single_k4": ["census.csv", "--qi", "ALL", "--k", "4", "--method", "mdav-single"],
    "tarragona_ivmdav_k4": ["tarragona.csv", "--qi", "ALL", "--k", "4", "--method", "ivmdav"],
    "census_ama_k3": ["census.csv", "--qi", "ALL", "--k", "3", "--method", "ama"],
    "census_emad_k3": ["census.csv", "--qi", "ALL", "--k", "3", "--select", "emad", "--select-count", "3"],
    "census_blocks_polish_k3": ["census.csv", "--qi", "ALL", "--k", "3", "--block-size", "200"],
    "census_blocks_refine_k3": ["census.csv", "--qi", "ALL", "--k", "3", "--block-size", "300",
                                "--refine", "local", "--polish-rounds", "0"],
    "adult_mixed_k5": ["adult.csv", *ADULT_MIXED],
    "adult_mixed_exact_k5": ["adult.csv", *ADULT_MIXED, "--block-size", "40000"],
    "adult_maxent": ["adult.csv", "--qi", "age,education_num,hours_per_week", "--method", "maxent",
                     "--sa", "occupation", "--epsilon", "2.5"],
    "adult_maxent_blocks_k5": ["adult.csv", "--qi", "age,education_num,hours_per_week,sex", "--method", "maxent",
                               "--sa", "occupation", "--epsilon", "2.0", "--k", "5", "--block-size", "8000",
                               "--numeric-output", "mean"],
    "census_mnqia_k3": ["census.csv", "--qi", "AFNLWGT,AGI,EMCONTRB,FEDTAX", "--method", "mnqia", "--k", "3"],
    "adult_mnqia_blocks_k5": ["adult.csv", "--qi", "age,education_num,hours_per_week", "--method", "mnqia",
                              "--k", "5", "--block-size", "8000"],
}


def test_every_case_has_a_golden_hash():
    assert set(CASES) == set(GOLDEN)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_release_bytes_unchanged(name, tmp_path):
    data, *argv = CASES[name]
    data = DATA / data
    if "ALL" in argv:
        argv[argv.index("ALL")] = ",".join(pl.read_csv(data, n_rows=1).columns)
    out = tmp_path / f"{name}.csv"
    assert main(["anonymize", str(data), str(out), *argv, "--quiet", "--no-progress", "--group-column", "g"]) == 0
    assert hashlib.sha256(out.read_bytes()).hexdigest() == GOLDEN[name], f"{name}: the release's bytes changed"
