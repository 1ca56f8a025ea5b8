"""A stable fingerprint of a Python function for the compile cache.

numba compiles the function's bytecode together with what it names: global
constants are frozen into the code, called device functions are compiled in.
So the fingerprint covers the function's code objects and, transitively, the
globals and closure values it names: plain constants by value, functions (and
``cuda.jit`` dispatchers) by their own fingerprint, anything else by type.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import suppress
from types import CodeType, FunctionType, ModuleType
from typing import Any

__all__ = ["fingerprint", "named_values", "referenced_values"]

_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def fingerprint(func: FunctionType) -> str:
    """Hex digest over ``func``'s code and everything it names (cycles are cut)."""
    digest = hashlib.sha256()
    _feed(func, digest, set())
    return digest.hexdigest()


def _feed(func: FunctionType, digest: Any, seen: set[int]) -> None:
    if id(func) in seen:
        digest.update(b"<cycle>" + func.__qualname__.encode())
        return
    seen.add(id(func))
    code = func.__code__
    digest.update(f"{func.__module__}.{func.__qualname__}".encode())
    _feed_code(code, digest)
    digest.update(repr(func.__defaults__).encode())
    names = _names(code)
    for label, value in named_values(func):
        digest.update(label.encode())
        _feed_value(value, digest, seen, names)


def named_values(func: FunctionType) -> list[tuple[str, Any]]:
    """The global and closure values ``func``'s code names, as (label, value), in a stable order."""
    names = sorted(_names(func.__code__))
    values = [(n, func.__globals__[n]) for n in names if n in func.__globals__]
    for i, cell in enumerate(func.__closure__ or ()):
        with suppress(ValueError):  # an empty cell: a name not bound yet
            values.append((f"<cell {i}>", cell.cell_contents))
    return values


def referenced_values(func: FunctionType, seen: set[int] | None = None) -> Iterator[Any]:
    """Every value ``func`` names, descending into the Python functions (and dispatchers) it calls."""
    seen = set() if seen is None else seen
    if id(func) in seen:
        return
    seen.add(id(func))
    for _, value in named_values(func):
        yield value
        inner = getattr(value, "py_func", value)
        if isinstance(inner, FunctionType):
            yield from referenced_values(inner, seen)


def _feed_value(value: Any, digest: Any, seen: set[int], names: set[str]) -> None:
    if isinstance(value, _PLAIN):
        digest.update(f"{type(value).__name__}:{value!r}".encode())
    elif isinstance(value, tuple):  # frozen by numba, items (nested tuples, arrays) included
        digest.update(f"tuple:{len(value)}".encode())
        for item in value:
            _feed_value(item, digest, seen, names)
    elif hasattr(value, "dtype") and hasattr(value, "tobytes"):  # NumPy arrays become constants
        digest.update(f"array:{value.dtype}:{getattr(value, 'shape', ())}".encode())
        digest.update(value.tobytes())
    elif isinstance(value, ModuleType):
        digest.update(f"module:{value.__name__}".encode())
        if id(value) not in seen:  # ``config.N`` / ``helpers.f``: the attributes the code names
            seen.add(id(value))
            for attr in sorted(names & vars(value).keys()):
                digest.update(attr.encode())
                _feed_value(vars(value)[attr], digest, seen, names)
            seen.discard(id(value))
    elif isinstance(getattr(value, "py_func", value), FunctionType):
        options = getattr(value, "targetoptions", None)
        digest.update(f"func:{options!r}".encode())
        _feed(getattr(value, "py_func", value), digest, seen)
    elif hasattr(value, "name") and hasattr(value, "sig"):  # a declare_device result
        digest.update(f"extern:{value.name}:{value.sig}".encode())
    else:
        digest.update(f"object:{type(value).__module__}.{type(value).__qualname__}".encode())


def _feed_code(code: CodeType, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    digest.update(repr(code.co_varnames).encode())
    for const in code.co_consts:
        if isinstance(const, CodeType):
            _feed_code(const, digest)
        else:
            digest.update(repr(const).encode())


def _names(code: CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _names(const)
    return names
