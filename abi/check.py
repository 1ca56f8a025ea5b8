"""Check a signature's lowering against what a code object declares.

The signature side is :attr:`Signature.layout` (``abi.layout``); the code side
is a list of :class:`DeclaredParam` records, each (ordinal, offset, size), made
from a PTX ``.entry``/``.func`` here, or from a cubin's ``EIATTR_KPARAM_INFO``
records by the cubin reader.  Types are not compared: the same 4 bytes are
``.f32`` in numba PTX, ``.b32`` in a ``.func`` and ``.u32`` for an ``int`` in
NVRTC PTX, and the driver only sees offsets and sizes (docs/conventions.md, "The driver side").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .errors import AbiMismatchError
from .layout import LaidParam
from .ptx import TYPE_SIZES, PtxFunction, PtxModule, PtxParam, param_offsets
from .signature import Param, Signature

__all__ = ["DeclaredParam", "KernelRecords", "check", "check_layout", "declared_params", "find_entry"]


@dataclass(frozen=True, slots=True)
class DeclaredParam:
    """One parameter as a code object declares it; ``type`` is ``None`` when unknown (cubin)."""

    ordinal: int
    offset: int
    size: int
    type: str | None = None


def declared_params(params: tuple[PtxParam, ...]) -> tuple[DeclaredParam, ...]:
    """PTX parameters at their natural-alignment offsets (where the driver places them)."""
    return tuple(DeclaredParam(i, offset, p.nbytes, p.type)
                 for i, (p, offset) in enumerate(zip(params, param_offsets(params), strict=True)))


def find_entry(module: PtxModule, name: str) -> PtxFunction:
    """The ``.entry``/``.func`` called ``name``, or the one generic cuda-oxide instance ``name_TID_<32 hex>``.

    Raises :class:`AbiMismatchError` when there is none, or several instances.
    """
    for function in module.functions:
        if function.name == name:
            return function
    generic = re.compile(re.escape(name) + r"_TID_[0-9a-fA-F]{32}")
    found = [f for f in module.functions if generic.fullmatch(f.name)]
    if len(found) == 1:
        return found[0]
    if found:
        raise AbiMismatchError(f"{name}: several generic instances in {module.source}, name one exactly "
                               f"(got {', '.join(f.name for f in found)})")
    names = ", ".join(f.name for f in module.functions) or "none"
    raise AbiMismatchError(f"{name}: {module.source} has no .entry or .func of that name (got {names})")


class KernelRecords(Protocol):
    """A compiled kernel that records its parameters itself: a cubin ``Kernel`` (``EIATTR_KPARAM_INFO``)."""

    name: str
    reqntid: tuple[int, int, int] | None
    maxntid: tuple[int, int, int] | None
    cluster_dims: tuple[int, int, int] | None

    def declared_params(self) -> tuple[DeclaredParam, ...]: ...


def check(signature: Signature, code_object: PtxFunction | PtxModule | KernelRecords) -> None:
    """Raise :class:`AbiMismatchError` unless ``code_object`` declares what ``signature`` lowers to.

    ``code_object`` is a PTX function, a PTX module in which the function is
    found by :func:`find_entry`, or a cubin kernel.  Kernels must be
    ``.entry``, device functions ``.func``; a device function's return value
    is compared too.  Launch demands stated on both sides must agree.
    """
    if not isinstance(code_object, (PtxFunction, PtxModule)):
        if not callable(getattr(code_object, "declared_params", None)):
            raise TypeError("check: code_object must be a PtxFunction, PtxModule or cubin Kernel "
                            f"(got {type(code_object).__name__})")
        what = f"cubin kernel {code_object.name}"  # its EIATTR_KPARAM_INFO records
        if signature.kind != "kernel":
            raise AbiMismatchError(f"{signature.name}: a cubin records parameters of kernels only; check a "
                                   f"device function against its PTX (got the {what})")
        check_layout(signature, code_object.declared_params(), what)
        _check_launch(signature, what, code_object.reqntid, code_object.maxntid, None,
                      code_object.cluster_dims)
        return
    function = find_entry(code_object, signature.name) if isinstance(code_object, PtxModule) else code_object
    expected_kind = "entry" if signature.kind == "kernel" else "func"
    if function.kind != expected_kind:
        raise AbiMismatchError(f"{signature.name}: the signature is a {signature.kind} function, so the PTX "
                               f"must declare a .{expected_kind} (got .{function.kind} {function.name})")
    what = f"PTX .{function.kind} {function.name}"
    check_layout(signature, declared_params(function.params), what)
    if signature.kind == "device":
        # the return value is laid out like a lone parameter (PTX ISA 7.1: func_retval0 in .param space)
        returns = () if signature.returns is None else Signature(
            signature.name, (Param("return", signature.returns),), signature.convention).layout.params
        _compare(signature.name, "the return value", returns, declared_params(function.returns), what)
    _check_launch(signature, what, function.reqntid, function.maxntid, function.minnctapersm,
                  function.reqnctapercluster)


def check_layout(signature: Signature, declared: Sequence[DeclaredParam], what: str) -> None:
    """Compare ``signature.layout`` with ``declared`` (count, sizes, offsets), parameter by parameter.

    ``what`` names the code side in messages ("PTX .entry saxpy", "cubin kernel saxpy").
    """
    laid = signature.layout.params
    totals = "" if len(laid) == len(declared) else (
        f"; in all, the signature lowers to {_count(len(laid))} and the {what} has {len(declared)}")
    groups: dict[int, list[LaidParam]] = {}
    for lp in laid:  # one pass: a kernel may have thousands of parameters (32,764 bytes of them)
        groups.setdefault(lp.param.source, []).append(lp)
    position = 0
    for index, param in enumerate(signature.params):
        group = tuple(groups.get(index, ()))
        if group and _matches(group, declared, position):  # the common case, in time linear overall
            position += len(group)
        elif group and fills_one_aggregate(group, declared, position):
            position += 1
        elif group:  # zero-sized parameters lower to nothing and occupy nothing
            _compare(signature.name, f"parameter {param.name!r}", group, declared[position:], what, totals)
            position += len(group)
    if len(declared) > position:
        extra = declared[position:]
        last = (f"after parameter {signature.params[-1].name!r}" if signature.params
                else "for a signature with none")
        raise AbiMismatchError(f"{signature.name}: the {what} has {len(extra)} more "
                               f"param{'s' if len(extra) > 1 else ''} {last} "
                               f"({_spell_declared(extra, detailed=True)})")


def _matches(group: Sequence[LaidParam], declared: Sequence[DeclaredParam], position: int) -> bool:
    """What :func:`_compare` accepts, without copying ``declared``: the next ``len(group)`` declared
    params equal the group's, and the one after starts past it (declared params come in offset order)."""
    after = position + len(group)
    if after > len(declared) or (after < len(declared) and declared[after].offset < group[-1].end):
        return False
    return all(d.offset == lp.offset and d.size == lp.param.size
               for d, lp in zip(declared[position:after], group, strict=True))


def fills_one_aggregate(group: Sequence[LaidParam], declared: Sequence[DeclaredParam], position: int) -> bool:
    """Whether the flat params of one parameter are exactly the bytes of the one aggregate declared
    at ``position``: a slice's pointer and length are plain rustc's 16-byte fat pointer
    (``.param .align 8 .b8 x[16]``).  The packed buffer is the same either way, and the loaders
    launch from that buffer (or from pointers at the driver's own parameter offsets)."""
    if len(group) < 2 or position >= len(declared):
        return False
    d = declared[position]
    return (d.type in (None, "b8") and d.offset == group[0].offset and d.size == group[-1].end - d.offset
            and (position + 1 == len(declared) or declared[position + 1].offset >= group[-1].end))


def _compare(kernel: str, subject: str, group: Sequence[LaidParam], rest: Sequence[DeclaredParam],
             what: str, totals: str = "") -> None:
    """``group`` (one signature parameter's flat params) against the declared params from its position on."""
    if not group:
        if rest:
            raise AbiMismatchError(f"{kernel}: {subject} lowers to nothing but the {what} has "
                                   f"{len(rest)} ({_spell_declared(rest, detailed=False)})")
        return
    end = group[-1].end
    # what the code object has "at that position": from here up to the end of this parameter's bytes
    seen = [d for d in rest if d.offset < end] or list(rest[:1])
    if len(seen) == len(group) and all(d.offset == lp.offset and d.size == lp.param.size
                                       for d, lp in zip(seen, group, strict=True)):
        return
    detailed = len(seen) == len(group)
    have = _spell_declared(seen, detailed) if seen else "nothing left"
    raise AbiMismatchError(f"{kernel}: {subject} lowers to {_count(len(group))} "
                           f"({_spell_laid(group, detailed)}) but the {what} has {len(seen)} ({have}) "
                           f"at that position{totals}")


def _check_launch(signature: Signature, what: str, reqntid: tuple[int, ...] | None,
                  maxntid: tuple[int, ...] | None, minnctapersm: int | None,
                  cluster: tuple[int, ...] | None) -> None:
    """Launch demands both sides state must agree (missing trailing dimensions read as 1)."""
    launch = signature.launch
    for label, mine, theirs in (("reqntid", launch.reqntid, reqntid), ("maxntid", launch.maxntid, maxntid),
                                ("cluster shape", launch.cluster, cluster)):
        if mine is not None and theirs is not None and tuple(mine) != theirs + (1,) * (3 - len(theirs)):
            raise AbiMismatchError(f"{signature.name}: the signature's {label} is {tuple(mine)} but the "
                                   f"{what} declares {tuple(theirs)}")
    if launch.minnctapersm is not None and minnctapersm not in (None, launch.minnctapersm):
        raise AbiMismatchError(f"{signature.name}: the signature's minnctapersm is {launch.minnctapersm} but "
                               f"the {what} declares {minnctapersm}")


def _count(n: int) -> str:
    return f"{n} param" if n == 1 else f"{n} params"


def _spell(ptx_type: str | None, size: int) -> str:
    """``u64``, ``b8[24]`` for aggregates, ``8 bytes`` when the type is unknown."""
    if ptx_type is None:
        return f"{size} bytes"
    natural = TYPE_SIZES.get(ptx_type.rpartition(".")[2], size)
    return ptx_type if natural == size else f"{ptx_type}[{size // natural}]"


def _spell_laid(group: Sequence[LaidParam], detailed: bool) -> str:
    suffix = " at offset {}" if detailed else ""
    return ", ".join(_spell(lp.param.ptx_type, lp.param.size) + suffix.format(lp.offset) for lp in group)


def _spell_declared(params: Sequence[DeclaredParam], detailed: bool) -> str:
    suffix = " at offset {}" if detailed else ""
    return ", ".join(_spell(d.type, d.size) + suffix.format(d.offset) for d in params)
