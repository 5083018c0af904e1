"""microagg-engine: k-anonymity for large tables by microaggregation."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .version import version

__all__ = ["microaggregate", "anonymize", "RunConfig", "RunResult", "Report", "EngineError", "METHODS",
           "verify_release", "VerifyResult", "disclosure_risk", "RiskResult", "__version__"]

# Everything is imported on first use: ``import engine`` (and the ``microagg``
# command's start, which handles Ctrl-C from its first line) does not load Polars,
# NumPy or Numba until a name that needs them is used.
_LAZY = {"microaggregate": ".api", "anonymize": ".api", "RunConfig": ".options", "METHODS": ".methods",
         "RunResult": ".coordinator", "EngineError": ".errors", "Report": ".report",
         "verify_release": ".audit.verify", "VerifyResult": ".audit.verify", "disclosure_risk": ".audit.risk",
         "RiskResult": ".audit.risk"}

if TYPE_CHECKING:  # for type checkers and IDEs: the names as the lazy imports give them
    from .api import anonymize, microaggregate
    from .methods import METHODS
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
