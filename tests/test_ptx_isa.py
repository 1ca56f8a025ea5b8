import pytest

from ptxbridge.linker.target import max_ptx_isa, needs_cubin


@pytest.mark.parametrize(("cuda", "isa"), [((11, 8), (7, 8)), ((12, 0), (8, 0)), ((12, 4), (8, 4)),
                                          ((12, 6), (8, 5)), ((12, 8), (8, 7)), ((12, 9), (8, 8)),
                                          ((13, 0), (9, 0)), ((13, 5), (9, 5))])
def test_isa_table(cuda, isa):
    assert max_ptx_isa(cuda) == isa


def test_numba_ptx_on_a_13_0_driver_needs_a_cubin():
    # docs/conventions.md, the driver side: libNVVM 13.5 writes ISA 9.5; the H200's 13.0 driver rejects it.
    assert needs_cubin((9, 5), (13, 0))
    assert not needs_cubin((7, 0), (13, 0))  # rustc's PTX 7.0 JIT-loads


def test_too_old_driver():
    with pytest.raises(ValueError, match="older"):
        max_ptx_isa((10, 2))
