"""The layers hold: collect -> model <- analyze <- rules <- report <- render, and nothing reaches up.

Read from the source (every `import hangdoc...` and `from hangdoc... import`, at any depth of a
function too), so a lazy import inside a function cannot hide a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "hangdoc"

# Lowest first. A module may import its own layer and the layers below; `collect` and `analyze`
# sit side by side on the model and never import each other. Everything not listed (the
# commands, the watch loop, the pipeline, bundle files, `check`, the scenarios) is the product
# on top and may import any layer.
LAYERS: dict[str, tuple[str, ...]] = {
    "base": ("hangdoc.model", "hangdoc.base.errors", "hangdoc.base.serde", "hangdoc.base.words", "hangdoc.base.redact",
             "hangdoc.base.cmdline", "hangdoc.base.partition", "hangdoc.advice", "hangdoc.bundle.codec", "hangdoc.bundle.checks"),
    "collect": ("hangdoc.collect",),
    "analyze": ("hangdoc.analyze",),
    "rules": ("hangdoc.rules",),
    "report": ("hangdoc.report",),
    "render": ("hangdoc.render",),
}
BELOW: dict[str, set[str]] = {
    "base": {"base"},
    "collect": {"base", "collect"},
    "analyze": {"base", "analyze"},
    "rules": {"base", "analyze", "rules"},
    "report": {"base", "analyze", "rules", "report"},
    "render": {"base", "analyze", "rules", "report", "render"},
}


def layer_of(module: str) -> str | None:
    for layer, prefixes in LAYERS.items():
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return layer
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "hangdoc":
                found |= {f"hangdoc.{a.name}" for a in node.names}
            elif node.module.startswith("hangdoc."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("hangdoc.")}
    return found


MODULES = sorted((module_name(p), p) for p in ROOT.rglob("*.py"))


@pytest.mark.parametrize("module, path", [m for m in MODULES if layer_of(m[0])], ids=lambda v: str(v))
def test_no_module_imports_a_layer_above_its_own(module, path):
    own = layer_of(module)
    above = sorted(f"{name} ({layer_of(name) or 'product'})" for name in imports(path)
                   if name != "hangdoc.__version__" and layer_of(name) not in BELOW[own])
    assert not above, f"{module} ({own}) imports {', '.join(above)}"


def test_every_layer_has_modules():
    present = {layer_of(m) for m, _ in MODULES}
    assert set(LAYERS) <= present


def test_the_product_never_imports_its_harness_and_tests_never_import_benchmarks():
    harness = ("benchmarks", "factories", "tests", "conftest")
    for module, path in MODULES:
        assert not {n for n in _all_imports(path) if n.split(".")[0] in harness}, f"{module} imports the harness"
    for path in (ROOT.parent / "tests").rglob("*.py"):
        assert not {n for n in _all_imports(path) if n.split(".")[0] == "benchmarks"}, f"{path} imports a benchmark"


def _all_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found
