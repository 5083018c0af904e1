"""The one exception type the engine raises for problems with input or settings."""

import signal


class EngineError(ValueError):
    """Bad input, bad settings or an I/O failure, described in one line.

    The CLI prints ``microagg: error: <message>`` and exits with status 2; the
    message names the column, row, parameter or path at fault.
    """


class VerificationError(EngineError):
    """A run's own output failed its self-check (a published class smaller than k, or
    a row count that does not add up). Nothing is written; the CLI exits with 1,
    as this points at a bug rather than at the input."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that the
    same cleanups run (spill folder and temporary output removed)."""


# Signals the command received (``cli``'s handler notes each before it raises). An
# exception raised by a handler can be swallowed where Python cannot propagate it (a
# ctypes callback, e.g. Numba's object cache while it compiles): ``check_signals`` at
# the checkpoints (before any output is committed) raises it again.
received_signals: list[int] = []


def check_signals() -> None:
    """Raise the interrupt of a signal received earlier (see ``received_signals``)."""
    if received_signals:
        raise Terminated() if received_signals[0] == signal.SIGTERM else KeyboardInterrupt()


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none): what an
    ``EngineError`` quotes of a library's error, so that it stays one line."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
