"""ptxbridge.torch on CPU tensors: ops traced by torch.compile, kept by torch.export, passing opcheck.

The kernels are real NVRTC (CUDA C++) and numba-cuda output, run by the CPU PTX interpreter; every
result is compared with the same computation in torch.  torch.compile uses the ``aot_eager``
backend (Dynamo, fake tensors, AOTAutograd and functionalization, without inductor's C++ build).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
cuda = pytest.importorskip("numba.cuda")

import ptxbridge
import ptxbridge.torch as pt
from ptxbridge.abi.errors import ArgumentError

CPP = r"""
struct Affine { float scale; float shift; };
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void scale_(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
extern "C" __global__ void affine(Affine p, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = p.scale * x[i] + p.shift;
}
extern "C" __global__ void square(const double* x, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}
extern "C" __global__ void mul(const double* a, const double* b, double s, double* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = s * a[i] * b[i];
}
extern "C" __global__ void histogram(const int* x, unsigned int* bins, int n, int nbins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[x[i] % nbins], 1u);
}
"""
NS = "ptxbridge_tests"
BLOCK = 128


def cover(n: int) -> int:
    return -(-n // BLOCK)


def silu(x, out):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        v = x[i, j]
        out[i, j] = v / (1.0 + math.exp(-v))


@pytest.fixture(scope="module")
def image():
    import ptxbridge.numba as pn
    from ptxbridge import nvrtc

    numba = pn.compile(silu, "void(float32[:, ::1], float32[:, ::1])", name="silu")
    return ptxbridge.link([nvrtc.compile(CPP), numba])


@pytest.fixture(scope="module")
def ops(image):
    """Every op of this file, made once (torch op names are global to the process)."""
    n_rule = {"n": "numel x"}
    made = {
        "vadd": pt.op(image, "vadd", name=f"{NS}::vadd", outputs={"c": "like a"}, derived={"n": "numel a"},
                      grid=lambda n: cover(n), block=BLOCK),
        "scale_": pt.op(image, "scale_", name=f"{NS}::scale_", derived=n_rule, grid=lambda n: cover(n),
                        block=BLOCK),
        "silu": pt.op(image, "silu", name=f"{NS}::silu", outputs={"out": "like x"}, read_only=("x",),
                      grid=lambda x: (cover(x.shape[0]), x.shape[1]), block=(BLOCK, 1)),
        "affine": pt.op(image, "affine", name=f"{NS}::affine", outputs={"y": "like x"},
                        derived={"p": {"scale": 2.0, "shift": 1.0}, **n_rule}, grid=lambda n: cover(n),
                        block=BLOCK),
        "histogram": pt.op(image, "histogram", name=f"{NS}::histogram", derived={**n_rule, "nbins": 8},
                           outputs={"bins": pt.Output(lambda nbins: (nbins,), zeros=True)},
                           grid=lambda n: cover(n), block=BLOCK),
        "mul": pt.op(image, "mul", name=f"{NS}::mul", outputs={"c": "like a"}, derived={"n": "numel a"},
                     grid=lambda n: cover(n), block=BLOCK),
    }
    mul = made["mul"]
    made["square"] = pt.op(image, "square", name=f"{NS}::square", outputs={"y": "like x"}, derived=n_rule,
                           grid=lambda n: cover(n), block=BLOCK,
                           backward=lambda grad, x, y: {"x": mul(grad, x, 2.0)})

    @pt.function(image, "kernel add_twice(a: *const f32, b: *const f32, out: *mut f32, n: i32)",
                 name=f"{NS}::add_twice", outputs={"out": "like a"}, derived={"n": "numel a"})
    def add_twice(kernels, a, b, out, n):
        kernels.vadd(a, b, out, n, grid=cover(n), block=BLOCK)
        kernels.scale_(out, 2.0, n, grid=cover(n), block=BLOCK)

    made["add_twice"] = add_twice
    return made


def model(ops, x, b, w):
    h = ops["vadd"](x, b)  # CUDA C++, functional
    ops["scale_"](h, 0.5)  # CUDA C++, in place on an intermediate
    y = ops["silu"](h.view(32, 32))  # numba, 2-D
    return (y @ w).sum(dim=1) + ops["add_twice"](x, b)[:32]


def reference(x, b, w):
    h = (x + b) * 0.5
    return (torch.nn.functional.silu(h.view(32, 32)) @ w).sum(dim=1) + (2 * (x + b))[:32]


def inputs():
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(1024, generator=gen), torch.randn(1024, generator=gen),
            torch.randn(32, 8, generator=gen))


def test_schemas_say_what_each_kernel_reads_and_writes(ops):
    schemas = {name: str(op._schema) for name, op in ops.items()}
    assert schemas["vadd"] == f"{NS}::vadd(Tensor a, Tensor b) -> Tensor"
    assert schemas["scale_"] == f"{NS}::scale_(Tensor(a0!) x, float s) -> ()"
    assert schemas["histogram"] == f"{NS}::histogram(Tensor x) -> Tensor"
    assert schemas["silu"] == f"{NS}::silu(Tensor x) -> Tensor"  # a numba array, promised read_only
    assert schemas["mul"] == f"{NS}::mul(Tensor a, Tensor b, float s) -> Tensor"
    assert schemas["add_twice"] == f"{NS}::add_twice(Tensor a, Tensor b) -> Tensor"


def test_the_model_traces_with_no_graph_break(ops):
    x, b, w = inputs()
    torch.testing.assert_close(model(ops, x, b, w), reference(x, b, w))
    assert torch._dynamo.explain(lambda *a: model(ops, *a))(x, b, w).graph_break_count == 0


def test_compiled_model_matches_eager(ops):
    x, b, w = inputs()
    compiled = torch.compile(lambda *a: model(ops, *a), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, b, w), model(ops, x, b, w))


def samples():
    """Arguments for each op (opcheck runs the op on them, eagerly, traced and under AOTAutograd)."""
    x, b, _ = inputs()
    return {
        "vadd": (x, b), "scale_": (x.clone(), 0.5), "silu": (x.view(32, 32),), "affine": (x,),
        "histogram": (torch.arange(100, dtype=torch.int32),), "mul": (x.double(), b.double(), 3.0),
        "square": (x[:16].double().requires_grad_(),), "add_twice": (x, b),
    }


def test_every_op_has_samples(ops):
    assert samples().keys() == ops.keys()


@pytest.mark.parametrize("name", list(samples()))
def test_opcheck_passes(ops, name):
    torch.library.opcheck(ops[name], samples()[name])


def test_export_keeps_every_op(ops):
    class Model(torch.nn.Module):
        def forward(self, x, b, w):
            return model(ops, x, b, w)

    exported = torch.export.export(Model(), inputs())
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert {f"{NS}.{name}.default" for name in ("vadd", "scale_", "silu", "add_twice")} <= targets
    torch.testing.assert_close(exported.module()(*inputs()), reference(*inputs()))


def test_backward_is_built_from_another_bridged_op(ops):
    x = torch.linspace(-2.0, 2.0, 16, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(ops["square"], (x,))
    compiled = torch.compile(lambda t: ops["square"](t).sum(), fullgraph=True, backend="aot_eager")
    compiled(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())


def test_outputs_from_rules_struct_constants_and_zero_fill(ops):
    x = torch.arange(300, dtype=torch.int32)
    torch.testing.assert_close(ops["histogram"](x), torch.bincount(x % 8, minlength=8).to(torch.uint32),
                               check_dtype=True)
    y = torch.randn(50)
    torch.testing.assert_close(ops["affine"](y), 2.0 * y + 1.0)


def test_non_contiguous_tensor_written_in_place_gets_the_result():
    # pt.op copies a strided tensor to contiguous memory for a raw pointer and writes the result back
    x = torch.arange(20.0).view(4, 5)
    view = x.t()
    assert not view.is_contiguous()
    expected = view * 3.0
    torch.ops.ptxbridge_tests.scale_(view, 3.0)
    torch.testing.assert_close(view, expected)


def test_wrong_dtype_is_refused_eagerly_and_at_trace_time(ops):
    x, b, _ = inputs()
    with pytest.raises(ArgumentError, match=r"vadd: argument 'a' \(\*const f32\) got float64 tensor"):
        ops["vadd"](x.double(), b.double())
    # under torch.compile it is ptxbridge's ArgumentError too, not Dynamo's "Unsupported: TypeError when
    # making fake tensor call" with the message buried in a logged traceback
    compiled = torch.compile(lambda a, c: ops["vadd"](a, c), fullgraph=True, backend="aot_eager")
    with pytest.raises(ArgumentError, match=r"^vadd: argument 'a' \(\*const f32\) got float64 tensor on cpu; "
                                            r"expected float32 on cpu$"):
        compiled(x.double(), b.double())
    refused = pytest.raises(ArgumentError, match=r"^vadd: argument 'a' \(\*const f32\) got float64 tensor;")
    with refused, torch._subclasses.fake_tensor.FakeTensorMode():  # outside Dynamo the fake kernel refuses it
        ops["vadd"](torch.empty(4, dtype=torch.float64), torch.empty(4, dtype=torch.float64))


def test_rules_are_checked_against_the_signature(image):
    def make(**rules):
        return pt.op(image, rules.pop("kernel", "vadd"), name=f"{NS}::never", **{"grid": 1, **rules})

    with pytest.raises(ArgumentError, match="vadd: no parameter 'q'"):
        make(outputs={"q": "like a"})
    with pytest.raises(ArgumentError, match="'numel z' reads 'z'"):
        make(derived={"n": "numel z"})
    with pytest.raises(ArgumentError, match="grid: the rule reads 'm'"):
        make(grid=lambda m: m)
    with pytest.raises(ArgumentError, match=r"parameter 'p' \(struct Affine .*give its value in derived="):
        make(kernel="affine")
    with pytest.raises(ArgumentError, match="is not a tensor parameter"):
        make(outputs={"n": "like a"})
    with pytest.raises(ArgumentError, match="read_only names 'c', which is not a tensor argument"):
        make(outputs={"c": "like a"}, read_only=("c",))
    with pytest.raises(ArgumentError, match="the image has no kernel 'nope'"):
        make(kernel="nope")
    with pytest.raises(ArgumentError, match="backward= needs an op that returns outputs and mutates no "):
        pt.op(image, "scale_", name=f"{NS}::never", grid=1, backward=lambda grad, **values: {})


def test_a_taken_name_is_refused(ops, image):
    with pytest.raises(ArgumentError, match=f"the op name '{NS}::vadd' is taken in this process"):
        pt.op(image, "vadd", name=f"{NS}::vadd", outputs={"c": "like a"}, derived={"n": "numel a"}, grid=1)


def test_an_in_place_launch_bumps_the_version_autograd_checks(ops):
    # torch's own in-place ops bump a tensor's version so that backward refuses a saved tensor that
    # changed since; the op's kernel writes through a pointer torch cannot see, so the op bumps it
    w = torch.ones(8, requires_grad=True)
    x = torch.arange(8.0)
    y = (w * x).sum()  # saves x for w's gradient
    before = x._version
    ops["scale_"](x, 2.0)
    assert x._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_backward_through_an_op_without_backward_says_so(ops):
    x = torch.randn(64, requires_grad=True)
    out = ops["vadd"](x, x.detach())
    with pytest.warns(UserWarning, match="vadd: an autograd kernel was not registered"):
        out.sum().backward()


def test_a_failing_rule_is_named(image):
    def make(suffix, **rules):
        return pt.op(image, "vadd", name=f"{NS}::vadd_{suffix}", outputs={"c": "like a"}, block=BLOCK,
                     **rules)

    x = torch.ones(10)
    broken_grid = make("grid", derived={"n": "numel a"}, grid=lambda n: n // 0)
    with pytest.raises(ArgumentError, match=r"vadd: grid .* failed: ZeroDivisionError"):
        broken_grid(x, x)
    broken_derived = make("derived", derived={"n": lambda a: a.nope}, grid=1)
    with pytest.raises(ArgumentError, match=r"vadd: derived 'n' .* failed: AttributeError"):
        broken_derived(x, x)


def test_rules_read_by_name_in_any_order(image):
    # a rule's parameters are matched by name, whatever their order or kind
    vadd = pt.op(image, "vadd", name=f"{NS}::vadd_named", outputs={"c": pt.Output(lambda b, a: a.shape)},
                 derived={"n": lambda b, *, a: a.numel() + 0 * b.numel()}, grid=lambda *, n: cover(n),
                 block=BLOCK)
    a, b = torch.randn(300), torch.randn(300)
    torch.testing.assert_close(vadd(a, b), a + b)


def test_shapes_keep_a_short_tensor_from_being_read_past_its_end(image):
    # vadd reads n elements of a and b through raw pointers: without shapes= a short b is read past
    # its end (the CPU loader faults; a GPU reads whatever lies there)
    vadd = pt.op(image, "vadd", name=f"{NS}::vadd_shaped", outputs={"c": "like a"}, derived={"n": "numel a"},
                 shapes={"b": "like a"}, grid=lambda n: cover(n), block=BLOCK)
    a, b = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(vadd(a, b), a + b)
    refused = r"vadd: argument 'b' has shape \(50,\); vadd: shapes\['b'\] 'like a' requires \(100,\)"
    with pytest.raises(ArgumentError, match=refused):
        vadd(a, b[:50])
    compiled = torch.compile(lambda x, y: vadd(x, y) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(a, b), (a + b) * 2)
    # the fake kernel checks too: refused while tracing (Dynamo retraces b's length as a symbol)
    with pytest.raises(Exception, match=r"vadd: argument 'b' has shape \(\w+,\); .* requires \(100,\)"):
        compiled(a, b[:50])
    # a callable rule reads named values, derived ones included
    scale = pt.op(image, "scale_", name=f"{NS}::scale_shaped", shapes={"x": lambda n: (n,)},
                  derived={"n": lambda x: 64}, grid=1, block=64)
    x = torch.ones(64)
    scale(x, 3.0)
    assert x.eq(3.0).all()
    with pytest.raises(ArgumentError, match=r"scale_: argument 'x' has shape \(8, 8\); .* requires \(64,\)"):
        scale(x.view(8, 8), 3.0)
    assert x.eq(3.0).all()  # refused before the launch: nothing written


def test_shapes_rules_are_checked_when_the_op_is_made(image):
    def make(shapes):
        return pt.op(image, "vadd", name=f"{NS}::never", outputs={"c": "like a"}, derived={"n": "numel a"},
                     shapes=shapes, grid=1)

    with pytest.raises(ArgumentError, match=r"vadd: shapes\['n'\]: 'n' is not a tensor argument of the op"):
        make({"n": (4,)})
    with pytest.raises(ArgumentError, match=r"shapes\['c'\]: 'c' is not a tensor argument"):
        make({"c": "like a"})  # an output's shape is its own rule
    with pytest.raises(ArgumentError, match=r"shapes\['b'\]: 'like z' reads 'z'"):
        make({"b": "like z"})
    with pytest.raises(ArgumentError, match=r"shapes\['b'\]: the shape is 'like NAME', a callable"):
        make({"b": [4]})


class _Dispatched(Exception):
    """Raised by a test's stand-in for torch's dispatcher: the op call went through it."""


@pytest.fixture
def undispatched(ops, monkeypatch):
    """The ops, each with torch's dispatcher behind its call replaced by one that raises _Dispatched
    (each called once first: an op meets a device, and loads its image there, through the dispatcher)."""
    def dispatcher(*args, **kwargs):
        raise _Dispatched

    for name, op in ops.items():
        op(*samples()[name])
        monkeypatch.setattr(op, "_op", dispatcher)
    return ops


def test_a_plain_eager_call_skips_the_dispatcher(undispatched):
    x, b, _ = inputs()
    torch.testing.assert_close(undispatched["vadd"](x, b), x + b)
    y = x.clone()
    before = y._version
    undispatched["scale_"](y, 0.5)
    torch.testing.assert_close(y, x * 0.5)
    assert y._version > before  # the direct call bumps the version as the dispatched one does
    strided = x.clone().view(32, 32).t()
    undispatched["scale_"](strided, 2.0)  # copied to contiguous memory and back, as dispatched
    torch.testing.assert_close(strided, x.view(32, 32).t() * 2.0)
    x64, b64 = x.double(), b.double()
    torch.testing.assert_close(undispatched["mul"](x64, b64, 3.0), 3.0 * x64 * b64)
    with pytest.raises(ArgumentError, match=r"vadd: argument 'a' \(\*const f32\) got float64 tensor"):
        undispatched["vadd"](x.double(), b.double())  # the same checks, the same words


class _Logged(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class _Sub(torch.Tensor):
    pass


def _routes_through_the_dispatcher():
    """Calls of vadd(x, b) that must reach torch's dispatcher: what each would miss without it."""
    x, b, _ = inputs()
    yield "requires grad", lambda op: op(x.clone().requires_grad_(), b)
    yield "keyword arguments", lambda op: op(x, b=b)
    yield "a tensor subclass", lambda op: op(x.as_subclass(_Sub), b)
    yield "a meta tensor", lambda op: op(x.to("meta"), b.to("meta"))
    yield "a dispatch mode", lambda op: _under(_Logged(), op, x, b)
    yield "a function mode", lambda op: _under(torch.device("cpu"), op, x, b)
    yield "vmap", lambda op: torch.vmap(op)(x.view(4, 256), b.view(4, 256))
    yield "the profiler", lambda op: _under(torch.profiler.profile(), op, x, b)
    yield "a forward AD level", lambda op: _under(torch.autograd.forward_ad.dual_level(), op, x, b)
    yield "torch.jit.trace", lambda op: torch.jit.trace(lambda p, q: op(p, q), (x, b), check_trace=False)


def _under(context, op, *args):
    with context:
        return op(*args)


@pytest.mark.parametrize("why", [why for why, _ in _routes_through_the_dispatcher()])
def test_calls_the_dispatcher_serves_go_through_it(undispatched, why):
    call = dict(_routes_through_the_dispatcher())[why]
    with pytest.raises(_Dispatched):
        call(undispatched["vadd"])


def test_a_float_argument_given_an_int_goes_through_the_dispatcher(undispatched):
    x, b, _ = inputs()
    with pytest.raises(_Dispatched):  # torch converts the int for a float schema argument
        undispatched["mul"](x.double(), b.double(), 3)


def test_the_dispatched_call_computes_what_the_direct_one_does(ops):
    x, b, _ = inputs()
    direct = ops["vadd"](x, b)
    logged = _Logged()
    with logged:
        dispatched = ops["vadd"](x, b)
    assert f"{NS}.vadd.default" in logged.seen
    assert torch.equal(direct, dispatched)
