/* ptxbridge.loaders.emulator._native: the CPU loader's inner loops that NumPy has no one-pass
 * form for.  Optional: setup.py builds it only where NumPy's headers are found, and the Python
 * code falls back to NumPy (float_math.py, memory.py) when it is absent.
 *
 * fma(a, b, c), a NumPy ufunc.  NumPy has no fused multiply-add, so float_math.py builds an exact one from
 * error-free transformations: about 30 passes over the batch for f64, 6 for
 * f32.  C99's fma()/fmaf() round a*b+c once (IEEE 754 fusedMultiplyAdd), so
 * this ufunc is one pass with the same result, signed zeros, infinities and
 * subnormals included.  It rounds to nearest even (the process's rounding
 * mode is never changed); the directed roundings stay in float_math.py.
 * Being a ufunc, it broadcasts NumPy scalars against register arrays and
 * takes out= like any NumPy arithmetic.
 *
 * sin, cos, exp2, log2, tanh: NumPy ufuncs over float64 that call the C library's functions.  PTX's
 * approximate sin/cos/ex2/lg2/tanh are computed in double precision and rounded to the type; NumPy's
 * own float64 loops are SIMD code of its own, which a compiled kernel cannot call, so the interpreter
 * calls these and the compiled tier calls the same C functions, and both tiers agree bit for bit.
 *
 * span(addresses, mask): (bitwise OR, minimum, maximum) of the active elements of a u32 or u64
 * array, or None when no element is active, in one pass: every memory access checks alignment
 * (the OR's low bits) and bounds (the extremes) before it gathers, which in NumPy is a compress
 * and three reductions.
 *
 * gather / scatter: the loads and stores themselves, once span and the region have been checked:
 * one pass from addresses to values instead of a subtraction, a shift and a take.
 *
 * use_pool() / restore(previous): NumPy's data allocator (PyDataMem_SetHandler, a context
 * variable) for the duration of a launch.  Every instruction frees an array the size of the batch
 * and allocates another; at these sizes (64 KiB and up) glibc's malloc maps and unmaps them, so
 * each one page-faults afresh, which cost more than the arithmetic.  The pool keeps freed blocks of
 * those sizes (at most POOL_DEPTH per size, POOL_BYTES in all) and hands them out again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pythread.h>
#include <stdint.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <numpy/ufuncobject.h>

/* One loop per type: args are a, b, c, out; steps are their strides in bytes.  Contiguous
 * operands (the common case: register arrays) take an indexed loop the compiler vectorizes; on a
 * CPU with FMA instructions (checked at run time) that loop is compiled for them, so fma() becomes
 * one vfmadd per vector instead of a libm call per element.  Both give the same, exact result.
 * Broadcast scalars (stride 0) and contiguous arrays both go through that loop, a chunk at a time. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_FMA_TARGET 1
#define FMA_TARGET __attribute__((target("fma")))
#else
#define HAVE_FMA_TARGET 0
#define FMA_TARGET
#endif

#define FMA_KERNELS(NAME, TYPE, FN, ATTR)                                                    \
    ATTR static void NAME(npy_intp n, const TYPE *restrict a, const TYPE *restrict b,           \
                          const TYPE *restrict c, TYPE *restrict out) {                       \
        for (npy_intp i = 0; i < n; i++) {                                                    \
            out[i] = FN(a[i], b[i], c[i]);                                                    \
        }                                                                                     \
    }

#define FMA_LOOP(NAME, TYPE, FN)                                                              \
    FMA_KERNELS(NAME##_plain, TYPE, FN, )                                                     \
    FMA_KERNELS(NAME##_fma, TYPE, FN, FMA_TARGET)                                             \
    static void NAME(char **args, const npy_intp *dimensions, const npy_intp *steps,          \
                     void *data) {                                                            \
        (void)data;                                                                           \
        npy_intp n = dimensions[0];                                                           \
        char *a = args[0], *b = args[1], *c = args[2], *out = args[3];                        \
        npy_intp sa = steps[0], sb = steps[1], sc = steps[2], so = steps[3];                  \
        npy_intp size = (npy_intp)sizeof(TYPE);                                               \
        if ((sa == size || sa == 0) && (sb == size || sb == 0) && (sc == size || sc == 0) &&   \
            so == size) {                                                                     \
            /* a broadcast scalar (stride 0) is read from a block filled with it */           \
            TYPE fill[3][CHUNK];                                                              \
            const TYPE *src[3] = {(const TYPE *)a, (const TYPE *)b, (const TYPE *)c};         \
            npy_intp advance[3] = {sa ? CHUNK : 0, sb ? CHUNK : 0, sc ? CHUNK : 0};           \
            for (int k = 0; k < 3; k++) {                                                     \
                if (!advance[k]) {                                                            \
                    for (int i = 0; i < CHUNK; i++) fill[k][i] = src[k][0];                   \
                    src[k] = fill[k];                                                         \
                }                                                                             \
            }                                                                                 \
            TYPE *dst = (TYPE *)out;                                                          \
            for (npy_intp start = 0; start < n; start += CHUNK) {                             \
                npy_intp count = n - start < CHUNK ? n - start : CHUNK;                       \
                (has_fma ? NAME##_fma : NAME##_plain)(count, src[0], src[1], src[2], dst);    \
                src[0] += advance[0], src[1] += advance[1], src[2] += advance[2];             \
                dst += CHUNK;                                                                 \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (npy_intp i = 0; i < n; i++, a += sa, b += sb, c += sc, out += so) {              \
            *(TYPE *)out = FN(*(const TYPE *)a, *(const TYPE *)b, *(const TYPE *)c);           \
        }                                                                                     \
    }

static int has_fma;
enum { CHUNK = 512 };

FMA_LOOP(fma_f32, float, fmaf)
FMA_LOOP(fma_f64, double, fma)

static PyUFuncGenericFunction loops[] = {fma_f32, fma_f64};
static void *loop_data[] = {NULL, NULL};
static const char loop_types[] = {NPY_FLOAT, NPY_FLOAT, NPY_FLOAT, NPY_FLOAT,
                                  NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE};

#define LIBM_LOOP(FN)                                                                         \
    static void libm_##FN(char **args, const npy_intp *dimensions, const npy_intp *steps,       \
                          void *data) {                                                        \
        (void)data;                                                                           \
        char *in = args[0], *out = args[1];                                                   \
        for (npy_intp i = 0; i < dimensions[0]; i++, in += steps[0], out += steps[1]) {       \
            *(double *)out = FN(*(const double *)in);                                         \
        }                                                                                     \
    }

LIBM_LOOP(sin)
LIBM_LOOP(cos)
LIBM_LOOP(exp2)
LIBM_LOOP(log2)
LIBM_LOOP(tanh)

static PyUFuncGenericFunction libm_loops[][1] = {{libm_sin}, {libm_cos}, {libm_exp2}, {libm_log2},
                                                 {libm_tanh}};
static const char *libm_names[] = {"sin", "cos", "exp2", "log2", "tanh"};
static void *libm_data[] = {NULL};
static const char libm_types[] = {NPY_DOUBLE, NPY_DOUBLE};

/* Branch-free so that the compiler vectorizes it; cloned for AVX-512 and AVX2 where available. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

#define SPAN_KERNEL(NAME, TYPE)                                                               \
    CLONES static Py_ssize_t NAME(const TYPE *x, const unsigned char *active, Py_ssize_t n,   \
                                  unsigned long long *out) {                                  \
        TYPE any = 0, low = (TYPE)-1, high = 0;                                               \
        Py_ssize_t count = 0;                                                                 \
        if (active == NULL) {                                                                 \
            for (Py_ssize_t i = 0; i < n; i++) {                                              \
                TYPE v = x[i];                                                                \
                any |= v;                                                                     \
                low = v < low ? v : low;                                                      \
                high = v > high ? v : high;                                                   \
            }                                                                                 \
            count = n;                                                                        \
        } else {                                                                              \
            for (Py_ssize_t i = 0; i < n; i++) {                                              \
                TYPE on = (TYPE)0 - (TYPE)(active[i] != 0);                                   \
                TYPE v = x[i];                                                                \
                any |= v & on;                                                                \
                TYPE lv = (v & on) | ~on, hv = v & on;                                        \
                low = lv < low ? lv : low;                                                    \
                high = hv > high ? hv : high;                                                 \
                count += active[i] != 0;                                                      \
            }                                                                                 \
        }                                                                                     \
        out[0] = any, out[1] = low, out[2] = high;                                            \
        return count;                                                                         \
    }

SPAN_KERNEL(span32, uint32_t)
SPAN_KERNEL(span64, uint64_t)

static PyObject *span(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values_obj, *mask_obj;
    if (!PyArg_ParseTuple(args, "OO:span", &values_obj, &mask_obj)) {
        return NULL;
    }
    Py_buffer values, mask = {0};
    if (PyObject_GetBuffer(values_obj, &values, PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = values.itemsize ? values.len / values.itemsize : 0;
    const unsigned char *active = NULL;
    if (values.itemsize != 4 && values.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "span: expects 4- or 8-byte unsigned integers");
        goto done;
    }
    if (mask_obj != Py_None) {
        if (PyObject_GetBuffer(mask_obj, &mask, PyBUF_C_CONTIGUOUS) < 0) {
            goto done;
        }
        if (mask.itemsize != 1 || mask.len != n) {
            PyErr_SetString(PyExc_TypeError, "span: the mask must be one bool per element");
            goto done;
        }
        active = (const unsigned char *)mask.buf;
    }
    unsigned long long found[3];
    Py_ssize_t count = values.itemsize == 4 ? span32((const uint32_t *)values.buf, active, n, found)
                                            : span64((const uint64_t *)values.buf, active, n, found);
    if (count == 0) {
        result = Py_NewRef(Py_None);
    } else {
        result = Py_BuildValue("(KKK)", found[0], found[1], found[2]);
    }
done:
    if (mask.obj != NULL) {
        PyBuffer_Release(&mask);
    }
    PyBuffer_Release(&values);
    return result;
}

/* gather(typed, addresses, mask, origin, shift, out): out[i] = typed[(addresses[i] - origin) >> shift]
 * for the active i (0 for the others); scatter(typed, addresses, mask, origin, shift, values):
 * the reverse, in thread order (the last thread wins on a tie), values one per thread or one for
 * all.  The caller has checked every active address (span, then the region it lies in): these
 * loops trust the indices, which is why they live in no public API. */
#define MOVE_LOOPS(TYPE)                                                                      \
    static void gather_##TYPE(TYPE *out, const TYPE *typed, const uint64_t *addr,             \
                              const unsigned char *active, Py_ssize_t n, uint64_t origin,     \
                              int shift) {                                                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                                  \
            out[i] = (active == NULL || active[i]) ? typed[(addr[i] - origin) >> shift] : 0;  \
        }                                                                                     \
    }                                                                                         \
    static void scatter_##TYPE(TYPE *typed, const uint64_t *addr, const unsigned char *active, \
                               Py_ssize_t n, uint64_t origin, int shift, const TYPE *values,  \
                               int step) {                                                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                                  \
            if (active == NULL || active[i]) typed[(addr[i] - origin) >> shift] = values[i * step]; \
        }                                                                                     \
    }

MOVE_LOOPS(uint8_t)
MOVE_LOOPS(uint16_t)
MOVE_LOOPS(uint32_t)
MOVE_LOOPS(uint64_t)

/* The buffers of one gather or scatter; 0 on success, -1 with an exception set. */
typedef struct {
    Py_buffer typed, addr, mask, other;
    int have_mask;
} Move;

static void move_release(Move *mv) {
    if (mv->typed.obj != NULL) PyBuffer_Release(&mv->typed);
    if (mv->addr.obj != NULL) PyBuffer_Release(&mv->addr);
    if (mv->mask.obj != NULL) PyBuffer_Release(&mv->mask);
    if (mv->other.obj != NULL) PyBuffer_Release(&mv->other);
}

static int move_open(Move *mv, PyObject *typed, int writable, PyObject *addr, PyObject *mask,
                     PyObject *other, int other_writable) {
    int flags = PyBUF_C_CONTIGUOUS;
    if (PyObject_GetBuffer(typed, &mv->typed, flags | (writable ? PyBUF_WRITABLE : 0)) < 0 ||
        PyObject_GetBuffer(addr, &mv->addr, flags) < 0 ||
        PyObject_GetBuffer(other, &mv->other, flags | (other_writable ? PyBUF_WRITABLE : 0)) < 0) {
        return -1;
    }
    mv->have_mask = mask != Py_None;
    if (mv->have_mask && PyObject_GetBuffer(mask, &mv->mask, flags) < 0) {
        return -1;
    }
    Py_ssize_t n = mv->addr.len / 8, size = mv->typed.itemsize;
    if (mv->addr.itemsize != 8 || (mv->have_mask && (mv->mask.itemsize != 1 || mv->mask.len != n)) ||
        mv->other.itemsize != size || (size != 1 && size != 2 && size != 4 && size != 8)) {
        PyErr_SetString(PyExc_TypeError, "gather/scatter: mismatched buffers");
        return -1;
    }
    return 0;
}

/* gather and scatter: args (typed, addresses, mask, origin, shift, other), other the values
 * read (one per address) or written (one per address, or one for all). */
static PyObject *move(PyObject *args, int store) {
    PyObject *typed, *addr, *mask, *other;
    unsigned long long origin;
    int shift;
    if (!PyArg_ParseTuple(args, "OOOKiO", &typed, &addr, &mask, &origin, &shift, &other)) {
        return NULL;
    }
    Move mv = {0};
    if (move_open(&mv, typed, store, addr, mask, other, !store) < 0) {
        move_release(&mv);
        return NULL;
    }
    Py_ssize_t n = mv.addr.len / 8, size = mv.typed.itemsize;
    int step = mv.other.len == n * size ? 1 : 0;
    if (!step && (!store || mv.other.len != size)) {
        PyErr_SetString(PyExc_TypeError, "gather/scatter: one value per address (scatter: or one for all)");
        move_release(&mv);
        return NULL;
    }
    const unsigned char *active = mv.have_mask ? (const unsigned char *)mv.mask.buf : NULL;
    const uint64_t *a = (const uint64_t *)mv.addr.buf;
    void *data = mv.typed.buf, *values = mv.other.buf;
#define MOVE(TYPE)                                                                            \
    (store ? scatter_##TYPE(data, a, active, n, origin, shift, values, step)                  \
           : gather_##TYPE(values, data, a, active, n, origin, shift))
    switch (size) {
    case 1: MOVE(uint8_t); break;
    case 2: MOVE(uint16_t); break;
    case 4: MOVE(uint32_t); break;
    default: MOVE(uint64_t); break;
    }
#undef MOVE
    move_release(&mv);
    Py_RETURN_NONE;
}

static PyObject *gather(PyObject *self, PyObject *args) {
    (void)self;
    return move(args, 0);
}

static PyObject *scatter(PyObject *self, PyObject *args) {
    (void)self;
    return move(args, 1);
}

enum { POOL_MIN = 64 * 1024, POOL_CLASSES = 64, POOL_DEPTH = 16 };
static const size_t POOL_BYTES = (size_t)256 << 20;

typedef struct {
    size_t size;
    int count;
    void *blocks[POOL_DEPTH];
} PoolClass;

static PoolClass pool_classes[POOL_CLASSES];
static size_t pool_bytes;
static PyThread_type_lock pool_lock; /* NumPy may allocate and free without the GIL */

static void *pool_take(size_t size) {
    void *block = NULL;
    if (size < POOL_MIN) {
        return NULL;
    }
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    for (int i = 0; i < POOL_CLASSES; i++) {
        PoolClass *c = &pool_classes[i];
        if (c->size == size && c->count > 0) {
            block = c->blocks[--c->count];
            pool_bytes -= size;
            break;
        }
    }
    PyThread_release_lock(pool_lock);
    return block;
}

static int pool_keep(void *block, size_t size) {
    int kept = 0;
    if (block == NULL || size < POOL_MIN) {
        return 0;
    }
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    if (pool_bytes + size <= POOL_BYTES) {
        PoolClass *slot = NULL, *unused = NULL;
        for (int i = 0; i < POOL_CLASSES && slot == NULL; i++) {
            PoolClass *c = &pool_classes[i];
            if (c->size == size) {
                slot = c;
            } else if (unused == NULL && c->count == 0) {
                unused = c;
            }
        }
        if (slot == NULL && unused != NULL) {
            unused->size = size;
            slot = unused;
        }
        if (slot != NULL && slot->count < POOL_DEPTH) {
            slot->blocks[slot->count++] = block;
            pool_bytes += size;
            kept = 1;
        }
    }
    PyThread_release_lock(pool_lock);
    return kept;
}

/* NumPy frees a block with the byte size it was allocated (or last reallocated) with. */
static void *pool_malloc(void *ctx, size_t size) {
    (void)ctx;
    void *block = pool_take(size);
    return block != NULL ? block : malloc(size);
}

static void *pool_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    if (elsize != 0 && nelem > (size_t)-1 / elsize) {
        return NULL;
    }
    void *block = pool_take(nelem * elsize);
    if (block == NULL) {
        return calloc(nelem, elsize);
    }
    memset(block, 0, nelem * elsize);
    return block;
}

static void *pool_realloc(void *ctx, void *block, size_t size) {
    (void)ctx;
    return realloc(block, size);
}

static void pool_free(void *ctx, void *block, size_t size) {
    (void)ctx;
    if (!pool_keep(block, size)) {
        free(block);
    }
}

static PyDataMem_Handler pool_handler = {
    "ptxbridge_emulator_pool", 1, {NULL, pool_malloc, pool_calloc, pool_realloc, pool_free},
};
static PyObject *pool_capsule;

static PyObject *use_pool(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyDataMem_SetHandler(pool_capsule);
}

static PyObject *restore(PyObject *self, PyObject *previous) {
    (void)self;
    PyObject *ours = PyDataMem_SetHandler(previous == Py_None ? NULL : previous);
    Py_XDECREF(ours);
    if (ours == NULL) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* schedule(pc, runnable, here): the lowest program counter of the runnable threads, how many
 * threads are at it (marked in the bool array here), and the lowest counter of any other
 * runnable thread (the group's bound), in one pass instead of five (machine.py). */
static PyObject *schedule(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *pc_obj, *runnable_obj, *here_obj;
    int far;
    if (!PyArg_ParseTuple(args, "OOOi:schedule", &pc_obj, &runnable_obj, &here_obj, &far)) {
        return NULL;
    }
    Py_buffer pc = {0}, runnable = {0}, here = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(pc_obj, &pc, PyBUF_C_CONTIGUOUS) < 0 ||
        PyObject_GetBuffer(runnable_obj, &runnable, PyBUF_C_CONTIGUOUS) < 0 ||
        PyObject_GetBuffer(here_obj, &here, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        goto done;
    }
    Py_ssize_t n = pc.len / 4;
    if (pc.itemsize != 4 || runnable.itemsize != 1 || here.itemsize != 1 || runnable.len != n ||
        here.len != n) {
        PyErr_SetString(PyExc_TypeError, "schedule: int32 counters and one bool per thread");
        goto done;
    }
    const int32_t *p = (const int32_t *)pc.buf;
    const unsigned char *r = (const unsigned char *)runnable.buf;
    unsigned char *h = (unsigned char *)here.buf;
    int32_t lowest = far, bound = far;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t v = r[i] ? p[i] : far;
        if (v < lowest) {
            bound = lowest;
            lowest = v;
        } else if (v > lowest && v < bound) {
            bound = v;
        }
    }
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char at = r[i] && p[i] == lowest && lowest != far;
        h[i] = at;
        count += at;
    }
    result = Py_BuildValue("(ini)", (int)lowest, count, (int)bound);
done:
    if (pc.obj != NULL) PyBuffer_Release(&pc);
    if (runnable.obj != NULL) PyBuffer_Release(&runnable);
    if (here.obj != NULL) PyBuffer_Release(&here);
    return result;
}

static PyMethodDef methods[] = {
    {"schedule", schedule, METH_VARARGS,
     "schedule(pc, runnable, here, far): (lowest counter, threads at it, next lowest counter)."},
    {"use_pool", use_pool, METH_NOARGS,
     "use_pool(): make the pool NumPy's allocator in this context; returns the previous handler."},
    {"restore", restore, METH_O, "restore(previous): put back the handler use_pool returned."},
    {"gather", gather, METH_VARARGS, "gather(typed, addresses, mask, origin, shift, out): checked loads."},
    {"scatter", scatter, METH_VARARGS,
     "scatter(typed, addresses, mask, origin, shift, values): checked stores, in thread order."},
    {"span", span, METH_VARARGS,
     "span(values, mask): (OR, min, max) of the active elements of a u32/u64 array, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The CPU loader's one-pass inner loops: fma and the C library's sin, cos, exp2, log2 and tanh "
    "(NumPy ufuncs), span, gather and scatter.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    import_array();
    import_umath();
    pool_lock = PyThread_allocate_lock();
    pool_capsule = PyCapsule_New(&pool_handler, "mem_handler", NULL);
    if (pool_lock == NULL || pool_capsule == NULL) {
        return NULL;
    }
#if HAVE_FMA_TARGET
    __builtin_cpu_init();
    has_fma = __builtin_cpu_supports("fma");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    PyObject *ufunc = PyUFunc_FromFuncAndData(
        loops, loop_data, (char *)loop_types, 2, 3, 1, PyUFunc_None, "fma",
        "fma(a, b, c): a*b+c with one rounding (C99 fma/fmaf).", 0);
    if (ufunc == NULL || PyModule_AddObject(m, "fma", ufunc) < 0) {
        Py_XDECREF(ufunc);
        Py_DECREF(m);
        return NULL;
    }
    for (size_t k = 0; k < sizeof(libm_names) / sizeof(libm_names[0]); k++) {
        ufunc = PyUFunc_FromFuncAndData(libm_loops[k], libm_data, (char *)libm_types, 1, 1, 1,
                                        PyUFunc_None, libm_names[k],
                                        "the C library's function of that name, on float64.", 0);
        if (ufunc == NULL || PyModule_AddObject(m, libm_names[k], ufunc) < 0) {
            Py_XDECREF(ufunc);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
