"""ptxbridge.numba: numba-cuda kernels and device functions, compiled without a GPU.

``frontend`` drives ``numba.cuda.compile`` (the public ``compile``); ``types`` maps numba types onto
the common ABI.  See ``docs/numba.md``.

``libraries``: what numba links besides the PTX (NRT, float16 wrappers, ``link=``).
"""

from .frontend import NumbaOptions, arch_to_cc, compile

__all__ = ["NumbaOptions", "arch_to_cc", "compile"]
