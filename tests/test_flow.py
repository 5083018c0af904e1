"""One coordinator flow for every method: the registry's hooks, and the in-memory run as
the one-block case of the blocked passes."""

import numpy as np
import pytest

import engine
from engine import coordinator
from engine.coordinator import FLOWS
from engine.options import RunConfig
from engine.io.spill import MemoryBlocks
from engine.registry import REGISTRY
from engine.synth import census_like

HOOKS = ("check_input", "check_rows", "budget_args", "profile", "new_store", "units", "aggregate",
         "after_aggregate", "stitch", "check_stitched", "one_class", "distributions_after", "write",
         "report_fields")

KW = {"maxent": dict(sa="occupation", epsilon=2.0, k=None), "mnqia": dict(k=5)}


def _qi(method):
    return ["age", "wage_income", "hours_per_week"] + (["sex"] if method == "maxent" else [])


@pytest.mark.parametrize("method", list(REGISTRY))
def test_every_method_declares_its_flow_and_block_function(method):
    spec = REGISTRY[method]
    flow = FLOWS[spec.publishes](RunConfig.make(qi=_qi(method), method=method, **KW.get(method, dict(k=5))))
    missing = [h for h in HOOKS if not callable(getattr(flow, h, None))]
    assert not missing, missing
    assert callable(spec.block_function)
    assert flow.aggregate_pass in ("aggregate", method)


@pytest.mark.parametrize("method", ["mdav", "vmdav", "maxent", "mnqia"])
def test_one_block_is_loaded_not_spilled(method, monkeypatch):
    """A table of one block runs through the same passes with its rows loaded into
    memory (``MemoryBlocks``); forcing blocks spills the same rows instead."""
    frame = census_like(1500, seed=3)
    stores = []
    real = coordinator.load_block

    def spy(*a, **kw):
        store = real(*a, **kw)
        stores.append(store)
        return store

    monkeypatch.setattr(coordinator, "load_block", spy)
    cfg = RunConfig.make(qi=_qi(method), method=method, **KW.get(method, dict(k=5)))
    one = coordinator.run(frame, cfg)
    assert len(stores) == 1 and isinstance(stores[0], MemoryBlocks)
    assert "load" in one.report.passes and "partition" not in one.report.passes
    assert one.report.blocks == 1 and one.report.verified["rows"] == 1500
    assert one.labels.dtype == np.int64 and one.labels.shape == (1500,)
    spilled = coordinator.run(frame, cfg, force_blocks=True)
    assert len(stores) == 1 and "partition" in spilled.report.passes and "load" not in spilled.report.passes
    if not cfg.spec.centroids:  # one spilled block gives what the in-memory block gives
        assert spilled.table.equals(one.table) and np.array_equal(spilled.labels, one.labels)


@pytest.mark.parametrize("method", ["mdav", "maxent", "mnqia"])
def test_same_core_keys_in_memory_and_in_blocks(method, tmp_path):
    frame = census_like(3000, seed=4)
    kw = KW.get(method, dict(k=5))
    reps = [engine.anonymize(frame, tmp_path / f"{method}{b}.parquet", qi=_qi(method), method=method,
                             block_size=b, **kw) for b in (None, 1000)]
    a, b = (r.to_dict() for r in reps)
    assert a.keys() == b.keys()
    assert reps[0].blocks == 1 and reps[1].blocks > 1
    for r in reps:
        assert r.verified["rows"] == 3000 and r.min_group_size >= (5 if method != "maxent" else 2)
