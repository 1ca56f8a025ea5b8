/* ptxbridge.launch._fastlaunch: one tensor argument of a C plan, read and packed.
 *
 * A tensor is read from its producer (launch_abi.h PTXB_ARG_*): through the DLPack C exchange API
 * (torch), through __cuda_array_interface__ (numba device arrays, any producer), or through a
 * cupy.ndarray's own attributes (its interface dict costs more than the launch).  Then it is checked as
 * the Python path checks it (bridge/launch/args.py _check_tensor, abi/tensor_rules.py): dtype, device,
 * read-only data on a parameter the kernel writes, element alignment, and the layout its form needs
 * (PTXB_FORM_*: contiguous for pointers, slices and rows, slices of non-numbers counted in whole
 * elements of their alignment; C / F / any for numba arrays of the compiled ndim; a cuTile array's
 * compiled promises),
 * and its flat values are written at their places.  Anything else declines (returns 0, no error set):
 * the Python path then accepts it or raises the house-format error.
 */
#include "_fastlaunch.h"

#include <string.h>

#define MAX_NDIM PTXB_MAX_NDIM
#define NO_PROMISE INT64_MIN /* a static shape / stride or stride bound not promised */

/* A cuTile array's promises, per axis (abi/kinds.py TileArray), and its index width's range. */
struct TilePromises {
    int64_t base_align, lo, hi;
    int64_t shape_divisor[MAX_NDIM], stride_divisor[MAX_NDIM];
    int64_t static_shape[MAX_NDIM], static_stride[MAX_NDIM], stride_bound[MAX_NDIM];
};

typedef struct {
    uint64_t address; /* of element 0, byte offset included */
    int32_t ndim;
    int64_t shape[MAX_NDIM];
    int64_t strides[MAX_NDIM]; /* in elements */
    int readonly;
} Tensor;

static PyObject *str_cai, *str_data, *str_typestr, *str_shape, *str_strides;
static PyObject *str_dlpack, *str_dlpack_device, *dlpack_kwnames, *max_version;
/* A cupy.ndarray's attributes the C plan reads, and its MemoryPointer's (data.ptr, data.device_id). */
enum { CUPY_DTYPE, CUPY_DATA, CUPY_C_CONTIGUOUS, CUPY_SIZE, CUPY_NDIM, CUPY_SHAPE, CUPY_STRIDES, CUPY_NAMES };
enum { MEMORY_PTR, MEMORY_DEVICE_ID, MEMORY_NAMES };
static PyObject *cupy_names[CUPY_NAMES], *memory_names[MEMORY_NAMES];

static int intern_all(PyObject **into, const char *const *names, size_t count) {
    for (size_t k = 0; k < count; ++k)
        if ((into[k] = PyUnicode_InternFromString(names[k])) == NULL) return 0;
    return 1;
}

int tensors_ready(void) {
    PyObject **slots[] = {&str_cai, &str_data, &str_typestr, &str_shape, &str_strides, &str_dlpack,
                          &str_dlpack_device};
    static const char *names[] = {"__cuda_array_interface__", "data", "typestr", "shape", "strides",
                                  "__dlpack__", "__dlpack_device__"};
    static const char *const cupy[CUPY_NAMES] = {"dtype", "data", "_c_contiguous", "size", "ndim",
                                                 "shape", "strides"};
    static const char *const memory[MEMORY_NAMES] = {"ptr", "device_id"};
    dlpack_kwnames = Py_BuildValue("(ss)", "stream", "max_version");
    max_version = Py_BuildValue("(ii)", 1, 1);
    if (dlpack_kwnames == NULL || max_version == NULL) return 0;
    for (size_t k = 0; k < sizeof names / sizeof *names; ++k)
        if ((*slots[k] = PyUnicode_InternFromString(names[k])) == NULL) return 0;
    return intern_all(cupy_names, cupy, CUPY_NAMES) && intern_all(memory_names, memory, MEMORY_NAMES);
}

static void compact_strides(Tensor *t) {
    int64_t step = 1;
    for (int32_t axis = t->ndim - 1; axis >= 0; --axis) {
        t->strides[axis] = step;
        step *= t->shape[axis] > 1 ? t->shape[axis] : 1;
    }
}

/* A tuple of at most MAX_NDIM Python ints that fit int64 -> out (*n of them); 0 for anything else. */
static int read_ints(PyObject *tuple, int64_t *out, int32_t *n) {
    if (tuple == NULL || !PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) > MAX_NDIM) return 0;
    *n = (int32_t)PyTuple_GET_SIZE(tuple);
    for (int32_t k = 0; k < *n; ++k) {
        PyObject *item = PyTuple_GET_ITEM(tuple, k);
        long long value;
        if (!exact_int(item, &value)) return 0;
        out[k] = value;
    }
    return 1;
}

/* An address is a multiple of n > 0; a mask for powers of two (alignments): a 64-bit division costs
 * tens of cycles, one or more per tensor per launch (strides are divided the same way below). */
static inline int multiple_of(uint64_t value, uint64_t n) {
    return (n & (n - 1)) == 0 ? (value & (n - 1)) == 0 : value % n == 0;
}

/* Byte strides -> element strides; 0 when one is not a multiple of the item size (the Python path says so). */
static int element_strides(PyObject *tuple, Tensor *t, int64_t itemsize) {
    int32_t n;
    if (!read_ints(tuple, t->strides, &n) || n != t->ndim) return 0;
    int pow2 = (itemsize & (itemsize - 1)) == 0, shift = __builtin_ctzll((uint64_t)itemsize);
    for (int32_t k = 0; k < n; ++k) {
        int64_t stride = t->strides[k];
        if (pow2 ? (stride & (itemsize - 1)) != 0 : stride % itemsize != 0) return 0;
        t->strides[k] = pow2 ? stride >> shift : stride / itemsize; /* exact: the shift rounds nothing */
    }
    return 1;
}

static int read_shape(PyObject *tuple, Tensor *t) {
    if (!read_ints(tuple, t->shape, &t->ndim)) return 0;
    for (int32_t k = 0; k < t->ndim; ++k)
        if (t->shape[k] < 0) return 0;
    return 1;
}

/* A DLTensor's facts, checked against the spec's dtype and device. */
static int read_view(const ArgSpec *s, const DLView *v, Tensor *t) {
    DLView view = *v;
    if (view.dtype.code != s->dtype.code || view.dtype.bits != s->dtype.bits || view.dtype.lanes != 1
        || view.device.device_type != s->device_type || view.device.device_id != s->device_id
        || view.ndim < 0 || view.ndim > MAX_NDIM)
        return 0;
    t->address = (uint64_t)(uintptr_t)view.data + view.byte_offset;
    t->ndim = view.ndim;
    t->readonly = 0; /* as the Python path reads torch tensors */
    for (int32_t k = 0; k < t->ndim; ++k) { /* one loop: a memcpy of the strides is a `rep movsq` here,
                                                  whose start-up cost is a fifth of a launch's */
        if (view.shape[k] < 0) return 0;
        t->shape[k] = view.shape[k];
        if (view.strides != NULL) t->strides[k] = view.strides[k];
    }
    if (view.strides == NULL) compact_strides(t);
    return 1;
}

static int read_dlpack(const ArgSpec *s, PyObject *arg, Tensor *t) {
    DLView view;
    if (s->api->dltensor_from_py_object_no_sync(arg, &view) != 0) {
        PyErr_Clear();
        return 0;
    }
    return read_view(s, &view, t);
}

/* bridge/launch/dlpack.py _dlpack_extract: __dlpack_device__ must name the spec's device; then
 * __dlpack__(stream=, max_version=(1, 1)) -- stream None on the CPU, else the launch's stream (1 for
 * the legacy default) -- gives a versioned capsule (read-only from its flags) or a legacy one; the facts
 * are copied and the capsule released unconsumed.  A producer that refuses max_version: declined. */
static int read_capsule(const ArgSpec *s, PyObject *arg, Tensor *t, uintptr_t stream) {
    PyObject *device = PyObject_CallMethodNoArgs(arg, str_dlpack_device);
    int ok = device != NULL && PyTuple_Check(device) && PyTuple_GET_SIZE(device) == 2
             && PyLong_AsLong(PyTuple_GET_ITEM(device, 0)) == s->device_type
             && PyLong_AsLong(PyTuple_GET_ITEM(device, 1)) == (s->device_type == DL_CUDA ? s->device_id : 0);
    Py_XDECREF(device);
    if (!ok) { PyErr_Clear(); return 0; }
    PyObject *consumer = s->device_type == DL_CUDA ? PyLong_FromUnsignedLongLong(stream ? stream : 1)
                                                   : Py_NewRef(Py_None);
    if (consumer == NULL) { PyErr_Clear(); return 0; }
    PyObject *args[] = {arg, consumer, max_version};
    PyObject *capsule = PyObject_VectorcallMethod(str_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                                  dlpack_kwnames);
    Py_DECREF(consumer);
    if (capsule == NULL) { PyErr_Clear(); return 0; }
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        const ManagedVersioned *managed = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        ok = read_view(s, &managed->dl_tensor, t);
        t->readonly = (int)(managed->flags & 1);
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        ok = read_view(s, (const DLView *)PyCapsule_GetPointer(capsule, "dltensor"), t);
    } else {
        ok = 0;
    }
    Py_DECREF(capsule); /* unconsumed: its destructor hands the tensor back to the producer */
    return ok;
}

/* __cuda_array_interface__ v2/v3 as bridge/launch/dlpack.py _cai_extract reads it; the device from the
 * pointer (cuPointerGetAttribute), accepted when the driver does not know the pointer, as there. */
static int read_cai_dict(const ArgSpec *s, PyObject *cai, Tensor *t, PointerAttributeFn pointer_attribute) {
    if (!PyDict_CheckExact(cai)) return 0;
    PyObject *data = PyDict_GetItemWithError(cai, str_data);
    PyObject *typestr = PyDict_GetItemWithError(cai, str_typestr);
    PyObject *strides = PyDict_GetItemWithError(cai, str_strides);
    if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (data == NULL || !PyTuple_CheckExact(data) || PyTuple_GET_SIZE(data) != 2 || typestr == NULL
        || !PyUnicode_CheckExact(typestr) || PyUnicode_Compare(typestr, s->source) != 0)
        return 0;
    PyObject *ptr = PyTuple_GET_ITEM(data, 0);
    if (ptr == Py_None) {
        t->address = 0;
    } else {
        unsigned long long address;
        if (!exact_u64(ptr, &address)) return 0;
        t->address = address;
    }
    if ((t->readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1))) < 0) { PyErr_Clear(); return 0; }
    if (!read_shape(PyDict_GetItemWithError(cai, str_shape), t)) { PyErr_Clear(); return 0; }
    if (strides == NULL || strides == Py_None) compact_strides(t);
    else if (!element_strides(strides, t, s->itemsize)) return 0;
    if (pointer_attribute != NULL && t->address != 0) {
        int ordinal = -1;
        if (pointer_attribute(&ordinal, POINTER_ATTRIBUTE_DEVICE_ORDINAL, t->address) == 0
            && ordinal != s->device_id)
            return 0;
    }
    return 1;
}

static int read_cai(const ArgSpec *s, PyObject *arg, Tensor *t, PointerAttributeFn pointer_attribute) {
    PyObject *cai = PyObject_GetAttr(arg, str_cai);
    if (cai == NULL) { PyErr_Clear(); return 0; }
    int ok = read_cai_dict(s, cai, t, pointer_attribute);
    Py_DECREF(cai);
    return ok;
}

/* A cupy.ndarray's attributes read, and its MemoryPointer's (data.ptr, data.device_id). */
struct CupyAttrs { AttrCache array, memory; };

static struct CupyAttrs *new_cupy_attrs(void) {
    struct CupyAttrs *c = PyMem_Calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->array = (AttrCache){.count = CUPY_NAMES, .names = cupy_names};
    c->memory = (AttrCache){.count = MEMORY_NAMES, .names = memory_names};
    return c;
}

void free_cupy_attrs(struct CupyAttrs *c) {
    if (c == NULL) return;
    attr_cache_clear(&c->array);
    attr_cache_clear(&c->memory);
    PyMem_Free(c);
}

/* A cupy.ndarray as bridge/launch/dlpack.py _cupy_extract reads it: data.ptr, dtype (the NumPy dtype
 * object, compared by identity), data.device_id (what .device.id reads), shape, strides in bytes.  For
 * a pointer or slice neither tuple is read (CuPy builds both per read): as the Python path's inline
 * read (fastpath.py _inline), CuPy's own C-contiguity flag decides, and size is the extent.  Nor for a
 * 1-d array of more than one element whose flag says C-contiguous, where the stride is the item size
 * (cupy/_core/internal.pyx get_c_contiguity).  Nor the size for a pointer without a byte range
 * (!sized): the array is read as its first element (ndim 0), so its alignment is checked even when it
 * is empty, which then declines to the Python path. */
static int read_cupy(const ArgSpec *s, PyObject *arg, Tensor *t, int sized) {
    AttrCache *array = &s->cupy->array;
    PyObject *dtype = cached_attr(array, arg, CUPY_DTYPE);
    Py_XDECREF(dtype);
    if (dtype != s->source) { PyErr_Clear(); return 0; } /* compared, not used: the array keeps it alive */
    PyObject *data = cached_attr(array, arg, CUPY_DATA);
    long long ptr = 0, device = -1, size = 0, ndim = 1;
    int ok = data != NULL && cached_int(&s->cupy->memory, data, MEMORY_PTR, &ptr)
             && cached_int(&s->cupy->memory, data, MEMORY_DEVICE_ID, &device);
    Py_XDECREF(data);
    if (!ok || device != s->device_id) { PyErr_Clear(); return 0; }
    t->address = (uint64_t)ptr;
    t->readonly = 0;
    int flat = s->form == PTXB_FORM_POINTER || s->form == PTXB_FORM_SLICE;
    if (flat || (s->ndim == 1 && cached_int(array, arg, CUPY_NDIM, &ndim) && ndim == 1)) {
        PyObject *contiguous = cached_attr(array, arg, CUPY_C_CONTIGUOUS);
        Py_XDECREF(contiguous);
        if (contiguous == Py_True && !sized && s->form == PTXB_FORM_POINTER) {
            t->ndim = 0;
            return 1;
        }
        ok = contiguous == Py_True && cached_int(array, arg, CUPY_SIZE, &size) && size >= 0;
        if (ok && (flat || size > 1)) {
            t->ndim = 1;
            t->shape[0] = size;
            t->strides[0] = 1;
            return 1;
        }
        PyErr_Clear();
        if (flat) return 0;
    }
    PyObject *shape = cached_attr(array, arg, CUPY_SHAPE);
    ok = read_shape(shape, t);
    Py_XDECREF(shape);
    PyObject *strides = ok ? cached_attr(array, arg, CUPY_STRIDES) : NULL;
    ok = ok && element_strides(strides, t, s->itemsize);
    Py_XDECREF(strides);
    if (!ok) PyErr_Clear();
    return ok;
}

/* TensorInfo.c_contiguous / f_contiguous: unit axes ignored, up to one element always contiguous. */
static int contiguous(const Tensor *t, uint64_t numel, int fortran) {
    if (numel <= 1) return 1;
    int64_t expected = 1;
    for (int32_t k = 0; k < t->ndim; ++k) {
        int32_t axis = fortran ? k : t->ndim - 1 - k;
        if (t->shape[axis] != 1 && t->strides[axis] != expected) return 0;
        expected *= t->shape[axis];
    }
    return 1;
}

/* [range[0], range[1]): the bytes the view touches (TensorInfo.span); 0 on overflow. */
static int span(const Tensor *t, uint64_t numel, int64_t itemsize, uint64_t range[2]) {
    if (numel == 0) {
        range[0] = range[1] = t->address;
        return 1;
    }
    int64_t below = 0, above = 0;
    for (int32_t k = 0; k < t->ndim; ++k) {
        int64_t reach;
        if (__builtin_mul_overflow(t->shape[k] - 1, t->strides[k], &reach)
            || __builtin_add_overflow(reach < 0 ? below : above, reach, reach < 0 ? &below : &above))
            return 0;
    }
    int64_t low, count, bytes;
    if (__builtin_mul_overflow(below, itemsize, &low) || __builtin_sub_overflow(above, below, &count)
        || __builtin_add_overflow(count, 1, &count) || __builtin_mul_overflow(count, itemsize, &bytes))
        return 0;
    range[0] = t->address + (uint64_t)low;
    return !__builtin_add_overflow(range[0], (uint64_t)bytes, &range[1]);
}

/* No two elements share an address (extents.py self_overlap's sufficient test): sorted by |stride|, each
 * axis of more than one element steps past all the smaller ones reach.  0 also for what it cannot show. */
static int distinct_elements(const Tensor *t) {
    int64_t strides[MAX_NDIM], extents[MAX_NDIM];
    int n = 0;
    for (int32_t k = 0; k < t->ndim; ++k) {
        if (t->shape[k] <= 1) continue;
        int64_t stride = t->strides[k] < 0 ? -t->strides[k] : t->strides[k];
        int at = n++;
        for (; at > 0 && strides[at - 1] > stride; --at) { /* insertion sort: a handful of axes */
            strides[at] = strides[at - 1];
            extents[at] = extents[at - 1];
        }
        strides[at] = stride;
        extents[at] = t->shape[k];
    }
    int64_t reach = 0;
    for (int k = 0; k < n; ++k) {
        if (strides[k] <= reach || __builtin_mul_overflow(strides[k], extents[k] - 1, &extents[k])
            || __builtin_add_overflow(reach, extents[k], &reach))
            return 0;
    }
    return 1;
}

static void put64(char *buf, int offset, uint64_t value) {
    memcpy(buf + offset, &value, 8);
}

/* tensor_rules.tile_array: ndim, base alignment, each axis's divisors, static values and stride bound,
 * the index range; values written masked to the index width. */
static int pack_tile(const ArgSpec *s, const Tensor *t, char *buf) {
    const struct TilePromises *p = s->tile;
    if (t->ndim != s->ndim || (p->base_align > 1 && !multiple_of(t->address, (uint64_t)p->base_align))) return 0;
    for (int32_t k = 0; k < t->ndim; ++k) {
        int64_t extent = t->shape[k], stride = t->strides[k];
        if ((p->shape_divisor[k] > 1 && extent % p->shape_divisor[k])
            || (p->stride_divisor[k] > 1 && stride % p->stride_divisor[k])
            || (p->static_shape[k] != NO_PROMISE && extent != p->static_shape[k])
            || (p->static_stride[k] != NO_PROMISE && stride != p->static_stride[k])
            || (p->stride_bound[k] != NO_PROMISE && stride < p->stride_bound[k])
            || extent < p->lo || extent > p->hi || stride < p->lo || stride > p->hi)
            return 0;
    }
    uint64_t mask = s->places[1 % s->nplaces][1] == 'I' ? 0xffffffffu : UINT64_MAX;
    if (!put_unsigned(buf, s->places[0][0], s->places[0][1], t->address)) return 0;
    for (int32_t k = 0; k < t->ndim; ++k)
        if (!put_unsigned(buf, s->places[1 + k][0], s->places[1 + k][1], (uint64_t)t->shape[k] & mask)
            || !put_unsigned(buf, s->places[1 + t->ndim + k][0], s->places[1 + t->ndim + k][1],
                             (uint64_t)t->strides[k] & mask))
            return 0;
    return 1;
}

int pack_tensor(const ArgSpec *s, PyObject *arg, char *buf, uint64_t *range, PointerAttributeFn pointer_attribute,
                uintptr_t stream) {
    Tensor t;
    if (Py_TYPE(arg) != s->type) return 0;
    int ok = s->kind == PTXB_ARG_TENSOR ? read_dlpack(s, arg, &t)
           : s->kind == PTXB_ARG_CAI ? read_cai(s, arg, &t, pointer_attribute)
           : s->kind == PTXB_ARG_CAPSULE ? read_capsule(s, arg, &t, stream)
           : read_cupy(s, arg, &t, range != NULL || s->distinct);
    if (!ok || (t.readonly && s->refuses_readonly)) return 0;
    uint64_t numel = 1;
    for (int32_t k = 0; k < t.ndim; ++k)
        if (__builtin_mul_overflow(numel, (uint64_t)t.shape[k], &numel)) return 0;
    if ((t.address != 0 && numel != 0 && !multiple_of(t.address, (uint64_t)s->align))
        || (s->element_align > 1 && !multiple_of(t.address, (uint64_t)s->element_align)))
        return 0;
    if (range != NULL && !span(&t, numel, s->itemsize, range)) return 0;
    if (s->distinct && numel > 1 && !distinct_elements(&t)) return 0;
    if (s->form == PTXB_FORM_TILE) return pack_tile(s, &t, buf);
    if (s->form != PTXB_FORM_NUMBA) { /* a pointer, slice or rows: contiguous, counted in whole elements */
        if (!contiguous(&t, numel, 0) || !put_unsigned(buf, s->places[0][0], s->places[0][1], t.address))
            return 0;
        if (s->form == PTXB_FORM_POINTER) return 1;
        uint64_t per = (uint64_t)s->per, count = numel, width = t.ndim == 2 ? (uint64_t)t.shape[1] : 0;
        if (per > 1) { /* a division: only for slices of non-numbers */
            if (numel % per || width % per) return 0;
            count /= per;
            width /= per;
        }
        if (!put_unsigned(buf, s->places[1][0], s->places[1][1], count)) return 0;
        if (s->form == PTXB_FORM_SLICE) return 1;
        return t.ndim == 2 && put_unsigned(buf, s->places[2][0], s->places[2][1], width); /* 'I': <= u32 */
    }
    if (t.ndim != s->ndim || (s->layout == 'C' && !contiguous(&t, numel, 0))
        || (s->layout == 'F' && !contiguous(&t, numel, 1)))
        return 0;
    uint64_t head[5] = {0, 0, numel, (uint64_t)s->itemsize, t.address}; /* meminfo, parent, ... */
    for (int k = 0; k < 5; ++k) put64(buf, s->places[k][0], head[k]);
    for (int32_t k = 0; k < t.ndim; ++k) {
        put64(buf, s->places[5 + k][0], (uint64_t)t.shape[k]);
        put64(buf, s->places[5 + t.ndim + k][0], (uint64_t)t.strides[k] * (uint64_t)s->itemsize);
    }
    return 1;
}

/* tile: (base_align, lo, hi, shape_divisor, stride_divisor, static_shape, static_stride, stride_bound),
 * each per-axis tuple of ndim ints or None (not promised).  1, or 0 with an error set. */
static int read_tile(ArgSpec *s, PyObject *tile) {
    struct TilePromises *p = s->tile = PyMem_Calloc(1, sizeof *p);
    PyObject *axes[5];
    int64_t *into[5] = {p->shape_divisor, p->stride_divisor, p->static_shape, p->static_stride, p->stride_bound};
    if (p == NULL) { PyErr_NoMemory(); return 0; }
    if (!PyTuple_Check(tile) || !PyArg_ParseTuple(tile, "LLLOOOOO", &p->base_align, &p->lo, &p->hi, &axes[0],
                                                  &axes[1], &axes[2], &axes[3], &axes[4]))
        return 0;
    for (int k = 0; k < 5; ++k) {
        for (int a = 0; a < s->ndim; ++a) {
            PyObject *value = PyTuple_Check(axes[k]) && PyTuple_GET_SIZE(axes[k]) == s->ndim
                              ? PyTuple_GET_ITEM(axes[k], a) : Py_None;
            into[k][a] = value == Py_None ? (k < 2 ? 1 : NO_PROMISE) : PyLong_AsLongLong(value);
            if (PyErr_Occurred()) return 0;
        }
    }
    return 1;
}

/* (kind, type, source, dl_code, dl_bits, device_type, device_id, form, ndim, layout, align, refuses_readonly,
 *  per, element_align, places[, tile]): source is the DLPack exchange API capsule, the __cuda_array_interface__ typestr, or the
 *  NumPy dtype of a cupy.ndarray; places ((offset, struct code), ...) the form's flat values; tile the
 *  promises of a PTXB_FORM_TILE array (read_tile).  1, or 0 with an error set. */
int read_tensor_spec(ArgSpec *s, PyObject *item) {
    PyObject *type, *places, *tile = Py_None;
    int dl_code, dl_bits, form_places;
    if (!PyArg_ParseTuple(item, "iOOiiiiiiiiiiiO!|O", &s->kind, &type, &s->source, &dl_code, &dl_bits,
                          &s->device_type, &s->device_id, &s->form, &s->ndim, &s->layout, &s->align,
                          &s->refuses_readonly, &s->per, &s->element_align, &PyTuple_Type, &places, &tile))
        return 0;
    form_places = s->form == PTXB_FORM_POINTER ? 1 : s->form == PTXB_FORM_SLICE ? 2
                : s->form == PTXB_FORM_ROWS ? 3 : s->form == PTXB_FORM_TILE ? 1 + 2 * s->ndim : 5 + 2 * s->ndim;
    if (!PyType_Check(type) || dl_bits <= 0 || dl_bits % 8 || s->align <= 0 || s->per <= 0
        || s->element_align <= 0 || s->form < 0 || s->form > PTXB_FORM_ROWS || s->ndim < 0 || s->ndim > MAX_NDIM || PyTuple_GET_SIZE(places) != form_places
        || (s->kind == PTXB_ARG_CAI && !PyUnicode_CheckExact(s->source))
        || ((s->form == PTXB_FORM_TILE) != (tile != Py_None))) {
        PyErr_SetString(PyExc_ValueError, "malformed tensor argument spec");
        return 0;
    }
    s->type = (PyTypeObject *)type;
    s->dtype = (DLType){(uint8_t)dl_code, (uint8_t)dl_bits, 1};
    s->itemsize = dl_bits / 8;
    s->nplaces = form_places;
    s->places = PyMem_Calloc((size_t)form_places, sizeof *s->places);
    if (s->places == NULL) { PyErr_NoMemory(); return 0; }
    for (int k = 0; k < form_places; ++k) {
        PyObject *place = PyTuple_GET_ITEM(places, k);
        if (!PyTuple_Check(place) || !PyArg_ParseTuple(place, "ii", &s->places[k][0], &s->places[k][1])) return 0;
        if (s->form == PTXB_FORM_NUMBA && s->places[k][1] != 'Q' && s->places[k][1] != 'q') {
            PyErr_SetString(PyExc_ValueError, "numba array fields are 64-bit");
            return 0;
        }
    }
    if (s->form == PTXB_FORM_TILE && !read_tile(s, tile)) return 0;
    if (s->kind == PTXB_ARG_CUPY && (s->cupy = new_cupy_attrs()) == NULL) { PyErr_NoMemory(); return 0; }
    if (s->kind != PTXB_ARG_TENSOR) return 1;
    s->api = (const ExchangeAPI *)PyCapsule_GetPointer(s->source, "dlpack_exchange_api");
    if (s->api == NULL) return 0;
    if (s->api->header.version.major != 1 || s->api->header.version.minor < 2
        || s->api->dltensor_from_py_object_no_sync == NULL || s->api->current_work_stream == NULL) {
        PyErr_SetString(PyExc_ValueError, "the DLPack exchange API is too old or lacks DLTensor views");
        return 0;
    }
    return 1;
}
