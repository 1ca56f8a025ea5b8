"""The optional C extensions; everything else is in pyproject.toml.

``ptxbridge.launch._fastlaunch`` (the C hot path) and, where jaxlib is installed at build time,
``ptxbridge.jax._xla_ffi`` (the XLA FFI handler of ``ptxbridge.jax``, built against jaxlib's
``xla/ffi/api/c_api.h``; install with ``--no-build-isolation`` so the build sees jaxlib).
``optional=True``: a machine without a C compiler or Python headers still installs, and the
pure-Python launch path is used there.  ``ptxbridge.loaders.emulator._native`` (the CPU loader's
fused multiply-add, a NumPy ufunc, and its one-pass memory checks, gathers and scatters) is built
where NumPy's headers are importable at build time; without it the CPU loader does the same in NumPy.
``ptxbridge.loaders.emulator._threads`` (the compiled CPU tier's pool of threads for independent
blocks) needs POSIX threads; without it a launch runs its blocks in order on one thread.
"""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup


def _jaxlib_include() -> str | None:
    """jaxlib's header folder (what ``jax.ffi.include_dir()`` returns), without importing jax."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or spec.origin is None:
        return None
    include = Path(spec.origin).parent / "include"
    return str(include) if (include / "xla" / "ffi" / "api" / "c_api.h").exists() else None


def _numpy_include() -> str | None:
    """NumPy's C header folder, where NumPy is importable by the build."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy.get_include()


# The launch ABI both launch extensions share (cuLaunchKernel, DLPack views, argument kinds, no-alias test).
LAUNCH_ABI = "bridge/launch/launch_abi.h"

extensions = [Extension("ptxbridge.launch._fastlaunch",
                        [f"bridge/launch/{name}.c"
                         for name in ("_fastlaunch", "_launcher", "_tensors", "_records", "_attrs")],
                        depends=["bridge/launch/_fastlaunch.h", LAUNCH_ABI],
                        # hidden: calls between its files are direct, not through the PLT (a few per
                        # argument per launch); PyInit__fastlaunch is exported by PyMODINIT_FUNC
                        extra_compile_args=["-O2", "-std=c11", "-fvisibility=hidden"], optional=True)]
if (numpy_include := _numpy_include()) is not None:
    extensions.append(Extension("ptxbridge.loaders.emulator._native", ["loaders/emulator/_native.c"],
                                include_dirs=[numpy_include], extra_compile_args=["-O3", "-std=c11"],
                                # linked with libm, so its sin/exp2/... bind to the C library's current
                                # versions, the ones the compiled tier's code finds (dlsym), not the
                                # oldest compatibility wrappers an unlinked reference gets
                                libraries=["m"], optional=True))
extensions.append(Extension("ptxbridge.loaders.emulator._threads", ["loaders/emulator/_threads.c"],
                            extra_compile_args=["-O2", "-std=c11", "-pthread"], extra_link_args=["-pthread"],
                            optional=True))
if (include := _jaxlib_include()) is not None:
    extensions.append(Extension("ptxbridge.jax._xla_ffi", ["bridge/frameworks/jax/_xla_ffi.c"],
                                include_dirs=["bridge/launch", include], depends=[LAUNCH_ABI],
                                extra_compile_args=["-O2", "-std=c11"],
                                optional=True))
setup(ext_modules=extensions)
