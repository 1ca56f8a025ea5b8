/* The launch ABI that ptxbridge's C extensions share: ptxbridge.launch._fastlaunch (the C plan and the
 * vectorcall Launcher) and ptxbridge.jax._xla_ffi (the XLA FFI handler).  Plain C11, no Python.
 *
 * What is here, and who else must agree with it:
 *   - LaunchFn / SetCurrentFn: cuLaunchKernel's and cuCtxSetCurrent's signatures (cuda.h), as the CUDA
 *     loader hands their addresses over (loaders/cuda.py native_facts) or as the CPU loader's ctypes
 *     callback implements it (bridge/frameworks/jax/xla_ffi.py);
 *   - LAUNCH_PARAM_*: the `extra` keys of cuLaunchKernel (cuda.h CU_LAUNCH_PARAM_*);
 *   - the DLPack parts read (dlpack.h v1.2+: DLTensor and the C exchange API, DLPackExchangeAPI);
 *   - PTXB_ARG_*: the argument kinds of a C plan's spec tuples.  _fastlaunch exports each as a module
 *     constant of the same name without the PTXB_ prefix, which bridge/launch/fastpath.py reads: the
 *     codes are written down here only;
 *   - the byte-range no-alias test every tier makes (bridge/launch/aliasing.py, docs/safety.md).
 */
#ifndef PTXBRIDGE_LAUNCH_ABI_H
#define PTXBRIDGE_LAUNCH_ABI_H

#include <stdint.h>

/* --- the driver ---------------------------------------------------------------------------- */
typedef int (*LaunchFn)(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                        unsigned block_y, unsigned block_z, unsigned shared_mem, void *stream, void **kernel_params,
                        void **extra);
typedef int (*SetCurrentFn)(void *context);

#define LAUNCH_PARAM_END ((void *)0)            /* CU_LAUNCH_PARAM_END */
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)1) /* CU_LAUNCH_PARAM_BUFFER_POINTER */
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)2)    /* CU_LAUNCH_PARAM_BUFFER_SIZE */

#define MAX_PARAM_BYTES 32764 /* the driver's limit (CUDA 12.1+); abi/layout.py MAX_PARAM_BYTES */
#define STACK_PARAM_BYTES 4096 /* larger parameter buffers go on the heap: threads may have small stacks */

/* --- DLPack (dlpack.h v1.2+), the parts read --------------------------------------------------- */
#define DL_CPU 1  /* kDLCPU */
#define DL_CUDA 2 /* kDLCUDA */

typedef struct { uint32_t major, minor; } DLVersion;
typedef struct { int32_t device_type; int32_t device_id; } DLDev;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLType;
typedef struct { /* DLTensor */
    void *data;
    DLDev device;
    int32_t ndim;
    DLType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
} DLView;
typedef struct ExchangeHeader { DLVersion version; struct ExchangeHeader *prev_api; } ExchangeHeader;
typedef struct { /* DLManagedTensorVersioned: a "dltensor_versioned" capsule's pointer */
    DLVersion version;
    void *manager_ctx;
    void (*deleter)(void *self);
    uint64_t flags; /* DLPACK_FLAG_BITMASK_READ_ONLY = 1 */
    DLView dl_tensor;
} ManagedVersioned;
/* A legacy "dltensor" capsule's DLManagedTensor starts with its DLTensor. */
typedef struct { /* DLPackExchangeAPI: a type's __dlpack_c_exchange_api__ capsule, "dlpack_exchange_api" */
    ExchangeHeader header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLView *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} ExchangeAPI;

/* --- a C plan's argument kinds ------------------------------------------------------------------ */
enum {
    PTXB_ARG_TENSOR = 0, /* a tensor read through the DLPack C exchange API (torch) */
    PTXB_ARG_INT = 1,    /* a Python int, range-checked */
    PTXB_ARG_FLOAT = 2,  /* a Python float, range-checked */
    PTXB_ARG_CAI = 3,    /* a tensor read through __cuda_array_interface__ (numba device arrays, any producer) */
    PTXB_ARG_CUPY = 4,   /* a cupy.ndarray, read through its attributes (data.ptr, dtype, shape, strides) */
    PTXB_ARG_RECORD = 5, /* a by-value struct (a dict) or tuple (a tuple / list) of scalars, addresses and
                            records; or a numba / cuTile tuple (a tuple / list) of any kinds, each item
                            its own parameters */
    PTXB_ARG_ADDRESS = 6, /* a pointer or slice member of a record: a tensor; a raw pointer's also None or an
                             int address */
    PTXB_ARG_CAPSULE = 7, /* any __dlpack__ producer (JAX...): a fresh capsule per launch, read, released */
    PTXB_ARG_PREFIX = 8,  /* a slice (an argument or a record member) given as {"ptr": tensor, "len": n}: the
                             tensor's first n elements */
    PTXB_ARG_FIELDS = 9,  /* a by-value struct given as a NumPy structured scalar: its fields' bytes copied */
};

/* What a tensor argument's flat values are (abi/tensor_rules.py): its address; address and element
 * count (a slice); or numba's array struct (meminfo, parent, nitems, itemsize, data, shape[n], strides[n]
 * in bytes); a DisjointSlice2d's address, element count and u32 row width (a 2-d tensor's). */
enum { PTXB_FORM_POINTER = 0, PTXB_FORM_SLICE = 1, PTXB_FORM_NUMBA = 2, PTXB_FORM_TILE = 3, PTXB_FORM_ROWS = 4 };
/* PTXB_FORM_TILE: a cuTile array, its address then shape[n] and strides[n] in elements at the index width
 * (abi/tensor_rules.py tile_array), under the promises it was compiled with. */
#define PTXB_MAX_NDIM 32 /* tensors of more axes: the Python path */

/* cuPointerGetAttribute (cuda.h), for the device of a __cuda_array_interface__ pointer. */
typedef int (*PointerAttributeFn)(void *data, int attribute, uint64_t pointer);
#define POINTER_ATTRIBUTE_DEVICE_ORDINAL 9 /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */

/* --- no-alias promises ---------------------------------------------------------------------------- */
/* The byte ranges [lo_a, hi_a) and [lo_b, hi_b) share a byte (an empty range shares none). */
static inline int ranges_overlap(uint64_t lo_a, uint64_t hi_a, uint64_t lo_b, uint64_t hi_b) {
    return lo_a < hi_b && lo_b < hi_a && lo_a < hi_a && lo_b < hi_b;
}

#endif
