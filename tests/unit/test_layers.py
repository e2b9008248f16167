"""The floors hold: every module imports only its own floor and the floors below it.

A module's floor is its top-level folder or module under hangdoc/. Imports are read from the
source at every depth (a lazy import inside a function counts), relative imports resolved, and
`importlib.import_module` / `__import__` calls counted too, so no import hides from the check.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

# Lowest first: each floor and what it may import besides itself ("*": anything).
FLOORS: dict[str, str] = {
    "base":      "",
    "model":     "base",
    "bundle":    "base model",
    "collect":   "base model",
    "analyze":   "base model",
    "rules":     "base model analyze",
    "check":     "base model collect analyze rules",
    "report":    "base model analyze rules",
    "render":    "base model report check",
    "inputs":    "base model bundle analyze rules report",
    "live":      "base model bundle collect analyze rules check report render inputs",
    "scenarios": "base model bundle collect analyze rules check report render inputs live",
    "registry":  "base model bundle collect analyze rules check report render inputs live scenarios",
    "cli":       "*",
    "__main__":  "*",
    "__init__":  "*",      # hangdoc/__init__.py, the package itself
}

ROOT = Path(__file__).resolve().parents[2] / "hangdoc"
IMPORTERS = {"import_module", "__import__"}
MODULE_NAME = re.compile(r"^hangdoc(\.[a-z_]+)+$")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted((module_name(p), p) for p in ROOT.rglob("*.py"))
KNOWN = {name for name, _ in MODULES}


def floor_of(name: str) -> str | None:
    """The floor of a hangdoc module name; None when the table places no such floor."""
    parts = name.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1] if parts[1] in FLOORS else None


def may_import(floor: str, other: str) -> bool:
    allowed = FLOORS[floor]
    return allowed == "*" or other == floor or other in allowed.split()


def imports_of(source: str, module: str | None = None, is_package: bool = False,
               known: set[str] = KNOWN) -> dict[str, int]:
    """Every module name `source` imports, absolute, with the line of its first import.

    `module` (the source's own dotted name) resolves relative imports; without it they are skipped.
    `from P import n` is `P.n` when that is a module in `known`, else `P`.
    """
    tree = ast.parse(source)
    found: dict[str, int] = {}

    def add(name: str, node: ast.AST) -> None:
        found.setdefault(name, node.lineno)

    calls_importer = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            if base is None:
                continue
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base, node)
        elif isinstance(node, ast.Call) and _is_importer(node.func):
            calls_importer = True
            if node.args and (name := _literal_prefix(node.args[0])):
                add(name, node)
    if calls_importer:
        # names kept as data and imported later (the registry's DECLARING, the commands table)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.match(node.value):
                add(node.value, node)
    return found


def _absolute(node: ast.ImportFrom, module: str | None, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module
    if module is None:
        return None
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _is_importer(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id in IMPORTERS
            or isinstance(func, ast.Attribute) and func.attr in IMPORTERS)


def _literal_prefix(arg: ast.expr) -> str | None:
    """The module a string or f-string names: f"hangdoc.rules.{name}" names hangdoc.rules."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        prefix = ""
        for part in arg.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            prefix += part.value
        prefix = prefix.rstrip(".")
        # f"hangdoc.{name}" could be any floor: name it so that it places on none
        return f"{prefix}.<dynamic>" if prefix == "hangdoc" else prefix or None
    return None


def violations(module: str, source: str, is_package: bool = False, known: set[str] = KNOWN) -> list[str]:
    """One line per import of `source` that reaches above `module`'s floor."""
    own = floor_of(module)
    found = []
    for name, line in sorted(imports_of(source, module, is_package, known).items(), key=lambda kv: kv[1]):
        # the package itself (its __version__) is loaded before any of its modules: every floor has it
        if not name.startswith("hangdoc."):
            continue
        other = floor_of(name)
        if other is None:
            found.append(f"{module}:{line} imports {name}, which stands on no floor")
        elif own is not None and not may_import(own, other):
            found.append(f"{module}:{line} imports {name} ({own} may not import {other})")
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


# --- the real tree ----------------------------------------------------------------------------


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_every_module_stands_on_a_floor(module, path):
    # GIVEN a module of the package
    # WHEN its floor is read from its top-level folder or module name
    # THEN the table places it: a new top-level module is placed deliberately
    assert floor_of(module) is not None, f"{module} stands on no floor: add it to FLOORS"


def test_every_floor_in_the_table_has_modules():
    # GIVEN the floor table
    # WHEN the package's modules are sorted onto it
    # THEN no floor is empty (a stale row is removed with the folder it named)
    present = {floor_of(m) for m, _ in MODULES}
    assert set(FLOORS) <= present, f"floors without modules: {sorted(set(FLOORS) - present)}"


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_no_module_imports_a_floor_above_its_own(module, path):
    # GIVEN a module of the package
    # WHEN every import in it is read, lazy and importlib ones too
    # THEN none reaches above its floor
    found = violations(module, path.read_text(), _is_package(path))
    assert not found, "\n".join(found)


# report/ assembles the Report from what the analysis read; it reads no evidence of its own.
ANALYSIS_ENTRY = "hangdoc.analyze.assess"
REPORT_MODULES = [(m, p) for m, p in MODULES if floor_of(m) == "report"]


@pytest.mark.parametrize("module, path", REPORT_MODULES, ids=[m for m, _ in REPORT_MODULES])
def test_report_reaches_the_analysis_through_its_one_entry(module, path):
    # GIVEN a module of report/
    # WHEN its imports are read, lazy ones too
    imported = imports_of(path.read_text(), module, _is_package(path))
    # THEN it takes nothing from collect/ or live/, and of analyze/ only the entry, analyse()
    assert not [n for n in imported if floor_of(n) in ("collect", "live")]
    assert [n for n in imported if floor_of(n) == "analyze" and n != ANALYSIS_ENTRY] == []


# --- the checker itself -----------------------------------------------------------------------

RENDER_LAZY_ANALYZE = '''
def words(report):
    from hangdoc.analyze.diagnose import diagnose
    return diagnose
'''

RENDER_IMPORTLIB_LIVE = '''
import importlib

def watch():
    return importlib.import_module("hangdoc.live.watcher")
'''


def test_an_upward_import_inside_a_function_is_a_violation():
    # GIVEN a render module whose function imports the analysis lazily
    # WHEN the checker reads it
    found = violations("hangdoc.render.x", RENDER_LAZY_ANALYZE)
    # THEN the lazy import is reported, with its line
    assert found == ["hangdoc.render.x:3 imports hangdoc.analyze.diagnose (render may not import analyze)"]


def test_an_upward_import_module_call_is_a_violation():
    # GIVEN a render module that reaches the watcher through importlib
    # WHEN the checker reads it
    found = violations("hangdoc.render.x", RENDER_IMPORTLIB_LIVE)
    # THEN the import_module call is reported
    assert found == ["hangdoc.render.x:5 imports hangdoc.live.watcher (render may not import live)"]


def test_import_module_of_an_f_string_counts_its_constant_prefix():
    # GIVEN an analysis module importing rules by an f-string, and one importing any top-level module
    source = ('from importlib import import_module\n'
              'def load(name):\n'
              '    return import_module(f"hangdoc.rules.{name}"), __import__(f"hangdoc.{name}")\n')
    # WHEN the checker reads it
    found = violations("hangdoc.analyze.x", source)
    # THEN the rules import is above analyze, and the open-ended one stands on no floor
    assert found == ["hangdoc.analyze.x:3 imports hangdoc.rules (analyze may not import rules)",
                     "hangdoc.analyze.x:3 imports hangdoc.<dynamic>, which stands on no floor"]


def test_module_names_kept_as_data_for_import_module_are_imports():
    # GIVEN a bundle module that lists module names in a tuple and imports them by variable
    source = ('import importlib\n'
              'DECLARING = ("hangdoc.check.env_rules", "hangdoc.model")\n'
              'def records():\n'
              '    return [importlib.import_module(n) for n in DECLARING]\n')
    # WHEN the checker reads it
    found = violations("hangdoc.bundle.x", source)
    # THEN the listed check module is an import above bundle, the model one is not
    assert found == ["hangdoc.bundle.x:2 imports hangdoc.check.env_rules (bundle may not import check)"]


def test_relative_and_package_imports_resolve_to_their_modules():
    # GIVEN a render package's __init__ and a render module importing relatively and from the package
    known = {"hangdoc.render", "hangdoc.render.text", "hangdoc.analyze", "hangdoc.analyze.classes"}
    init = "from . import text\nfrom ..analyze import classes\n"
    module = "from hangdoc import analyze\nfrom .text import render\n"
    # WHEN the checker reads them
    in_init = violations("hangdoc.render", init, is_package=True, known=known)
    in_module = violations("hangdoc.render.text", module, known=known)
    # THEN the sibling import is fine and the analysis one is reported in both
    assert in_init == ["hangdoc.render:2 imports hangdoc.analyze.classes (render may not import analyze)"]
    assert in_module == ["hangdoc.render.text:1 imports hangdoc.analyze (render may not import analyze)"]


def test_imports_at_or_below_the_floor_pass():
    # GIVEN a render module importing the report, the model and the package version, lazily too
    source = ('from hangdoc import __version__\n'
              'from hangdoc.model import Report\n'
              'def render(report, out):\n'
              '    from hangdoc.report.build import build\n'
              '    import hangdoc.base.words\n')
    # WHEN the checker reads it
    # THEN nothing is reported
    assert violations("hangdoc.render.x", source) == []


# --- the harness ------------------------------------------------------------------------------


def test_the_product_never_imports_its_harness_and_tests_never_import_benchmarks():
    # GIVEN the package's modules and the test files
    # WHEN their imports are read
    # THEN the product names no harness package, and no test names a benchmark
    harness = ("benchmarks", "factories", "tests", "conftest")
    for module, path in MODULES:
        named = {n for n in imports_of(path.read_text(), module, _is_package(path)) if n.split(".")[0] in harness}
        assert not named, f"{module} imports the harness: {sorted(named)}"
    for path in (ROOT.parent / "tests").rglob("*.py"):
        named = {n for n in imports_of(path.read_text()) if n.split(".")[0] == "benchmarks"}
        assert not named, f"{path} imports a benchmark: {sorted(named)}"
