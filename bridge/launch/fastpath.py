"""Compile a launch plan into one Python function, once per (kernel, argument types).

A plan is a tuple of binders; calling them in a loop costs a call, a tuple
and a concatenation per argument.  For the common cases a binder says how
its accepting path reads (``Binder.inline``), and this module writes one
function that does those reads in line, falls back to the binder (which
checks fully and raises the house-format error) otherwise, and ends with
the loader's launch.  Generated code only ever names values from the
binders; nothing from the arguments reaches the source text.

When the optional C extension ``ptxbridge.launch._fastlaunch`` is built, plans whose
arguments are all what the C plan reads (``Binder.native``: tensors of torch, CuPy,
``__cuda_array_interface__`` and ``__dlpack__`` producers on pointers, slices -- also
``{"ptr", "len"}`` dicts --, DisjointSlice(2d), numba and cuTile arrays; by-value structs as
dicts, dataclasses or NumPy structured scalars, and tuples; numba / cuTile tuples) and plain
int/float scalars also get a C plan (:func:`native_specs`): it reads and checks the
tensors, checks the byte ranges of tensors the signature promises not to overlap
(:mod:`.aliasing`), packs on the stack and calls the driver; on any check failure it
declines and this module's Python function runs.  Set
``PTXBRIDGE_FASTLAUNCH=0`` to turn the C plan off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy

from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.abi.dtypes import DType
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.kinds import Slice
from ptxbridge.abi.layout import PACK_CODES, Layout
from ptxbridge.launch.aliasing import AliasCheck
from ptxbridge.launch.args import Binder
from ptxbridge.launch.native_args import NativeAddress, NativeItems, NativePrefix, NativeRecord, NativeTensor
from ptxbridge.launch.values import BF16_MAX, F16_MAX, F32_MAX

try:
    from ptxbridge.launch import _fastlaunch
except ImportError:  # not built (no compiler at install time): the Python path alone
    _fastlaunch = None

__all__ = ["compile_launch", "native_specs", "native_available"]

# The C plan's argument kinds and tensor forms (flat values per form; numba's depend on ndim), as
# bridge/launch/launch_abi.h defines them: the extension exports them.
_INT, _FLOAT = (_fastlaunch.ARG_INT, _fastlaunch.ARG_FLOAT) if _fastlaunch is not None else (None, None)
_FORMS = ({"pointer": (_fastlaunch.FORM_POINTER, 1), "slice": (_fastlaunch.FORM_SLICE, 2),
           "rows": (_fastlaunch.FORM_ROWS, 3), "numba": (_fastlaunch.FORM_NUMBA, 0),
           "tile": (_fastlaunch.FORM_TILE, 0)}
          if _fastlaunch is not None else {})


_HALVES = {"f16": ("e", F16_MAX), "bf16": ("E", BF16_MAX)}  # the C plan's codes and finite ranges


def native_available() -> bool:
    """The C plan is built and not switched off (``PTXBRIDGE_FASTLAUNCH=0``)."""
    return _fastlaunch is not None and os.environ.get("PTXBRIDGE_FASTLAUNCH", "1") != "0"


def _codes(layout: Layout, first: int, count: int) -> list[tuple[int, int]] | None:
    """(offset, struct code) of ``count`` flat parameters from ``first``; None for aggregates."""
    laid = layout.params[first:first + count]
    if len(laid) != count or any(p.param.aggregate or p.param.ptx_type not in PACK_CODES for p in laid):
        return None
    return [(p.offset, ord(PACK_CODES[p.param.ptx_type])) for p in laid]


def _tensor_spec(native: NativeTensor, arg_type: type, places: list[tuple[int, int]]) -> tuple | None:
    """The C plan's spec of one tensor argument (bridge/launch/_tensors.c read_tensor_spec)."""
    want = native.dtype
    if native.producer == "dlpack":
        kind, source = _fastlaunch.ARG_TENSOR, getattr(arg_type, "__dlpack_c_exchange_api__", None)
        if source is None:
            return None
    elif native.producer == "capsule":
        kind, source = _fastlaunch.ARG_CAPSULE, None
    else:
        dtype = numpy.dtype(want.numpy_name)
        cupy = native.producer == "cupy"
        kind, source = (_fastlaunch.ARG_CUPY, dtype) if cupy else (_fastlaunch.ARG_CAI, dtype.str)
    where = (DLPACK_CUDA, native.device_id) if native.device_id >= 0 else (DLPACK_CPU, 0)
    return (kind, arg_type, source, want.code, want.bits, *where, _FORMS[native.form][0], native.ndim,
            ord(native.layout), want.itemsize, int(native.refuses_readonly), native.per, native.element_align,
            tuple(places),
            *(() if native.tile is None else (native.tile,)))


def _scalar_spec(dt: DType, offset: int) -> tuple:
    """An int, bool or float member of a record at ``offset``, range-checked as values.py checks it
    (bool: True, False, 0 or 1; f16 and bf16 as values.py rounds them, 'E' standing for bf16)."""
    if dt.name == "bool":
        return (_INT, offset, ord("?"), 0, 1)
    if dt.name in _HALVES:
        code, limit = _HALVES[dt.name]
        return (_FLOAT, offset, ord(code), limit)
    if dt.is_integer:
        top = 1 << (dt.bits - 1)
        lo, hi = (-top, top - 1) if dt.is_signed else (0, 2 * top - 1)
        code = {8: "b", 16: "h", 32: "i", 64: "q"}[dt.bits]
        return (_INT, offset, ord(code if dt.is_signed else code.upper()), lo, hi)
    return (_FLOAT, offset, ord("f" if dt.bits == 32 else "d"), F32_MAX if dt.bits == 32 else float("inf"))


# how _records.c finds a record's members: by position (a tuple / list), key (a dict), attribute (a dataclass)
_BY_POSITION, _BY_KEY, _BY_ATTRIBUTE = range(3)


def _container(value: Any, keys: tuple[str, ...] | None, count: int) -> int | None:
    """How the C plan reads the members of ``value`` (``_BY_*``), or None where it does not (a NumPy
    record, a container of another length)."""
    kind = type(value)
    if keys is None:
        return _BY_POSITION if kind in (tuple, list) and len(value) == count else None
    if kind is dict:
        return _BY_KEY if len(value) == count else None
    return _BY_ATTRIBUTE if hasattr(kind, "__dataclass_fields__") else None


def _member(value: Any, by: int, keys: tuple[str, ...] | None, k: int) -> Any:
    return (value[k] if by == _BY_POSITION else value.get(keys[k]) if by == _BY_KEY
            else getattr(value, keys[k], None))


def _record_spec(native: NativeRecord, base: int, value: Any) -> tuple | None:
    """The C plan's spec of a by-value struct or tuple whose blob starts at byte ``base``
    (bridge/launch/_records.c read_record_spec), its tensor members read as in ``value`` (the call
    that builds the plan): None when ``value`` is a container the C plan does not read (a NumPy
    record), as it would then decline every call of these argument types."""
    keys = native.keys
    if type(value) is numpy.void:
        return _fields_spec(native, base, value.dtype)
    by = _container(value, keys, len(native.members))
    if by is None:
        return None
    members = []
    for k, (offset, what) in enumerate(native.members):
        at, member = base + offset, _member(value, by, keys, k)
        if isinstance(what, DType):
            members.append(_scalar_spec(what, at))
        elif isinstance(what, NativeRecord):
            nested = _record_spec(what, at, member)
            if nested is None:
                return None
            members.append(nested)
        else:
            members.append(_address_spec(what, base, member))
    container = (type(value),) if by == _BY_ATTRIBUTE else ()
    return (_fastlaunch.ARG_RECORD, by, keys, tuple(members), *container)


# per scalar member dtype, what _records.c checks of a field copied as it is: NaN (its payload is not
# what values.py writes), a bool byte other than 0 and 1
_FIELD_CHECKS = {"f16": ord("e"), "f32": ord("f"), "f64": ord("d"), "bool": ord("?")}


def _fields_spec(native: NativeRecord, base: int, dtype: numpy.dtype) -> tuple | None:
    """A struct given as a NumPy structured scalar of ``dtype`` (bridge/launch/_records.c pack_fields):
    None unless its fields are the struct's, in order, each of its member's own NumPy dtype (nested
    structs: nested structured fields), so that copying a field's bytes is what values.py writes."""
    copies = _field_copies(native, base, dtype, 0)
    return None if copies is None else (_fastlaunch.ARG_FIELDS, numpy.void, dtype, dtype.itemsize, copies)


def _field_copies(native: NativeRecord, base: int, dtype: numpy.dtype, start: int) -> tuple | None:
    if native.keys is None or dtype.names is None or tuple(dtype.names) != native.keys:
        return None
    copies: list[tuple[int, int, int, int]] = []
    for (offset, what), name in zip(native.members, dtype.names, strict=True):
        field, at = dtype.fields[name][:2]
        if isinstance(what, NativeRecord):
            nested = _field_copies(what, base + offset, field, start + at)
            if nested is None:
                return None
            copies += nested
        elif isinstance(what, DType) and what.numpy_name and field == numpy.dtype(what.numpy_name):
            copies.append((base + offset, start + at, field.itemsize, _FIELD_CHECKS.get(what.name, 0)))
        else:
            return None
    return tuple(copies)


def _prefix_spec(arg: Any, tensor: Callable[[type], NativeTensor | None],
                 spec: Callable[[NativeTensor, Any], tuple | None]) -> tuple | None:
    """A slice given as ``{"ptr": tensor, "len": n}`` (args.py ``_slice_prefix``), an argument or a
    member: the tensor read as ``tensor(its type)`` says (a slice; its places as ``spec`` writes them);
    None where ``arg`` is no such dict or the C plan does not read its tensor."""
    if type(arg) is not dict or arg.keys() != {"ptr", "len"}:
        return None
    try:
        native = tensor(type(arg["ptr"]))
    except ArgumentError:  # the Python path says so
        return None
    found = None if native is None or native.form != "slice" else spec(native, arg["ptr"])
    return None if found is None else (_fastlaunch.ARG_PREFIX, found)


def _address_spec(address: NativeAddress, base: int, value: Any) -> tuple:
    """A pointer or slice member: a tensor of ``value``'s type read there (for a None or int address in
    the building call: a torch tensor, when torch is imported), and whether None / ints are taken; a
    slice's ``{"ptr", "len"}`` dict as a top-level one is read."""
    places = [(base + at, ord(code)) for at, code in address.places]
    prefix = None if not isinstance(address.t, Slice) else _prefix_spec(
        value, address.tensor, lambda native, tensor: _tensor_spec(native, type(tensor), places))
    if prefix is not None:
        return prefix
    arg_type = type(value)
    if value is None or arg_type is int:
        torch = sys.modules.get("torch")
        arg_type = torch.Tensor if torch is not None else None
    native = None if arg_type is None else address.tensor(arg_type)
    tensor = None if native is None else _tensor_spec(native, arg_type, places)
    return (_fastlaunch.ARG_ADDRESS, places[0][0], ord("Q"), tensor, int(address.raw))


def native_specs(binders: Sequence[Binder], args: Sequence[Any], layout: Layout) -> tuple | None:
    """Per argument, what the C plan reads and where it packs it; None when any argument
    needs the Python path.  ``args``: the call that builds the plan (its types are the plan's; the
    types inside its structs and tuples say how their members are read)."""
    cursor = [0]
    specs = []
    for binder, arg in zip(binders, args, strict=True):
        spec = _spec(binder, arg, layout, cursor)
        if spec is None:
            return None
        specs.append(spec)
    return tuple(specs) if cursor[0] == len(layout.params) else None


def _spec(binder: Binder, arg: Any, layout: Layout, cursor: list[int]) -> tuple | None:
    """One argument's spec, its flat parameters taken from ``layout`` at ``cursor[0]`` on."""
    native, hint = binder.native, binder.inline
    if isinstance(native, DType):  # a bool / f16 / bf16 scalar: one value, plain or a blob
        at = cursor[0]
        cursor[0] += 1
        return _scalar_spec(native, layout.params[at].offset) if at < len(layout.params) else None
    if isinstance(native, NativePrefix):
        def tensor_spec(tensor: NativeTensor, value: Any) -> tuple | None:
            return _spec(Binder(binder.values, native=tensor), value, layout, cursor)
        return _prefix_spec(arg, native.tensor, tensor_spec)
    if isinstance(native, NativeRecord):
        at = cursor[0]
        if at >= len(layout.params) or not layout.params[at].param.aggregate:
            return None
        cursor[0] += 1
        return _record_spec(native, layout.params[at].offset, arg)
    if isinstance(native, NativeItems):
        if type(arg) not in (tuple, list) or len(arg) != native.count:
            return None
        items = []
        for index, item in enumerate(arg):
            try:
                binder = native.binder(index, type(item))
            except ArgumentError:  # the Python path says so, after what it checks first
                return None
            spec = _spec(binder, item, layout, cursor)
            if spec is None:
                return None
            items.append(spec)
        return (_fastlaunch.ARG_RECORD, _BY_POSITION, None, tuple(items))
    if native is not None:
        if native.ndim > _fastlaunch.MAX_NDIM:
            return None
        # numba: meminfo, parent, nitems, itemsize, data, shape, strides; tile: data, shape, strides
        count = _FORMS[native.form][1] or (1 if native.form == "tile" else 5) + 2 * native.ndim
    elif hint is not None and hint[0] in ("int", "float"):
        count = 1
    else:
        return None
    places = _codes(layout, cursor[0], count)
    cursor[0] += count
    if places is None:
        return None
    if native is not None:
        return _tensor_spec(native, type(arg), places)
    if hint[0] == "int":
        return (_INT, *places[0], int(hint[1]), int(hint[2]))
    return (_FLOAT, *places[0], float(hint[1]))


def native_alias(specs: tuple, promises: tuple[tuple, tuple] | None) -> tuple[tuple, tuple] | None:
    """``AliasCheck.native_promises`` as the C plan takes them: each member path as (argument index,
    member position, ...) into ``specs``; None where a path does not end at a tensor the plan reads."""
    if promises is None:
        return None
    pairs, distinct = promises
    found = [_positions(specs, path) for path in (*(p for pair in pairs for p in pair), *distinct)]
    if any(f is None for f in found):
        return None
    count = 2 * len(pairs)
    return tuple(zip(found[:count:2], found[1:count:2], strict=True)), tuple(found[count:])


def _positions(specs: tuple, path: tuple) -> tuple[int, ...] | None:
    index, *steps = path
    spec, found = specs[index], [index]
    for step in steps:
        if spec[0] != _fastlaunch.ARG_RECORD:
            return None
        _, by_name, keys, members, *_ = spec
        position = (keys.index(step) if step in keys else None) if by_name else step
        if not isinstance(position, int) or not 0 <= position < len(members):
            return None
        found.append(position)
        spec = members[position]
    return tuple(found)


def native_plan(size: int, specs: tuple, alias: tuple[tuple, tuple] = ((), ()), **launch: Any) -> Any:
    """A ``_fastlaunch.Plan``; ``launch`` is the loader's ``native_facts`` (the kernel handle, the
    context and the driver's entry points, see bridge/launch/_fastlaunch.c).  ``alias``
    (:func:`native_alias`): pairs of member paths whose tensors must not overlap, and the paths of
    tensors that must not overlap themselves (the plan declines when they do)."""
    pairs, distinct = alias
    return _fastlaunch.Plan(size, specs, alias_pairs=pairs, distinct=distinct, **launch)


def _inline_tensor(i: int, test: str, reads: tuple[str, str], kind: str,
                   itemsize: int) -> tuple[list[str], str]:
    """Lines reading a tensor's address (and element count, for slices) inline when ``test``
    holds, else through its checked binder ``b{i}``; with the expression of its flat values.
    ``itemsize`` > 0: also its byte range ``[l{i}, e{i})`` for the no-alias test (after a binder's
    fallback the range is everything, so the full check decides)."""
    ptr, numel = reads
    flat = f"v{i}" if kind == "pointer" else f"v{i}, w{i}"
    inline = [test, f"        v{i} = {ptr}"] + ([] if kind == "pointer" else [f"        w{i} = {numel}"])
    fallback = [f"        {flat}{',' if kind == 'pointer' else ''} = b{i}(a{i}, stream)"]
    if itemsize:
        count = numel if kind == "pointer" else f"w{i}"
        inline.append(f"        l{i}, e{i} = v{i}, v{i} + {count} * {itemsize}")
        fallback.append(f"        l{i}, e{i} = -1, {1 << 65}")
    return [*inline, "    else:", *fallback], flat


def _inline(i: int, hint: tuple | None, names: dict[str, Any], ranged: bool = False) -> tuple[list[str], str]:
    """Source lines binding argument ``a{i}`` and the expression of its flat values (with its byte
    range when ``ranged``)."""
    if hint is None:
        return [f"    v{i} = b{i}(a{i}, stream)"], f"*v{i}"
    if hint[0] == "torch":
        _, kind, torch_dtype, device = hint
        names[f"d{i}"] = torch_dtype
        cpu = "" if device >= 0 else f"a{i}.is_cpu and "  # get_device() is -1 for meta tensors too
        test = (f"    if a{i}.dtype is d{i} and a{i}.get_device() == {int(device)} "
                f"and {cpu}a{i}.is_contiguous():")
        return _inline_tensor(i, test, (f"a{i}.data_ptr()", f"a{i}.numel()"), kind,
                              torch_dtype.itemsize if ranged else 0)
    if hint[0] == "cupy":
        _, kind, numpy_dtype, device = hint
        names[f"d{i}"] = numpy_dtype
        test = (f"    if a{i}.dtype is d{i} and a{i}.data.device_id == {int(device)} "
                f"and a{i}.flags.c_contiguous:")
        return _inline_tensor(i, test, (f"a{i}.data.ptr", f"a{i}.size"), kind,
                              numpy_dtype.itemsize if ranged else 0)
    if hint[0] == "int":
        _, lo, hi = hint
        test = f"    if a{i}.__class__ is int and {int(lo)} <= a{i} <= {int(hi)}:"
    else:  # "float": within the finite range (NaN and infinities take the checked path)
        names[f"lim{i}"] = float(hint[1])
        test = f"    if a{i}.__class__ is float and -lim{i} <= a{i} <= lim{i}:"
    return [test, f"        v{i} = a{i}", "    else:", f"        v{i}, = b{i}(a{i}, stream)"], f"v{i}"


def _alias_test(binders: Sequence[Binder], check: AliasCheck) -> tuple[set[int], str]:
    """The arguments whose byte ranges the plan reads inline, and the line that runs ``check``:
    only when two of those ranges overlap, or always when a promise needs more than ranges."""
    pairs = check.argument_pairs()
    inline = {i for i, b in enumerate(binders) if b.inline is not None and b.inline[0] in ("torch", "cupy")}
    if not pairs or any(i not in inline for pair in pairs for i in pair):
        return set(), "    if check_aliasing: check(args)"
    quick = " or ".join(f"l{j} < e{i} and l{i} < e{j}" for i, j in pairs)
    return {i for pair in pairs for i in pair}, f"    if check_aliasing and ({quick}): check(args)"


def compile_launch(binders: Sequence[Binder], launch: Callable[..., None],
                   check: AliasCheck | None = None) -> Callable[..., None]:
    """``f(args, grid, block, shared_mem, stream, check_aliasing=True)`` binding every argument,
    then ``check(args)`` (the no-alias promises, :mod:`.aliasing`) unless told not to, then ``launch``."""
    names: dict[str, Any] = {"launch": launch, "check": check}
    count = len(binders)
    lines = ["def bound_launch(args, grid, block, shared_mem, stream, check_aliasing=True):"]
    if count:
        lines.append(f"    {', '.join(f'a{i}' for i in range(count))}, = args")
    ranged, test = _alias_test(binders, check) if check is not None else (set(), "")
    values = []
    for i, binder in enumerate(binders):
        names[f"b{i}"] = binder.values
        body, expression = _inline(i, binder.inline, names, i in ranged)
        lines += body
        values.append(expression)
    if test:
        lines.append(test)
    lines.append(f"    launch(({', '.join(values)}{',' if len(values) == 1 else ''}), grid, block, "
                 "shared_mem, stream)")
    namespace: dict[str, Any] = dict(names)
    exec(compile("\n".join(lines), "<ptxbridge launch plan>", "exec"), namespace)
    return namespace["bound_launch"]
