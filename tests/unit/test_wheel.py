"""hangdoc from an installed wheel: the rule pages and the HTML page's templates ship in the
package, not only in the source tree."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Bounds, fuzzers and builds of tens of seconds: the full suite runs them, the fast tier (`make fast`) does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])          # the installed wheel, ahead of any other hangdoc
import hangdoc
assert hangdoc.__file__.startswith(sys.argv[1]), hangdoc.__file__
from hangdoc.cli import main

sys.exit(main(sys.argv[2:]))
"""


def hangdoc(root: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`hangdoc ARGS` run from the package under `root` (the installed wheel, or the source tree)."""
    return subprocess.run([sys.executable, "-c", PROBE, str(root), *args], capture_output=True, text=True,
                          cwd=cwd, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)}, timeout=120)


def copy_sources(src: Path) -> None:
    """What a checkout holds that a build reads."""
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    for name in ("hangdoc", "build_backend"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))


def tree(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in sorted(root.rglob("*"))}


@pytest.mark.timeout(600)
def test_a_wheel_build_and_an_editable_install_leave_the_checkout_as_it_was(tmp_path):
    # GIVEN a checkout, every file and its time noted
    src = tmp_path / "src"
    src.mkdir()
    copy_sources(src)
    before = tree(src)
    # WHEN a wheel is built from it (as `pip install PATH` and `make dist` do) and it is installed editable
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            str(src), "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    # --ignore-installed: pip would otherwise uninstall the hangdoc of the venv running these tests
    editable = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                               "--ignore-installed", "--prefix", str(tmp_path / "prefix"), "-e", str(src)],
                              capture_output=True, text=True, timeout=300)
    # THEN both succeed, and the checkout holds the same files, unchanged: no build/, no hangdoc.egg-info
    assert built.returncode == 0, built.stderr
    assert editable.returncode == 0, editable.stderr
    assert next((tmp_path / "dist").glob("hangdoc-*.whl"))
    assert tree(src) == before
    # and the editable install points at the checkout itself, not at the copy a build used
    finder = next((tmp_path / "prefix").rglob("__editable___hangdoc_*_finder.py")).read_text()
    assert repr(str(src / "hangdoc")) in finder


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """GIVEN the wheel built from a copy of the project and installed into a fresh directory"""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    copy_sources(src)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            str(src), "-w", str(work / "dist")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    wheel = next((work / "dist").glob("hangdoc-*.whl"))
    target = work / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return target


@pytest.mark.timeout(600)
@pytest.mark.parametrize("slug", ["collective-straggler", "shm-too-small", "run-timeout", "interrupted", "glossary"])
def test_explain_prints_every_kind_of_page_from_the_installed_wheel(installed, slug, tmp_path):
    # WHEN `hangdoc explain SLUG` runs from the wheel's files, outside the source tree
    run = hangdoc(installed, ["explain", slug], tmp_path)
    # THEN it prints the page shipped in the wheel (less the markers of its examples) and exits 0
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"# {slug}\n")
    page = (installed / "hangdoc" / "rules" / "pages" / f"{slug}.md").read_text()
    assert run.stdout == re.sub(r"<!-- example: \S+ \S+ -->\n\n", "", page)


@pytest.mark.timeout(600)
def test_the_html_page_from_the_installed_wheel_is_the_source_tree_page(installed, tmp_path):
    # GIVEN a golden bundle of a hang
    bundle = ROOT / "tests" / "golden" / "bz2-shards" / "bundle.json"
    # WHEN the wheel's hangdoc and the source tree's render it as HTML, outside the source tree
    wheel, source = (hangdoc(root, ["report", str(bundle), "--format", "html"], tmp_path) for root in (installed, ROOT))
    # THEN the wheel holds every template of the page (its stylesheet and SVG pieces), and its page is the
    # source tree's, byte for byte
    templates = ("hangdoc", "render", "templates")
    assert sorted(p.name for p in installed.joinpath(*templates).iterdir()) == \
        sorted(p.name for p in ROOT.joinpath(*templates).iterdir())
    assert wheel.returncode == source.returncode, wheel.stderr + source.stderr
    assert "<style>\n:root{" in wheel.stdout and "<pattern id=\"p-collective-wait\"" in wheel.stdout
    assert wheel.stdout == source.stdout
