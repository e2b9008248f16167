"""Names the kernel hands over as bytes (paths, command-line words, thread names, environment
values), as text, once, where they are read (docs/bundle.md, "Names that are not UTF-8").

A name is UTF-8 text; each byte that is not UTF-8 (a Latin-1 file name in a speech corpus) is
kept as `\\xNN`, Python's `backslashreplace`: nothing is lost or replaced by U+FFFD, and the bundle,
which is JSON, can always be written. A name that already holds a backslash followed by `xNN`
reads the same: the escape is for eyes and for the bundle, and the bytes are on the node.
"""
from __future__ import annotations

import os


def shown(name: str | bytes) -> str:
    """`name` as text: UTF-8, each undecodable byte as `\\xNN`. A str from `os` (whose undecodable
    bytes are surrogate escapes, which JSON cannot hold) is turned back into its bytes first."""
    if isinstance(name, str):
        try:
            name.encode("utf-8")
            return name
        except UnicodeEncodeError:
            name = name.encode("utf-8", "surrogateescape" if _escaped_only(name) else "surrogatepass")
    return name.decode("utf-8", "backslashreplace")


def _escaped_only(text: str) -> bool:
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in text)


def read_link(path: str | os.PathLike) -> str:
    """The target of a symbolic link (/proc/PID/fd/N, exe, cwd) as `shown` text."""
    return shown(os.readlink(os.fsencode(path)))
