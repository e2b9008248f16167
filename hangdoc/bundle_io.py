"""Saving and loading bundles: atomic writes, one clear line for a bad file."""
from __future__ import annotations

import gc
import json
import os
import tempfile
from pathlib import Path

from hangdoc.bundle_check import check_bundle, hostile_input
from hangdoc.errors import BadBundle, BadOutput
from hangdoc.model import BUNDLE_SCHEMA, Bundle
from hangdoc.serde import from_dict, to_dict


def check_writable(path: str | Path) -> Path:
    """Fail before the capture, not after it, when the output cannot be written."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise BadOutput(f"--out {path} is a directory; give a file name such as {path}/bundle.json")
    if not parent.is_dir():
        raise BadOutput(f"cannot write {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise BadOutput(f"cannot write {path}: no write permission on {parent}")
    return path


def save_bundle(bundle: Bundle, path: str | Path) -> Path:
    path = check_writable(path)
    data = json.dumps(to_dict(bundle), separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=".hangdoc-", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes it 0600; a bundle is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def bundle_from_json(text: str, source: str = "bundle") -> Bundle:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadBundle(f"{source} is not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict) or "schema" not in data:
        raise BadBundle(f"{source} is not a hangdoc bundle (no \"schema\" field)")
    schema = data["schema"]
    if schema != BUNDLE_SCHEMA:
        if isinstance(schema, str) and schema.startswith("hangdoc/bundle-v"):
            raise BadBundle(f"{source} has schema {schema}; this hangdoc reads {BUNDLE_SCHEMA}: upgrade hangdoc")
        raise BadBundle(f"{source} is not a hangdoc bundle (schema {schema!r})")
    try:
        return from_dict(Bundle, data)
    except (ValueError, TypeError) as exc:
        raise BadBundle(f"{source} is damaged: {exc}") from None


def load_bundle(path: str | Path) -> Bundle:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BadBundle(f"no such bundle: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadBundle(f"cannot read {path}: {exc}") from None
    with hostile_input(str(path)):
        return check_bundle(bundle_from_json(text, str(path)), str(path))


def bundle_files(paths) -> list[Path]:
    """The bundle files named, with directories expanded to the *.json files inside them."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                raise BadBundle(f"no *.json bundle in directory {path}")
            files.extend(found)
        else:
            files.append(path)
    return files


def load_bundles(paths) -> Bundle:
    """One bundle from one file; several files are the nodes of one job, merged."""
    files = bundle_files(paths)
    # Bundles are millions of acyclic objects: the cyclic collector would walk them again and
    # again while they load (most of the time of a 4096-rank merge). Reference counting frees them.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        bundles = [load_bundle(f) for f in files]
        if len(bundles) == 1:
            return bundles[0]
        from hangdoc.merge import merge_bundles

        return merge_bundles(bundles, [str(f) for f in files])
    finally:
        if was_enabled:
            gc.enable()
