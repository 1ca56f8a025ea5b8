"""NVVM IR and LTO-IR inputs: compiled, kept to their compile policy, and finalised to PTX.

- NVVM IR inputs become LTO-IR through libNVVM (:mod:`ptxbridge.nvvm`) for
  the target they record (else the link's), under the policy their
  ``link_options`` spell.
- An LTO-IR input built for a target the link's cannot take (newer, another
  ``a`` arch, another family for an ``f`` one) is a :class:`LinkError` naming
  both, before nvJitLink runs; so is a fatbin or host object holding LTO-IR
  only, none of it for such a target (its fatbin records the ``a`` / ``f``
  suffix, which an LTO-IR header does not record for ``f``; nvJitLink's own
  word for it is a bare "bad input").
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

from ptxbridge.abi.errors import FormatError, LinkError
from ptxbridge.abi.fatbin import read_fatbin
from ptxbridge.abi.targets import Target, known_target, parse_target
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
    (``NVJITLINK_ERROR_ARCH_MISMATCH``, or "bad input" for a container): LTO-IR links for its own
    target and newer ones, as PTX JIT-compiles (:meth:`ptxbridge.abi.targets.Target.ptx_runs_on`);
    ``a`` code for its own only, ``f`` code for its family."""
    linking = parse_target(arch)
    for artifact in artifacts:
        built = _ltoir_targets(artifact)
        if built and not any(t.ptx_runs_on(linking) for t in built):
            first = built[0]
            raise LinkError(f"{artifact.name}: LTO-IR built for {', '.join(map(str, built))}; linking for "
                            f"{linking}, which it cannot be linked for: link for {first} (arch={first.sm!r}) "
                            f"or rebuild it for {linking}")


def _ltoir_targets(artifact: Artifact) -> list[Target]:
    """The targets of the LTO-IR ``artifact`` is, or of a fatbin or host object that holds LTO-IR and
    nothing else; none for anything else (nvJitLink picks among PTX and cubins itself)."""
    if artifact.kind is CodeKind.LTOIR:
        built = known_target(artifact.arch)
        return [built] if built is not None else []
    if artifact.kind not in (CodeKind.FATBIN, CodeKind.OBJECT):
        return []
    try:
        entries = read_fatbin(artifact.code, artifact.name).entries
    except FormatError:  # no device code, or a broken container nvJitLink reports
        return []
    if not entries or any(e.kind != "ltoir" for e in entries):
        return []
    return [t for t in (known_target(e.arch) for e in entries) if t is not None]


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
