"""Value checks shared by every boundary (the run configuration, refinement, verify, risk)."""

from __future__ import annotations

import math
import numbers

from .errors import EngineError


# the least k, declared once: a class of one row protects nobody (``options.RunConfig.k``'s bound;
# maxent without k forms classes of this many rows at least)
K_LEAST = 2


def least_class(k) -> int:
    """The fewest rows a published class holds: ``k``, or ``K_LEAST`` when k is not given."""
    return max(K_LEAST, int(k or 0))


def is_int(x) -> bool:
    """A whole number given as an integer (not a bool, not a float)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_finite_number(x) -> bool:
    """A finite real number (an integer or a float, not a bool, not NaN or infinite)."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def option_texts(value, whole: str, item: str) -> list[str]:
    """An option given as one text or a list of texts (one per repeated flag), as a list:
    else one line, ``whole`` (the value is no list; ``{value}`` in it: the value) or
    ``item`` (an element is no text; ``{value}``: the element)."""
    texts = [value] if isinstance(value, str) else value
    try:
        texts = list(texts)
    except TypeError:
        raise EngineError(whole.format(value=repr(value))) from None
    for t in texts:
        if not isinstance(t, str):
            raise EngineError(item.format(value=repr(t)))
    return texts


def check_whole(value, name: str, minimum: int) -> int:
    """``value`` as an int, or one line naming ``name``: not a whole number, or below ``minimum``."""
    if not is_int(value):
        raise EngineError(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise EngineError(f"{name} must be at least {minimum}, got {value}")
    return int(value)



def split_names(text: str) -> list[str]:
    """Column names given as one text (``--qi a,b``): split at the commas, each name
    stripped of the spaces around it. A backslash takes the next character as it is, so
    that a name may hold a comma or start or end with a space: ``--qi 'a\\,b,\\ c'``
    names ``a,b`` and `` c`` (a backslash of a name's own: ``\\\\``)."""
    names, part = [], []  # part: (character, escaped)
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            part.append((next(chars, "\\"), True))
        elif ch == ",":
            names.append(_stripped(part))
            part = []
        else:
            part.append((ch, False))
    names.append(_stripped(part))
    return [] if names == [""] else names


def _stripped(part: list) -> str:
    """``part``'s text without the unescaped white space at its ends."""
    start, end = 0, len(part)
    while start < end and not part[start][1] and part[start][0].isspace():
        start += 1
    while end > start and not part[end - 1][1] and part[end - 1][0].isspace():
        end -= 1
    return "".join(ch for ch, _ in part[start:end])
