"""microagg-engine: k-anonymity for large tables by microaggregation."""

from .api import anonymize, microaggregate
from .config import METHODS, RunConfig
from .coordinator import RunResult
from .errors import EngineError
from .report import Report
from .risk import RiskResult, disclosure_risk
from .verify import VerifyResult, verify_release

__version__ = "0.1.0"
__all__ = ["microaggregate", "anonymize", "RunConfig", "RunResult", "Report", "EngineError", "METHODS",
           "verify_release", "VerifyResult", "disclosure_risk", "RiskResult"]
