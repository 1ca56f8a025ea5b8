/* ptxbridge.launch._fastlaunch: by-value structs (a dict of their fields, or a dataclass instance) and
 * tuples (a tuple or list of their items), packed in place; and numba / cuTile tuples, whose items are parameters of their own.
 *
 * bridge/launch/values.py encodes by-value ones: each member at its offset inside the parameter (padding
 * zero), scalars range-checked, nested structs and tuples in place, and a pointer member is None (null),
 * an int (a raw address, the caller's business) or a tensor checked as a top-level pointer argument is;
 * a slice member is a tensor, its {ptr, len} at the member's offset, or a {"ptr": tensor, "len": n} dict.
 * This file reads the same cases -- exact dicts with exactly the field names, instances of the exact
 * dataclass the plan was built for (its fields read with getattr, as values.py reads them), exact tuples /
 * lists of the item count, exact ints and floats, tensors of the type the plan was built for (any producer
 * _tensors.c reads), {ptr, len} dicts as top-level ones (pack_prefix, the tensor's stream 0) -- and declines
 * anything else (0, no error set), which the Python path then judges.  A numba / cuTile tuple
 * (bridge/launch/args.py _items_binder) is a record of top-level specs: each item is read as the
 * argument it stands for.
 */
#include "_fastlaunch.h"

enum { BY_POSITION = 0, BY_KEY = 1, BY_ATTRIBUTE = 2 }; /* a tuple / list; a dict; a dataclass instance */

struct Record {
    int by_name;       /* BY_*: how the members are found */
    PyTypeObject *container; /* BY_ATTRIBUTE: the exact type (a dataclass) whose attributes they are */
    Py_ssize_t count;
    PyObject **keys;   /* by_name: the field names (borrowed from the spec tuple) */
    ArgSpec *members;  /* PTXB_ARG_INT / _FLOAT / _ADDRESS / _PREFIX / _RECORD / _FIELDS, absolute offsets */
};

/* A pointer or slice member: None -> 0 and an exact int below 2**64 -> itself where raw addresses are
 * taken (raw pointers), else a tensor of its tensor spec, packed at that spec's places. */
static int pack_address(const ArgSpec *s, PyObject *value, char *buf, uint64_t *range,
                        PointerAttributeFn pointer_attribute) {
    if (s->raw && (value == Py_None || PyLong_CheckExact(value))) {
        unsigned long long v = 0;
        if (value != Py_None && !exact_u64(value, &v)) return 0;
        if (range != NULL) range[0] = range[1] = 0; /* no tensor: nothing the no-alias check sees */
        return put_unsigned(buf, s->offset, s->code, v);
    }
    /* stream 0: a __dlpack__ producer is told the legacy default, as the Python path tells it (None) */
    return s->members != NULL && pack_tensor(s->members, value, buf, range, pointer_attribute, 0);
}

/* dict[key] (borrowed; NULL, maybe with an error set, when absent), read in the dict's order while its
 * keys are the fields' own (interned) names in field order, as a dict display of the fields writes
 * them: the next entry then costs no hash lookup.  *pos is PyDict_Next's cursor. */
static PyObject *field(PyObject *dict, PyObject *key, Py_ssize_t *pos) {
    PyObject *found, *value;
    if (*pos >= 0 && PyDict_Next(dict, pos, &found, &value) && found == key) return value;
    *pos = -1; /* out of order: look the rest up */
    return PyDict_GetItemWithError(dict, key);
}

int pack_record(const ArgSpec *s, PyObject *arg, char *buf, uint64_t (*ranges)[2],
                PointerAttributeFn pointer_attribute, uintptr_t stream) {
    const struct Record *r = s->record;
    PyObject *const *items = NULL;
    if (r->by_name == BY_ATTRIBUTE) {
        if (Py_TYPE(arg) != r->container) return 0;
    } else if (r->by_name == BY_KEY) {
        if (!PyDict_CheckExact(arg) || PyDict_GET_SIZE(arg) != r->count) return 0;
    } else if (PyTuple_CheckExact(arg) && PyTuple_GET_SIZE(arg) == r->count) {
        items = &PyTuple_GET_ITEM(arg, 0);
    } else if (PyList_CheckExact(arg) && PyList_GET_SIZE(arg) == r->count) {
        items = PySequence_Fast_ITEMS(arg);
    } else {
        return 0;
    }
    Py_ssize_t pos = 0;
    for (Py_ssize_t k = 0; k < r->count; ++k) {
        /* an attribute is a new reference (values.py reads it with getattr), the rest borrowed */
        PyObject *value = items != NULL ? items[k] : r->by_name == BY_KEY ? field(arg, r->keys[k], &pos)
                        : PyObject_GetAttr(arg, r->keys[k]);
        if (value == NULL) { PyErr_Clear(); return 0; }
        const ArgSpec *m = &r->members[k];
        uint64_t *range = m->alias_slot < 0 ? NULL : ranges[m->alias_slot];
        int ok = m->kind == PTXB_ARG_INT ? pack_int(m, value, buf)
               : m->kind == PTXB_ARG_FLOAT ? pack_float(m, value, buf)
               : m->kind == PTXB_ARG_ADDRESS ? pack_address(m, value, buf, range, pointer_attribute)
               : m->kind == PTXB_ARG_RECORD ? pack_record(m, value, buf, ranges, pointer_attribute, stream)
               : m->kind == PTXB_ARG_FIELDS ? pack_fields(m, value, buf)
               : m->kind == PTXB_ARG_PREFIX ? pack_prefix(m, value, buf, range, pointer_attribute, 0)
               : pack_tensor(m, value, buf, range, pointer_attribute, stream);
        if (r->by_name == BY_ATTRIBUTE) Py_DECREF(value);
        if (!ok) return 0;
    }
    return 1;
}

static PyObject *str_ptr, *str_len, *str_dtype;

int records_ready(void) {
    str_ptr = PyUnicode_InternFromString("ptr");
    str_len = PyUnicode_InternFromString("len");
    str_dtype = PyUnicode_InternFromString("dtype");
    return str_ptr != NULL && str_len != NULL && str_dtype != NULL;
}

/* A NumPy structured scalar whose fields have the struct members' own dtypes (fastpath.py decides): each
 * field's bytes copied to its member's offset, as values.py's conversions would write them -- except a
 * NaN (its payload is not kept there) or a bool byte other than 0 and 1, which decline. */
struct Fields {
    Py_ssize_t itemsize, count;
    struct Copy { int to, from, size, check; } *copies; /* check: 'f' / 'd' / 'e' NaN, '?' bool, or 0 */
};

static int nan_bits(const char *at, int check) {
    uint64_t bits = 0;
    memcpy(&bits, at, check == 'd' ? 8 : check == 'f' ? 4 : 2);
    return check == 'd' ? (bits & 0x7fffffffffffffffu) > 0x7ff0000000000000u
         : check == 'f' ? (bits & 0x7fffffffu) > 0x7f800000u : (bits & 0x7fffu) > 0x7c00u;
}

int pack_fields(const ArgSpec *s, PyObject *arg, char *buf) {
    const struct Fields *f = s->fields;
    Py_buffer view;
    if (Py_TYPE(arg) != s->type) return 0;
    PyObject *dtype = PyObject_GetAttr(arg, str_dtype);
    int same = dtype != NULL && (dtype == s->source || PyObject_RichCompareBool(dtype, s->source, Py_EQ) == 1);
    Py_XDECREF(dtype);
    if (!same || PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) { PyErr_Clear(); return 0; }
    int ok = view.len == f->itemsize;
    for (Py_ssize_t k = 0; ok && k < f->count; ++k) {
        const struct Copy *c = &f->copies[k];
        const char *from = (const char *)view.buf + c->from;
        ok = c->check == '?' ? (unsigned char)*from <= 1 : c->check == 0 || !nan_bits(from, c->check);
        memcpy(buf + c->to, from, (size_t)c->size);
    }
    PyBuffer_Release(&view);
    return ok;
}

/* (PTXB_ARG_FIELDS, numpy.void, dtype, itemsize, ((to, from, size, check), ...)): the copies' sources
 * inside the itemsize bytes.  1, or 0 with an error set. */
int read_fields_spec(ArgSpec *s, PyObject *item) {
    PyObject *type, *copies;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(item, "iOOnO!", &s->kind, &type, &s->source, &itemsize, &PyTuple_Type, &copies))
        return 0;
    struct Fields *f = s->fields = PyMem_Calloc(1, sizeof *f);
    if (f == NULL) { PyErr_NoMemory(); return 0; }
    f->copies = PyMem_Calloc(PyTuple_GET_SIZE(copies) ? (size_t)PyTuple_GET_SIZE(copies) : 1, sizeof *f->copies);
    if (f->copies == NULL) { PyErr_NoMemory(); return 0; }
    f->itemsize = itemsize;
    f->count = PyTuple_GET_SIZE(copies);
    s->type = (PyTypeObject *)type;
    for (Py_ssize_t k = 0; k < f->count; ++k) {
        struct Copy *c = &f->copies[k];
        PyObject *copy = PyTuple_GET_ITEM(copies, k);
        if (!PyTuple_Check(copy) || !PyArg_ParseTuple(copy, "iiii", &c->to, &c->from, &c->size, &c->check))
            return 0;
        if (c->from < 0 || c->size <= 0 || c->size > 8 || c->from + c->size > itemsize) goto bad;
    }
    if (PyType_Check(type)) return 1;
bad:
    PyErr_SetString(PyExc_ValueError, "malformed structured-scalar spec");
    return 0;
}

int fields_fit(const ArgSpec *s, int size) {
    for (Py_ssize_t k = 0; k < s->fields->count; ++k) {
        const struct Copy *c = &s->fields->copies[k];
        if (c->to < 0 || c->to + c->size > size) return 0;
    }
    return 1;
}

/* args.py _slice_prefix: an exact dict of exactly "ptr" (a tensor, packed as the slice's spec says) and
 * "len" (an exact int from 0 to the tensor's element count, which replaces that count). */
int pack_prefix(const ArgSpec *s, PyObject *arg, char *buf, uint64_t *range, PointerAttributeFn pointer_attribute,
                uintptr_t stream) {
    const ArgSpec *t = s->members;
    long long n;
    uint64_t count;
    if (!PyDict_CheckExact(arg) || PyDict_GET_SIZE(arg) != 2) return 0;
    PyObject *tensor = PyDict_GetItemWithError(arg, str_ptr), *length = PyDict_GetItemWithError(arg, str_len);
    if (tensor == NULL || length == NULL || !exact_int(length, &n) || n < 0) { PyErr_Clear(); return 0; }
    if (!pack_tensor(t, tensor, buf, range, pointer_attribute, stream)) return 0;
    memcpy(&count, buf + t->places[1][0], 8); /* the count just packed ('Q', read_prefix_spec checks) */
    return (uint64_t)n <= count && put_unsigned(buf, t->places[1][0], t->places[1][1], (uint64_t)n);
}

/* (PTXB_ARG_PREFIX, tensor spec): the tensor spec's form a slice, its count a u64. */
int read_prefix_spec(ArgSpec *s, PyObject *item) {
    PyObject *tensor;
    if (!PyArg_ParseTuple(item, "iO", &s->kind, &tensor)) return 0;
    s->members = PyMem_Calloc(1, sizeof *s->members);
    if (s->members == NULL) { PyErr_NoMemory(); return 0; }
    s->members->alias_slot = -1;
    if (!PyTuple_Check(tensor) || !read_tensor_spec(s->members, tensor)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed slice prefix spec");
        return 0;
    }
    if (s->members->form != PTXB_FORM_SLICE || s->members->places[1][1] != 'Q') {
        PyErr_SetString(PyExc_ValueError, "a {ptr, len} slice's tensor is read as a slice of u64 length");
        return 0;
    }
    return 1;
}

/* (PTXB_ARG_ADDRESS, offset, code, tensor spec or None, raw): raw 1 where None / int addresses are taken. */
static int read_address(ArgSpec *s, PyObject *item) {
    PyObject *tensor;
    if (!PyArg_ParseTuple(item, "iiiOp", &s->kind, &s->offset, &s->code, &tensor, &s->raw)) return 0;
    if (tensor == Py_None) return 1;
    s->members = PyMem_Calloc(1, sizeof *s->members);
    if (s->members == NULL) { PyErr_NoMemory(); return 0; }
    s->members->alias_slot = -1;
    if (!read_tensor_spec(s->members, tensor)) return 0;
    if (s->members->form != PTXB_FORM_POINTER && s->members->form != PTXB_FORM_SLICE
        && s->members->form != PTXB_FORM_ROWS) {
        PyErr_SetString(PyExc_ValueError, "a pointer or slice member's tensor is read as a pointer or slice");
        return 0;
    }
    return 1;
}

/* (PTXB_ARG_RECORD, by_name, keys, members[, container]): by_name BY_*; keys a tuple of field names
 * (by key or attribute) or None; members the specs of the members, in order: scalars, addresses, {ptr, len}
 * slices, nested records, tensors (the items of a numba tuple, each its own parameters); container the
 * dataclass of a record read by attribute (the spec tuple keeps it alive).  1, or 0 with an error set. */
int read_record_spec(ArgSpec *s, PyObject *item) {
    PyObject *keys, *members, *container = NULL;
    int by_name;
    if (!PyArg_ParseTuple(item, "iiOO!|O", &s->kind, &by_name, &keys, &PyTuple_Type, &members, &container))
        return 0;
    Py_ssize_t count = PyTuple_GET_SIZE(members);
    if (by_name < BY_POSITION || by_name > BY_ATTRIBUTE
        || (by_name && (!PyTuple_Check(keys) || PyTuple_GET_SIZE(keys) != count))
        || (by_name == BY_ATTRIBUTE) != (container != NULL && PyType_Check(container))) {
        PyErr_SetString(PyExc_ValueError, "a struct spec names each member (and a dataclass its type)");
        return 0;
    }
    struct Record *r = s->record = PyMem_Calloc(1, sizeof *r);
    if (r == NULL) { PyErr_NoMemory(); return 0; }
    r->by_name = by_name;
    r->container = (PyTypeObject *)container;
    r->members = PyMem_Calloc(count ? (size_t)count : 1, sizeof *r->members);
    if (r->members == NULL) { PyErr_NoMemory(); return 0; }
    r->count = count; /* set once allocated: free_spec walks count members */
    r->keys = by_name ? &PyTuple_GET_ITEM(keys, 0) : NULL;
    for (Py_ssize_t k = 0; k < count; ++k) {
        ArgSpec *m = &r->members[k];
        PyObject *spec = PyTuple_GET_ITEM(members, k);
        m->alias_slot = -1;
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1) goto bad;
        m->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
        if (m->kind == PTXB_ARG_ADDRESS ? !read_address(m, spec) : !read_spec(m, spec)) goto bad;
        if (by_name && !PyUnicode_CheckExact(r->keys[k])) goto bad;
    }
    return 1;
bad:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed struct or tuple member spec");
    return 0;
}

ArgSpec *record_member(ArgSpec *s, Py_ssize_t k) {
    return s->kind == PTXB_ARG_RECORD && k >= 0 && k < s->record->count ? &s->record->members[k] : NULL;
}

/* Every place of a record's members fits a buffer of ``size`` bytes. */
int record_fits(const ArgSpec *s, int size) {
    for (Py_ssize_t k = 0; k < s->record->count; ++k) {
        const ArgSpec *m = &s->record->members[k];
        if (!check_place(m, size) || (m->kind == PTXB_ARG_ADDRESS && m->members != NULL
                                      && !check_place(m->members, size)))
            return 0;
    }
    return 1;
}

void free_spec(ArgSpec *s) {
    PyMem_Free(s->places);
    PyMem_Free(s->tile);
    free_cupy_attrs(s->cupy);
    if (s->fields != NULL) PyMem_Free(s->fields->copies);
    PyMem_Free(s->fields);
    if ((s->kind == PTXB_ARG_ADDRESS || s->kind == PTXB_ARG_PREFIX) && s->members != NULL) free_spec(s->members);
    if (s->kind == PTXB_ARG_ADDRESS || s->kind == PTXB_ARG_PREFIX) PyMem_Free(s->members);
    if (s->record != NULL) {
        for (Py_ssize_t k = 0; k < s->record->count; ++k) free_spec(&s->record->members[k]);
        PyMem_Free(s->record->members);
        PyMem_Free(s->record);
    }
}
