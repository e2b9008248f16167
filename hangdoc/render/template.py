"""The HTML page's stylesheet and SVG pieces, kept as files in `render/templates/` and read from
the installed package (a wheel ships them: pyproject.toml's package data).

A piece's `$name` placeholders are filled by `string.Template`; the newline that ends each file
is not part of the piece.
"""
from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from string import Template


@lru_cache(maxsize=None)
def template_text(name: str) -> str:
    """The text of `render/templates/<name>`, read once."""
    return (files("hangdoc.render") / "templates" / name).read_text(encoding="utf-8").removesuffix("\n")


def fill(name: str, **values: object) -> str:
    """The piece `name` with its `$placeholders` replaced by `values` (every one must be given)."""
    return Template(template_text(name)).substitute(values)
