"""ptxbridge.rust: Rust kernels through rustc's own ``nvptx64-nvidia-cuda`` target.

``frontend`` compiles and types (the public ``compile`` / ``from_ptx``); ``toolchain`` finds rustc
and builds the private sysroot; ``syntax``, ``source`` and ``types`` read signatures from the Rust
source (also for :mod:`ptxbridge.oxide`).  See ``docs/rust.md``.

Also: ``cursor`` and ``type_syntax`` (the token cursor and type grammar ``syntax`` reads with),
``ltoir`` (rustc's LLVM IR -> libNVVM -> LTO-IR), ``llvm7`` (that IR in the LLVM 7 dialect
libNVVM reads below sm_100) and ``panic_runtime`` (ptxbridge's ``#[panic_handler]`` crate, linked
into crates without one, whose panics become ``KernelRaisedError``).
"""

from .frontend import compile, from_ptx, localize_panic_handler, rustc_options

__all__ = ["compile", "from_ptx", "localize_panic_handler", "rustc_options"]
