"""The Numba kernels: pure functions on NumPy arrays, compiled on first use and cached
(``cache=True``).

Cache freshness. Numba keys a function's cache on its own source file only, but a
kernel compiles the kernels it calls from other files into its own machine code (for
example ``mdav._run_mdav`` holds ``buckets.knn``). After an upgrade that changed only
``buckets.py``, ``mdav.py``'s cache would still be taken as fresh and run the old
code: wrong answers, or a crash. So every kernel of this package is stamped with one
fingerprint of all the package's source files (their contents): any change to any of
them recompiles every kernel on its next use. The cache stays where Numba puts it
(``NUMBA_CACHE_DIR``, else ``__pycache__`` beside the sources, else the user's cache
folder); only the staleness test changes, and only for this package's functions.
"""

from __future__ import annotations

import hashlib
import os

from numba.core import caching

_DIR = os.path.dirname(os.path.abspath(__file__))


def fingerprint(folder: str = _DIR) -> bytes:
    """The SHA-256 of every ``.py`` file in ``folder`` (names and contents, in name order)."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            h.update(name.encode() + b"\0")
            with open(os.path.join(folder, name), "rb") as fh:
                h.update(fh.read())
            h.update(b"\0")
    return h.digest()


_STAMP = fingerprint()


class _PackageStamped:
    """A Numba cache locator for this package's kernels: the stamp is the package's
    fingerprint, not the one file's (module docstring). Other functions: not ours."""

    def get_source_stamp(self):
        return _STAMP

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.dirname(os.path.abspath(py_file)) != _DIR:
            return None
        return super().from_function(py_func, py_file)


# ahead of Numba's own locators, in Numba's order (the first that can write wins)
_LOCATORS = [type("Kernels" + base.__name__, (_PackageStamped, base), {})
             for base in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator,
                          caching.UserWideCacheLocator)]
if not any(getattr(c, "__name__", "").startswith("Kernels") for c in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS
