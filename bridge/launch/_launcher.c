/* ptxbridge.launch._fastlaunch.Launcher: the base type of ptxbridge.Kernel, so that calling a kernel
 * runs C from the first instruction (PEP 590 vectorcall) instead of a Python __call__.
 *
 * Per call: read grid= / block= / shared_mem= / stream= exactly as ptxbridge.launch.module.dim3 and
 * Kernel._call_python accept them, find the C Plan cached for the tuple of positional argument types
 * (a linear probe over CACHE_SIZE entries that the Python side fills through _remember), apply the
 * default block (.reqntid), and run the plan.  A call spelled any other way -- a keyword that is not
 * one of the four (a parameter by name, a typo), or no grid= -- goes to Kernel._call_keywords, which
 * binds it or raises the error that shows the expected call; anything else this file does not take
 * -- a cache miss, a value it does not read, a plan that declines -- calls Kernel._call_python with
 * the same arguments, which launches or raises the house-format error: this file never makes up an
 * error message of its own.  The accepting path does no more work for this split than before it.  A driver error goes to
 * Kernel._launch_failed, which raises the loader's CudaError.
 */
#include "_fastlaunch.h"

#include <stddef.h>

#define CACHE_SIZE 8
#define STACK_ARGS 16

typedef struct {
    PyObject *types; /* tuple of the positional argument types */
    PyObject *plan;  /* a Plan */
} Entry;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Entry cache[CACHE_SIZE];
    int next;                  /* round-robin victim when the cache is full */
    int has_block;
    unsigned block[3];         /* the default block (.reqntid) when has_block */
    PyObject *stream_handle;   /* callable: a stream object -> int handle (NULL until configured) */
    PyObject *kwnames;         /* the keyword names of the last call that used only the four (a call
                                  site's constant tuple: the same object each time), and ... */
    signed char kw_slot[4];    /* ... which of the four each one is */
} Launcher;

static PyObject *str_call_python, *str_call_keywords, *keyword_names[4]; /* grid, block, shared_mem, stream */

static PyObject *lookup(const Launcher *self, PyObject *const *args, Py_ssize_t nargs) {
    for (int i = 0; i < CACHE_SIZE; ++i) {
        PyObject *types = self->cache[i].types;
        if (types == NULL || PyTuple_GET_SIZE(types) != nargs) continue;
        Py_ssize_t k = 0;
        while (k < nargs && PyTuple_GET_ITEM(types, k) == (PyObject *)Py_TYPE(args[k])) ++k;
        if (k == nargs) return self->cache[i].plan;
    }
    return NULL;
}

/* self.<method>(*args, **kwargs) with this call's arguments (method: _call_python or _call_keywords). */
static PyObject *fallback(PyObject *self, PyObject *method, PyObject *const *args, size_t nargsf,
                          PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject *small[STACK_ARGS + 1];
    PyObject **with_self = total < STACK_ARGS ? small : PyMem_Malloc((size_t)(total + 1) * sizeof(PyObject *));
    if (with_self == NULL) return PyErr_NoMemory();
    with_self[0] = self;
    memcpy(with_self + 1, args, (size_t)total * sizeof(PyObject *));
    PyObject *result = PyObject_VectorcallMethod(method, with_self, (size_t)(nargs + 1), kwnames);
    if (with_self != small) PyMem_Free(with_self);
    return result;
}

typedef struct {
    PyObject *grid, *block, *shared, *stream;
} Keywords;

static int keyword_index(PyObject *name) {
    for (int k = 0; k < 4; ++k)
        if (name == keyword_names[k]) return k; /* names in call sites are interned */
    for (int k = 0; k < 4; ++k)
        if (PyUnicode_Compare(name, keyword_names[k]) == 0) return k;
    PyErr_Clear();
    return -1;
}

/* 1: every keyword is one of the four (each NULL when absent); 0: another keyword. */
static int read_keywords(Launcher *self, PyObject *const *values, PyObject *kwnames, Keywords *out) {
    PyObject **slots[] = {&out->grid, &out->block, &out->shared, &out->stream};
    *out = (Keywords){NULL, NULL, NULL, NULL};
    Py_ssize_t n = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (kwnames != NULL && kwnames == self->kwnames) { /* the call site seen last: its names known */
        for (Py_ssize_t i = 0; i < n; ++i) *slots[self->kw_slot[i]] = values[i];
        return 1;
    }
    signed char found[4];
    for (Py_ssize_t i = 0; i < n; ++i) {
        int k = keyword_index(PyTuple_GET_ITEM(kwnames, i));
        if (k < 0 || *slots[k] != NULL) return 0; /* a repeated name (a hand-built call): Python judges */
        *slots[k] = values[i];
        found[i] = (signed char)k;
    }
    if (n > 0) {
        Py_XSETREF(self->kwnames, Py_NewRef(kwnames));
        memcpy(self->kw_slot, found, (size_t)n);
    }
    return 1;
}

static PyObject *launch_failed(PyObject *self, int code, const unsigned g[3], const unsigned b[3], long shared) {
    return PyObject_CallMethod(self, "_launch_failed", "i(III)(III)l", code, g[0], g[1], g[2], b[0], b[1],
                               b[2], shared);
}

/* The launch of a cache hit (kw->grid is set): 1 when the driver was called (its CUresult in *code),
 * 0 when this call is the Python path's to judge, -1 with an error set. */
static int try_launch(const Launcher *self, PyObject *plan, PyObject *const *args, Py_ssize_t nargs,
                      const Keywords *kw, unsigned grid[3], unsigned block[3], long *shared, int *code) {
    if (!parse_dim(kw->grid, grid)) return 0;
    if (kw->block == NULL || kw->block == Py_None) {
        if (!self->has_block) return 0;
        memcpy(block, self->block, 3 * sizeof(unsigned));
    } else if (!parse_dim(kw->block, block)) {
        return 0;
    }
    *shared = 0;
    if (kw->shared != NULL) {
        if (!PyLong_CheckExact(kw->shared)) return 0;
        *shared = PyLong_AsLong(kw->shared);
        if (*shared < 0) { /* negative, or too large for a long (error set) */
            PyErr_Clear();
            return 0;
        }
    }
    PyObject *stream = kw->stream == NULL ? Py_None : kw->stream;
    if (stream != Py_None && !PyLong_CheckExact(stream)) {
        stream = self->stream_handle == NULL ? NULL : PyObject_CallOneArg(self->stream_handle, stream);
        if (stream == NULL || !PyLong_CheckExact(stream)) {
            PyErr_Clear();
            Py_XDECREF(stream);
            return 0;
        }
    } else {
        Py_INCREF(stream);
    }
    int ran = plan_run(plan, args, nargs, grid, block, *shared, stream, code);
    Py_DECREF(stream);
    return ran;
}

static PyObject *launcher_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Launcher *self = (Launcher *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Keywords kw;
    PyObject *plan;
    if (!read_keywords(self, args + nargs, kwnames, &kw) || kw.grid == NULL)
        return fallback(callable, str_call_keywords, args, nargsf, kwnames);
    if ((plan = lookup(self, args, nargs)) == NULL) return fallback(callable, str_call_python, args, nargsf, kwnames);
    unsigned grid[3], block[3];
    long shared;
    int code = 0;
    Py_INCREF(plan); /* the stream conversion runs Python and the launch releases the GIL: _forget may
                        drop the entry meanwhile */
    int ran = try_launch(self, plan, args, nargs, &kw, grid, block, &shared, &code);
    Py_DECREF(plan);
    if (ran < 0) return NULL;
    if (ran == 0) return fallback(callable, str_call_python, args, nargsf, kwnames);
    if (code != 0) return launch_failed(callable, code, grid, block, shared);
    Py_RETURN_NONE;
}

static void forget(Launcher *self) {
    for (int i = 0; i < CACHE_SIZE; ++i) {
        Py_CLEAR(self->cache[i].types);
        Py_CLEAR(self->cache[i].plan);
    }
    self->next = 0;
}

/* _remember(types, plan): later calls with these positional argument types run plan from C. */
static PyObject *launcher_remember(Launcher *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2 || !PyTuple_CheckExact(argv[0]) || !PyObject_TypeCheck(argv[1], &PlanType)) {
        PyErr_SetString(PyExc_TypeError, "_remember(types: tuple, plan: Plan)");
        return NULL;
    }
    int slot = -1;
    for (int i = 0; i < CACHE_SIZE && slot < 0; ++i) {
        PyObject *types = self->cache[i].types;
        if (types == NULL) {
            slot = i;
        } else {
            int same = PyObject_RichCompareBool(types, argv[0], Py_EQ);
            if (same < 0) return NULL;
            if (same) slot = i;
        }
    }
    if (slot < 0) {
        slot = self->next;
        self->next = (self->next + 1) % CACHE_SIZE;
    }
    Py_XSETREF(self->cache[slot].types, Py_NewRef(argv[0]));
    Py_XSETREF(self->cache[slot].plan, Py_NewRef(argv[1]));
    Py_RETURN_NONE;
}

static PyObject *launcher_forget(Launcher *self, PyObject *unused) {
    (void)unused;
    forget(self);
    Py_RETURN_NONE;
}

/* _configure(default_block: 3-tuple | None, stream_handle: callable) */
static PyObject *launcher_configure(Launcher *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2 || !PyCallable_Check(argv[1]) || (argv[0] != Py_None && !parse_dim(argv[0], self->block))) {
        PyErr_SetString(PyExc_TypeError, "_configure(default_block: (x, y, z) | None, stream_handle)");
        return NULL;
    }
    self->has_block = argv[0] != Py_None;
    Py_XSETREF(self->stream_handle, Py_NewRef(argv[1]));
    Py_RETURN_NONE;
}

/* _cached() -> tuple of the argument-type tuples whose plans run from C (for tests). */
static PyObject *launcher_cached(Launcher *self, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(0);
    for (int i = 0; out != NULL && i < CACHE_SIZE; ++i) {
        if (self->cache[i].types != NULL && PyList_Append(out, self->cache[i].types) < 0) Py_CLEAR(out);
    }
    if (out == NULL) return NULL;
    Py_SETREF(out, PyList_AsTuple(out));
    return out;
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)args;
    (void)kwargs;
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = launcher_call;
    return (PyObject *)self;
}

static int launcher_traverse(Launcher *self, visitproc visit, void *arg) {
    for (int i = 0; i < CACHE_SIZE; ++i) {
        Py_VISIT(self->cache[i].types);
        Py_VISIT(self->cache[i].plan);
    }
    Py_VISIT(self->stream_handle);
    Py_VISIT(self->kwnames);
    return 0;
}

static int launcher_clear(Launcher *self) {
    forget(self);
    Py_CLEAR(self->stream_handle);
    Py_CLEAR(self->kwnames);
    return 0;
}

static void launcher_dealloc(Launcher *self) {
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* __init_subclass__: a class defined in Python (ptxbridge.Kernel) calls through vectorcall as this type
 * does.  Python 3.12 passes Py_TPFLAGS_HAVE_VECTORCALL on to such a class by itself when it keeps the
 * inherited tp_call; 3.11 never does, so every call there went through tp_call, building an argument
 * tuple and a keyword dict that PyVectorcall_Call then took apart again (about 200 ns a launch). */
static PyObject *launcher_init_subclass(PyObject *cls, PyObject *unused) {
    (void)unused;
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_call == PyVectorcall_Call) type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    Py_RETURN_NONE;
}

static PyMethodDef launcher_methods[] = {
    {"__init_subclass__", (PyCFunction)launcher_init_subclass, METH_NOARGS | METH_CLASS,
     "a subclass that keeps this type's __call__ keeps its vectorcall too"},
    {"_remember", (PyCFunction)(void (*)(void))launcher_remember, METH_FASTCALL,
     "_remember(types, plan): run plan from C for these positional argument types"},
    {"_forget", (PyCFunction)launcher_forget, METH_NOARGS, "drop every remembered plan"},
    {"_configure", (PyCFunction)(void (*)(void))launcher_configure, METH_FASTCALL,
     "_configure(default_block, stream_handle)"},
    {"_cached", (PyCFunction)launcher_cached, METH_NOARGS, "the remembered argument-type tuples"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ptxbridge.launch._fastlaunch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Base of ptxbridge.Kernel: calls run C plans, falling back to Kernel._call_python "
              "(or Kernel._call_keywords for calls spelled another way).",
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_methods = launcher_methods,
};

int launcher_ready(void) {
    static const char *names[] = {"grid", "block", "shared_mem", "stream"};
    for (int k = 0; k < 4; ++k)
        if ((keyword_names[k] = PyUnicode_InternFromString(names[k])) == NULL) return 0;
    str_call_python = PyUnicode_InternFromString("_call_python");
    str_call_keywords = PyUnicode_InternFromString("_call_keywords");
    return str_call_python != NULL && str_call_keywords != NULL && PyType_Ready(&LauncherType) == 0;
}
