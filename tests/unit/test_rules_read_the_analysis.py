"""Rules read the analysis they are handed, not the bundle's derivations again, and not each other.

Every module of hangdoc/rules/ but base.py (the Context, the rules' one door to analyze/) imports
from analyze/ only the analysis' shapes (its classes) and its constants; a fact two rules need is
worked out once by `analyse` (`Context.worked`) or read through the Context. A rule module (one
with a RULE) imports no other rule module: what two rules share lives in a module of neither."""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import hangdoc.rules

RULES = Path(importlib.import_module("hangdoc.rules").__file__).parent
MODULES = sorted(p.stem for p in RULES.glob("*.py") if p.stem not in ("__init__", "base"))
RULE_MODULES = {rule.check.__module__.rpartition(".")[2] for rule in hangdoc.rules.RULES}


def _imports(module: str) -> list[tuple[str, str]]:
    tree = ast.parse((RULES / f"{module}.py").read_text())
    found = [(alias.name, "") for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    found += [(node.module, alias.name) for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module for alias in node.names]
    return found


def _helper(module: str, name: str) -> bool:
    """A name of analyze/ that is a function: a derivation, not a shape or a constant."""
    value = getattr(importlib.import_module(module), name)
    return inspect.isroutine(value) and not inspect.isclass(value)


@pytest.mark.parametrize("module", MODULES)
def test_a_rules_module_imports_no_analyze_helper(module):
    # GIVEN a module of the rules (a rule, or what rules share)
    # WHEN its imports are read
    helpers = [f"{source}.{name}" for source, name in _imports(module)
               if source.startswith("hangdoc.analyze") and (not name or _helper(source, name))]
    # THEN it takes from analyze/ no function: the analysis reaches it through its Context
    assert helpers == [], f"rules/{module}.py imports {helpers}: read it from the Context (ctx.worked, ctx.*)"


@pytest.mark.parametrize("module", sorted(RULE_MODULES))
def test_a_rule_imports_no_other_rule(module):
    # GIVEN a rule's module
    # WHEN its imports of hangdoc.rules are read
    others = {source.rpartition(".")[2] for source, _ in _imports(module) if source.startswith("hangdoc.rules.")}
    # THEN none of them is another rule's module
    assert not others & (RULE_MODULES - {module})


def test_the_check_catches_a_helper_imported_from_analyze():
    # GIVEN an import of a derivation of analyze/ beside a shape of it (as rank_died's once was)
    source = "from hangdoc.analyze.logs import RaisedError, rank_exception\n"
    tree = ast.parse(source)
    names = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    # WHEN the same test reads it
    helpers = [name for mod, name in names if _helper(mod, name)]
    # THEN the function is caught and the class let through
    assert helpers == ["rank_exception"]
