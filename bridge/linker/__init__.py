"""ptxbridge.linker: artifacts from any frontend -> one cubin for one arch, checked before nvJitLink runs.

``options`` (:class:`LinkOptions` and their nvJitLink argument list), ``symbols`` (imports matched
with exports), ``target`` (arch names, the default arch, PTX ISA per driver), ``device_runtime``
(libcudadevrt for device-side launches), ``embedded`` (the PTX in fatbins, objects and libraries, for
the CPU loader) and ``nvjitlink`` (:func:`link` and :func:`load`).

``finalize``: NVVM IR inputs under their compile policies; LTO-IR to PTX for the CPU loader.
"""

from .nvjitlink import link, load, nvjitlink_version
from .options import LinkOptions, nvjitlink_args, use_lto
from .symbols import check_symbols
from .target import choose_arch, ptx_isa_supported

__all__ = ["LinkOptions", "check_symbols", "choose_arch", "link", "load", "nvjitlink_args",
           "nvjitlink_version", "ptx_isa_supported", "use_lto"]
