"""Threads: Numba's thread count for a call, an ordered thread-pool map, a read-ahead thread."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator


@contextlib.contextmanager
def numba_threads(threads: int | None) -> Iterator[int]:
    """Use ``threads`` Numba threads inside the block (Numba's count is per calling
    thread) and restore the caller's setting; yields the count in effect."""
    # (this module is imported for ``read_ahead`` too: engine.io, so ``microagg verify``)
    import numba  # start-up: Numba takes 0.15-0.2 s to import

    if threads is None:
        yield numba.get_num_threads()
        return
    before = numba.get_num_threads()
    numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(before)


def ordered_map(fn, items, threads: int, *, stop=None, inline: bool | None = None) -> Iterator:
    """``fn`` over ``items``, ``threads`` at a time, results yielded in item order (so
    what the caller builds from them does not depend on the thread count).

    ``inline`` (default: one thread or one item) runs ``fn`` in the calling thread;
    else on a pool, so that a signal is handled while a long kernel runs. ``stop``
    (an int64 array of one element) is set to 1 on an error, a signal or an early
    stop of the consumer, before the running items are waited for, so that kernels
    that read it return soon."""
    if inline is None:
        inline = threads <= 1 or len(items) <= 1
    if inline:
        for it in items:
            yield fn(it)
        return
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        pending: deque = deque()
        i = 0
        try:
            while i < len(items) or pending:
                while i < len(items) and len(pending) < threads + 1:
                    pending.append(pool.submit(fn, items[i]))
                    i += 1
                yield pending.popleft().result()
        except BaseException:  # an error, Ctrl-C, or the consumer stopped: queued items never
            if stop is not None:  # start, so the pool's shutdown waits only for the running ones
                stop[0] = 1
            for f in pending:
                f.cancel()
            raise


def read_ahead(items: Iterator, name: str = "microagg-reader", depth: int = 1) -> Iterator:
    """The items of ``items``, produced by a background thread ``depth`` items ahead
    of the consumer (reading and decoding release the GIL, so they overlap the
    caller's work). Its errors are raised in the consumer; when the consumer stops
    early (an error, Ctrl-C), the thread stops at its next item."""
    box: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(msg) -> bool:
        while not stop.is_set():
            try:
                box.put(msg, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("done", None))
        except BaseException as exc:  # raised in the consumer
            put(("error", exc))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def consume():
        try:
            while True:
                try:
                    kind, value = box.get(timeout=0.1)  # a timeout keeps Ctrl-C prompt
                except queue.Empty:
                    continue
                if kind == "item":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return
        finally:
            stop.set()
            thread.join()

    return consume()


def interruptible(fn, *args, poll: float = 0.02):
    """``fn(*args)`` on a thread of its own while the calling thread waits in short
    sleeps, so that a signal is handled at once: a Numba kernel (``nogil``) holds the
    thread that calls it until it returns, and a long one (the risk step's kd-tree
    build and queries: seconds to tens of seconds) would hold Ctrl-C and SIGTERM that
    long. On an interrupt the caller unwinds while the kernel finishes on its daemon
    thread (its result dropped; the command exits without waiting for it). The
    kernel runs with the caller's Numba thread count (a per-thread setting). Returns
    ``fn``'s result or raises its exception."""
    import numba  # start-up: Numba takes 0.15-0.2 s to import

    threads = numba.get_num_threads()
    out: dict = {}

    def run() -> None:
        try:
            numba.set_num_threads(threads)
            out["value"] = fn(*args)
        except BaseException as exc:  # raised in the caller
            out["error"] = exc

    thread = threading.Thread(target=run, name="microagg-kernel", daemon=True)
    thread.start()
    while thread.is_alive():
        time.sleep(poll)  # (in this frame, not in ``threading``'s: a signal's interrupt is raised here)
    if "error" in out:
        raise out["error"]
    return out.get("value")
