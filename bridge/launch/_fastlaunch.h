/* ptxbridge.launch._fastlaunch's two halves: what _fastlaunch.c (plans, the module) exports to _launcher.c
 * (the vectorcall Launcher in front of them) and back.  The launch ABI itself is launch_abi.h. */
#ifndef PTXBRIDGE_FASTLAUNCH_H
#define PTXBRIDGE_FASTLAUNCH_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "launch_abi.h"

/* _attrs.c: attribute reads of one type through its descriptors, looked up once per type version.
 * names[0:count] are interned (borrowed); the cache holds the type and descriptors it found. */
#define MAX_CACHED_ATTRS 8
typedef struct {
    int count;
    PyObject *const *names;
    PyTypeObject *type;
    unsigned int version; /* the type's tp_version_tag when looked up; 0: read with PyObject_GetAttr */
    PyObject *descr[MAX_CACHED_ATTRS];
    getter get[MAX_CACHED_ATTRS]; /* a getset descriptor's C getter (called as getset_get would), or NULL */
} AttrCache;
PyObject *cached_attr(AttrCache *c, PyObject *obj, int k);           /* obj.names[k], a new reference */
int cached_int(AttrCache *c, PyObject *obj, int k, long long *out);  /* an exact int attribute (1), else 0 */
void attr_cache_clear(AttrCache *c);

/* One argument of a plan (bridge/launch/fastpath.py native_specs writes them). */
typedef struct ArgSpec {
    int kind;                    /* PTXB_ARG_* */
    int offset, code;            /* scalars: the flat value's byte offset and struct code ('?' a bool,
                                    'e' an f16; 'E', not one of struct's, a bf16) */
    PyTypeObject *type;          /* tensors: the exact type the plan was made for */
    PyObject *source;            /* tensors: the exchange API capsule, CAI typestr or cupy dtype (borrowed) */
    const ExchangeAPI *api;      /* PTXB_ARG_TENSOR */
    DLType dtype;
    int32_t device_type, device_id;
    int form, ndim, layout;      /* PTXB_FORM_*; numba arrays: ndim and 'C' / 'F' / 'A' */
    int align, itemsize, refuses_readonly;
    int per, element_align;      /* slices and rows of non-numbers: values per element, the element's
                                    alignment (checked even for null and empty tensors, as tensor_rules) */
    int raw;                     /* PTXB_ARG_ADDRESS: None and int addresses are taken (raw pointers) */
    int nplaces;
    int (*places)[2];            /* tensors: (byte offset, struct code) of each flat value of the form */
    struct TilePromises *tile;   /* PTXB_FORM_TILE: what the array was compiled for */
    struct CupyAttrs *cupy;      /* PTXB_ARG_CUPY: the array's and its MemoryPointer's attribute caches */
    struct Record *record;       /* PTXB_ARG_RECORD: its members */
    struct Fields *fields;       /* PTXB_ARG_FIELDS: the field copies (type: numpy.void; source: its dtype) */
    struct ArgSpec *members;     /* PTXB_ARG_ADDRESS: the tensor spec of a tensor member, or NULL;
                                    PTXB_ARG_PREFIX: the slice's tensor spec */
    long long lo;                /* ints: the range; unsigned when lo >= 0 */
    unsigned long long hi;
    double limit;                /* floats: |x| <= limit */
    int alias_slot;              /* tensors in a no-alias pair: where its byte range goes; else -1 */
    int distinct;                /* tensors: no two elements may share an address (cuTile's promise) */
} ArgSpec;

/* _tensors.c: a tensor spec read from its tuple (1, or 0 with an error set); one tensor argument packed
 * (1, or 0: declined), its byte range into range[0:2] when range is not NULL; the interned names. */
int read_tensor_spec(ArgSpec *s, PyObject *item);
int pack_tensor(const ArgSpec *s, PyObject *arg, char *buf, uint64_t *range, PointerAttributeFn pointer_attribute,
                uintptr_t stream);
int tensors_ready(void);
void free_cupy_attrs(struct CupyAttrs *c);

/* _records.c: a record spec read (1, or 0 with an error set); one record argument packed (1, or 0:
 * declined), its members' byte ranges into ranges[alias_slot]; whether its members' places fit the
 * buffer; a spec's memory freed (any kind). */
int read_record_spec(ArgSpec *s, PyObject *item);
int pack_record(const ArgSpec *s, PyObject *arg, char *buf, uint64_t (*ranges)[2],
                PointerAttributeFn pointer_attribute, uintptr_t stream);
int record_fits(const ArgSpec *s, int size);
ArgSpec *record_member(ArgSpec *s, Py_ssize_t k); /* member k of a record spec, else NULL */
void free_spec(ArgSpec *s);
/* A {"ptr": tensor, "len": n} slice: its spec read (1, or 0 with an error set); packed (1, or 0:
 * declined), the whole tensor's byte range into range when not NULL; the interned keys (0: error set). */
int read_prefix_spec(ArgSpec *s, PyObject *item);
int pack_prefix(const ArgSpec *s, PyObject *arg, char *buf, uint64_t *range, PointerAttributeFn pointer_attribute,
                uintptr_t stream);
int records_ready(void);
/* A NumPy structured scalar: its spec read (1, or 0 with an error set); packed (1, or 0: declined); its
 * copies fit a buffer of size bytes. */
int read_fields_spec(ArgSpec *s, PyObject *item);
int pack_fields(const ArgSpec *s, PyObject *arg, char *buf);
int fields_fit(const ArgSpec *s, int size);

/* _fastlaunch.c: v written at buf + offset as struct code `code`, when it fits it (1), else 0; exact ints
 * read; a scalar
 * argument packed (1) or declined (0); any argument's spec read; its places checked against the buffer. */
int put_unsigned(char *buf, int offset, int code, unsigned long long v);
/* An exact int that fits int64 / uint64 -> *out (1), else 0, no error set either way: what
 * PyLong_AsLongLong and PyLong_AsUnsignedLongLong read, without their _PyLong_AsByteArray for 2-3 digit
 * values (addresses, stream handles) in CPython 3.11. */
int exact_u64(PyObject *value, unsigned long long *out);
static inline int exact_int(PyObject *value, long long *out) {
    int overflow;
    if (!PyLong_CheckExact(value)) return 0;
#if PY_VERSION_HEX >= 0x030C0000 /* one digit (|v| < 2**30) read in line: most scalars, shapes, counts */
    if (PyUnstable_Long_IsCompact((PyLongObject *)value)) {
        *out = (long long)PyUnstable_Long_CompactValue((PyLongObject *)value);
        return 1;
    }
#else
    Py_ssize_t digits = Py_SIZE(value);
    if (digits >= -1 && digits <= 1) { /* 0 has no digit to read */
        *out = digits == 0 ? 0 : (long long)digits * (long long)((PyLongObject *)value)->ob_digit[0];
        return 1;
    }
#endif
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    return 1;
}

int pack_int(const ArgSpec *s, PyObject *arg, char *buf);
int pack_float(const ArgSpec *s, PyObject *arg, char *buf);
int read_spec(ArgSpec *s, PyObject *item);
int check_place(const ArgSpec *s, int size);

extern PyTypeObject PlanType;
extern PyTypeObject LauncherType;

/* 4 / (4,) / (4, 2) / [4, 2, 1] of exact positive ints below 2**31 -> out; 0 (no error set) for
 * anything else, which the Python path then judges. */
int parse_dim(PyObject *value, unsigned out[3]);

/* One launch of a Plan over argv[0:nargs]: 1 when the driver was called (its CUresult in *code),
 * 0 when declined (nothing launched, no error set), -1 with a Python error set. */
int plan_run(PyObject *plan, PyObject *const *argv, Py_ssize_t nargs, const unsigned grid[3],
             const unsigned block[3], long shared, PyObject *stream, int *code);

/* Interns the names and readies LauncherType: 0 with a Python error set. */
int launcher_ready(void);

#endif
