"""Summarise what a loaded checkpoint holds as `KeyInfo` rows, two levels deep.

A dict whose values are all tensors is a state_dict and is summed up, not listed.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hangdoc.check.ckpt_load import is_tensor
from hangdoc.check.model import KeyInfo

ROOT = "<root>"
MAX_DEPTH = 2
MAX_CHILDREN = 40


def _is_tensor(value: Any) -> bool:
    return is_tensor(value)


def _is_state_dict(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(_is_tensor(v) for v in value.values())


def describe(value: Any) -> tuple[str, str]:
    """(kind, summary) of one value."""
    if _is_state_dict(value):
        params = sum(int(v.numel()) for v in value.values())
        return "state_dict", f"{len(value):,} tensors, {params:,} values"
    if _is_tensor(value):
        return "tensor", f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, Mapping):
        if "state" in value and "param_groups" in value:
            groups = value["param_groups"]
            if not isinstance(groups, (list, tuple)):    # a hand-made or damaged checkpoint
                return "optimizer", f"optimizer state, param_groups a {type(groups).__name__} (not a list)"
            return "optimizer", f"optimizer state, {len(groups)} param group{'s' if len(groups) != 1 else ''}"
        return "dict", f"{len(value)} key{'s' if len(value) != 1 else ''}"
    if isinstance(value, (list, tuple)):
        return type(value).__name__, f"{len(value)} items"
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return type(value).__name__, text if len(text) <= 60 else text[:57] + "..."
    return type(value).__name__, type(value).__name__


def checkpoint_keys(ckpt: Mapping[str, Any]) -> tuple[KeyInfo, ...]:
    if _is_state_dict(ckpt):
        return (KeyInfo(ROOT, *describe(ckpt)),)
    rows: list[KeyInfo] = []
    _walk(ckpt, "", 1, rows)
    return tuple(rows)


def _walk(mapping: Mapping[str, Any], prefix: str, depth: int, rows: list[KeyInfo]) -> None:
    for n, (key, value) in enumerate(mapping.items()):
        if n == MAX_CHILDREN:
            rows.append(KeyInfo(f"{prefix}...", "more", f"{len(mapping) - MAX_CHILDREN} more keys"))
            return
        path = f"{prefix}{key}"
        kind, summary = describe(value)
        rows.append(KeyInfo(path, kind, summary))
        if kind == "dict" and depth < MAX_DEPTH:
            _walk(value, path + ".", depth + 1, rows)
