"""ptxbridge.abi: kernel signatures, their PTX lowering, and readers of code objects.

Pure Python and NumPy-free data; never imports CUDA.
"""

from .dtypes import DTYPES, DType, dtype
from .errors import (
    AbiMismatchError,
    ArgumentError,
    CompileError,
    CudaError,
    EmulatorError,
    FormatError,
    LinkError,
    MemoryAccessError,
    PtxBridgeError,
    SignatureSyntaxError,
    ToolchainError,
    UnsupportedInstructionError,
)
from .kinds import (
    Constant,
    DisjointSlice,
    NumbaArray,
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
from .signature import Convention, LaunchMeta, Param, Signature

__all__ = [
    "DTYPES", "AbiMismatchError", "ArgumentError", "CompileError", "Constant", "Convention",
    "CudaError", "DType", "DisjointSlice", "EmulatorError", "FlatParam", "FormatError", "LaidParam",
    "LaunchMeta", "Layout", "LinkError", "MemoryAccessError", "NumbaArray", "Opaque", "Packer",
    "Param", "Pointer", "PtxBridgeError", "Scalar", "Signature", "SignatureSyntaxError", "Slice",
    "Struct", "StructField", "TileArray", "TileList", "TileTensor", "ToolchainError", "Tuple",
    "UnsupportedInstructionError", "dtype", "field_offsets", "layout_of", "lower_param",
    "lower_params", "memory_layout",
]
