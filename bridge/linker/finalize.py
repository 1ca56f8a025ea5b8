"""NVVM IR and LTO-IR inputs: compiled, kept to their compile policy, and finalised to PTX.

- NVVM IR inputs become LTO-IR through libNVVM (:mod:`ptxbridge.nvvm`) for
  the target they record (else the link's), under the policy their
  ``link_options`` spell.
- An LTO-IR input built for a target the link's cannot take (newer, or another
  ``a`` arch) is a :class:`LinkError` naming both, before nvJitLink runs.
- Every LTO-IR input's ``link_options`` (a cuda-oxide bundle's ``-fma=0``,
  ``-lineinfo``, ``-g``) join the nvJitLink options; two inputs that need
  different policies, or a :class:`LinkOptions` that contradicts one, are a
  :class:`LinkError` naming them (nvJitLink applies one policy to a link).

Finalising LTO-IR to PTX (for the CPU loader, and to read an LTO-IR input's
kernels) is :func:`ptxbridge.linker.nvjitlink.ptx_from_ltoir`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ptxbridge.abi.errors import LinkError
from ptxbridge.abi.targets import known_target, parse_target
from ptxbridge.artifacts.artifact import Artifact, CodeKind
from ptxbridge.linker.options import LinkOptions
from ptxbridge.nvvm import compile_to_ltoir, policy_of

__all__ = ["as_ltoir", "check_ltoir_targets", "policy_args"]


def as_ltoir(artifact: Artifact, arch: str) -> Artifact:
    """``artifact`` with NVVM IR compiled to LTO-IR (for its recorded target, else ``arch``)."""
    if artifact.kind != CodeKind.NVVM:
        return artifact
    target = artifact.arch or arch
    code = compile_to_ltoir(artifact.code, artifact.name, target, policy_of(artifact.link_options))
    return dataclasses.replace(artifact, code=code, kind=CodeKind.LTOIR, arch=target)


def check_ltoir_targets(artifacts: Sequence[Artifact], arch: str) -> None:
    """A :class:`LinkError` naming both targets for an LTO-IR input nvJitLink would refuse for ``arch``
    (``NVJITLINK_ERROR_ARCH_MISMATCH``): LTO-IR links for its own target and newer ones, as PTX
    JIT-compiles (:meth:`ptxbridge.abi.targets.Target.ptx_runs_on`); ``a`` code for its own only."""
    linking = parse_target(arch)
    for artifact in artifacts:
        built = known_target(artifact.arch) if artifact.kind is CodeKind.LTOIR else None
        if built is not None and not built.ptx_runs_on(linking):
            raise LinkError(f"{artifact.name}: LTO-IR built for {built}; linking for {linking}, which it "
                            f"cannot be linked for: link for {built} (arch={built.sm!r}) or rebuild it for "
                            f"{linking}")


def policy_args(artifacts: Sequence[Artifact], options: LinkOptions) -> list[str]:
    """The nvJitLink options the LTO inputs' compile policy adds to a link with ``options``."""
    needing = [a for a in artifacts if a.kind in (CodeKind.LTOIR, CodeKind.NVVM) and a.link_options]
    if not needing:
        return []
    first = needing[0]
    for other in needing[1:]:
        if set(other.link_options) != set(first.link_options):
            raise LinkError(f"{first.name} must be linked with {' '.join(first.link_options)} but "
                            f"{other.name} with {' '.join(other.link_options)}, and nvJitLink applies one "
                            "policy to the whole link: link them in separate images")
    wanted = set(first.link_options)
    if options.fma is not None and f"-fma={int(options.fma)}" not in wanted:
        raise LinkError(f"{first.name} was built with {' '.join(first.link_options)} but LinkOptions.fma="
                        f"{options.fma}; drop LinkOptions.fma to keep the policy it was compiled under")
    given = {"-g": options.debug, "-lineinfo": options.lineinfo}
    return [o for o in first.link_options if not (o.startswith("-fma=") and options.fma is not None)
            and not given.get(o)]
