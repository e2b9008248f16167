"""hangdoc's build backend: setuptools', run on a copy of the source tree.

setuptools builds in the tree it is given: `build/`, and `hangdoc.egg-info` rewritten (even to
say which packages it needs). A wheel build (`pip install /path/to/hangdoc`, `make dist`) would
change the checkout, and fail in a read-only one. So the hooks that write copy the files a build
reads into a temporary directory and build there. An editable install (`pip install -e .`) must
point at the checkout itself; its own hooks write nothing into it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from setuptools import build_meta as _setuptools

# What a build reads, beside pyproject.toml: the package, its readme, this backend (an sdist carries it).
_SOURCES = ("pyproject.toml", "README.md", "MANIFEST.in", "hangdoc", "build_backend")

prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
build_editable = _setuptools.build_editable


@contextlib.contextmanager
def _in_a_copy():
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="hangdoc-build-") as tree:
        for name in _SOURCES:
            source = os.path.join(here, name)
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(tree, name),
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif os.path.isfile(source):
                shutil.copy2(source, tree)
        os.chdir(tree)
        try:
            yield
        finally:
            os.chdir(here)


def _copied(hook):
    def run(*args, **kwargs):
        args = tuple(os.path.abspath(a) if isinstance(a, str) and i == 0 else a for i, a in enumerate(args))
        with _in_a_copy():
            return hook(*args, **kwargs)
    run.__name__, run.__doc__ = hook.__name__, hook.__doc__
    return run


# The hooks whose first argument is an output directory take it made absolute, before the move.
build_wheel = _copied(_setuptools.build_wheel)
build_sdist = _copied(_setuptools.build_sdist)
prepare_metadata_for_build_wheel = _copied(_setuptools.prepare_metadata_for_build_wheel)
get_requires_for_build_wheel = _copied(_setuptools.get_requires_for_build_wheel)
get_requires_for_build_sdist = _copied(_setuptools.get_requires_for_build_sdist)
get_requires_for_build_editable = _copied(_setuptools.get_requires_for_build_editable)
