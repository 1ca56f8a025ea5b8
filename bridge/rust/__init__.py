"""ptxbridge.rust: Rust kernels through rustc's own ``nvptx64-nvidia-cuda`` target.

``frontend`` compiles and types (the public ``compile`` / ``from_ptx``); ``toolchain`` finds rustc
and builds the private sysroot; ``syntax``, ``source`` and ``types`` read signatures from the Rust
source (also for :mod:`ptxbridge.oxide`).  See ``docs/rust.md``.
"""

from .frontend import compile, from_ptx, localize_panic_handler, rustc_options

__all__ = ["compile", "from_ptx", "localize_panic_handler", "rustc_options"]
