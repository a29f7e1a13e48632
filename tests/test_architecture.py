"""The layout is the architecture (docs/architecture.md): the repository's folders install as one package,
every arrow between its parts points one way, and no module imports itself round a cycle.

oracle (reference) <- adapters <- checks (conformance) -> reports; the oracle imports no framework.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "transformer_conformance"
#: repository folder -> the part of the architecture it is (and its import name under PACKAGE)
PARTS = ("reference", "adapters", "conformance", "reports", "expectations")
#: what each part may import of the others (expectations: the built-in adapters' known defects, data)
ALLOWED: dict[str, set[str]] = {
    "reference": set(),
    "adapters": {"reference"},
    "conformance": {"reference", "adapters", "reports", "expectations"},
    "reports": set(),
    "expectations": set(),
}
#: deep-learning frameworks and kernel libraries: the oracle is NumPy alone
FRAMEWORKS = {
    "torch", "jax", "jaxlib", "flax", "transformers", "liger_kernel", "triton", "tensorflow", "keras",
    "keras_hub", "mlx", "onnx", "onnxruntime", "torchtune", "equinox", "litgpt", "megatron", "fla", "torchtitan",
    "vllm", "unsloth", "unsloth_zoo",
}  # fmt: skip
#: folders of the repository whose Python must import the suite by its installed name only
USERS = ("tests", "mutants", "benchmarks", "docs")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for part in PARTS for p in sorted((ROOT / part).rglob("*.py"))}


def _imports(path: Path, name: str) -> list[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports included), absolute."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found += [f"{base}.{a.name}" for a in node.names] + [base]
    return found


def _graph() -> dict[str, set[str]]:
    """module -> the suite's modules it imports (``from pkg import sub`` counts as importing pkg.sub)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path, name):
            # the deepest module of the suite the name denotes (an imported function denotes its module)
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _part(module: str) -> str:
    return module.split(".")[1]


def test_every_module_is_found() -> None:
    graph = _graph()
    assert len(graph) > 80
    assert {_part(m) for m in graph} == set(PARTS)


def test_arrows_between_parts_point_one_way() -> None:
    wrong = [
        f"{m} imports {t} ({_part(m)} -> {_part(t)})"
        for m, targets in _graph().items()
        for t in sorted(targets)
        if _part(t) != _part(m) and _part(t) not in ALLOWED[_part(m)]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_oracle_imports_no_framework() -> None:
    wrong = []
    for name, path in _modules().items():
        if _part(name) != "reference":
            continue
        for imported in _imports(path, name):
            if imported.split(".")[0] in FRAMEWORKS:
                wrong.append(f"{name} imports {imported}")
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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


def test_no_import_cycle() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("folder", USERS + PARTS)
def test_the_suite_is_imported_by_its_installed_name(folder: str) -> None:
    """``import adapters`` would work inside this repository and import someone else's package elsewhere."""
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for imported in _imports(path, _module_name(path) if folder in PARTS else "x"):
            if imported.split(".")[0] in PARTS:
                wrong.append(f"{path.relative_to(ROOT)}: {imported}")
    assert not wrong, "\n".join(wrong)


def test_the_wheel_lists_every_package() -> None:
    """pyproject.toml names each sub-package (setuptools maps the folders under transformer_conformance)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {_module_name(p) for part in PARTS for p in (ROOT / part).rglob("__init__.py")}
    # the documents messages and reports name, as package data (``transformer-conformance --docs``)
    assert listed == on_disk | {f"{PACKAGE}.docs"}
    assert config["package-dir"] == {f"{PACKAGE}.{p}": p for p in (*PARTS, "docs")}
    assert config["package-data"][f"{PACKAGE}.docs"] == ["*.md"]
