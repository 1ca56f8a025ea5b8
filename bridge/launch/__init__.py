"""ptxbridge.launch: calling a loaded kernel with tensors and scalars, as cheaply as ``cuLaunchKernel``.

A call ``kernel(*args, grid=, block=, shared_mem=0, stream=None)`` runs on one of three tiers, each
decided once per (kernel, tuple of argument types) and cached in the kernel's plan table:

1. **C plan** (``_fastlaunch.c`` + ``_tensors.c`` + ``_records.c`` + ``_attrs.c`` + ``_launcher.c``, built by
   ``setup.py`` where a C compiler is; :mod:`.fastpath` ``native_specs``): every argument is one the
   C plan reads (:mod:`.native_args`): a tensor (torch through the DLPack C exchange API, CuPy arrays
   through their attributes, other ``__cuda_array_interface__`` producers through the interface, other
   ``__dlpack__`` producers through a capsule per launch) on a
   pointer, slice, ``DisjointSlice``, numba array or cuTile array parameter; a plain int/float scalar;
   a by-value struct (a dict) or tuple of scalars, raw pointers, slices and nested structs and tuples;
   or a numba / cuTile tuple of any of these (the plan reads the member types of the call that built
   it; ``_attrs.c`` reads a CuPy array's properties through descriptors found once per type).  ``Kernel``'s
   base type is then ``_fastlaunch.Launcher``, whose vectorcall parses keywords, finds the plan,
   reads and checks the tensors, packs on the stack and calls ``cuLaunchKernel``.  Any check that
   fails *declines* (no error is raised in C) and the call falls through to tier 2.
   ``PTXBRIDGE_FASTLAUNCH=0`` turns it off.
2. **Generated Python** (:mod:`.fastpath` ``compile_launch``): one function written per plan, with
   the common binders' reads in line (torch / CuPy tensor facts, scalars), falling back per
   argument to the binder itself.
3. **General Python** (:mod:`.args` binders, :mod:`.values`, the kinds' tensor rules in
   :mod:`ptxbridge.abi.tensor_rules`, :mod:`.dlpack`): checks everything and owns every error
   message; tiers 1 and 2 only ever accept what this tier accepts.

Every tier checks the signature's no-alias promises (:mod:`.aliasing`, extents from
:mod:`.extents`; docs/safety.md): the C plan compares the byte ranges of the tensors it reads (struct
and tuple members too) and declines a cuTile array it cannot show to be free of self-overlap; the
generated function compares the ranges of contiguous top-level tensors; both hand anything else to
the full check.

:mod:`.module` holds ``Module`` / ``Kernel`` (the loader's :class:`~ptxbridge.loaders.base.Backend`
wrapped for users) and picks the tier.

``launch_abi.h`` is the C launch ABI both C extensions (this one and ``ptxbridge.jax._xla_ffi``) share:
``cuLaunchKernel``'s type, the DLPack views, the C plan's argument kinds (exported as
``_fastlaunch.ARG_*``, which :mod:`.fastpath` reads) and the no-alias range test.

Also: ``nvtx`` (optional NVTX ranges per launch), ``call_form`` (the launch keywords), ``symbols``
(kernels found by their C++ names), ``members`` (where an argument's tensors sit: by-value structs and
tuples walked), ``raised`` (numba ``debug=True`` exceptions) and ``panics`` (Rust panics), both
reported after the launch as ``KernelRaisedError``, which keeps such launches on tier 3.
"""
