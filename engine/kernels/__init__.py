"""The Numba kernels: pure functions on NumPy arrays, compiled on first use and cached
(``cache=True``). They import nothing from the rest of the package: a pass that
wants threads or progress drives them from outside.

The families, one sub-package (or module) each; every algorithm is written once:

* ``common``: what every family shares: the distance ``sq_dist`` (summed in column
  order, as every slow reference), the bounded "m nearest" insertion, the
  "farthest so far" rule, a box grown by a row, splitmix64's mixer, the prefetch
  hint;
* ``index/``: spatial indexes and cuts: ``split`` (median cuts into leaves),
  ``kdtree`` (one branch-and-bound traversal for farthest, k-nearest and nearest
  with ties), ``buckets`` (the MDAV family's scanning index), ``partition`` (the
  streamed path's partition plan: routing rows to leaves, gathers);
* ``mdav/``: the MDAV family: ``indexed`` (on the bucket index), ``slots`` and
  ``brute`` (by brute force on compacted slots), ``leaf`` (every leaf of a block),
  ``pick`` (which of them runs a block: the one place of the size thresholds);
* ``search/``: local search on a partition: ``moves`` (the one move/swap core with
  the exact SSE changes), ``near`` (near lists), ``polish``, ``refine`` (the
  refinement's state and rounds), ``windows`` and ``recut`` (windows of groups cut
  again: descent, perturbation, GA);
* ``groups``: per-group sums, means and SSE from scratch (the one place), gathers,
  picks, minima and maxima;
* ``dependency/``: the dependency profile's histograms and spanning trees;
* ``ranges/``: the range methods: maxent (with its SOM) and mnqia;
* ``entropy``: Shannon entropy, in NumPy and in the running form kernels keep;
* ``risk``: disclosure risk (record linkage, classes); ``classcount``: the
  self-check's class counting; ``leak``: the one-to-one test of the leak guard;
  ``moments``: streaming column moments; ``published``: the published values in
  row order.

Cache freshness. Numba keys a function's cache on its own source file only, but a
kernel compiles the kernels it calls from other files into its own machine code (for
example ``mdav.indexed._run_mdav`` holds ``index.buckets.knn``). After an upgrade
that changed only ``buckets.py``, ``indexed.py``'s cache would still be taken as
fresh and run the old code: wrong answers, or a crash. So every kernel of this
package is stamped with one fingerprint of all the package's source files,
sub-packages included (their paths and contents): any change to any of them
recompiles every kernel on its next use. The cache stays where Numba puts it
(``NUMBA_CACHE_DIR``, else ``__pycache__`` beside the sources, else the user's cache
folder); only the staleness test changes, and only for this package's functions.

One process at a time per kernel. Two processes that compile the same kernel at the
same moment into one cache can leave its files mixed from both (the index, the
machine code and a parallel kernel's ``guf-`` entry): later runs that load them crash
(numba/numba#10128, #4807), and two new signatures saved at once can take the same
data file. So loading or compiling one of this package's kernels holds a file lock
beside its cache entry (``flock``: released by the system if the process dies); a
second process waits, then loads what the first saved. A kernel's lock is taken
inside Numba's own compiler lock, so one thread of a process compiles at a time, and
while its callees' are taken in call order, so no two processes wait on each other.
"""

from __future__ import annotations

import hashlib
import os

from numba.core import caching, sigutils
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: Numba's own behaviour, no lock
    fcntl = None

_DIR = os.path.dirname(os.path.abspath(__file__))


def fingerprint(folder: str = _DIR) -> bytes:
    """The SHA-256 of every ``.py`` file below ``folder`` (relative paths and contents,
    in path order)."""
    h = hashlib.sha256()
    paths = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        paths += [os.path.join(top, name) for name in files if name.endswith(".py")]
    for path in sorted(paths, key=lambda p: os.path.relpath(p, folder)):
        h.update(os.path.relpath(path, folder).replace(os.sep, "/").encode() + b"\0")
        with open(path, "rb") as fh:
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
        if not os.path.abspath(py_file).startswith(_DIR + os.sep):
            return None
        return super().from_function(py_func, py_file)


# ahead of Numba's own locators, in Numba's order (the first that can write wins)
_LOCATORS = [type("Kernels" + base.__name__, (_PackageStamped, base), {})
             for base in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator,
                          caching.UserWideCacheLocator)]
if not any(getattr(c, "__name__", "").startswith("Kernels") for c in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS


_PACKAGE = os.path.dirname(_DIR) + os.sep  # the engine's kernels and its passes' few jitted helpers
_held: dict[str, tuple] = {}  # lock path -> (open file, depth): under Numba's compiler lock


def _entry_lock(disp) -> str | None:
    """The lock file of ``disp``'s cache entry; None: not this package's, or not cached."""
    if not disp.py_func.__code__.co_filename.startswith(_PACKAGE):
        return None
    cache_file = getattr(disp._cache, "_cache_file", None)  # (NullCache: caching is off)
    path = getattr(cache_file, "_index_path", None)
    return None if path is None else path[:-len(".nbi")] + ".lock"


def _compile(self, sig):
    """``Dispatcher.compile`` with the entry's lock held (module docstring)."""
    lock = _entry_lock(self) if fcntl is not None else None
    if lock is None or tuple(sigutils.normalize_signature(sig)[0]) in self.overloads:  # (in this process)
        return _numba_compile(self, sig)
    with global_compiler_lock:
        fh, depth = _held.get(lock, (None, 0))
        if depth == 0:
            try:
                os.makedirs(os.path.dirname(lock), exist_ok=True)
                fh = open(lock, "a+b")
            except OSError:  # an unwritable cache: Numba does not save there either
                return _numba_compile(self, sig)
            try:
                fcntl.flock(fh, fcntl.LOCK_EX)
            except BaseException:
                fh.close()
                raise
        _held[lock] = (fh, depth + 1)
        try:
            return _numba_compile(self, sig)
        finally:
            if depth == 0:
                del _held[lock]
                fh.close()  # (releases the lock)
            else:
                _held[lock] = (fh, depth)


# (a reload of this module wraps Numba's method again, not its own wrapper)
_numba_compile = getattr(Dispatcher.compile, "numba_compile", Dispatcher.compile)
_compile.numba_compile = _numba_compile
Dispatcher.compile = _compile
