/* The XLA FFI handler behind ptxbridge.jax: one bridged kernel launch inside a jax.jit program.
 *
 * Plain C over the XLA FFI C API (xla/ffi/api/c_api.h from jax.ffi.include_dir()); setup.py builds
 * it only where jaxlib is installed at build time.  Everything a launch needs is fixed when the
 * program is traced and arrives as attributes (xla_ffi.py beside this file writes them), none of
 * them an address, so a program can be serialized (jax.export) and cached across processes:
 *
 *   image     string the image's content hash (hex SHA-256 of its saved form)
 *   kernel    string the kernel's name
 *   geometry  i64[7] grid x y z, block x y z, dynamic shared memory bytes
 *   params    u8[]   the packed parameter buffer with every pointer slot zero
 *   slots     i64[]  pairs (byte offset, buffer): buffer >= 0 is operand k, < 0 is result -k-1
 *   spans     i64[]  pairs (bytes, writable), one per slot: the buffer's extent
 *   stream    i64    1: launch on XLA's stream (CUDA); 0: no stream (CPU)
 *
 * and, for a kernel with no-alias promises (__restrict__, &mut, DisjointSlice):
 *
 *   no_alias       i64[] pairs (slot i, slot j) whose buffers must not overlap
 *   no_alias_text  string one line per pair, "head<TAB>why": the message around the bytes
 *
 * When XLA instantiates the call (compiling it, or loading a cached or deserialized executable)
 * the handler asks ptxbridge, through the resolver set with set_resolver, for the launch: the
 * image registered in this process under that hash, loaded on first use.  The answer is kept as
 * the call's FFI state:
 *
 *   entry     a function with cuLaunchKernel's signature (the driver's, or on the CPU a ctypes
 *             callback into ptxbridge's CPU PTX interpreter)
 *   function  its first argument (a CUkernel handle, or the CPU launch record's id)
 *   describe  0, or int (*)(int code, const char **text): the text for a failed launch
 *
 * Per call the handler copies the template, writes each buffer's address into its slots, checks
 * the no-alias pairs (two byte ranges each: XLA's buffers are dense), and makes one launch with
 * the packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER).  It launches the same
 * work every time, so it declares itself command-buffer compatible (XLA may capture it in a
 * CUDA graph).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_abi.h" /* bridge/launch/: cuLaunchKernel, its extra keys, the no-alias test */
#include "xla/ffi/api/c_api.h"

typedef int (*describe_fn)(int code, const char **text);

/* The launch an instantiated call resolved to (its FFI state). */
typedef struct {
    uint64_t entry, function, describe;
} resolved_launch;

static PyObject *resolver; /* ptxbridge's: (stream, image, kernel, slots, spans) -> (entry, function, describe) */

/* The state's type id, registered once per FFI API (the CPU client and a GPU plugin each have one). */
static pthread_mutex_t types_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const XLA_FFI_Api *api;
    XLA_FFI_TypeId id;
} types[4];

static XLA_FFI_Error *fail(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *message) {
    XLA_FFI_Error_Create_Args args = {XLA_FFI_Error_Create_Args_STRUCT_SIZE, NULL, message, code};
    return api->XLA_FFI_Error_Create(&args);
}

/* The attribute ``name`` of type ``type``, or NULL. */
static const void *attribute(const XLA_FFI_Attrs *attrs, const char *name, XLA_FFI_AttrType type) {
    size_t length = strlen(name);
    for (int64_t i = 0; i < attrs->size; i++) {
        const XLA_FFI_ByteSpan *found = attrs->names[i];
        if (found->len == length && memcmp(found->ptr, name, length) == 0)
            return attrs->types[i] == type ? attrs->attrs[i] : NULL;
    }
    return NULL;
}

static int scalar64(const XLA_FFI_Attrs *attrs, const char *name, uint64_t *out) {
    const XLA_FFI_Scalar *found = attribute(attrs, name, XLA_FFI_AttrType_SCALAR);
    if (found == NULL || (found->dtype != XLA_FFI_DataType_U64 && found->dtype != XLA_FFI_DataType_S64))
        return 0;
    memcpy(out, found->value, sizeof *out);
    return 1;
}

static const XLA_FFI_Array *array(const XLA_FFI_Attrs *attrs, const char *name, XLA_FFI_DataType dtype) {
    const XLA_FFI_Array *found = attribute(attrs, name, XLA_FFI_AttrType_ARRAY);
    return found != NULL && found->dtype == dtype ? found : NULL;
}

static void free_state(void *state) { free(state); }

/* The type id of resolved_launch in ``api``'s registry; NULL with *error set when it cannot be had. */
static XLA_FFI_TypeId *state_type(const XLA_FFI_Api *api, XLA_FFI_Error **error) {
    static const XLA_FFI_TypeInfo info = {XLA_FFI_TypeInfo_STRUCT_SIZE, NULL, free_state};
    static const char name[] = "ptxbridge_resolved_launch";
    XLA_FFI_TypeId *found = NULL;
    pthread_mutex_lock(&types_lock);
    size_t k = 0;
    for (; k < sizeof types / sizeof types[0] && types[k].api != NULL && found == NULL; k++)
        if (types[k].api == api) found = &types[k].id;
    if (found == NULL && k < sizeof types / sizeof types[0]) {
        XLA_FFI_Type_Register_Args args = {XLA_FFI_Type_Register_Args_STRUCT_SIZE, NULL,
                                           {name, sizeof name - 1}, &types[k].id, &info};
        types[k].id.type_id = 0; /* XLA_FFI_UNKNOWN_TYPE_ID: XLA assigns one */
        *error = api->XLA_FFI_Type_Register(&args);
        if (*error == NULL) {
            types[k].api = api;
            found = &types[k].id;
        }
    } else if (found == NULL) {
        *error = fail(api, XLA_FFI_Error_Code_INTERNAL, "ptxbridge_launch: too many XLA FFI instances");
    }
    pthread_mutex_unlock(&types_lock);
    return found;
}

/* "Type: message" of the pending Python exception (cleared) into ``out``. */
static void exception_text(char *out, size_t size) {
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    PyErr_NormalizeException(&type, &value, &trace);
    PyObject *text = value != NULL ? PyObject_Str(value) : NULL;
    const char *name = type != NULL ? ((PyTypeObject *)type)->tp_name : "error";
    const char *dot = strrchr(name, '.');
    const char *message = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
    snprintf(out, size, "%s: %s", dot != NULL ? dot + 1 : name, message != NULL ? message : "(no message)");
    PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
}

/* Ask ptxbridge's resolver for the call's launch (under the GIL); 0 on success, else the text in ``text``. */
static int resolve(const XLA_FFI_Attrs *attrs, resolved_launch *out, char *text, size_t size) {
    const XLA_FFI_ByteSpan *image = attribute(attrs, "image", XLA_FFI_AttrType_STRING);
    const XLA_FFI_ByteSpan *kernel = attribute(attrs, "kernel", XLA_FFI_AttrType_STRING);
    const XLA_FFI_Array *slots = array(attrs, "slots", XLA_FFI_DataType_S64);
    const XLA_FFI_Array *spans = array(attrs, "spans", XLA_FFI_DataType_S64);
    uint64_t stream;
    if (image == NULL || kernel == NULL || slots == NULL || spans == NULL || !scalar64(attrs, "stream", &stream)) {
        snprintf(text, size, "ptxbridge_launch: the custom call lacks attributes ptxbridge.jax writes (image, "
                             "kernel: strings; slots, spans: i64 pairs; stream: i64)");
        return 1;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    int failed = 1;
    if (resolver == NULL) {
        snprintf(text, size, "ptxbridge_launch: ptxbridge.jax registered no resolver in this process");
    } else {
        PyObject *found = PyObject_CallFunction(resolver, "Ky#y#y#y#", (unsigned long long)stream, image->ptr,
                                                (Py_ssize_t)image->len, kernel->ptr, (Py_ssize_t)kernel->len,
                                                (const char *)slots->data, (Py_ssize_t)(slots->size * 8),
                                                (const char *)spans->data, (Py_ssize_t)(spans->size * 8));
        if (found != NULL && PyArg_ParseTuple(found, "KKK", &out->entry, &out->function, &out->describe))
            failed = 0;
        else
            exception_text(text, size);
        Py_XDECREF(found);
    }
    PyGILState_Release(gil);
    return failed;
}

/* At instantiation: resolve the launch once and keep it as the call's state. */
static XLA_FFI_Error *instantiate(XLA_FFI_CallFrame *frame) {
    const XLA_FFI_Api *api = frame->api;
    XLA_FFI_Error *error = NULL;
    XLA_FFI_TypeId *type = state_type(api, &error);
    if (type == NULL) return error;
    resolved_launch *state = malloc(sizeof *state);
    if (state == NULL) return fail(api, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "ptxbridge_launch: out of memory");
    char text[2048];
    if (resolve(&frame->attrs, state, text, sizeof text) != 0) {
        free(state);
        return fail(api, XLA_FFI_Error_Code_FAILED_PRECONDITION, text);
    }
    XLA_FFI_State_Set_Args args = {XLA_FFI_State_Set_Args_STRUCT_SIZE, NULL, frame->ctx,
                                   XLA_FFI_ExecutionStage_INSTANTIATE, type, state};
    error = api->XLA_FFI_State_Set(&args);
    if (error != NULL) free(state);
    return error;
}

static XLA_FFI_Error *metadata(XLA_FFI_Metadata_Extension *extension) {
    XLA_FFI_Api_Version version = {XLA_FFI_Api_Version_STRUCT_SIZE, NULL, XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR};
    extension->metadata->api_version = version;
    extension->metadata->traits = XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE;
    return NULL;
}

/* The address of buffer ``source`` (operand k >= 0, result -k-1); 0 when there is no such buffer. */
static int buffer_address(const XLA_FFI_CallFrame *frame, int64_t source, void **out) {
    if (source >= 0) {
        if (source >= frame->args.size || frame->args.types[source] != XLA_FFI_ArgType_BUFFER) return 0;
        *out = ((XLA_FFI_Buffer *)frame->args.args[source])->data;
        return 1;
    }
    int64_t index = -source - 1;
    if (index >= frame->rets.size || frame->rets.types[index] != XLA_FFI_RetType_BUFFER) return 0;
    *out = ((XLA_FFI_Buffer *)frame->rets.rets[index])->data;
    return 1;
}

/* The error for no-alias pair ``k`` sharing bytes [lo, hi): line k of ``text``, split at its tab. */
static XLA_FFI_Error *overlapped(const XLA_FFI_Api *api, const XLA_FFI_ByteSpan *text, int64_t k, uintptr_t lo,
                                 uintptr_t hi) {
    const char *line = text->ptr, *end = text->ptr + text->len;
    for (; k > 0 && line < end; k--) {
        const char *next = memchr(line, '\n', (size_t)(end - line));
        line = next == NULL ? end : next + 1;
    }
    const char *stop = memchr(line, '\n', (size_t)(end - line));
    if (stop == NULL) stop = end;
    const char *tab = memchr(line, '\t', (size_t)(stop - line));
    if (tab == NULL) tab = stop;
    const char *why = tab < stop ? tab + 1 : stop;
    char message[2048];
    snprintf(message, sizeof message, "%.*s in bytes [%#llx, %#llx) (%llu bytes): %.*s", (int)(tab - line), line,
             (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)(hi - lo), (int)(stop - why), why);
    return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, message);
}

/* NULL, or the error for the first no-alias pair whose buffers share bytes. */
static XLA_FFI_Error *check_no_alias(const XLA_FFI_Api *api, const XLA_FFI_CallFrame *frame,
                                     const XLA_FFI_Array *slots) {
    const XLA_FFI_Attrs *attrs = &frame->attrs;
    const XLA_FFI_Array *pairs = array(attrs, "no_alias", XLA_FFI_DataType_S64);
    if (pairs == NULL) return NULL;
    const XLA_FFI_Array *spans = array(attrs, "spans", XLA_FFI_DataType_S64);
    const XLA_FFI_ByteSpan *text = attribute(attrs, "no_alias_text", XLA_FFI_AttrType_STRING);
    if (spans == NULL || text == NULL || pairs->size % 2 || spans->size != slots->size)
        return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "ptxbridge_launch: no_alias needs spans (a pair per slot) and no_alias_text");
    const int64_t *p = pairs->data, *span = spans->data, *source = slots->data;
    size_t count = slots->size / 2;
    for (size_t k = 0; k < pairs->size; k += 2) {
        int64_t i = p[k], j = p[k + 1];
        void *a = NULL, *b = NULL;
        if (i < 0 || j < 0 || (size_t)i >= count || (size_t)j >= count ||
            !buffer_address(frame, source[2 * i + 1], &a) || !buffer_address(frame, source[2 * j + 1], &b))
            return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "ptxbridge_launch: a no_alias pair names no slot");
        uint64_t lo_a = (uintptr_t)a, lo_b = (uintptr_t)b;
        uint64_t hi_a = lo_a + (uint64_t)span[2 * i], hi_b = lo_b + (uint64_t)span[2 * j];
        if (ranges_overlap(lo_a, hi_a, lo_b, hi_b))
            return overlapped(api, text, (int64_t)(k / 2), lo_a > lo_b ? lo_a : lo_b, hi_a < hi_b ? hi_a : hi_b);
    }
    return NULL;
}

static XLA_FFI_Error *launch_failed(const XLA_FFI_Api *api, const XLA_FFI_ByteSpan *kernel, uint64_t describe,
                                    int code, const int64_t *g) {
    const char *text = NULL;
    if (describe == 0 || ((describe_fn)(uintptr_t)describe)(code, &text) != 0 || text == NULL)
        text = "the driver refused it (see CUresult in cuda.h)";
    char message[2048];
    snprintf(message, sizeof message,
             "%.*s: the launch (grid=(%lld, %lld, %lld), block=(%lld, %lld, %lld), shared_mem=%lld) "
             "failed with code %d: %s",
             kernel ? (int)kernel->len : 6, kernel ? kernel->ptr : "kernel", (long long)g[0], (long long)g[1],
             (long long)g[2], (long long)g[3], (long long)g[4], (long long)g[5], (long long)g[6], code, text);
    return fail(api, XLA_FFI_Error_Code_INTERNAL, message);
}

static XLA_FFI_Error *ptxbridge_launch(XLA_FFI_CallFrame *frame) {
    const XLA_FFI_Api *api = frame->api;
    if (frame->extension_start != NULL && frame->extension_start->type == XLA_FFI_Extension_Metadata)
        return metadata((XLA_FFI_Metadata_Extension *)frame->extension_start);
    if (frame->stage == XLA_FFI_ExecutionStage_INSTANTIATE) return instantiate(frame);
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    const XLA_FFI_Attrs *attrs = &frame->attrs;
    uint64_t use_stream;
    const XLA_FFI_Array *geometry = array(attrs, "geometry", XLA_FFI_DataType_S64);
    const XLA_FFI_Array *params = array(attrs, "params", XLA_FFI_DataType_U8);
    const XLA_FFI_Array *slots = array(attrs, "slots", XLA_FFI_DataType_S64);
    const XLA_FFI_ByteSpan *kernel = attribute(attrs, "kernel", XLA_FFI_AttrType_STRING);
    if (!scalar64(attrs, "stream", &use_stream) || geometry == NULL || geometry->size != 7 || params == NULL ||
        slots == NULL || slots->size % 2)
        return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "ptxbridge_launch: the custom call lacks attributes ptxbridge.jax writes (stream: i64; "
                    "geometry: 7 x i64; params: u8[]; slots: i64 pairs)");
    XLA_FFI_Error *error = NULL;
    XLA_FFI_TypeId *type = state_type(api, &error);
    if (type == NULL) return error;
    XLA_FFI_State_Get_Args got = {XLA_FFI_State_Get_Args_STRUCT_SIZE, NULL, frame->ctx,
                                  XLA_FFI_ExecutionStage_INSTANTIATE, type, NULL};
    error = api->XLA_FFI_State_Get(&got);
    if (error != NULL) return error;
    const resolved_launch *launch = got.state;
    const int64_t *g = geometry->data;
    const int64_t *pairs = slots->data;
    size_t size = params->size;
    unsigned char stack[STACK_PARAM_BYTES];
    unsigned char *buffer = size <= STACK_PARAM_BYTES ? stack : malloc(size);
    if (buffer == NULL) return fail(api, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "ptxbridge_launch: out of memory");
    memcpy(buffer, params->data, size);
    for (size_t i = 0; i < slots->size && error == NULL; i += 2) {
        int64_t offset = pairs[i];
        void *address = NULL;
        if (offset < 0 || (size_t)offset + sizeof address > size || !buffer_address(frame, pairs[i + 1], &address))
            error = fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                         "ptxbridge_launch: a pointer slot lies outside the parameter buffer or names no buffer");
        else
            memcpy(buffer + offset, &address, sizeof address);
    }
    if (error == NULL) error = check_no_alias(api, frame, slots);
    void *stream = NULL;
    if (error == NULL && use_stream) {
        XLA_FFI_Stream_Get_Args args = {XLA_FFI_Stream_Get_Args_STRUCT_SIZE, NULL, frame->ctx, NULL};
        error = api->XLA_FFI_Stream_Get(&args);
        stream = args.stream;
    }
    if (error == NULL) {
        void *extra[] = {LAUNCH_PARAM_BUFFER_POINTER, buffer, LAUNCH_PARAM_BUFFER_SIZE, &size, LAUNCH_PARAM_END};
        LaunchFn entry = (LaunchFn)(uintptr_t)launch->entry;
        int code = entry((void *)(uintptr_t)launch->function, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2],
                         (unsigned)g[3], (unsigned)g[4], (unsigned)g[5], (unsigned)g[6], stream, NULL, extra);
        if (code != 0) error = launch_failed(api, kernel, launch->describe, code, g);
    }
    if (buffer != stack) free(buffer);
    return error;
}

static PyObject *set_resolver(PyObject *self, PyObject *fn) {
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_resolver takes a callable");
        return NULL;
    }
    Py_INCREF(fn);
    Py_XSETREF(resolver, fn);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_resolver", set_resolver, METH_O,
     "set_resolver(fn): fn(stream, image, kernel, slots, spans) -> (entry, function, describe), called when XLA "
     "instantiates a call"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ptxbridge.jax._xla_ffi",
    "The XLA FFI handler of ptxbridge.jax; ``handler`` is a PyCapsule for jax.ffi.register_ffi_target (for the "
    "instantiate and execute stages).",
    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__xla_ffi(void) {
    PyObject *self = PyModule_Create(&module);
    if (self == NULL) return NULL;
    PyObject *capsule = PyCapsule_New((void *)ptxbridge_launch, NULL, NULL);
    if (capsule == NULL || PyModule_AddObject(self, "handler", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(self);
        return NULL;
    }
    return self;
}
