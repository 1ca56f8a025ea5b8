"""ptxbridge.nvrtc: CUDA C++ through NVRTC, typed from the source's own declarations.

``frontend`` runs NVRTC (the public ``compile``); ``c_source`` reads the C/C++ declarations that
give kernels and device functions their signatures.  See ``docs/linking.md``.
"""

from .frontend import compile, nvrtc_args, nvrtc_version

__all__ = ["compile", "nvrtc_args", "nvrtc_version"]
