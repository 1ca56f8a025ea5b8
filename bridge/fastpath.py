"""Compile a launch plan into one Python function, once per (kernel, argument types).

A plan is a tuple of binders; calling them in a loop costs a call, a tuple
and a concatenation per argument.  For the common cases a binder says how
its accepting path reads (``Binder.inline``), and this module writes one
function that does those reads in line, falls back to the binder (which
checks fully and raises the house-format error) otherwise, and ends with
the loader's launch.  Generated code only ever names values from the
binders; nothing from the arguments reaches the source text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .args import Binder

__all__ = ["compile_launch"]


def _inline(i: int, hint: tuple | None, names: dict[str, Any]) -> tuple[list[str], str]:
    """Source lines binding argument ``a{i}`` and the expression of its flat values."""
    if hint is None:
        return [f"    v{i} = b{i}(a{i}, stream)"], f"*v{i}"
    if hint[0] == "torch":
        _, kind, torch_dtype, device = hint
        names[f"d{i}"] = torch_dtype
        test = (f"    if a{i}.dtype is d{i} and a{i}.get_device() == {int(device)} "
                f"and a{i}.is_contiguous():")
        if kind == "pointer":
            return [test, f"        v{i} = a{i}.data_ptr()", "    else:",
                    f"        v{i}, = b{i}(a{i}, stream)"], f"v{i}"
        return [test, f"        v{i} = a{i}.data_ptr()", f"        w{i} = a{i}.numel()", "    else:",
                f"        v{i}, w{i} = b{i}(a{i}, stream)"], f"v{i}, w{i}"
    if hint[0] == "cupy":
        _, kind, numpy_dtype, device = hint
        names[f"d{i}"] = numpy_dtype
        test = (f"    if a{i}.dtype is d{i} and a{i}.data.device_id == {int(device)} "
                f"and a{i}.flags.c_contiguous:")
        if kind == "pointer":
            return [test, f"        v{i} = a{i}.data.ptr", "    else:",
                    f"        v{i}, = b{i}(a{i}, stream)"], f"v{i}"
        return [test, f"        v{i} = a{i}.data.ptr", f"        w{i} = a{i}.size", "    else:",
                f"        v{i}, w{i} = b{i}(a{i}, stream)"], f"v{i}, w{i}"
    if hint[0] == "int":
        _, lo, hi = hint
        test = f"    if a{i}.__class__ is int and {int(lo)} <= a{i} <= {int(hi)}:"
    else:  # "float": within the finite range (NaN and infinities take the checked path)
        names[f"lim{i}"] = float(hint[1])
        test = f"    if a{i}.__class__ is float and -lim{i} <= a{i} <= lim{i}:"
    return [test, f"        v{i} = a{i}", "    else:", f"        v{i}, = b{i}(a{i}, stream)"], f"v{i}"


def compile_launch(binders: Sequence[Binder], launch: Callable[..., None]) -> Callable[..., None]:
    """``f(args, grid, block, shared_mem, stream)`` binding every argument, then ``launch``."""
    names: dict[str, Any] = {"launch": launch}
    count = len(binders)
    lines = ["def bound_launch(args, grid, block, shared_mem, stream):"]
    if count:
        lines.append(f"    {', '.join(f'a{i}' for i in range(count))}, = args")
    values = []
    for i, binder in enumerate(binders):
        names[f"b{i}"] = binder.values
        body, expression = _inline(i, binder.inline, names)
        lines += body
        values.append(expression)
    lines.append(f"    launch(({', '.join(values)}{',' if len(values) == 1 else ''}), grid, block, "
                 "shared_mem, stream)")
    namespace: dict[str, Any] = dict(names)
    exec(compile("\n".join(lines), "<ptxbridge launch plan>", "exec"), namespace)
    return namespace["bound_launch"]
