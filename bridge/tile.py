"""cuTile frontend: ``cuda.tile`` kernels exported to cubin, and tileiras cubins loaded back.

A cuTile kernel's entry symbol is mangled from its whole signature
(``vadd_Kt1_A1f32_1l0_...``; docs/conventions.md), so the signature is
recovered from the name (:func:`ptxbridge.abi.cutile_names.demangle`) and
checked against the cubin's ``EIATTR_KPARAM_INFO`` records.  Launch demands
come from the cubin: block (1,1,1), or exactly its ``REQNTID``; no cluster.
cutile-rs kernels (``<kernel>_entry``) carry no signature in their names, so
:func:`load` takes one from the caller (signature text, a manifest or
Signature objects, see :func:`ptxbridge.artifact.coerce_signatures`).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from ptxbridge import cache
from ptxbridge.abi.cutile_names import demangle, is_cutile_symbol
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, CompileError, FormatError, ToolchainError
from ptxbridge.abi.signature import Signature
from ptxbridge.artifact import (
    Artifact,
    CodeKind,
    Provenance,
    artifact_from_bytes,
    artifact_from_file,
    coerce_signatures,
)
from ptxbridge.fingerprint import fingerprint
from ptxbridge.linker.target import default_arch

__all__ = ["export", "load"]

_ARCH = re.compile(r"sm_\d{2,3}[af]?")
_INSTALL = "install them with `pip install cuda-tile nvidia-cuda-tileiras`"


def export(kernel: Any, signatures: Any, arch: str | None = None) -> Artifact:
    """Compile a ``@cuda.tile.kernel`` ahead of time to a cubin for ``arch``, one entry per signature.

    Parameters
    ----------
    kernel : a ``cuda.tile.kernel``.
    signatures : one ``cuda.tile.compilation.KernelSignature`` or a sequence of them; a
        signature without ``symbol`` gets cuTile's mangled name.
    arch : the GPU to assemble for (``"sm_90"``, ``"sm_100"``...); default: the first GPU's arch,
        else ``sm_90``.  tileiras needs no GPU.

    Returns a cubin :class:`Artifact` whose kernels carry signatures recovered from the
    mangled names, with the Python parameter names, checked against the cubin.
    """
    compilation = _cuda_tile()
    pyfunc = getattr(getattr(kernel, "_annotated_function", None), "pyfunc", None)
    if pyfunc is None:
        raise ArgumentError(f"tile.export: kernel must be a @cuda.tile.kernel (got {type(kernel).__name__})")
    arch = default_arch() if arch is None else arch
    if not isinstance(arch, str) or not _ARCH.fullmatch(arch):
        raise ArgumentError(f"tile.export: arch must look like 'sm_90' (got {arch!r})")
    given = [signatures] if isinstance(signatures, compilation.KernelSignature) else list(signatures)
    if not given or not all(isinstance(s, compilation.KernelSignature) for s in given):
        raise ArgumentError("tile.export: signatures must be one or more "
                            f"cuda.tile.compilation.KernelSignature (got {signatures!r})")
    ours = [_signature(pyfunc, ks) for ks in given]
    versions = _versions()
    entry_key = cache.key(versions, fingerprint(pyfunc), repr(kernel._compiler_options), arch,
                          *(s.name for s in ours), *(str(s) for s in ours))

    def produce() -> bytes:
        out = io.BytesIO()
        try:
            compilation.export_kernel(kernel, given, out, gpu_code=arch, output_format="cubin")
        except FileNotFoundError as exc:  # cuda.tile's way of saying tileiras is missing
            raise ToolchainError(f"tileiras not found ({exc}); {_INSTALL}") from exc
        except Exception as exc:  # typing errors, tileiras failures: cuda.tile has many types
            raise CompileError(f"cuTile could not compile {pyfunc.__name__} for {arch}: "
                               f"{type(exc).__name__}", log=str(exc)) from exc
        return out.getvalue()

    cubin = cache.cached("tile", entry_key, produce)
    artifact = artifact_from_bytes(cubin, ours, source=f"<cuTile {pyfunc.__name__}>", name=pyfunc.__name__)
    provenance = Provenance("cuda-tile", versions, ("output_format=cubin", f"gpu_code={arch}",
                                                     f"options={kernel._compiler_options!r}"), arch)
    return dataclasses.replace(artifact, provenance=provenance)


def load(path: str | Path, signatures: Any = None) -> Artifact:
    """A tileiras (or cutile-rs) cubin as an artifact.

    cuTile Python kernels need no ``signatures``: their names carry them.  A
    cutile-rs kernel ``add_entry`` needs one named ``add`` or ``add_entry``
    with ``#[convention(cutile-rs)]``.
    """
    artifact = artifact_from_file(path, signatures)
    if artifact.kind is not CodeKind.CUBIN:
        raise FormatError(f"tile.load reads cubins (tileiras output) (got {artifact.kind.value})",
                          source=str(path))
    given = {s.name for s in coerce_signatures(signatures)} if signatures is not None else set()
    for name in artifact.kernels:
        if not is_cutile_symbol(name) and name not in given and name.removesuffix("_entry") not in given:
            raise AbiMismatchError(
                f"{name}: not a cuTile symbol, so its signature must be given, e.g. "
                f"signatures='#[convention(cutile-rs)] kernel {name.removesuffix('_entry')}"
                f"(x: Tensor<f32, 1>, y: Partition<f32, 1>)' (got none for it in {str(path)!r})")
    return artifact


def _signature(pyfunc: Any, kernel_signature: Any) -> Signature:
    """Our signature for one KernelSignature: demangled from its canonical mangled name."""
    names = [p.name for p in inspect.signature(pyfunc).parameters.values()]
    try:
        mangled = kernel_signature.with_mangled_symbol(pyfunc.__name__).symbol
    except Exception as exc:  # the mangler rejects what cuda.tile cannot export
        raise ArgumentError(f"{pyfunc.__name__}: cuda.tile cannot name this signature: {exc}") from exc
    sig = demangle(mangled, names)
    return dataclasses.replace(sig, name=kernel_signature.symbol or mangled)


def _cuda_tile() -> Any:
    try:
        from cuda.tile import compilation
    except ImportError as exc:
        raise ToolchainError(f"cuda-tile is not importable ({exc}); {_INSTALL}") from exc
    return compilation


def _versions() -> str:
    """cuda-tile and tileiras versions, for provenance and the cache key."""
    return ", ".join(f"{package} {_version(package)}" for package in ("cuda-tile", "nvidia-cuda-tileiras"))


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not from a wheel)"
