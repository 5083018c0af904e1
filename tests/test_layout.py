"""The package's layout, read from its source: no import circles, no private name
imported from another module, imports inside functions only where a comment says why.

These walk the import statements of every module of ``engine/`` with ``ast`` (nothing
is imported or run), so ``python -m pytest tests/test_layout.py`` shows the layout's
state to anyone."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
# an import inside a function must say why on its own line or the three lines above:
# an optional dependency, or a measured start-up cost
LAZY_REASONS = ("optional", "start-up", "startup")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name of ``from X import ...`` in ``module``."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path):
    """``(target module, imported names, node, at top level)`` of each import of ``engine``."""
    tree = ast.parse(path.read_text())
    top = set()
    for node in tree.body:
        for sub in ast.walk(node):
            if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                top.add(id(sub))
            else:
                break
    # nodes inside any function body
    inner = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(fn):
                if sub is not fn:
                    inner.add(id(sub))
    mods = _modules()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            names = [a.name for a in node.names]
            if target.split(".")[0] != "engine":
                yield target, names, node, id(node) not in inner
                continue
            # ``from . import x`` may import a submodule
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
            plain = [n for n in names if f"{target}.{n}" not in mods]
            for s in subs:
                yield s, [], node, id(node) not in inner
            if plain or not subs:
                yield target, plain, node, id(node) not in inner
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node, id(node) not in inner


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        for target, _, _, _ in _imports(m, p):
            if target in mods and target != m:
                graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    """A package ``__init__`` imports its own submodules: that is not a circle unless
    a submodule imports the package back."""
    assert _cycles(_graph()) == []


# The layer order of ``docs/architecture.md``, low to high. A package is a direct
# subfolder of ``engine/`` or a top-level module ("engine": the package's ``__init__``,
# the public API). A package imports only packages of its own layer or below, and
# never in a cycle (``test_no_cycle_between_packages``). A new package is placed here.
LAYERS = (
    ("foundations", {"kernels", "errors", "checks", "tuning", "version", "parallel", "progress", "registry",
                     "declared", "relations"}),
    ("io", {"io", "options", "report"}),
    ("encode", {"frames", "encode"}),
    ("passes", {"passes", "budget", "csvlimit", "select"}),
    ("methods", {"methods", "cluster", "planning", "audit"}),
    ("coordinator", {"coordinator", "entities"}),
    ("release", {"release", "html_report", "html_sections"}),
    ("faces", {"api", "cli", "synth", "engine", "__main__", "warmup"}),
)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _package_imports() -> dict[tuple[str, str], list[str]]:
    """``(package, imported package)`` -> where: every import of one package by another,
    at module level or inside a function."""
    mods = _modules()
    edges: dict[tuple[str, str], list[str]] = {}
    for m, p in mods.items():
        for target, _, node, _ in _imports(m, p):
            if target in mods and _package(target) != _package(m):
                edges.setdefault((_package(m), _package(target)), []).append(f"{m}:{node.lineno} imports {target}")
    return edges


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {_package(m): set() for m in _modules()}
    for a, b in _package_imports():
        graph[a].add(b)
    return graph


def test_no_cycle_between_packages():
    edges = _package_imports()
    found = [f"{' <-> '.join(c)}: " + "; ".join(w for (a, b), ws in sorted(edges.items()) if a in c and b in c for w in ws)
             for c in _cycles(_package_graph())]
    assert found == [], "\n".join(found)


def test_packages_import_only_their_layer_or_below():
    layer = {p: i for i, (_, members) in enumerate(LAYERS) for p in members}
    assert set(_package_graph()) - set(layer) == set(), "packages placed in no layer (tests/test_layout.py LAYERS)"
    found = [w for (a, b), ws in sorted(_package_imports().items()) if layer[b] > layer[a] for w in ws]
    assert found == [], "imports up the layer order:\n" + "\n".join(found)


def test_no_private_names_across_modules():
    mods = _modules()
    found = []
    for m, p in mods.items():
        for target, names, node, _ in _imports(m, p):
            if target.split(".")[0] == "engine" and target != m:
                found += [f"{m}:{node.lineno} takes {target}.{n}" for n in names
                          if n.startswith("_") and not n.startswith("__")]
            elif target.split(".")[0] != "engine":
                # another package's private module or name (NumPy's, say)
                if any(part.startswith("_") and not part.startswith("__") for part in target.split(".")) \
                        or any(n.startswith("_") and not n.startswith("__") for n in names):
                    found.append(f"{m}:{node.lineno} takes {target}:{','.join(names)}")
    assert found == []


def test_imports_inside_functions_say_why():
    found = []
    for m, p in _modules().items():
        lines = p.read_text().splitlines()
        for target, _, node, at_top in _imports(m, p):
            if at_top or target == "__future__":
                continue
            said = " ".join(lines[max(0, node.lineno - 4): node.end_lineno]).lower()
            if not any(r in said for r in LAZY_REASONS):
                found.append(f"{m}:{node.lineno} imports {target}")
    assert found == [], f"{len(found)} imports inside functions without a reason:\n" + "\n".join(found)


# the sizes a reader can take in at once (the kernel library's issue): lines of a module,
# lines of a function's body without its docstring
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def test_no_module_or_function_too_long():
    found = []
    for m, p in _modules().items():
        text = p.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{m}: {len(text.splitlines())} lines")
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = fn.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]  # the docstring
            if body and fn.end_lineno - body[0].lineno + 1 > MAX_FUNCTION_LINES:
                found.append(f"{m}:{fn.lineno} {fn.name}: {fn.end_lineno - body[0].lineno + 1} lines")
    assert found == [], "\n".join(found)


def test_kernels_import_nothing_from_the_rest_of_the_package():
    """``engine.kernels`` is pure Numba on NumPy arrays: the thread pools, I/O and
    options belong to the passes that call it."""
    found = [f"{m}:{node.lineno} imports {target}" for m, p in _modules().items() if m.startswith("engine.kernels")
             for target, _, node, _ in _imports(m, p)
             if target.split(".")[0] == "engine" and not target.startswith("engine.kernels")]
    assert found == [], "\n".join(found)


if __name__ == "__main__":  # python tests/test_layout.py: the package graph by layer, and its cycles
    _layer = {p: i for i, (_, members) in enumerate(LAYERS) for p in members}
    _graph_now = _package_graph()
    for _name, _members in LAYERS:
        print(f"{_name}:")
        for _p in sorted(_members & set(_graph_now)):
            print(f"  {_p} -> {', '.join(sorted(_graph_now[_p], key=lambda q: (_layer.get(q, -1), q))) or '-'}")
    for _p in sorted(set(_graph_now) - set(_layer)):
        print(f"unplaced: {_p} -> {', '.join(sorted(_graph_now[_p]))}")
    print("cycles between packages:", _cycles(_graph_now) or "none")
