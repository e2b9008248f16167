"""A demangled C++ symbol as a reader wants it: the qualified function name, not its signature.

`py-spy dump --native` names a C++ frame by its whole demangled symbol: template arguments,
parameter lists and lambdas included. torch's pybind11 bindings and its dispatcher make those
symbols hundreds or thousands of characters long, where the function is a few words:

    c10::impl::BoxedKernelWrapper<c10::intrusive_ptr<c10d::Work, ...> (at::Tensor, ...), void>::call
    -> c10::impl::BoxedKernelWrapper::call

A pybind11 binding's dispatcher is a lambda inside `cpp_function::initialize<...>`; the bound
function is not in its name (it is the next frame in), only the class it belongs to:

    pybind11::cpp_function::initialize<pybind11::cpp_function::cpp_function<bool, c10d::Work, ...
    -> pybind11 binding of c10d::Work
"""
from __future__ import annotations

import re

_PYBIND_METHOD = re.compile(r"pybind11::cpp_function::initialize<pybind11::cpp_function::cpp_function<")
_ANONYMOUS = "(anonymous namespace)"
_OPERATOR = re.compile(r"operator(?:\(\)|<<=?|>>=?|<=>?|>=?|<|->\*?|\[\]|[^\w\s(<]{1,3})?")
_LAMBDA = re.compile(r"\{lambda#?\d*\}")


def symbol_name(symbol: str) -> str:
    """The qualified function name of a demangled C++ symbol; any other name as it is."""
    if "<" not in symbol and "(" not in symbol:
        return symbol
    bound = _pybind_class(symbol)
    if bound is not None:
        return f"pybind11 binding of {bound}"
    name = _strip_groups(symbol)
    return name.strip() or symbol


def _pybind_class(symbol: str) -> str | None:
    """The class a pybind11 method binding belongs to: `cpp_function<Return, Class, ...>`'s second
    argument (None when the symbol is no such binding, or its class cannot be read)."""
    found = _PYBIND_METHOD.match(symbol)
    if found is None:
        return None
    args = _top_level_args(symbol, found.end())
    if len(args) < 2 or not re.fullmatch(r"[\w:]+", args[1].strip()):
        return None
    return args[1].strip()


def _top_level_args(text: str, start: int) -> list[str]:
    """The comma-separated arguments of the template list opened just before `start`."""
    args, depth, at = [], 0, start
    for i in range(start, len(text)):
        c = text[i]
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            if depth == 0:
                args.append(text[at:i])
                return args
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[at:i])
            at = i + 1
    return args


def _strip_groups(symbol: str) -> str:
    """`symbol` without its template arguments and parameter lists, at every depth; operators'
    own brackets and the `(anonymous namespace)` scope stay, a lambda reads `{lambda}`."""
    text = symbol.replace(_ANONYMOUS, "\0")
    out, depth, i = [], 0, 0
    while i < len(text):
        op = _OPERATOR.match(text, i) if depth == 0 and text.startswith("operator", i) else None
        if op is not None and op.end() > i:
            out.append(text[i:op.end()])
            i = op.end()
            continue
        c = text[i]
        if c in "<(":
            depth += 1
        elif c in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
        i += 1
    name = "".join(out).replace("\0", _ANONYMOUS)
    name = _LAMBDA.sub("{lambda}", name)
    # What the parameter list leaves behind: a const or reference qualifier of a method.
    return re.sub(r"\s*(?:const|volatile|&&|&)\s*$", "", name)
