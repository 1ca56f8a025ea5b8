"""Element types with their DLPack type codes.

The codes are those of ``DLDataTypeCode`` in dlpack.h (v1.1):
kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6,
kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12.  A dtype is identified by
(code, bits, lanes), which is what a DLPack tensor reports.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DTYPES", "DType", "dtype", "from_dlpack", "from_numpy"]

KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
KDL_COMPLEX = 5
KDL_BOOL = 6
KDL_FLOAT8_E4M3FN = 10
KDL_FLOAT8_E5M2 = 12


@dataclass(frozen=True, slots=True)
class DType:
    """One element type: its short name (as in signature text) and DLPack identity."""

    name: str
    code: int
    bits: int
    numpy_name: str | None  # the NumPy dtype name, where NumPy has one

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @property
    def is_float(self) -> bool:
        return self.code in (KDL_FLOAT, KDL_BFLOAT, KDL_FLOAT8_E4M3FN, KDL_FLOAT8_E5M2)

    @property
    def is_signed(self) -> bool:
        return self.code == KDL_INT

    @property
    def is_integer(self) -> bool:
        return self.code in (KDL_INT, KDL_UINT)

    def __str__(self) -> str:
        return self.name


_ALL = (
    DType("bool", KDL_BOOL, 8, "bool"),
    DType("i8", KDL_INT, 8, "int8"),
    DType("i16", KDL_INT, 16, "int16"),
    DType("i32", KDL_INT, 32, "int32"),
    DType("i64", KDL_INT, 64, "int64"),
    DType("u8", KDL_UINT, 8, "uint8"),
    DType("u16", KDL_UINT, 16, "uint16"),
    DType("u32", KDL_UINT, 32, "uint32"),
    DType("u64", KDL_UINT, 64, "uint64"),
    DType("f16", KDL_FLOAT, 16, "float16"),
    DType("bf16", KDL_BFLOAT, 16, None),
    DType("f32", KDL_FLOAT, 32, "float32"),
    DType("f64", KDL_FLOAT, 64, "float64"),
    DType("c64", KDL_COMPLEX, 64, "complex64"),
    DType("c128", KDL_COMPLEX, 128, "complex128"),
    DType("f8e4m3fn", KDL_FLOAT8_E4M3FN, 8, None),
    DType("f8e5m2", KDL_FLOAT8_E5M2, 8, None),
)

DTYPES: dict[str, DType] = {d.name: d for d in _ALL}
_BY_DLPACK: dict[tuple[int, int], DType] = {(d.code, d.bits): d for d in _ALL}
_BY_NUMPY: dict[str, DType] = {d.numpy_name: d for d in _ALL if d.numpy_name}
_ALIASES = {"complex64": "c64", "complex128": "c128", "float": "f32", "double": "f64"}


def dtype(name: str | DType) -> DType:
    """Look up a dtype by its short name (``"f32"``), NumPy name or alias."""
    if isinstance(name, DType):
        return name
    found = DTYPES.get(name) or DTYPES.get(_ALIASES.get(name, "")) or _BY_NUMPY.get(name)
    if found is None:
        known = ", ".join(DTYPES)
        raise ValueError(f"unknown element type {name!r} (known: {known})")
    return found


def from_dlpack(code: int, bits: int, lanes: int = 1) -> DType | None:
    """The dtype a DLPack ``DLDataType`` denotes, or None when ptxbridge has none."""
    if lanes != 1:
        return None
    return _BY_DLPACK.get((code, bits))


def from_numpy(numpy_dtype_name: str) -> DType | None:
    """The dtype for a NumPy dtype name (``np.dtype(...).name``), or None."""
    return _BY_NUMPY.get(numpy_dtype_name)
