"""microagg-engine: k-anonymity for large tables by microaggregation."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import TYPE_CHECKING


def _quit_at_once(signum, frame):
    """The ``microagg`` command's first handler: nothing is written yet, so exit (130 for
    SIGINT, 143 for SIGTERM) with the command's one line, without a traceback."""
    word = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    os.write(2, f"\nmicroagg: {word}; temporary files removed, no partial output left\n".encode())
    os._exit(143 if signum == signal.SIGTERM else 130)


def _as_command() -> bool:
    """This process is the ``microagg`` command (the console script, or ``python -m
    engine``), not a program that imports the package."""
    argv = getattr(sys, "orig_argv", ())
    return (os.path.basename(sys.argv[0] if sys.argv else "") == "microagg"
            or any(a == "-m" and b == "engine" for a, b in zip(argv, argv[1:])))


# The command handles Ctrl-C and SIGTERM from here, its first line (``engine.cli.entry``
# then installs its own handler): Python's own would print a KeyboardInterrupt traceback
# while the command's modules are imported. A program that imports the package keeps its
# handlers; a signal its parent set to be ignored (nohup) stays ignored.
if _as_command():
    for _sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(_sig) is not signal.SIG_IGN:
            signal.signal(_sig, _quit_at_once)

from .version import version  # noqa: E402  (after the handler: it imports importlib.metadata, 17 ms)

__all__ = ["microaggregate", "anonymize", "plan", "Plan", "RunConfig", "RunResult", "Report", "EngineError", "METHODS",
           "verify_release", "VerifyResult", "disclosure_risk", "RiskResult", "__version__"]

# Everything is imported on first use: ``import engine`` (and the ``microagg``
# command's start, which handles Ctrl-C from its first line) does not load Polars,
# NumPy or Numba until a name that needs them is used.
_LAZY = {"microaggregate": ".api", "anonymize": ".api", "plan": ".api", "Plan": ".planning", "RunConfig": ".options", "METHODS": ".registry",
         "RunResult": ".coordinator", "EngineError": ".errors", "Report": ".report",
         "verify_release": ".audit.verify", "VerifyResult": ".audit.verify", "disclosure_risk": ".audit.risk",
         "RiskResult": ".audit.risk"}

if TYPE_CHECKING:  # for type checkers and IDEs: the names as the lazy imports give them
    from .api import anonymize, microaggregate, plan
    from .planning import Plan
    from .registry import METHODS
    from .options import RunConfig
    from .coordinator import RunResult
    from .errors import EngineError
    from .report import Report
    from .audit.risk import RiskResult, disclosure_risk
    from .audit.verify import VerifyResult, verify_release


def __getattr__(name: str):
    if name == "__version__":
        value = version()
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
