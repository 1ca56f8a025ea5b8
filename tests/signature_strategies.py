"""Hypothesis strategies that build every kind of signature (shared by the syntax and manifest tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from ptxbridge.abi.dtypes import DTYPES
from ptxbridge.abi.kinds import (
    INDEX_WIDTHS,
    NOALIAS,
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
from ptxbridge.abi.signature import Convention, LaunchMeta, Param, Signature

# plain identifiers most of the time, arbitrary text (quoted in the syntax) sometimes
names = st.one_of(st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$]{0,10}", fullmatch=True), st.text(max_size=8))
dtypes = st.sampled_from(sorted(DTYPES.values(), key=lambda d: d.name))
ints = st.integers(-(2**70), 2**70)


def _per_axis(ndim: int, values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.just(()), st.tuples(*[values] * ndim))


@st.composite
def tile_arrays(draw: st.DrawFn) -> TileArray:
    ndim = draw(st.integers(0, 4))
    optional = st.none() | ints
    return TileArray(
        draw(dtypes), ndim, draw(st.sampled_from(INDEX_WIDTHS)),
        shape_divisible_by=draw(_per_axis(ndim, ints)), stride_divisible_by=draw(_per_axis(ndim, ints)),
        static_shape=draw(_per_axis(ndim, optional)), static_stride=draw(_per_axis(ndim, optional)),
        stride_lower_bound=draw(_per_axis(ndim, optional)), base_align=draw(st.integers(-4, 2**20)),
        alias_groups=draw(st.integers(-3, 2**70)), may_alias_internally=draw(st.booleans()))


@st.composite
def tile_tensors(draw: st.DrawFn) -> TileTensor:
    """cutile-rs tensors and partitions with every promise a kernel can be specialised under."""
    rank = draw(st.integers(0, 4))
    optional = st.none() | ints
    partition = draw(st.booleans())
    return TileTensor(
        draw(dtypes), rank, partition, static_shape=draw(_per_axis(rank, optional)),
        static_stride=draw(_per_axis(rank, optional)), shape_divisible_by=draw(_per_axis(rank, ints)),
        stride_divisible_by=draw(_per_axis(rank, ints)), base_align=draw(st.integers(-4, 2**20)),
        own_strides=partition and draw(st.booleans()))


constants = st.builds(Constant, st.booleans() | ints | st.floats(allow_nan=False))
leaves = st.one_of(
    st.builds(Scalar, dtypes),
    st.builds(Pointer, st.none(), st.booleans(), st.sampled_from(NOALIAS)),
    st.builds(Slice, dtypes, st.booleans()),
    st.builds(DisjointSlice, dtypes, st.booleans()),
    st.builds(NumbaArray, dtypes, st.integers(0, 8), st.sampled_from("CFA")),
    tile_arrays(),
    st.builds(TileList, tile_arrays(), st.integers(0, 2**40), st.booleans()),
    tile_tensors(),
    st.builds(Opaque, st.integers(0, 2**40), st.sampled_from([1, 2, 4, 8, 16, 256])),
    constants,
)


def _compound(children: st.SearchStrategy) -> st.SearchStrategy:
    fields = st.lists(st.builds(StructField, names, children), max_size=4).map(tuple)
    return st.one_of(
        st.builds(Pointer, children, st.booleans(), st.sampled_from(NOALIAS)),
        st.builds(Struct, names, fields),
        st.builds(Tuple, st.lists(children, max_size=4).map(tuple)),
        st.builds(NumbaRecordArray, st.builds(Struct, names, fields), st.integers(0, 8),
                  st.sampled_from("CFA")),
    )


param_types = st.recursive(leaves, _compound, max_leaves=10)
dim3 = st.none() | st.tuples(st.integers(1, 1024), st.integers(1, 1024), st.integers(1, 64))
launches = st.builds(LaunchMeta, dim3, dim3, st.none() | st.integers(1, 32), dim3,
                     st.integers(0, 2**20), st.integers(0, 2**20))
signatures = st.builds(
    Signature,
    names,
    st.lists(st.builds(Param, names, param_types), max_size=5, unique_by=lambda p: p.name).map(tuple),
    st.sampled_from(list(Convention)),
    launches,
    st.sampled_from(["kernel", "device"]),
    st.none() | param_types,
)
