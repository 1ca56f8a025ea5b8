/* ptxbridge.launch._fastlaunch: the per-launch hot path of a checked launch, in C.
 *
 * A Plan is built once per (kernel, argument types) from what the Python
 * side decided (bridge/launch/fastpath.py): per argument, where its flat values
 * come from and what it must be.  Per launch it reads and checks each tensor
 * (_tensors.c: the DLPack C exchange API, a CuPy array's attributes or the
 * __cuda_array_interface__), range-checks Python int / float scalars,
 * checks that tensors the signature promises not to alias do not overlap
 * (bridge/launch/aliasing.py decides which pairs; launch_abi.h the test), packs the parameter
 * buffer (on the stack up to 4 KiB, on the heap up to the driver's 32,764
 * bytes) and calls cuLaunchKernel through the entry points the CUDA loader
 * gives each plan (this file never loads libcuda: the loader is the only
 * code that touches the driver).
 *
 * The C side never raises for user input: whenever a check fails it returns
 * False ("declined") and the Python path runs, which either accepts what
 * this path is too strict for or raises the house-format ArgumentError.
 * Results of Plan.launch: None (launched), False (declined, nothing
 * launched), an int CUresult (the driver refused the launch).
 * bridge/launch/_launcher.c puts a vectorcall type in front of the plans, so a
 * kernel call reaches plan_run without running Python code.
 */
#include "_fastlaunch.h"
#include "launch_abi.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the parameter buffer is packed little-endian by memcpy"
#endif

/* --- plans ---------------------------------------------------------------------------------- */
#define STACK_SLOTS 256   /* kernelParams pointers kept on the stack */
#define MAX_ALIAS_SLOTS 64 /* tensors with a no-alias promise a C plan checks; more: the Python path */


typedef struct {
    PyObject_HEAD
    Py_ssize_t nargs;
    ArgSpec *args;
    int size;
    PyObject *keep;              /* the spec tuple: keeps types and capsules alive */
    void *function;              /* CUkernel handle */
    void *context;               /* primary context, made current for the default streams */
    LaunchFn launch_fn;          /* cuLaunchKernel */
    SetCurrentFn set_current_fn; /* cuCtxSetCurrent */
    int pointers;                /* kernelParams instead of extra */
    int nslots;
    int *slots;                  /* kernelParams: flat parameter offsets (nslots of them) */
    long max_shared;
    PyObject *function_obj;      /* re-read max_dynamic_shared when a launch asks for more */
    PyObject *last, *name;       /* last[0] = name after each launch: the loader's one-slot list, written
                                    without the attribute lookups a setattr on the loader costs */
    const ExchangeAPI *stream_api; /* the first DLPack tensor's: its framework's current stream */
    PyObject *default_stream;    /* without one: callable(device_id) -> the current stream, or None: 0 */
    PointerAttributeFn pointer_attribute_fn; /* cuPointerGetAttribute: the device of CAI pointers */
    PyObject *nvtx_push, *nvtx_pop;  /* NULL, or NVTX's push(name) / pop() around each launch (nvtx.py) */
    int32_t device_id;
    int npairs;
    int (*pairs)[2];             /* alias slots whose byte ranges must not overlap */
} Plan;

static PyObject *str_max_shared;

/* Each case copies its own constant size: a memcpy of a variable size is a call per value. */
static int put_int(char *buf, int offset, int code, long long sv, unsigned long long uv, int negative) {
    char *at = buf + offset; /* two's complement: uv holds sv's bits when negative */
    switch (code) {
    case 'Q': if (negative) return 0; memcpy(at, &uv, 8); return 1;
    case 'q': if (!negative && uv > (unsigned long long)INT64_MAX) return 0; memcpy(at, &uv, 8); return 1;
    case 'i': if (sv < INT32_MIN || sv > INT32_MAX) return 0; memcpy(at, &uv, 4); return 1;
    case 'I': if (negative || uv > 0xffffffffu) return 0; memcpy(at, &uv, 4); return 1;
    case 'h': if (sv < -32768 || sv > 32767) return 0; memcpy(at, &uv, 2); return 1;
    case 'H': if (negative || uv > 0xffffu) return 0; memcpy(at, &uv, 2); return 1;
    case 'b': if (sv < -128 || sv > 127) return 0; memcpy(at, &uv, 1); return 1;
    case 'B': if (negative || uv > 0xffu) return 0; memcpy(at, &uv, 1); return 1;
    case '?': if (negative || uv > 1) return 0; memcpy(at, &uv, 1); return 1;
    default: return 0;
    }
}

int put_unsigned(char *buf, int offset, int code, unsigned long long v) {
    return put_int(buf, offset, code, (long long)v, v, 0);
}

int exact_u64(PyObject *value, unsigned long long *out) {
    long long v;
    if (exact_int(value, &v)) {
        *out = (unsigned long long)v;
        return v >= 0;
    }
    if (!PyLong_CheckExact(value)) return 0;
    *out = PyLong_AsUnsignedLongLong(value); /* 2**63 and up */
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

int pack_int(const ArgSpec *s, PyObject *arg, char *buf) {
    if (s->code == '?' && PyBool_Check(arg)) /* a bool member: True / False, or the ints 0 and 1 */
        return put_unsigned(buf, s->offset, s->code, arg == Py_True);
    if (s->lo < 0) {
        long long v;
        if (!exact_int(arg, &v) || v < s->lo || v > (long long)s->hi) return 0;
        return put_int(buf, s->offset, s->code, v, (unsigned long long)v, v < 0);
    }
    unsigned long long v;
    if (!exact_u64(arg, &v) || v < (unsigned long long)s->lo || v > s->hi) return 0;
    return put_unsigned(buf, s->offset, s->code, v);
}

int pack_float(const ArgSpec *s, PyObject *arg, char *buf) {
    if (!PyFloat_CheckExact(arg)) return 0;
    double v = PyFloat_AS_DOUBLE(arg);
    if (!(-s->limit <= v && v <= s->limit)) return 0; /* NaN fails too */
    char *at = buf + s->offset;
    float f = (float)v;
    uint32_t bits;
    switch (s->code) {
    case 'f': memcpy(at, &f, 4); return 1;
    case 'd': memcpy(at, &v, 8); return 1;
    case 'e': /* struct.pack("<e"), rounded once; the limit leaves it nothing to overflow */
        if (PyFloat_Pack2(v, at, 1) == 0) return 1;
        PyErr_Clear();
        return 0;
    case 'E': /* bf16: values.py bf16_bits, binary32 rounded to nearest even */
        memcpy(&bits, &f, 4);
        bits = (uint32_t)(((uint64_t)bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        memcpy(at, &bits, 2);
        return 1;
    default: return 0;
    }
}

static int is_tensor(int kind) {
    return kind == PTXB_ARG_TENSOR || kind == PTXB_ARG_CAI || kind == PTXB_ARG_CUPY || kind == PTXB_ARG_CAPSULE;
}

/* 1: every argument packed into buf and no no-alias pair overlaps; 0: declined. */
/* stream: the launch's, which a __dlpack__ producer is told (0: the legacy default stream). */
static int pack(const Plan *plan, PyObject *const *argv, Py_ssize_t nargs, char *buf, uintptr_t stream) {
    uint64_t ranges[MAX_ALIAS_SLOTS][2];
    if (nargs != plan->nargs) return 0;
    memset(buf, 0, plan->size);
    for (Py_ssize_t i = 0; i < nargs; ++i) {
        const ArgSpec *s = &plan->args[i];
        PyObject *arg = argv[i];
        uint64_t *range = s->alias_slot < 0 ? NULL : ranges[s->alias_slot];
        int ok = is_tensor(s->kind) ? pack_tensor(s, arg, buf, range, plan->pointer_attribute_fn, stream)
               : s->kind == PTXB_ARG_INT ? pack_int(s, arg, buf)
               : s->kind == PTXB_ARG_FLOAT ? pack_float(s, arg, buf)
               : s->kind == PTXB_ARG_PREFIX ? pack_prefix(s, arg, buf, range, plan->pointer_attribute_fn, stream)
               : s->kind == PTXB_ARG_FIELDS ? pack_fields(s, arg, buf)
               : pack_record(s, arg, buf, ranges, plan->pointer_attribute_fn, stream);
        if (!ok) return 0;
    }
    for (int k = 0; k < plan->npairs; ++k) { /* empty ranges overlap nothing */
        const uint64_t *a = ranges[plan->pairs[k][0]], *b = ranges[plan->pairs[k][1]];
        if (ranges_overlap(a[0], a[1], b[0], b[1])) return 0;
    }
    return 1;
}

int read_spec(ArgSpec *s, PyObject *item) {
    unsigned long long hi;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1) goto bad;
    s->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
    s->alias_slot = -1;
    if (is_tensor(s->kind)) return read_tensor_spec(s, item);
    if (s->kind == PTXB_ARG_RECORD) return read_record_spec(s, item);
    if (s->kind == PTXB_ARG_PREFIX) return read_prefix_spec(s, item);
    if (s->kind == PTXB_ARG_FIELDS) return read_fields_spec(s, item);
    if (s->kind == PTXB_ARG_INT) {
        if (!PyArg_ParseTuple(item, "iiiLK", &s->kind, &s->offset, &s->code, &s->lo, &hi)) return 0;
        s->hi = hi;
        return 1;
    }
    if (s->kind == PTXB_ARG_FLOAT) {
        if (!PyArg_ParseTuple(item, "iiid", &s->kind, &s->offset, &s->code, &s->limit)) return 0;
        if (s->code != 'f' && s->code != 'd' && s->code != 'e' && s->code != 'E') goto bad;
        return 1;
    }
bad:
    PyErr_SetString(PyExc_ValueError, "malformed argument spec");
    return 0;
}

static int place_fits(int offset, int code, int size) {
    static const char codes[] = "bBhHiIqQfd?eE";
    static const int sizes[] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 2, 2};
    const char *found = code > 0 ? strchr(codes, code) : NULL;
    return found != NULL && offset >= 0 && offset + sizes[found - codes] <= size;
}

int check_place(const ArgSpec *s, int size) {
    if (s->kind == PTXB_ARG_RECORD) return record_fits(s, size);
    if (s->kind == PTXB_ARG_PREFIX) return check_place(s->members, size);
    if (s->kind == PTXB_ARG_FIELDS) return fields_fit(s, size);
    if (!is_tensor(s->kind)) return place_fits(s->offset, s->code, size);
    for (int k = 0; k < s->nplaces; ++k)
        if (!place_fits(s->places[k][0], s->places[k][1], size)) return 0;
    return 1;
}

/* A member path -- an argument index, or (argument index, member position, ...) into records -- to the
 * spec of the tensor there (a tensor argument or item, or a pointer / slice member); NULL when it ends
 * anywhere else. */
static ArgSpec *spec_at(Plan *self, PyObject *path) {
    PyObject *const *steps = &path;
    Py_ssize_t n = 1;
    if (PyTuple_Check(path)) {
        steps = &PyTuple_GET_ITEM(path, 0);
        n = PyTuple_GET_SIZE(path);
    }
    ArgSpec *s = NULL;
    for (Py_ssize_t k = 0; k < n; ++k) {
        Py_ssize_t at = PyLong_Check(steps[k]) ? PyLong_AsSsize_t(steps[k]) : -1;
        if (at == -1) PyErr_Clear();
        s = k == 0 ? (at >= 0 && at < self->nargs ? &self->args[at] : NULL) : record_member(s, at);
        if (s == NULL) return NULL;
    }
    return s != NULL && (is_tensor(s->kind) || s->kind == PTXB_ARG_ADDRESS || s->kind == PTXB_ARG_PREFIX) ? s
                                                                                                         : NULL;
}

/* alias_pairs: ((path, path), ...) of tensors whose byte ranges must not overlap, each path as spec_at
 * reads it; each such tensor gets a slot for its range.  distinct: (path, ...) of tensors that must not
 * overlap themselves.  Either may be NULL (none).  1, or 0 with an error set. */
static int read_pairs(Plan *self, PyObject *pairs, PyObject *distinct) {
    PyObject *seq = pairs == NULL ? PyTuple_New(0) : PySequence_Fast(pairs, "alias_pairs must be a sequence");
    if (seq == NULL) return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int nslots = 0;
    self->pairs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *self->pairs);
    if (self->pairs == NULL) { Py_DECREF(seq); PyErr_NoMemory(); return 0; }
    for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) goto bad;
        for (int e = 0; e < 2; ++e) {
            ArgSpec *s = spec_at(self, PyTuple_GET_ITEM(pair, e));
            if (s == NULL) goto bad;
            if (s->alias_slot < 0) {
                if (nslots == MAX_ALIAS_SLOTS) goto bad;
                s->alias_slot = nslots++;
            }
            self->pairs[k][e] = s->alias_slot;
        }
    }
    Py_DECREF(seq);
    self->npairs = (int)n;
    if (distinct == NULL) return 1;
    seq = PySequence_Fast(distinct, "distinct must be a sequence of paths");
    if (seq == NULL) return 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); ++k) {
        ArgSpec *s = spec_at(self, PySequence_Fast_GET_ITEM(seq, k));
        if (s == NULL || !is_tensor(s->kind)) goto bad;
        s->distinct = 1;
    }
    Py_DECREF(seq);
    return 1;
bad:
    Py_DECREF(seq);
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "alias_pairs and distinct must name tensors the plan reads (at most 64)");
    return 0;
}

static void free_args(Plan *self) {
    for (Py_ssize_t i = 0; self->args != NULL && i < self->nargs; ++i) free_spec(&self->args[i]);
    PyMem_Free(self->args);
}

/* Plan(size, specs, function=0, context=0, pointer_offsets=None, max_shared=0, function_obj=None,
 *      last_kernel=None, name=None, device_id=0, launch_entry=0, set_current_entry=0, alias_pairs=(),
 *      pointer_attribute_entry=0, default_stream=None, nvtx=None, distinct=()): the entries are the
 *      addresses of cuLaunchKernel, cuCtxSetCurrent and cuPointerGetAttribute; a plan without the first
 *      two never launches.  nvtx: None or (push, pop), called around each launch with the kernel's name;
 *      alias_pairs and distinct: read_pairs. */
static int plan_init(Plan *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"size", "specs", "function", "context", "pointer_offsets", "max_shared",
                            "function_obj", "last_kernel", "name", "device_id", "launch_entry",
                            "set_current_entry", "alias_pairs", "pointer_attribute_entry", "default_stream",
                            "nvtx", "distinct", NULL};
    PyObject *specs, *offsets = Py_None, *function_obj = Py_None, *last = Py_None, *name = Py_None;
    PyObject *alias_pairs = NULL, *default_stream = Py_None, *nvtx = Py_None, *push = NULL, *pop = NULL;
    PyObject *distinct = NULL;
    unsigned long long function = 0, context = 0, launch_entry = 0, set_current_entry = 0, pointer_entry = 0;
    if (self->args != NULL) { /* before parsing: a second __init__ must not change size under the specs */
        PyErr_SetString(PyExc_TypeError, "a Plan is initialized once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iO!|KKOlOOOiKKOKOOO", names, &self->size, &PyTuple_Type,
                                     &specs, &function, &context, &offsets, &self->max_shared,
                                     &function_obj, &last, &name, &self->device_id, &launch_entry,
                                     &set_current_entry, &alias_pairs, &pointer_entry, &default_stream, &nvtx,
                                     &distinct))
        return -1;

    if (nvtx != Py_None && (!PyTuple_Check(nvtx) || !PyArg_ParseTuple(nvtx, "OO", &push, &pop)
                            || !PyCallable_Check(push) || !PyCallable_Check(pop))) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "nvtx must be None or (push(name), pop())");
        return -1;
    }
    if (default_stream != Py_None && !PyCallable_Check(default_stream)) {
        PyErr_SetString(PyExc_TypeError, "default_stream must be None or callable(device_id) -> int");
        return -1;
    }
    if (self->size < 0 || self->size > MAX_PARAM_BYTES) {
        PyErr_SetString(PyExc_ValueError, "parameter buffer too large for the C path");
        return -1;
    }
    self->nargs = PyTuple_GET_SIZE(specs);
    self->args = PyMem_Calloc(self->nargs ? self->nargs : 1, sizeof(ArgSpec));
    if (self->args == NULL) { self->nargs = 0; PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < self->nargs; ++i) {
        ArgSpec *s = &self->args[i];
        if (!read_spec(s, PyTuple_GET_ITEM(specs, i))) goto fail;
        if (!check_place(s, self->size)) {
            PyErr_Format(PyExc_ValueError, "argument spec %zd does not fit the %d-byte buffer", i, self->size);
            goto fail;
        }
        if (s->kind == PTXB_ARG_TENSOR && self->stream_api == NULL) self->stream_api = s->api;
    }
    if (!read_pairs(self, alias_pairs, distinct)) goto fail;
    if (offsets != Py_None) {
        PyObject *seq = PySequence_Fast(offsets, "pointer_offsets must be a sequence");
        if (seq == NULL) goto fail;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        self->slots = n > MAX_PARAM_BYTES ? NULL : PyMem_Calloc(n ? n : 1, sizeof(int));
        if (self->slots == NULL) {
            Py_DECREF(seq);
            if (n > MAX_PARAM_BYTES) PyErr_SetString(PyExc_ValueError, "more parameters than the buffer has bytes");
            else PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; ++i) {
            self->slots[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
            if (self->slots[i] < 0 || self->slots[i] >= (self->size ? self->size : 1)) {
                Py_DECREF(seq);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "parameter offset out of range");
                goto fail;
            }
        }
        Py_DECREF(seq);
        self->pointers = 1;
        self->nslots = (int)n;
    }
    self->function = (void *)(uintptr_t)function;
    self->context = (void *)(uintptr_t)context;
    self->launch_fn = (LaunchFn)(uintptr_t)launch_entry;
    self->set_current_fn = (SetCurrentFn)(uintptr_t)set_current_entry;
    self->pointer_attribute_fn = (PointerAttributeFn)(uintptr_t)pointer_entry;
    Py_XSETREF(self->default_stream, default_stream == Py_None ? NULL : Py_NewRef(default_stream));
    Py_XSETREF(self->nvtx_push, push == NULL ? NULL : Py_NewRef(push));
    Py_XSETREF(self->nvtx_pop, pop == NULL ? NULL : Py_NewRef(pop));
    Py_XSETREF(self->keep, Py_NewRef(specs));
    Py_XSETREF(self->function_obj, Py_NewRef(function_obj));
    Py_XSETREF(self->last, Py_NewRef(last));
    Py_XSETREF(self->name, Py_NewRef(name));
    return 0;
fail: /* leave an empty plan behind: packing it writes nothing and launches nothing */
    free_args(self);
    PyMem_Free(self->pairs);
    PyMem_Free(self->slots);
    self->args = NULL;
    self->pairs = NULL;
    self->npairs = 0;
    self->slots = NULL;
    self->nargs = 0;
    self->size = 0;
    self->stream_api = NULL;
    return -1;
}

static void plan_dealloc(Plan *self) {
    free_args(self);
    Py_XDECREF(self->default_stream);
    Py_XDECREF(self->nvtx_push);
    Py_XDECREF(self->nvtx_pop);
    PyMem_Free(self->pairs);
    PyMem_Free(self->slots);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->function_obj);
    Py_XDECREF(self->last);
    Py_XDECREF(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One launch's parameter buffer: on the stack up to STACK_PARAM_BYTES bytes, else on the heap (per launch:
 * a plan may launch from several threads at once, each packing its own buffer). */
typedef struct {
    char stack[STACK_PARAM_BYTES];
    char *data;
} ParamBuffer;

static char *buffer_open(ParamBuffer *b, int size) {
    b->data = size <= STACK_PARAM_BYTES ? b->stack : PyMem_Malloc((size_t)size);
    return b->data;
}

static void buffer_close(ParamBuffer *b) {
    if (b->data != b->stack) PyMem_Free(b->data);
}

/* Plan.pack(args) -> bytes, or False when declined (the CPU-testable half of launch). */
static PyObject *plan_pack(Plan *self, PyObject *args) {
    ParamBuffer b;
    char *buf = buffer_open(&b, self->size);
    PyObject *out = Py_False;
    if (buf == NULL) Py_RETURN_FALSE; /* no memory: the Python path will say so */
    if (PyTuple_CheckExact(args) && pack(self, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), buf, 0))
        out = PyBytes_FromStringAndSize(buf, self->size);
    else
        Py_INCREF(out);
    buffer_close(&b);
    return out;
}

int parse_dim(PyObject *value, unsigned out[3]) {
    PyObject *const *items = &value;
    Py_ssize_t n = 1;
    if (PyTuple_CheckExact(value)) {
        items = &PyTuple_GET_ITEM(value, 0);
        n = PyTuple_GET_SIZE(value);
    } else if (PyList_CheckExact(value)) {
        items = PySequence_Fast_ITEMS(value);
        n = PyList_GET_SIZE(value);
    }
    if (n < 1 || n > 3) return 0;
    out[0] = out[1] = out[2] = 1;
    for (Py_ssize_t i = 0; i < n; ++i) {
        long long x;
        if (!exact_int(items[i], &x) || x <= 0 || x > 0x7fffffffL) return 0;
        out[i] = (unsigned)x;
    }
    return 1;
}

static int shared_allowed(Plan *self, long shared) {
    if (shared <= self->max_shared) return 1;
    PyObject *now = PyObject_GetAttr(self->function_obj, str_max_shared);
    if (now == NULL) { PyErr_Clear(); return 0; }
    self->max_shared = PyLong_AsLong(now);
    Py_DECREF(now);
    if (PyErr_Occurred()) { PyErr_Clear(); self->max_shared = 0; return 0; }
    return shared <= self->max_shared;
}

int plan_run(PyObject *plan, PyObject *const *argv, Py_ssize_t nargs, const unsigned grid[3],
             const unsigned block[3], long shared, PyObject *stream_arg, int *code) {
    Plan *self = (Plan *)plan;
    void *stream = NULL;
    if (self->launch_fn == NULL || self->set_current_fn == NULL || self->function == NULL || shared < 0 || shared > 0x7fffffffL
        || !shared_allowed(self, shared))
        return 0;
    if (stream_arg == Py_None && self->stream_api != NULL) {
        if (self->stream_api->current_work_stream(DL_CUDA, self->device_id, &stream) != 0) {
            PyErr_Clear();
            return 0;
        }
    } else if (stream_arg == Py_None && self->default_stream != NULL) { /* as Kernel's stream_of */
        PyObject *device = PyLong_FromLong(self->device_id);
        PyObject *handle = device == NULL ? NULL : PyObject_CallOneArg(self->default_stream, device);
        Py_XDECREF(device);
        unsigned long long value;
        int ok = handle != NULL && exact_u64(handle, &value);
        Py_XDECREF(handle);
        if (!ok) { PyErr_Clear(); return 0; }
        stream = (void *)(uintptr_t)value;
    } else if (stream_arg == Py_None) {
        stream = NULL; /* no framework names a current stream: the legacy default stream, as Kernel's stream_of */
    } else {
        unsigned long long handle;
        if (!exact_u64(stream_arg, &handle)) return 0;
        stream = (void *)(uintptr_t)handle;
    }
    ParamBuffer b;
    void *stack_params[STACK_SLOTS];
    char *buf = buffer_open(&b, self->size);
    void **params = self->nslots <= STACK_SLOTS ? stack_params : PyMem_Malloc(self->nslots * sizeof(void *));
    if (buf == NULL || params == NULL || !pack(self, argv, nargs, buf, (uintptr_t)stream)) {
        if (params != stack_params) PyMem_Free(params);
        if (buf != NULL) buffer_close(&b);
        return 0;
    }
    size_t size = (size_t)self->size;
    void *extra[5] = {LAUNCH_PARAM_BUFFER_POINTER, buf, LAUNCH_PARAM_BUFFER_SIZE, &size, LAUNCH_PARAM_END};
    for (int i = 0; i < self->nslots; ++i) params[i] = buf + self->slots[i];
    int ranged = 0;
    if (self->nvtx_push != NULL) { /* profiling only: off, this is the one test it costs */
        PyObject *pushed = PyObject_CallOneArg(self->nvtx_push, self->name);
        ranged = pushed != NULL;
        Py_XDECREF(pushed);
        if (!ranged) {
            if (params != stack_params) PyMem_Free(params);
            buffer_close(&b);
            return -1;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    if ((uintptr_t)stream <= 2) *code = self->set_current_fn(self->context); /* NULL, legacy, per-thread */
    else *code = 0;
    if (*code == 0)
        *code = self->launch_fn(self->function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                          (unsigned)shared, stream, self->pointers ? params : NULL,
                          self->pointers ? NULL : extra);
    Py_END_ALLOW_THREADS
    if (params != stack_params) PyMem_Free(params);
    buffer_close(&b);
    if (ranged) {
        PyObject *popped = PyObject_CallNoArgs(self->nvtx_pop);
        if (popped == NULL) return -1;
        Py_DECREF(popped);
    }
    if (self->last != NULL && PyList_CheckExact(self->last) && PyList_GET_SIZE(self->last) == 1) {
        PyObject *was = PyList_GET_ITEM(self->last, 0);
        PyList_SET_ITEM(self->last, 0, Py_NewRef(self->name));
        Py_XDECREF(was);
    }
    return 1;
}

/* Plan.launch(args, grid3, block3, shared_mem, stream) -> None | False | int CUresult */
static PyObject *plan_launch(Plan *self, PyObject *const *argv, Py_ssize_t argc) {
    unsigned grid[3], block[3];
    int code = 0;
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "launch(args, grid3, block3, shared_mem, stream)");
        return NULL;
    }
    if (!PyTuple_CheckExact(argv[0]) || !parse_dim(argv[1], grid) || !parse_dim(argv[2], block)
        || !PyLong_CheckExact(argv[3]))
        Py_RETURN_FALSE;
    long shared = PyLong_AsLong(argv[3]);
    if (shared == -1 && PyErr_Occurred()) { PyErr_Clear(); Py_RETURN_FALSE; }
    int ran = plan_run((PyObject *)self, &PyTuple_GET_ITEM(argv[0], 0), PyTuple_GET_SIZE(argv[0]), grid,
                       block, shared, argv[4], &code);
    if (ran < 0) return NULL;
    if (ran == 0) Py_RETURN_FALSE;
    if (code != 0) return PyLong_FromLong(code);
    Py_RETURN_NONE;
}

static PyMethodDef plan_methods[] = {
    {"pack", (PyCFunction)plan_pack, METH_O, "pack(args) -> bytes, or False when declined"},
    {"launch", (PyCFunction)(void (*)(void))plan_launch, METH_FASTCALL,
     "launch(args, grid3, block3, shared_mem, stream) -> None, False (declined) or a CUresult"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ptxbridge.launch._fastlaunch.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One kernel's launch plan for one tuple of argument types.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)plan_init,
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_methods = plan_methods,
};

/* host_data(array) -> (address, readonly): a host array's element 0 and mutability through the buffer
 * protocol (NumPy's __array_interface__ builds a dict, and cost more than a small CPU launch's
 * kernel); None where the object exports no strided buffer (the caller reads the interface). */
static PyObject *host_data(PyObject *module, PyObject *array) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_STRIDES) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *out = Py_BuildValue("(KO)", (unsigned long long)(uintptr_t)view.buf,
                                  view.readonly ? Py_True : Py_False);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef module_methods[] = {
    {"host_data", host_data, METH_O, "host_data(array) -> (address, readonly), or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ptxbridge.launch._fastlaunch",
    .m_doc = "The C hot path of a checked launch (optional; the Python path is the fallback).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__fastlaunch(void) {
    str_max_shared = PyUnicode_InternFromString("max_dynamic_shared");
    if (str_max_shared == NULL || !tensors_ready() || !records_ready() || PyType_Ready(&PlanType) < 0
        || !launcher_ready())
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddIntConstant(module, "MAX_PARAMS", MAX_PARAM_BYTES) < 0
        || PyModule_AddIntConstant(module, "ARG_TENSOR", PTXB_ARG_TENSOR) < 0
        || PyModule_AddIntConstant(module, "ARG_INT", PTXB_ARG_INT) < 0
        || PyModule_AddIntConstant(module, "ARG_FLOAT", PTXB_ARG_FLOAT) < 0
        || PyModule_AddIntConstant(module, "ARG_CAI", PTXB_ARG_CAI) < 0
        || PyModule_AddIntConstant(module, "ARG_CUPY", PTXB_ARG_CUPY) < 0
        || PyModule_AddIntConstant(module, "ARG_RECORD", PTXB_ARG_RECORD) < 0
        || PyModule_AddIntConstant(module, "ARG_ADDRESS", PTXB_ARG_ADDRESS) < 0
        || PyModule_AddIntConstant(module, "ARG_CAPSULE", PTXB_ARG_CAPSULE) < 0
        || PyModule_AddIntConstant(module, "ARG_PREFIX", PTXB_ARG_PREFIX) < 0
        || PyModule_AddIntConstant(module, "ARG_FIELDS", PTXB_ARG_FIELDS) < 0
        || PyModule_AddIntConstant(module, "FORM_POINTER", PTXB_FORM_POINTER) < 0
        || PyModule_AddIntConstant(module, "FORM_SLICE", PTXB_FORM_SLICE) < 0
        || PyModule_AddIntConstant(module, "FORM_NUMBA", PTXB_FORM_NUMBA) < 0
        || PyModule_AddIntConstant(module, "FORM_TILE", PTXB_FORM_TILE) < 0
        || PyModule_AddIntConstant(module, "FORM_ROWS", PTXB_FORM_ROWS) < 0
        || PyModule_AddIntConstant(module, "MAX_NDIM", PTXB_MAX_NDIM) < 0
        || PyModule_AddObjectRef(module, "Plan", (PyObject *)&PlanType) < 0
        || PyModule_AddObjectRef(module, "Launcher", (PyObject *)&LauncherType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
