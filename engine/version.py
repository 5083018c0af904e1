"""The installed package's version (single source: pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _installed


def version() -> str:
    """``microagg-engine``'s installed version, or ``0+unknown`` in a source tree that
    is not installed."""
    try:
        return _installed("microagg-engine")
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "0+unknown"
