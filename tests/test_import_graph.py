"""The package's import graph, read from the source with ``ast``: no circle among loopscale's modules, and
``fit/`` and ``design/`` never import torch.

Edges come from every ``import`` / ``from … import`` statement of a module, at the top and inside functions
alike: a function-level import only hides a circle from the interpreter, not from the reader."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
NO_TORCH = ("loopscale.fit", "loopscale.pairs", "loopscale.design")  # NumPy/SciPy only (CONTRIBUTING.md)


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name → (file, is a package's __init__)."""
    out = {}
    for path in sorted((SRC / "loopscale").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _imported(name: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules) -> list[str]:
    """The modules among ``modules`` one import statement of module ``name`` reads: ``from a import b`` reads
    module ``a.b`` when it is one, else ``a``; a name inside a module counts as that module."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: resolved against the module's package
            package = name.split(".") if is_package else name.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    out = []
    for target in names:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.append(target)
    return out


def _top_packages(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The top-level packages an import statement names (``torch`` for ``from torch.nn import …``)."""
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    return set() if node.level or not node.module else {node.module.split(".")[0]}


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module → the loopscale modules it imports, module → every top-level package it imports), from
    every import statement at any level of each module."""
    modules = _modules()
    graph, packages = {}, {}
    for name, (path, is_package) in modules.items():
        graph[name], packages[name] = set(), set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name].update(_imported(name, is_package, node, modules))
                packages[name].update(_top_packages(node))
    return graph, packages


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_among_loopscale_modules():
    graph, _ = import_graph()
    assert "loopscale.design.pipeline" in graph and "loopscale.sweep.results" in graph  # the walk saw them
    assert cycles(graph) == []


def test_fit_and_design_never_import_torch():
    _, packages = import_graph()
    offenders = sorted(
        name for name, tops in packages.items() if name.startswith(NO_TORCH) and "torch" in tops
    )
    assert offenders == []
    assert any(name.startswith("loopscale.design") for name in packages)


def test_fit_never_imports_design_or_pairs():
    """The law (fit/) sits below the pair analysis (pairs/) and the designs (design/): data flows one way."""
    graph, _ = import_graph()
    assert sorted(
        (name, target)
        for name, edges in graph.items()
        if name.startswith("loopscale.fit")
        for target in edges
        if target.startswith(("loopscale.design", "loopscale.pairs"))
    ) == []


def test_numbers_layers_write_no_sentence():
    """Issue 49: fit/, pairs/ and design/ return numbers; sentences live in present/, which none imports."""
    graph, _ = import_graph()
    layers = ("loopscale.fit", "loopscale.pairs", "loopscale.design")
    assert sorted(
        (name, target)
        for name, edges in graph.items()
        if name.startswith(layers)
        for target in edges
        if target.startswith("loopscale.present")
    ) == []


def test_the_graph_sees_function_level_imports_and_finds_a_circle():
    """The checker itself: a function-level import that closes a circle is found, resolved to its module."""
    source = {
        "loopscale.a": "from loopscale.b import thing\n",
        "loopscale.b": "def f():\n    from loopscale import a\n    return a\n",
        "loopscale.c": "import loopscale.a\nfrom . import b\n",
    }
    graph = {
        name: {t for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Import | ast.ImportFrom)
               for t in _imported(name, False, node, source)}
        for name, text in source.items()
    }
    assert graph["loopscale.c"] == {"loopscale.a", "loopscale.b"}
    assert cycles(graph) == [["loopscale.a", "loopscale.b"]]


def test_fit_computes_from_tables_and_imports_no_layer_above_or_beside_it():
    """Issue 42: fit/ reads results tables and returns numbers; it imports nothing from train/, sweep/,
    data/, report/, analysis/ or cli/ (reading run configs belongs to analysis/, drawing to report/)."""
    graph, _ = import_graph()
    above = ("train", "sweep", "data", "report", "analysis", "cli")
    banned = tuple(f"loopscale.{name}" for name in above)
    leaks = {
        name: sorted(t for t in targets if t.startswith(banned))
        for name, targets in graph.items()
        if name.startswith(("loopscale.fit", "loopscale.pairs"))
    }
    assert not {k: v for k, v in leaks.items() if v}, leaks


# What report/ may import besides report/ and present/: types, labels, closed-form reads of a fitted law and
# the files a sweep publishes; never a fit, a collect, a training or data step, or the analysis driver.
REPORT_MAY_IMPORT = (
    "loopscale.fit.results",
    "loopscale.pairs.results",
    "loopscale.pairs.case_study_results",
    "loopscale.fit.protocol_results",
    "loopscale.fit.labels",
    "loopscale.fit.law",
    "loopscale.fit.analyses",
    "loopscale.fit.table",
    "loopscale.config",
    "loopscale.errors",
    "loopscale.io",
    "loopscale.paper",
    "loopscale.published",
    "loopscale.sweep.results",
    "loopscale.eval.axes",
)


def test_report_only_renders():
    """Issue 42: report/ lays out what the analysis computed: it imports no fitting, collecting, training
    or data code, no analysis driver, and neither torch nor SciPy (``report --from`` re-renders in
    seconds)."""
    graph, packages = import_graph()
    inside = ("loopscale.report", "loopscale.present")
    leaks = {
        name: sorted(t for t in targets if not t.startswith(inside) and not t.startswith(REPORT_MAY_IMPORT))
        for name, targets in graph.items()
        if name.startswith("loopscale.report")
    }
    assert not {k: v for k, v in leaks.items() if v}, leaks
    heavy = {name: sorted(tops & {"torch", "scipy"}) for name, tops in packages.items()}
    assert not {k: v for k, v in heavy.items() if k.startswith("loopscale.report") and v}


def test_fit_writes_no_sentence_draws_no_figure():
    """Issue 42: fit/ returns numbers (``fit.results``); sentences and figures live in present/, so fit/
    imports neither matplotlib nor present/."""
    graph, packages = import_graph()
    fit = {name for name in graph if name.startswith("loopscale.fit")}
    assert sorted(name for name in fit if "matplotlib" in packages[name]) == []
    assert sorted((n, t) for n in fit for t in graph[n] if t.startswith("loopscale.present")) == []
