"""Rules are pure functions of the bundle: no /proc, no subprocess, no clock, no files."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import hangdoc.rules

RULES = Path(importlib.import_module("hangdoc.rules").__file__).parent
RULE_MODULES = tuple(rule.check.__module__.rpartition(".")[2] for rule in hangdoc.rules.RULES)
FORBIDDEN_MODULES = {"os", "subprocess", "time", "pathlib", "psutil", "socket", "shutil", "glob", "datetime"}


@pytest.mark.parametrize("module", [*RULE_MODULES, "evidence", "samples", "logs", "decoding", "base"])
def test_a_rule_module_touches_nothing_outside_the_bundle(module):
    # GIVEN a rule module's source
    tree = ast.parse((RULES / f"{module}.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    # THEN it imports no system module and opens no file
    assert not imported & FORBIDDEN_MODULES
    assert "open" not in calls
