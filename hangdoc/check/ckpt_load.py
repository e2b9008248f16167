"""Read a checkpoint without running its code, and WeNet's side-car `.yaml` next to it.

`torch.load(weights_only=True, map_location="cpu")` refuses any pickle that would call
code; such a file, or one that is no checkpoint at all, is a HangdocError (exit 2).
"""
from __future__ import annotations

import pickle
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hangdoc.base.errors import HangdocError
from hangdoc.base.limits import (
    CHECKPOINT_LOAD_SECONDS, MAX_CHECKPOINT_DEPTH, MAX_CHECKPOINT_OBJECTS, TooLarge, require_regular, time_budget,
    within_values,
)
from hangdoc.check.ckpt_scan import scan_checkpoint

UNSAFE_MARK = "Weights only load failed"


def is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "numel")


def load_checkpoint(path: str | Path, seconds: float = CHECKPOINT_LOAD_SECONDS) -> Mapping[str, Any]:
    """The checkpoint's top-level mapping, loaded within the budgets (hangdoc/base/limits.py): a
    regular file, a pickle of at most MAX_CHECKPOINT_PICKLE_BYTES making MAX_CHECKPOINT_PICKLE_VALUES
    values (counted as it streams, before torch reads it), at most `seconds` to load,
    MAX_CHECKPOINT_OBJECTS values outside tensors (a shared one counted at each use) nested at most
    MAX_CHECKPOINT_DEPTH; beyond any, HangdocError (exit 2)."""
    path = Path(path)
    if not path.exists():
        raise HangdocError(f"checkpoint not found: {path}")
    if path.is_dir():
        raise HangdocError(f"{path} is a directory; give the .pt file (torch.distributed.checkpoint "
                           "directories are not read)")
    try:          # a FIFO would block torch.load for ever, /dev/zero fill the memory
        require_regular(path)
    except TooLarge as exc:
        raise HangdocError(f"checkpoint {path} is refused: {exc}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # torch's import and legacy-format chatter
            import torch
    except ImportError:
        raise HangdocError("reading a checkpoint needs torch (pip install torch)") from None
    try:
        with warnings.catch_warnings(), time_budget(seconds, "loading it"):
            warnings.simplefilter("ignore")
            scan_checkpoint(path)       # its values counted as its pickle streams, before torch reads it whole
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
            within_values(obj, MAX_CHECKPOINT_OBJECTS, MAX_CHECKPOINT_DEPTH, leaf=is_tensor)
    except TooLarge as exc:
        raise HangdocError(f"checkpoint {path} is beyond a budget: {exc} (docs/check.md, budgets)") from None
    except pickle.UnpicklingError as exc:
        if UNSAFE_MARK in str(exc):
            raise HangdocError(f"{path} needs unsafe unpickling ({_refusal(str(exc))}); hangdoc loads "
                               "with weights_only=True and never runs a checkpoint's code") from None
        raise HangdocError(f"{path} is not a torch checkpoint ({_first_line(exc)})") from None
    except Exception as exc:  # torch raises RuntimeError, KeyError, EOFError, ... on foreign files
        raise HangdocError(f"{path} is not a torch checkpoint (torch.load: {type(exc).__name__}: "
                           f"{_first_line(exc)})") from None
    if not isinstance(obj, Mapping):
        raise HangdocError(f"{path} holds a {type(obj).__name__}, not a checkpoint dict")
    return obj


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, EOFError):
        return "empty or truncated file"
    return text.splitlines()[0][:160] if text else "no detail"


def _refusal(message: str) -> str:
    """The unpickler's own reason, e.g. 'unsupported GLOBAL posix.system'."""
    for line in message.splitlines():
        line = line.split("WeightsUnpickler error:", 1)[-1].strip()
        if "GLOBAL" in line or "Unsupported" in line:
            reason = line.split(" was not an allowed global")[0].removeprefix("Trying to load ")
            return "weights_only refused: " + reason.rstrip(".")[:160]
    return "weights_only refused it"


def side_car_path(path: str | Path) -> Path | None:
    """WeNet writes `epoch_3.yaml` next to `epoch_3.pt`."""
    candidate = Path(path).with_suffix(".yaml")
    return candidate if candidate.is_file() and candidate != Path(path) else None


def read_side_car(path: Path) -> dict[str, str]:
    """The side-car's top-level keys, always read by `parse_top_level`: whether PyYAML happens to be
    installed (many ML stacks pull it in) must not change what `check` prints."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return {"<unreadable>": str(exc)}
    return parse_top_level(text)


def parse_top_level(text: str) -> dict[str, str]:
    """`key: value` lines at the top level of a YAML mapping; nested blocks are counted."""
    out: dict[str, str] = {}
    last = None
    nested = 0
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t-":
            nested += 1
            if last is not None:
                out[last] = f"({nested} nested line{'s' if nested != 1 else ''})"
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last, nested = key.strip(), 0
        out[last] = value.strip().strip("'\"")
    return out
