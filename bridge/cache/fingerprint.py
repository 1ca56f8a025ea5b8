"""A stable fingerprint of a Python function for the compile cache.

numba compiles the function's bytecode together with what it names: global
constants are frozen into the code, called device functions are compiled in.
So the fingerprint covers the function's code objects and, transitively, the
globals and closure values it names: plain constants by value, functions (and
``cuda.jit`` dispatchers) by their own fingerprint, anything else by its pickle
(numba-cuda's own cache key pickles closure values too): ``operator.add`` and
``operator.sub`` differ, and so do two ``IntEnum`` members or NumPy scalar types.
A value that cannot be pickled makes the fingerprint unique to the call, so
its cache entry is never reused (the function recompiles every time).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from contextlib import suppress
from types import CodeType, FunctionType, ModuleType
from typing import Any

__all__ = ["fingerprint", "named_values", "referenced_values"]

_PLAIN = (bool, int, float, complex, str, bytes, type(None))
_LIBRARY_DIRS = tuple(sorted({os.path.realpath(sysconfig.get_path(k)) + os.sep
                            for k in ("stdlib", "platstdlib", "purelib", "platlib")}))


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
    elif not isinstance(value, type) and hasattr(value, "dtype") and hasattr(value, "tobytes"):
        # NumPy arrays and scalars become constants (``np.float32`` itself is a type)
        digest.update(f"array:{value.dtype}:{getattr(value, 'shape', ())}".encode())
        digest.update(value.tobytes())
    elif isinstance(value, (ModuleType, type)):
        _feed_namespace(value, digest, seen, names)
    elif isinstance(getattr(value, "py_func", value), FunctionType):
        options = getattr(value, "targetoptions", None)
        digest.update(f"func:{options!r}".encode())
        _feed(getattr(value, "py_func", value), digest, seen)
    elif hasattr(value, "name") and hasattr(value, "sig"):  # a declare_device result
        digest.update(f"extern:{value.name}:{value.sig}".encode())
    else:
        digest.update(_reference(value) or _pickled(value))


def _feed_namespace(value: ModuleType | type, digest: Any, seen: set[int], names: set[str]) -> None:
    """A module or class: its name and, when it is the user's own, the attributes the code names.

    ``config.N``, ``helpers.f`` and ``Color.RED`` are frozen into the code, so
    their values count; an installed library's (``np.float32``, ``cuda.grid``)
    are fixed by its version and count by name only.
    """
    if isinstance(value, ModuleType):
        module, label = value, f"module:{value.__name__}"
    else:
        module, label = sys.modules.get(value.__module__), f"class:{value.__module__}.{value.__qualname__}"
    digest.update(label.encode())
    if id(value) in seen or module is None or _installed(module):
        return
    seen.add(id(value))
    for attr in sorted(names & vars(value).keys()):
        digest.update(attr.encode())
        _feed_value(getattr(value, attr), digest, seen, names)
    seen.discard(id(value))


def _installed(module: ModuleType) -> bool:
    """A built-in module or one under the interpreter's library folders (not the user's code)."""
    path = getattr(module, "__file__", None)
    if path is None:  # built into the interpreter, or made at run time (``types.ModuleType``)
        return module.__name__ in sys.builtin_module_names
    return os.path.realpath(path).startswith(_LIBRARY_DIRS)


def _reference(value: Any) -> bytes | None:
    """``module.qualname`` of an object an installed module defines under that name (``operator.add``,
    ``cuda.grid``): what it is does not change while the library's version does not."""
    module = sys.modules.get(getattr(value, "__module__", None) or "")
    name = getattr(value, "__qualname__", None)
    if module is None or not isinstance(name, str) or not _installed(module):
        return None
    found: Any = module
    for part in name.split("."):
        found = getattr(found, part, None)
    return f"ref:{module.__name__}.{name}".encode() if found is value else None


def _pickled(value: Any) -> bytes:
    """The value's pickle (numba-cuda's cache key pickles closure values too): enum members and
    builtins by name, other objects by state."""
    try:
        return b"pickle:" + pickle.dumps(value, protocol=4)
    except Exception:  # local classes, lambdas, handles: nothing stable to hash, never reuse
        return f"unpicklable:{uuid.uuid4()}".encode()


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
