"""Connecting to a Dask scheduler (``--scheduler``): an address checked in bounded time
before a ``distributed.Client`` is made (``probe``), ``local`` for a ``LocalCluster`` of
this machine, or a Client given by the caller (docs/notes/dask.md, "Faults")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

from ..errors import EngineError, first_line

CONNECT_SECONDS = 3     # an unreachable scheduler: the run stops after this long
ANSWER_SECONDS = 20     # a service at the address that accepts connections but does not answer as a scheduler
WORKER_WAIT_SECONDS = 30  # a scheduler without workers


def connect(scheduler, memory_limit: int | None = None):
    """``(client, closer)``: a ``distributed.Client`` for ``scheduler`` (an address, "local"
    for a ``LocalCluster`` of this machine, or a Client), and what to close at the end."""
    try:
        import distributed  # optional: the [dask] extra
    except ImportError:
        raise EngineError("scheduler (--scheduler) needs Dask: pip install 'microagg-engine[dask]'") from None
    if isinstance(scheduler, distributed.Client):
        return scheduler, contextlib.nullcontext()
    stack = contextlib.ExitStack()
    if scheduler == "local":
        quiet = logging.getLogger("distributed")  # its scheduler's INFO lines (as it starts and stops)
        stack.callback(quiet.setLevel, quiet.level)  # restored after the cluster is closed
        quiet.setLevel(logging.ERROR)
        cluster = stack.enter_context(distributed.LocalCluster(
            threads_per_worker=1, processes=True, memory_limit=memory_limit or "auto", dashboard_address=":0",
            silence_logs=logging.ERROR))
        client = stack.enter_context(distributed.Client(cluster, set_as_default=False))
        return client, stack
    if not isinstance(scheduler, str) or "://" not in scheduler and ":" not in scheduler:
        raise EngineError(f"scheduler (--scheduler) must be an address such as tcp://HOST:PORT, 'local' or a "
                          f"distributed.Client, got {scheduler!r}")
    if not scheduler.startswith("inproc://"):  # (an in-process address answers only in its own process)
        probe(scheduler)
    stack.enter_context(_quiet_distributed())  # its own log lines (a lost connection's traceback): one line is ours
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_SECONDS, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        stack.close()
        raise EngineError(f"cannot reach the Dask scheduler at {scheduler} (--scheduler): {first_line(exc)}") from None
    stack.enter_context(client)
    return client, stack


@contextlib.contextmanager
def _quiet_distributed():
    """Dask's client logs a lost connection (its reconnection attempts, with an asyncio
    traceback) at ERROR: silenced while the run uses it (a failure reaches the run as an
    exception, reported in one line); its level restored after."""
    names = ["distributed"] + [n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]
    quiet = [logging.getLogger(n) for n in names]  # (Dask's config gives some their own level)
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)


def probe(address: str, connect_seconds: float | None = None, answer_seconds: float | None = None) -> None:
    """Check that a Dask scheduler answers at ``address``, in bounded time, before a
    ``distributed.Client`` is made: the Client waits without end for a service that
    accepts the connection and never answers (its handshake has no timeout), and reads
    another service's answer as a Dask message (an HTTP server's "HTTP/1.1" read as a
    frame length: a 3 EiB allocation). One line naming the address otherwise:
    unreachable (``CONNECT_SECONDS``), no answer (``ANSWER_SECONDS``), or not a Dask
    scheduler. Runs on a thread of its own (its own event loop: the caller may run one)."""
    from distributed.comm import connect as dask_connect  # optional: the [dask] extra

    connect_seconds = CONNECT_SECONDS if connect_seconds is None else connect_seconds
    answer_seconds = ANSWER_SECONDS if answer_seconds is None else answer_seconds
    where = f"the Dask scheduler at {address} (--scheduler)"
    out: dict = {}

    async def ask():
        comm = await dask_connect(address, timeout=connect_seconds)  # (its handshake: no timeout of its own)
        out["connected"] = True
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded():
        return await asyncio.wait_for(ask(), connect_seconds + answer_seconds)

    def run():
        try:
            out["answer"] = asyncio.run(bounded())
        except BaseException as exc:  # (reported by the caller's thread)
            out["error"] = exc

    t = threading.Thread(target=run, name="microagg-probe", daemon=True)
    t.start()
    while t.is_alive():  # (a sleep in this frame: a signal interrupts the wait at once)
        time.sleep(0.02)
    exc = out.get("error")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        raise EngineError(f"{where} did not answer: the address accepts connections but sent nothing in "
                          f"{connect_seconds + answer_seconds:g} s (is it a Dask scheduler's?)") from None
    if isinstance(exc, OSError) and "connected" not in out:
        raise EngineError(f"cannot reach {where}: {first_line(exc)}") from None
    if exc is not None:  # a reply that is no Dask message (another service), or the connection dropped
        why = "" if isinstance(exc, MemoryError) else f" ({type(exc).__name__}: {first_line(exc)[:200]})"
        raise EngineError(f"{address} (--scheduler) is not a Dask scheduler: the service there does not "
                          f"answer in Dask's protocol{why}") from None
    answer = out.get("answer")
    kind = answer.get("type") if isinstance(answer, dict) else None
    if kind != "Scheduler":
        what = f"a Dask {kind.lower()}" if isinstance(kind, str) else "not a Dask scheduler"
        raise EngineError(f"{address} (--scheduler) is {what}, not a scheduler: give the scheduler's "
                          f"address") from None
