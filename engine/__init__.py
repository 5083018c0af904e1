"""microagg-engine: k-anonymity for large tables by microaggregation."""

from .api import anonymize, microaggregate
from .config import METHODS, RunConfig
from .coordinator import RunResult
from .errors import EngineError
from .report import Report

__version__ = "0.1.0"
__all__ = ["microaggregate", "anonymize", "RunConfig", "RunResult", "Report", "EngineError", "METHODS",
           "verify_release", "VerifyResult", "disclosure_risk", "RiskResult"]

# imported on first use (an anonymize run needs neither): start-up time
_LAZY = {"verify_release": ".verify", "VerifyResult": ".verify", "disclosure_risk": ".risk", "RiskResult": ".risk"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
