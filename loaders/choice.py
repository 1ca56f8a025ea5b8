"""Which code of an image a GPU runs: its own cubin, a cubin it can run, or the PTX JIT-compiled.

:func:`choose_code` is the decision, a pure function of facts (the GPU's arch, the image's targets,
its PTX's target and ISA, the driver's version), tested without a GPU; the CUDA loader acts on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ptxbridge.abi.errors import CudaError
from ptxbridge.abi.targets import Target, known_target, max_ptx_isa

__all__ = ["CodeChoice", "PtxFacts", "choose_code"]


@dataclass(frozen=True, slots=True)
class PtxFacts:
    """What the image's PTX is: the newest ``.target`` and ``.version`` of its modules, and the
    kernels it lacks (``Image.cpu_unavailable``: they came as machine code only)."""

    target: str | None
    isa: tuple[int, int] | None
    missing: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class CodeChoice:
    """``kind`` ``"cubin"`` (``arch``: the cubin's target) or ``"ptx"`` (JIT-compiled by the driver)."""

    kind: str
    arch: str | None


def choose_code(device: str | None, index: int, cubins: Mapping[str, bytes],
                ptx_facts: Callable[[], PtxFacts | None], cuda_version: tuple[int, int] | None) -> CodeChoice:
    """The code GPU ``index`` of arch ``device`` loads (``ptx_facts`` is asked only when no cubin fits).

    ==========================================================  ============================
    the image has                                               loaded
    ==========================================================  ============================
    a cubin for the GPU's arch                                  that cubin
    cubins the GPU runs (:meth:`Target.cubin_runs_on`)          the newest of them
    every kernel's PTX, for a target the GPU runs               the PTX, JIT-compiled by the
    (:meth:`Target.ptx_runs_on`) in an ISA the driver reads     driver
    (:func:`~ptxbridge.abi.targets.max_ptx_isa`)
    anything else                                               a :class:`CudaError` naming
                                                                the GPU, the image's targets
                                                                and what to rebuild
    ==========================================================  ============================

    An arch the driver does not report, or a name that is no target, is left to the driver: the
    first cubin loads (and the driver says whether it runs).
    """
    have = known_target(device)
    if have is None and cubins:
        return CodeChoice("cubin", next(iter(cubins)))
    built = {arch: known_target(arch) for arch in cubins}
    if have is not None:
        if have.sm in cubins:
            return CodeChoice("cubin", have.sm)
        running = [(t, arch) for arch, t in built.items() if t is not None and t.cubin_runs_on(have)]
        if running:
            return CodeChoice("cubin", max(running)[1])
    unknown = [arch for arch, t in built.items() if t is None]
    if unknown:  # a cubin whose arch the image does not state: the driver decides
        return CodeChoice("cubin", unknown[0])
    ptx = ptx_facts()
    why_not = _ptx_problem(have, ptx, cuda_version)
    if why_not is None:
        return CodeChoice("ptx", ptx.target if ptx else None)
    raise _refusal(device or "unknown", index, list(cubins), why_not)


def _ptx_problem(have: Target | None, ptx: PtxFacts | None,
                 cuda_version: tuple[int, int] | None) -> str | None:
    """Why the image's PTX cannot be JIT-compiled for ``have`` (None: it can)."""
    if ptx is None or ptx.target is None:
        return "it has no PTX to JIT-compile"
    if ptx.missing:
        shown = ", ".join(sorted(ptx.missing)[:4]) + (", ..." if len(ptx.missing) > 4 else "")
        return f"its PTX lacks kernels that came as machine code only ({shown})"
    target = known_target(ptx.target)
    if have is not None and target is not None and not target.ptx_runs_on(have):
        return f"its PTX is for {target}, which a {have} GPU cannot JIT-compile"
    if cuda_version is not None and ptx.isa is not None:
        reads = max_ptx_isa(cuda_version)
        if ptx.isa > reads:
            return (f"its PTX (ISA {ptx.isa[0]}.{ptx.isa[1]}) is newer than this driver JIT-compiles (CUDA "
                    f"{cuda_version[0]}.{cuda_version[1]} reads PTX ISA up to {reads[0]}.{reads[1]})")
    return None


def _refusal(device: str, index: int, targets: list[str], why_not: str) -> CudaError:
    if len(targets) == 1:
        has = f"the image's cubin is built for {targets[0]}, which it cannot run"
    elif targets:
        has = f"the image's cubins are built for {', '.join(targets)}, none of which it can run"
    else:
        has = "the image has no cubin"
    wanted = [*targets, device] if targets else [device]
    arch = wanted[0] if len(wanted) == 1 else wanted
    return CudaError(f"cuda:{index} is {device} but {has}, and {why_not}; rebuild the image for {device}: "
                     f"ptxbridge.link(..., arch={arch!r}) or `ptxbridge link ... --arch {','.join(wanted)} "
                     "-o FILE`", code="CUDA_ERROR_NO_BINARY_FOR_GPU")
