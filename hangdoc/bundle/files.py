"""Saving and loading bundles: atomic writes, one clear line for a bad file."""
from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import msgspec
import zstandard

from hangdoc.bundle import codec as bundle_v2
from hangdoc.bundle.checks import check_bundle, check_head, check_processes, check_values, hostile_input
from hangdoc.base.errors import BadBundle
from hangdoc.base.heap import no_cycle_walks
from hangdoc.base.outputs import check_output, write_output
from hangdoc.base.limits import MAX_BUNDLE_FILE_BYTES, MAX_BUNDLE_JSON_BYTES, TooLarge, read_regular
from hangdoc.model import BUNDLE_SCHEMA, Bundle, NodeDigest
from hangdoc.base.serde import from_json

READABLE = (bundle_v2.SCHEMA, BUNDLE_SCHEMA)
BUNDLE_GLOBS = ("*.json", "*.json.zst")
_BUNDLE_ENDS = tuple(glob.removeprefix("*") for glob in BUNDLE_GLOBS)    # what each glob matches: a name that ends so
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_LEVEL = 3


def check_writable(path: str | Path, option: str = "--out") -> Path:
    """Fail before the capture, not after it, when the output must not or cannot be written
    (hangdoc/base/outputs.py: a device, FIFO, socket, directory or link is refused by its type)."""
    return check_output(path, option)


def save_bundle(bundle: Bundle, path: str | Path, digest: NodeDigest | None = None) -> Path:
    """Write `bundle` as hangdoc/bundle-v2, atomically: zstd-compressed unless the name ends
    in `.json` (then the same interned JSON, plain, for jq and eyes).

    `digest`: the node's reading of its ranks, as the diagnosis that judged this bundle made it;
    saved beside the samples so a merge of thousands of nodes reads a few hundred bytes a rank
    (without it, a merge reads the samples)."""
    path = check_writable(path)
    data = bundle_v2.encode(bundle, digest)
    data = data + b"\n" if path.name.endswith(".json") else compressed(data)
    write_output(path, data)    # 0600: the job's command lines, logs and paths are its owner's to share
    return path


def compressed(data: bytes) -> bytes:
    """v2 JSON as a saved bundle holds it: one zstd frame, its head in blocks of their own (a
    merge decompresses those alone)."""
    cut = data.find(bundle_v2.HEAD_END) + len(bundle_v2.HEAD_END)
    packer = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj(size=len(data))
    return (packer.compress(data[:cut]) + packer.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            + packer.compress(data[cut:]) + packer.flush())


class _Schema(msgspec.Struct):
    schema: Any = None


def bundle_from_json(text: str | bytes, source: str = "bundle", interner: bundle_v2.Interner | None = None) -> Bundle:
    """A bundle from its JSON, v1 or v2; BadBundle with one line (and the JSON path) otherwise."""
    if isinstance(text, str):
        text = text.encode()
    try:
        schema = msgspec.json.decode(text, type=_Schema).schema
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        if isinstance(exc, msgspec.ValidationError):
            raise BadBundle(f"{source} is not a hangdoc bundle (no \"schema\" field)") from None
        raise BadBundle(f"{source} is not valid JSON (truncated or corrupt?): {exc}") from None
    if schema not in READABLE:
        if isinstance(schema, str) and schema.startswith("hangdoc/bundle-v"):
            raise BadBundle(f"{source} has schema {schema}; this hangdoc reads {', '.join(READABLE)}: "
                            "upgrade hangdoc")
        raise BadBundle(f"{source} is not a hangdoc bundle (schema {schema!r})")
    check_processes(text, source)
    try:
        if schema == bundle_v2.SCHEMA:
            return bundle_v2.decode(text, interner)
        return from_json(Bundle, text)
    except (ValueError, TypeError) as exc:
        raise BadBundle(f"{source} is damaged: {exc}") from None


def read_bundle_bytes(path: Path) -> bytes:
    """The bundle's JSON bytes, decompressed when the file is zstd (by its magic, whatever its name).

    Within the budgets (hangdoc/base/limits.py), checked before anything is expanded: only a
    regular file, at most MAX_BUNDLE_FILE_BYTES of it; a zstd frame that declares more than
    MAX_BUNDLE_JSON_BYTES is refused from its header, and one that declares no size (the `zstd`
    command reading a pipe) is streamed and stopped at that many bytes."""
    return _json_of(path, _read_file(path))


def _read_file(path: Path) -> bytes:
    try:
        return read_regular(path, MAX_BUNDLE_FILE_BYTES)
    except FileNotFoundError:
        raise BadBundle(f"no such bundle: {path}") from None
    except TooLarge as exc:
        raise BadBundle(f"{path} is refused: {exc}") from None
    except OSError as exc:
        raise BadBundle(f"cannot read {path}: {exc.strerror or exc}") from None


def _json_of(path: Path, data: bytes) -> bytes:
    if data[:4] == ZSTD_MAGIC:
        try:
            data = _decompress(data, MAX_BUNDLE_JSON_BYTES)
        except zstandard.ZstdError as exc:
            raise BadBundle(f"{path} is a corrupt or truncated zstd file ({exc}); copy it again "
                            "from the node") from None
        except TooLarge as exc:
            raise BadBundle(f"{path} is refused: it decompresses to {exc}") from None
    elif len(data) > MAX_BUNDLE_JSON_BYTES:
        raise BadBundle(f"{path} is refused: {len(data):,} bytes of JSON, more than the "
                        f"{MAX_BUNDLE_JSON_BYTES:,} hangdoc reads")
    check_values(data, str(path))
    return data


def _decompress(data: bytes, limit: int) -> bytes:
    """zstd data (one frame or several), decompressed never past `limit` bytes: TooLarge beyond.

    One frame that declares its size is decompressed in one call, into a buffer of that size (zstd
    writes no further). Otherwise fed 1 KB at a time: a zstd block expands at most 32,768-fold,
    so no step yields more than 32 MB."""
    declared = zstandard.get_frame_parameters(data).content_size
    if declared != zstandard.CONTENTSIZE_UNKNOWN and declared > limit:
        raise TooLarge(f"{declared:,} bytes (its header says), more than the {limit:,} hangdoc reads")
    if declared not in (zstandard.CONTENTSIZE_UNKNOWN, 0):
        try:
            return _decompressor().decompress(data, allow_extra_data=False)
        except zstandard.ZstdError:
            pass              # several frames, or a damaged one: read below, which tells which
    out = bytearray()
    view, at = memoryview(data), 0
    while at < len(data):
        frame = _decompressor().decompressobj()
        while at < len(data) and not frame.eof:
            chunk = view[at:at + 1024]
            out += frame.decompress(chunk)
            at += len(chunk)
            if len(out) > limit:
                raise TooLarge(f"more than the {limit:,} bytes hangdoc reads")
        if not frame.eof:
            raise zstandard.ZstdError("the last frame ends early")
        at -= len(frame.unused_data)
    return bytes(out)


_DECOMPRESSORS = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """The thread's decompressor, made once: making one (and its first use) takes 30 us, five
    times the reading of a node's head, and a job's 131,072 heads took 4 s of it. Each use starts
    afresh (its stream is reset); one use at a time, as a thread makes them."""
    made = getattr(_DECOMPRESSORS, "made", None)
    if made is None:
        made = _DECOMPRESSORS.made = zstandard.ZstdDecompressor()
    return made


WALK_BLOCKS = 4096     # zstd blocks a head read walks at most (512 MB of content as zstd writes it)


def _head_bytes(path: Path, data: bytes) -> bytes | None:
    """The start of a zstd bundle's JSON up to its head's end (`codec.HEAD_END`), the rest left
    compressed: what `save_bundle` writes. None for anything else (JSON, several frames, no size
    declared, no head, more blocks than WALK_BLOCKS): the caller reads the whole. The blocks are
    walked to the frame's end, so a truncated copy is still refused."""
    if data[:4] != ZSTD_MAGIC:
        return None
    try:
        declared = zstandard.get_frame_parameters(data).content_size
        if declared == zstandard.CONTENTSIZE_UNKNOWN or declared > MAX_BUNDLE_JSON_BYTES or _frame_end(data) != len(data):
            return None
        out = bytearray()
        view, at = memoryview(data), 0
        reader = _decompressor().decompressobj()
        while at < len(data) and not reader.eof:
            searched = max(0, len(out) - len(bundle_v2.HEAD_END))
            out += reader.decompress(view[at:at + 1024])     # at most 32 MB a step
            at += 1024
            if len(out) > declared:
                return None
            if out.find(bundle_v2.HEAD_END, searched) >= 0:
                return bytes(out)
    except zstandard.ZstdError as exc:
        raise BadBundle(f"{path} is a corrupt or truncated zstd file ({exc}); copy it again "
                        "from the node") from None
    return None


def _frame_end(data: bytes) -> int | None:
    """Where the first zstd frame of `data` ends, from its header and block headers (nothing is
    decompressed); None past WALK_BLOCKS blocks; ZstdError when the data ends first."""
    checksum = data[4] & 0x04 if len(data) > 4 else 0
    end = zstandard.frame_header_size(data[:18])
    for _ in range(WALK_BLOCKS):
        if end + 3 > len(data):
            raise zstandard.ZstdError("the last frame ends early")
        block = int.from_bytes(data[end:end + 3], "little")
        kind = (block >> 1) & 3
        if kind == 3:
            raise zstandard.ZstdError("a block of the reserved type")
        end += 3 + (1 if kind == 1 else block >> 3)      # an RLE block stores one byte
        if block & 1:
            end += 4 if checksum else 0
            if end > len(data):
                raise zstandard.ZstdError("the last frame ends early")
            return end
    return None


def load_head(path: str | Path) -> bundle_v2.Head | None:
    """A node's digest and identity without its samples; None for a v1 bundle (it has no head).
    A head written first (`codec.encode`) is decompressed and parsed alone: 15 KB of a node's 180."""
    path = Path(path)
    return head_of_bytes(_read_file(path), path)


def head_of_bytes(raw: bytes, path: Path) -> bundle_v2.Head | None:
    """`load_head` of a file's bytes read already (`path` names it in errors)."""
    start = _head_bytes(path, raw)
    with hostile_input(str(path)):
        if start is not None:
            check_values(start, str(path))
            head = bundle_v2.head_of_prefix(start)
            if head is not None:
                return check_head(head, str(path))
        data = _json_of(path, raw)
        head = bundle_v2.head_of_prefix(data)
        if head is not None:
            return check_head(head, str(path))
        try:
            head = bundle_v2.decode_head(data)
        except msgspec.DecodeError as exc:
            raise BadBundle(f"{path} is not valid JSON (truncated or corrupt?): {exc}") from None
        except (ValueError, TypeError) as exc:
            try:
                schema = msgspec.json.decode(data, type=_Schema).schema
            except msgspec.DecodeError:   # the head's first error came before the malformed byte
                schema = None
            if schema != bundle_v2.SCHEMA:
                return None    # v1, or not a bundle at all: the whole load says which
            raise BadBundle(f"{path} is damaged: {exc}") from None
    if head.schema != bundle_v2.SCHEMA or head.bundle is None:
        return None
    return check_head(head, str(path))


def load_bundle(path: str | Path, interner: bundle_v2.Interner | None = None) -> Bundle:
    """One bundle file (v1 JSON, v2 JSON or v2 zstd); BadBundle (exit 2) with one line otherwise."""
    path = Path(path)
    data = read_bundle_bytes(path)
    with hostile_input(str(path)):
        return check_bundle(bundle_from_json(data, str(path), interner), str(path))


def bundle_files(paths) -> list[Path]:
    """The bundle files named, with directories expanded to the bundles (*.json, *.json.zst) inside."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            # What `path.glob` finds of each pattern, sorted as paths compare (by name, in one
            # folder), from one listing of the folder: a job's 131,072 node bundles took two globs
            # and two million comparisons of Path objects, 2 s, where the names take a tenth.
            try:
                names = sorted(name for name in os.listdir(path) if name.endswith(_BUNDLE_ENDS))
            except PermissionError:       # as glob: a folder it may not list holds nothing
                names = []
            found = [path / name for name in names]
            if not found:
                raise BadBundle(f"no bundle ({', '.join(BUNDLE_GLOBS)}) in directory {path}")
            files.extend(found)
        else:
            files.append(path)
    return files


def load_bundles(paths) -> Bundle:
    """One bundle from one file; several files are the nodes of one job, merged.

    The files are read one at a time into the merge, sharing one table of frames and stacks,
    so memory grows with the distinct stacks, not with the ranks times their frames.
    """
    files = bundle_files(paths)
    interner = bundle_v2.Interner()
    # Bundles are millions of acyclic objects: the cyclic collector would walk them again and
    # again while they load (most of a 4096-rank report: 8.4 s of loading instead of 3.0 s).
    # Reference counting frees them; once loaded they are frozen out of later collections, so
    # the diagnosis that follows does not walk them either.
    with no_cycle_walks():
        if len(files) == 1:
            bundle = load_bundle(files[0], interner)
        else:
            from hangdoc.bundle.merge import merge_stream

            bundle = merge_stream((load_bundle(f, interner) for f in files), [str(f) for f in files])
        gc.freeze()
        return bundle
