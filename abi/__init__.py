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
    archive.py         ar archives (.a static libraries: GNU and BSD member names)
    oxart.py           cuda-oxide .oxart bundles (and the .options policy files)
    cutile_cache.py    cutile-rs JIT cache entries (CUTILECUBIN header + cubin)
    elements.py        slices of any fixed-layout element: the unit a tensor holds
    sniff.py           format detection by content
    cutile_names.py    cuTile t1/t2 symbol demangler -> Signature
    cxx_names.py       C++ names of mangled symbols (kernels and globals by source name)
    check.py           signature vs PTX entry / cubin records, naming kernel and parameter
    errors.py          PtxBridgeError and its subclasses
"""

from .check import DeclaredParam, check, check_layout, find_entry
from .cubin import Cubin, read_cubin
from .cutile_names import demangle as demangle_cutile
from .cutile_names import is_cutile_symbol
from .dtypes import DTYPES, DType, dtype
from .errors import (
    AbiMismatchError,
    ArgumentError,
    CompileError,
    CudaError,
    EmulatorError,
    FormatError,
    KernelRaisedError,
    LinkError,
    MemoryAccessError,
    OptionError,
    PtxBridgeError,
    SanitizerError,
    SignatureSyntaxError,
    ToolchainError,
    UnsupportedInstructionError,
)
from .fatbin import Fatbin, read_fatbin
from .kinds import (
    Constant,
    DisjointSlice,
    NumbaArray,
    NumbaRecordArray,
    Opaque,
    Pointer,
    Scalar,
    Slice,
    Struct,
    StructField,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
)
from .layout import LaidParam, Layout, Packer, layout_of
from .lowering import FlatParam, field_offsets, lower_param, lower_params, memory_layout
from .manifest import MANIFEST_VERSION, from_manifest, to_manifest
from .manifest import dumps as dumps_manifest
from .manifest import loads as loads_manifest
from .memory_access import Access, Memory, Promise, access
from .oxart import read_oxart, write_oxart
from .ptx import PtxFunction, PtxGlobal, PtxModule, PtxParam, read_ptx
from .signature import Convention, LaunchMeta, Param, Signature
from .sniff import sniff
from .syntax import format_signature, format_type, parse_signature, parse_signatures, parse_type

__all__ = [
    "DTYPES", "AbiMismatchError", "ArgumentError", "CompileError", "Constant", "Convention",
    "CudaError", "DType", "DisjointSlice", "EmulatorError", "FlatParam", "FormatError", "LaidParam",
    "KernelRaisedError", "LaunchMeta", "Layout", "LinkError", "MemoryAccessError", "NumbaArray",
    "NumbaRecordArray", "OptionError", "SanitizerError", "Opaque", "Packer",
    "Param", "Pointer", "PtxBridgeError", "Scalar", "Signature", "SignatureSyntaxError", "Slice",
    "Struct", "StructField", "TileArray", "TileList", "TileTensor", "ToolchainError", "Tuple",
    "UnsupportedInstructionError", "dtype", "field_offsets", "layout_of", "lower_param",
    "lower_params", "memory_layout",
    # the access trait (what a kernel may do to a parameter's memory)
    "Access", "Memory", "Promise", "access",
    # readers, checks and the text/JSON forms
    "MANIFEST_VERSION", "Cubin", "DeclaredParam", "Fatbin", "PtxFunction", "PtxGlobal", "PtxModule",
    "PtxParam", "check", "check_layout", "demangle_cutile", "dumps_manifest", "find_entry",
    "format_signature", "format_type", "from_manifest", "is_cutile_symbol", "loads_manifest",
    "parse_signature", "parse_signatures", "parse_type", "read_cubin", "read_fatbin", "read_oxart",
    "read_ptx", "sniff", "to_manifest", "write_oxart",
]
