"""The Dask write task's publisher (``engine.cluster.write``), without a cluster: it takes
the write pass's call as a local run's ``encode.publish.Publisher`` does. (The mixed Dask
runs themselves are slow tests: ``tests/test_dask_mixed.py``; a publisher signature the
task's proxy did not follow failed every one of them, unseen by the fast tests.)"""

import inspect

import numpy as np
import polars as pl

from engine.cluster import write as cluster_write
from engine.encode.publish import Publisher


class _Recorder:
    """A publisher that records its calls (the proxy forwards; the real one is tested
    end to end by the slow Dask tests)."""

    columns = ["x"]

    def __init__(self):
        self.calls = []

    def publish(self, frame, lab, offset, values=None):
        self.calls.append((offset, values))
        return frame


def test_write_task_publisher_takes_the_write_pass_call():
    rec = _Recorder()
    shifted = cluster_write._Shifted(rec, 1_000)
    frame = pl.DataFrame({"x": [1.0, 2.0]})
    lab = np.zeros(2, np.int64)
    values = np.ones((1, 2))
    assert shifted.publish(frame, lab, 5, values) is frame  # (the call of ``passes.write._published``)
    assert shifted.publish(frame, lab, 7) is frame  # (``PublisherSums``: no values)
    assert rec.calls[0][0] == 1_005 and rec.calls[0][1] is values
    assert rec.calls[1] == (1_007, None)
    assert shifted.columns == ["x"]  # (everything else: the publisher's own)


def test_write_task_publisher_follows_the_publisher_signature():
    def names(fn):
        return [p.name for p in inspect.signature(fn).parameters.values()][1:]  # (without self)

    assert names(cluster_write._Shifted.publish) == names(Publisher.publish)
