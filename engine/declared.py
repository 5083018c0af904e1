"""``--missing COL=CODE[,CODE...]`` as the options read it (``RunConfig.missing``).

The codes stay as given here (texts from the command line, numbers or texts from the
API): the column's type is known only once the input is opened, where
``engine.encode.codes.resolve_missing`` reads them as numbers or texts and refuses a
code of the wrong type. Kept apart from ``engine.options`` (no Polars: the command
line builds its parser before any command needs it)."""

from __future__ import annotations

import math
import numbers

from .checks import option_texts
from .errors import EngineError


def parse_missing(value) -> tuple | None:
    """``missing`` as ``((column, (code, ...)), ...)``: from a dict ``{column: [codes]}``
    (numbers or texts as given), or texts ``"column=996,997"`` (one per ``--missing``;
    in one text, a part with ``=`` starts the next column: ``"age=996,sex=9"``). Codes
    from the command line stay texts here: ``engine.encode.codes.resolve_missing``
    reads them as numbers or texts by the column's type once the input is known."""
    if value is None:
        return None
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], tuple)
                                        for v in value):
        return value or None  # already normalized (RunConfig.missing)
    pairs: list = []
    if isinstance(value, dict):
        for c, codes in value.items():
            codes = [codes] if isinstance(codes, (str, numbers.Real)) else codes
            try:
                pairs.append((c, tuple(codes)))
            except TypeError:
                raise EngineError(f"missing (--missing): the codes of column {c!r} must be a list, "
                                  f"got {codes!r}") from None
    else:
        expected = "missing (--missing): expected COLUMN=CODE,..., got {value}"
        for t in option_texts(value, expected, expected):
            for part in t.split(","):
                name, eq, code = part.partition("=")
                if eq:
                    pairs.append((name.strip(), []))
                elif not pairs:
                    raise EngineError(f"missing (--missing): expected COLUMN=CODE,..., got {t!r}")
                else:
                    code = name
                if not code.strip():
                    raise EngineError(f"missing (--missing): empty code in {t!r}")
                pairs[-1][1].append(code.strip())
        pairs = [(c, tuple(codes)) for c, codes in pairs]
    for c, codes in pairs:
        if not isinstance(c, str) or not c:
            raise EngineError(f"missing (--missing): invalid column name {c!r}")
        if not codes:
            raise EngineError(f"missing (--missing): no code given for column {c!r}")
        for v in codes:
            if isinstance(v, bool) or not isinstance(v, (str, numbers.Real)) or (
                    isinstance(v, float) and not math.isfinite(v)):
                raise EngineError(f"missing (--missing): code {v!r} of column {c!r} must be a finite number "
                                  f"or a text")
    return tuple(pairs) or None
