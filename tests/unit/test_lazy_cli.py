"""`hangdoc --help` and `hangdoc watch` import only what they need (issue 13: a watcher that costs nothing)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hangdoc.cli import COMMANDS, main

HEAVY = ("hangdoc.cli.check", "hangdoc.check.data", "hangdoc.cli.run", "hangdoc.cli.demo", "hangdoc.cli.report",
         "hangdoc.cli.ps", "hangdoc.inputs.evidence", "hangdoc.live.runner")

PROBE = """
import contextlib, io, json, sys
from hangdoc.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "help": out.getvalue(), "modules": sorted(m for m in sys.modules if m.startswith("hangdoc"))}))
"""


def _modules_after(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_top_level_help_imports_no_command_module_and_lists_every_command():
    # GIVEN a fresh interpreter
    # WHEN it prints `hangdoc --help`
    result = _modules_after("--help")
    # THEN no command module (nor what they pull in) was imported, and every command is listed
    assert result["rc"] == 0
    assert not set(result["modules"]) & set(HEAVY)
    for name in COMMANDS:
        assert f" {name} " in result["help"]


def test_watch_imports_its_own_module_only():
    # GIVEN a fresh interpreter
    # WHEN it runs `hangdoc watch --help`
    result = _modules_after("watch", "--help")
    # THEN watch's module is there and the other commands' are not
    assert "hangdoc.cli.watch" in result["modules"]
    assert not set(result["modules"]) & {"hangdoc.cli.check", "hangdoc.check.data", "hangdoc.cli.run",
                                         "hangdoc.cli.demo", "hangdoc.cli.ps"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_placeholder_help_is_the_commands_own_first_line(name, capsys):
    # GIVEN every command module imported (the command's real help)
    import importlib

    importlib.import_module(COMMANDS[name][0])
    # WHEN the command's help is printed
    rc = main([name, "--help"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    # THEN the one-line help `hangdoc --help` shows without importing it starts that help
    assert rc == 0
    assert " ".join(COMMANDS[name][1].split()) in text


def test_commands_run_after_another_was_loaded(capsys):
    # GIVEN `watch` loaded by an earlier call in this process
    main(["watch", "--help"])
    capsys.readouterr()
    # WHEN another command runs, then the top-level help
    assert main(["rules"]) == 0
    assert "worker-deadlock" in capsys.readouterr().out
    assert main(["--help"]) == 0
    # THEN every command is listed once
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert out.count(f"│ {name} ") == 1, name

