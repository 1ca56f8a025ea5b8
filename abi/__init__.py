"""ptxbridge.abi: kernel signatures, their PTX lowering, and readers of code objects.

Pure Python and NumPy-free data; never imports CUDA.
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
    "NumbaRecordArray", "OptionError", "Opaque", "Packer",
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
