"""ptxbridge.abi: kernel signatures, their PTX lowering, and readers of code objects.

Pure Python and NumPy-free data; never imports CUDA.

Modules::

    dtypes.py          element types with their DLPack codes
    devices.py         DLPack device types
    kinds.py           parameter kinds (scalar, pointer, slice, numba array, cuTile array, struct...)
    kind_table.py      the one table of kinds: what an entry holds, lookup by kind class
    kind_entries.py    one entry per kind: text form, manifest fields, lowering, access, binding family
    _flat.py           flat PTX parameters and their builders
    tensor_rules.py    how a tensor fills a tensor-like kind (dtype, rank, layout, promises)
    memory_access.py, _access.py  per parameter: may the kernel write, only read; no-alias promise
    params.py          Convention, Param, LaunchMeta: the parts of a signature
    signature.py       Signature (text form, layout)
    lowering.py        the one place conventions lower kinds to flat PTX parameters
    layout.py          offsets, total size, the precompiled packer
    syntax.py          signature text, public face of:
    _syntax_tables.py    the tables both directions share
    _syntax_tokens.py    tokens and literals
    _syntax_parse.py     the grammar
    _syntax_format.py    text from the data
    manifest.py        the versioned JSON manifest
    image_file.py      the saved-image file (Image.save / Image.open, docs/image-format.md)
    ptx.py, _ptx_lex.py  PTX text reader
    elf.py, nvinfo.py  ELF sections and .nv.info records (KPARAM, REQNTID, cluster...)
    cubin.py           cubin reader (kernels, launch facts, Tile IR marker, embedded PTX)
    fatbin.py          fatbin containers (lz4, zstd)
    ltoir.py           the target an LTO-IR file records in its header
    archive.py         ar archives (.a static libraries: GNU and BSD member names)
    oxart.py           cuda-oxide .oxart bundles (and the .options policy files)
    cutile_cache.py    cutile-rs JIT cache entries (CUTILECUBIN header + cubin)
    elements.py        slices of any fixed-layout element: the unit a tensor holds
    sniff.py           format detection by content
    cutile_names.py    cuTile t1/t2 symbol demangler -> Signature
    cxx_names.py       C++ names of mangled symbols (kernels and globals by source name)
    rust_names.py      Rust v0 symbols as paths (core::panicking::panic_bounds_check)
    check.py           signature vs PTX entry / cubin records, naming kernel and parameter
    targets.py         GPU targets (sm_90a, compute_90, (9, 0)): the one parser and compatibility rules
    errors.py          PtxBridgeError and its subclasses
    raised.py          the exception table of a numba debug kernel (what each stored error code means)
    panic_record.py    the record a Rust kernel's panic is written to (read after the launch)
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, tuple[str, str]] = {  # public name -> (module, its name there)
    "DeclaredParam": ("check", "DeclaredParam"), "check": ("check", "check"),
    "check_layout": ("check", "check_layout"), "find_entry": ("check", "find_entry"),
    "Cubin": ("cubin", "Cubin"), "read_cubin": ("cubin", "read_cubin"),
    "demangle_cutile": ("cutile_names", "demangle"),
    "is_cutile_symbol": ("cutile_names", "is_cutile_symbol"),
    "DTYPES": ("dtypes", "DTYPES"), "DType": ("dtypes", "DType"), "dtype": ("dtypes", "dtype"),
    "AbiMismatchError": ("errors", "AbiMismatchError"), "ArgumentError": ("errors", "ArgumentError"),
    "CompileError": ("errors", "CompileError"), "CudaError": ("errors", "CudaError"),
    "EmulatorError": ("errors", "EmulatorError"), "FormatError": ("errors", "FormatError"),
    "KernelRaisedError": ("errors", "KernelRaisedError"), "LinkError": ("errors", "LinkError"),
    "KernelTrapError": ("errors", "KernelTrapError"),
    "MemoryAccessError": ("errors", "MemoryAccessError"), "OptionError": ("errors", "OptionError"),
    "PtxBridgeError": ("errors", "PtxBridgeError"), "SanitizerError": ("errors", "SanitizerError"),
    "SignatureSyntaxError": ("errors", "SignatureSyntaxError"), "TargetError": ("errors", "TargetError"),
    "ToolchainError": ("errors", "ToolchainError"),
    "UnsupportedInstructionError": ("errors", "UnsupportedInstructionError"),
    "Fatbin": ("fatbin", "Fatbin"), "read_fatbin": ("fatbin", "read_fatbin"),
    "Constant": ("kinds", "Constant"), "DisjointSlice": ("kinds", "DisjointSlice"),
    "NumbaArray": ("kinds", "NumbaArray"), "NumbaRecordArray": ("kinds", "NumbaRecordArray"),
    "Opaque": ("kinds", "Opaque"), "Pointer": ("kinds", "Pointer"), "Scalar": ("kinds", "Scalar"),
    "Slice": ("kinds", "Slice"), "Struct": ("kinds", "Struct"), "StructField": ("kinds", "StructField"),
    "TileArray": ("kinds", "TileArray"), "TileList": ("kinds", "TileList"),
    "TileTensor": ("kinds", "TileTensor"), "Tuple": ("kinds", "Tuple"),
    "LaidParam": ("layout", "LaidParam"), "Layout": ("layout", "Layout"), "Packer": ("layout", "Packer"),
    "layout_of": ("layout", "layout_of"),
    "FlatParam": ("lowering", "FlatParam"), "field_offsets": ("lowering", "field_offsets"),
    "lower_param": ("lowering", "lower_param"), "lower_params": ("lowering", "lower_params"),
    "memory_layout": ("lowering", "memory_layout"),
    "MANIFEST_VERSION": ("manifest", "MANIFEST_VERSION"), "from_manifest": ("manifest", "from_manifest"),
    "to_manifest": ("manifest", "to_manifest"), "dumps_manifest": ("manifest", "dumps"),
    "loads_manifest": ("manifest", "loads"),
    "Access": ("memory_access", "Access"), "Memory": ("memory_access", "Memory"),
    "Promise": ("memory_access", "Promise"), "access": ("memory_access", "access"),
    "read_oxart": ("oxart", "read_oxart"), "write_oxart": ("oxart", "write_oxart"),
    "PtxFunction": ("ptx", "PtxFunction"), "PtxGlobal": ("ptx", "PtxGlobal"),
    "PtxModule": ("ptx", "PtxModule"), "PtxParam": ("ptx", "PtxParam"), "read_ptx": ("ptx", "read_ptx"),
    "Convention": ("signature", "Convention"), "LaunchMeta": ("signature", "LaunchMeta"),
    "Param": ("signature", "Param"), "Signature": ("signature", "Signature"),
    "sniff": ("sniff", "sniff"),
    "format_signature": ("syntax", "format_signature"), "format_type": ("syntax", "format_type"),
    "parse_signature": ("syntax", "parse_signature"), "parse_signatures": ("syntax", "parse_signatures"),
    "parse_type": ("syntax", "parse_type"),
    "Target": ("targets", "Target"), "parse_target": ("targets", "parse_target"),
}
__all__ = sorted(_EXPORTS)

# Two functions share their module's name: importing the module binds the name to the module, so these
# are bound now, before any import of the submodule can shadow them.
from .check import check as check  # noqa: E402
from .sniff import sniff as sniff  # noqa: E402


def __getattr__(name: str) -> Any:
    """Each public name is imported from its module on first use, so ``import ptxbridge.abi`` (and a
    reader such as ``ptxbridge.abi.ptx``) loads only what it needs."""
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'ptxbridge.abi' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"ptxbridge.abi.{module}"), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
