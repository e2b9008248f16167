"""Conversion between the model's frozen dataclasses and JSON, done by msgspec.

Every type in model.py round-trips through `to_dict` / `from_dict` (and straight from and to
JSON bytes) without a per-class method: the dataclass fields and their annotations are the
schema, so a field added to the model needs no change here. A shape mismatch raises a
ValueError that names the JSON path (`$.job.processes[3].pid`).
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, Callable, TypeVar

import msgspec

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


def to_json(obj: Any) -> bytes:
    """Compact JSON of a dataclass tree (enums by value, tuples as lists)."""
    return _encoder.encode(obj)


def to_dict(obj: Any) -> Any:
    """Turn a dataclass tree into plain dicts, lists, strings and numbers."""
    return msgspec.json.decode(_encoder.encode(obj))


def from_dict(cls: type[T], data: Any) -> T:
    """Rebuild `cls` from what `to_dict` produced; raises ValueError on a shape mismatch."""
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None
    except TypeError:
        # msgspec refuses untagged unions of several dataclasses (check's facts); those small
        # documents go through the converter below, which tries each member in turn.
        return _converter(cls)(data, "$")


def from_json(cls: type[T], text: bytes | str, dec_hook=None) -> T:
    """`cls` decoded straight from JSON; ValueError naming the path on a shape mismatch,
    msgspec.DecodeError on text that is not JSON."""
    try:
        return msgspec.json.decode(text, type=cls, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None


# --- the fallback for types msgspec does not take ---------------------------------------


Converter = Callable[[Any, str], Any]


@functools.lru_cache(maxsize=None)
def _converter(tp: Any) -> Converter:
    """A function that converts JSON data to `tp`, built once per annotation: a merged bundle of
    thousands of ranks holds millions of values, so the annotation is not re-read for each."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return lambda value, where: value
    if origin in (typing.Union, types.UnionType):
        return _union([a for a in typing.get_args(tp) if a is not type(None)],
                      type(None) in typing.get_args(tp), tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return _tuple_of(_converter(args[0]))
        return _fixed_tuple(tuple(_converter(a) for a in args))
    if origin is dict:
        return _dict_of(_converter(typing.get_args(tp)[1]))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        def enum_value(value, where):
            try:
                return tp(value)
            except ValueError:
                raise ValueError(f"{where}: {value!r} is not a valid {tp.__name__}") from None
        return enum_value
    if tp is float:
        def number(value, where):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}: expected a number, got {value!r}")
            return float(value)
        return number
    if tp is str:
        def text(value, where):
            if not isinstance(value, str):
                raise ValueError(f"{where}: expected str, got {value!r}")
            return value
        return text
    if tp in (int, bool):
        def scalar(value, where):
            if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
                raise ValueError(f"{where}: expected {tp.__name__}, got {value!r}")
            return value
        return scalar
    raise TypeError(f"unsupported annotation {tp!r}")


def _union(options: list, optional: bool, tp: Any) -> Converter:
    converters = [_converter(a) for a in options]

    def union(value, where):
        if value is None and optional:
            return None
        for convert in converters:
            try:
                return convert(value, where)
            except (ValueError, TypeError):
                continue
        raise ValueError(f"{where}: {value!r} fits none of {typing.get_args(tp)}")
    return union


def _tuple_of(item: Converter) -> Converter:
    def convert(value, where):
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple([item(v, where) for v in value])
    return convert


def _fixed_tuple(items: tuple[Converter, ...]) -> Converter:
    def convert(value, where):
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(c(v, f"{where}[{i}]") for i, (c, v) in enumerate(zip(items, value)))
    return convert


def _dict_of(item: Converter) -> Converter:
    def convert(value, where):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        return {k: item(v, where) for k, v in value.items()}
    return convert


def _dataclass(tp: type) -> Converter:
    hints = typing.get_type_hints(tp)
    fields = [(f.name, _LazyConverter(hints[f.name]),
               f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
              for f in dataclasses.fields(tp)]

    def convert(value, where):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        kwargs = {}
        for name, field_converter, required in fields:
            if name in value:
                kwargs[name] = field_converter(value[name], f"{where}.{name}")
            elif required:
                raise ValueError(f"{where}: missing field {name!r}")
        return tp(**kwargs)
    return convert


class _LazyConverter:
    """Resolved on first use, so dataclasses that refer to each other build without recursion."""

    __slots__ = ("tp", "fn")

    def __init__(self, tp: Any):
        self.tp, self.fn = tp, None

    def __call__(self, value, where):
        if self.fn is None:
            self.fn = _converter(self.tp)
        return self.fn(value, where)
