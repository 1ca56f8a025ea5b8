"""NVVM IR text in the dialect libNVVM reads for a target, whatever dialect it was written in.

libNVVM reads NVVM IR 2.0 with opaque pointers (``ptr``) only from compute_100 on; below, its
LLVM 7 reader wants typed pointers and fails with a bare "parse expected type".  cuda-oxide writes
the opaque dialect (upstream NVlabs/cuda-oxide #98), so its kernels that call libdevice ran on
Blackwell only.  Below compute_100 such IR is rewritten by :func:`ptxbridge.rust.llvm7.downgrade`
(the rewrite rustc's IR gets), after two cuda-oxide habits are made ones it knows:

- kernels are marked only in ``!nvvm.annotations`` (``!{ptr @k, !"kernel", i32 1}``), not with
  ``ptx_kernel``: they get ``ptx_kernel``, which the rewrite keeps and annotates again; the other
  annotations (``maxntidx``, ``reqntidx``, ``minctasm``, ``cluster_dim_x``...) are restated with
  the kernel's typed function pointer;
- the data layout of the modern dialect (``p3:32:32:32``, ``a:8:8``) is one the LLVM 7 reader
  refuses: it becomes the 64-bit layout the NVVM IR specification prescribes for that dialect;
- IR printed by LLVM 20 and later (bitcode read by :mod:`ptxbridge.nvvm.bitcode`) states the
  annotations as function attributes, the form LLVM itself upgrades them to (``ptx_kernel``,
  ``"nvvm.maxntid"="256,1,1"``, ``"nvvm.reqntid"``, ``"nvvm.cluster_dim"``, ``"nvvm.minctasm"``,
  ``"nvvm.maxnreg"``, ``"nvvm.maxclusterrank"``): they are annotations again, as above; another
  ``nvvm.`` attribute is refused naming the function.

IR without ``!nvvmir.version`` is read by libNVVM as version 1.0 and refused ("IR version 1.0
incompatible with current version 2.0"), so it gets the version libNVVM reports, in either
dialect.  IR without a data layout gets that 64-bit layout, in either dialect: libNVVM refuses it
below compute_100 ("Empty target data layout") and aborts the process from compute_100 on
(libNVVM 13.5, measured).  Bitcode is returned as it is: :func:`ptxbridge.nvvm.compile_to_ltoir`
reads it as text where libNVVM cannot take it (:mod:`ptxbridge.nvvm.bitcode`).  libNVVM's
verifier checks the result before it compiles.
"""

from __future__ import annotations

import re

from ptxbridge.abi.errors import CompileError
from ptxbridge.rust import llvm7

from .bitcode import is_bitcode

__all__ = ["LEGACY_DATALAYOUT", "for_libnvvm"]

LEGACY_DATALAYOUT = (b"e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-"
                     b"f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")

_OPAQUE = re.compile(rb'(?<![\w%@.$"-])ptr(?![\w.$-])')
_NODE = re.compile(rb"^!(\d+) = (?:distinct )?!\{(.*)\}\s*$", re.MULTILINE)
_ANNOTATIONS = re.compile(rb"^!nvvm\.annotations = !\{(.*)\}\s*$", re.MULTILINE)
_ANNOTATED = re.compile(rb"^ptr (@[-\w.$]+|@\"[^\"]*\"), (.*)$")
_PAIR = re.compile(rb'!"([\w.]+)", (i\d+ -?\d+)')
_LAYOUT = re.compile(rb'^target datalayout = "[^"]*"', re.MULTILINE)
_DEFINE = re.compile(rb"^define ((?:(?:private|internal|external|weak|weak_odr|linkonce|linkonce_odr|"
                     rb"dso_local|hidden|protected|default) )*)")
_TYPED_KERNEL = re.compile(rb'^!\d+ = !\{(.*) (@[-\w.$]+|@"[^"]*"), !"kernel", i32 1\}$', re.MULTILINE)
_DEFINED = re.compile(rb'^define [^@\n]*(@[-\w.$]+|@"[^"]*")\((.*)$', re.MULTILINE)
_GROUP = re.compile(rb"^attributes #(\d+) = \{(.*)\}\s*$", re.MULTILINE)
_NVVM_ATTRIBUTE = re.compile(rb'"nvvm\.(\w+)"="([^"]*)"')
# LLVM's function attributes for NVVM annotations (its AutoUpgrade): the annotation of each axis,
# or of the one value
_AXES = {b"maxntid": (b"maxntidx", b"maxntidy", b"maxntidz"),
         b"reqntid": (b"reqntidx", b"reqntidy", b"reqntidz"),
         b"cluster_dim": (b"cluster_dim_x", b"cluster_dim_y", b"cluster_dim_z"),
         b"minctasm": (b"minctasm",), b"maxnreg": (b"maxnreg",), b"maxclusterrank": (b"maxclusterrank",)}


def for_libnvvm(ir: bytes, llvm_major: int, version: tuple[int, ...]) -> bytes:
    """``ir`` as libNVVM reads it when it parses LLVM ``llvm_major`` IR for the target (7 below
    compute_100), stating NVVM IR ``version`` when it states none (see the module docstring)."""
    if is_bitcode(ir):
        return ir
    if llvm_major == llvm7.LLVM_MAJOR and _OPAQUE.search(_code_only(ir)):
        ir = _legacy(ir)
    if not _LAYOUT.search(ir):
        ir = b'target datalayout = "' + LEGACY_DATALAYOUT + b'"\n' + ir
    if b"!nvvmir.version" in ir:
        return ir
    node = max((int(m) for m in re.findall(rb"^!(\d+) = ", ir, re.MULTILINE)), default=-1) + 1
    stated = ", ".join(f"i32 {v}" for v in version)
    return ir.rstrip(b"\n") + f"\n\n!nvvmir.version = !{{!{node}}}\n!{node} = !{{{stated}}}\n".encode()


def _code_only(ir: bytes) -> bytes:
    """``ir`` without comments and string literals, where ``ptr`` may be a word like any other."""
    return re.sub(rb';[^\n]*|c?"[^"\n]*"', b"", ir)


def _annotations(ir: bytes) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Function -> its ``!nvvm.annotations`` (key, typed value) pairs, in file order, then those its
    ``nvvm.`` function attributes state."""
    found = _attributed(ir)
    listed = _ANNOTATIONS.search(ir)
    if listed is None:
        return found
    nodes = {m.group(1): m.group(2) for m in _NODE.finditer(ir)}
    for ref in re.findall(rb"!(\d+)", listed.group(1)):
        entry = _ANNOTATED.match(nodes.get(ref, b""))
        if entry is not None:
            found.setdefault(entry.group(1), []).extend(_PAIR.findall(entry.group(2)))
    return found


def _attributed(ir: bytes) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Function -> the annotations its ``nvvm.`` attributes (on its ``define`` line or in its
    attribute groups) state: ``"nvvm.maxntid"="256,1"`` is ``maxntidx`` 256, ``maxntidy`` 1."""
    groups = {m.group(1): m.group(2) for m in _GROUP.finditer(ir)}
    found: dict[bytes, list[tuple[bytes, bytes]]] = {}
    for define in _DEFINED.finditer(ir):
        name, rest = define.group(1), define.group(2)
        stated = b" ".join([rest, *(groups.get(g, b"") for g in re.findall(rb"#(\d+)", rest))])
        for key, value in _NVVM_ATTRIBUTE.findall(stated):
            keys = _AXES.get(key)
            values = value.split(b",")
            if keys is None or len(values) > len(keys) or not all(v.isdigit() for v in values):
                said = (b'%s has the attribute "nvvm.%s"="%s"' % (name, key, value)).decode(errors="replace")
                raise CompileError(f"NVVM IR function {said}, which the LLVM 7 dialect libNVVM reads below "
                                   "compute_100 cannot state; compile it for sm_100 or newer")
            found.setdefault(name, []).extend((k, b"i32 " + v) for k, v in zip(keys, values, strict=False))
    return found


def _legacy(ir: bytes) -> bytes:
    annotated = _annotations(ir)
    kernels = {name for name, pairs in annotated.items() if (b"kernel", b"i32 1") in pairs}
    lines = [_mark_kernel(line, kernels) for line in ir.split(b"\n")]
    try:
        text = llvm7.downgrade(b"\n".join(lines))
    except CompileError as exc:  # its words are rustc's: say what it means for this IR
        raise CompileError(f"NVVM IR with opaque pointers could not be rewritten in the LLVM 7 dialect "
                           f"libNVVM reads below compute_100 ({exc}); compile it for sm_100 or newer"
                           ) from None
    text = _LAYOUT.sub(b'target datalayout = "' + LEGACY_DATALAYOUT + b'"', text, count=1)
    return _restate(text, annotated)


def _mark_kernel(line: bytes, kernels: set[bytes]) -> bytes:
    """A ``define`` of an annotated kernel with the ``ptx_kernel`` calling convention added."""
    define = _DEFINE.match(line)
    if define is None or b"ptx_kernel" in line:
        return line
    name = re.search(rb"(@[-\w.$]+|@\"[^\"]*\")\(", line)
    if name is None or name.group(1) not in kernels:
        return line
    return line[:define.end()] + b"ptx_kernel " + line[define.end():]


def _restate(text: bytes, annotated: dict[bytes, list[tuple[bytes, bytes]]]) -> bytes:
    """The annotations other than ``kernel``, added to the rewrite's ``!nvvm.annotations`` with
    each kernel's typed function pointer (the rewrite states ``kernel`` only)."""
    typed = {name: kind for kind, name in _TYPED_KERNEL.findall(text)}
    extra = [(typed[name], name, key, value) for name, pairs in annotated.items() if name in typed
             for key, value in pairs if key != b"kernel"]
    listed = _ANNOTATIONS.search(text)
    if not extra or listed is None:
        return text
    first = max(int(m) for m in re.findall(rb"^!(\d+) = ", text, re.MULTILINE)) + 1
    nodes = [b'!%d = !{%s %s, !"%s", %s}' % (first + i, *entry) for i, entry in enumerate(extra)]
    listing = listed.group(1) + b"".join(b", !%d" % (first + i) for i in range(len(extra)))
    return (text[:listed.start()] + b"!nvvm.annotations = !{" + listing + b"}" + text[listed.end():]
            ).rstrip(b"\n") + b"\n" + b"\n".join(nodes) + b"\n"
