/* ptxbridge.loaders.emulator._threads: the compiled CPU tier's blocks on several threads, handed
 * over in microseconds.
 *
 * run(launch, first_field, end_field, chunks) runs chunk k = (context address, first block, end
 * block) as launch(context) after writing the block range into the context's words first_field
 * and end_field; chunk 0 on the calling thread, the others on threads of a pool this module keeps,
 * and returns each chunk's status once every chunk has returned.  The GIL is released meanwhile.
 *
 * Why native: a Jacobi step of 256 small blocks is 150 us of work, and a Python thread pool's
 * hand-over (a future, a lock, a wake-up through the GIL) costs tens of microseconds a thread, more
 * than such a launch's share saves.  Here a chunk is posted by one store into the worker's slot; a
 * worker that finished a chunk spins for SPIN_NS on its slot before it sleeps on a condition
 * variable, so the launches of a loop find it awake.  Workers block every signal (a Ctrl-C is
 * taken by the calling thread once the round returns); a forked child starts a pool of its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RELAX() _mm_pause()
#else
#define RELAX() ((void)0)
#endif

enum { MAX_CHUNKS = 1024 };
static const int64_t SPIN_NS = 200000; /* a worker's wait before it sleeps: a loop's next launch */

typedef int32_t (*Launch)(int64_t *ctx);

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint_fast64_t posted;   /* the round of the chunk posted last */
    atomic_uint_fast64_t finished; /* the round of the chunk finished last */
    atomic_int sleeping;
    Launch launch;
    int64_t *ctx;
    int32_t status;
} Worker;

static Worker *workers[MAX_CHUNKS];
static int started;        /* workers with a running thread */
static uint64_t round_now; /* rounds posted, for the slots' round numbers */
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER; /* one round at a time */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The round of the next chunk posted to w after round seen: spinning a while, then asleep. */
static uint64_t await_post(Worker *w, uint64_t seen) {
    int64_t until = 0;
    for (unsigned spins = 0;; spins++) {
        uint64_t posted = atomic_load_explicit(&w->posted, memory_order_acquire);
        if (posted != seen) {
            return posted;
        }
        RELAX();
        if ((spins & 255) == 255) {
            sched_yield(); /* more threads than cores: the ones still working go first */
            int64_t t = now_ns();
            if (until == 0) {
                until = t + SPIN_NS;
            } else if (t > until) {
                break;
            }
        }
    }
    pthread_mutex_lock(&w->lock);
    atomic_store(&w->sleeping, 1); /* sequentially consistent with post()'s store and load */
    uint64_t posted;
    while ((posted = atomic_load(&w->posted)) == seen) {
        pthread_cond_wait(&w->wake, &w->lock);
    }
    atomic_store(&w->sleeping, 0);
    pthread_mutex_unlock(&w->lock);
    return posted;
}

static void *work(void *arg) {
    Worker *w = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    uint64_t seen = 0;
    for (;;) {
        seen = await_post(w, seen);
        w->status = w->launch(w->ctx);
        atomic_store_explicit(&w->finished, seen, memory_order_release);
    }
    return NULL;
}

/* Workers up to count; returns how many there are (fewer where a thread could not start). */
static int ensure_workers(int count) {
    while (started < count) {
        Worker *w = calloc(1, sizeof *w);
        if (w == NULL) {
            break;
        }
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, NULL);
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attr, work, w);
        pthread_attr_destroy(&attr);
        if (failed) {
            free(w);
            break;
        }
        workers[started++] = w;
    }
    return started < count ? started : count;
}

static void post(Worker *w, Launch launch, int64_t *ctx, uint64_t round) {
    w->launch = launch;
    w->ctx = ctx;
    atomic_store(&w->posted, round);
    if (atomic_load(&w->sleeping)) {
        pthread_mutex_lock(&w->lock);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
    }
}

static void await_finish(Worker *w, uint64_t round) {
    for (unsigned spins = 0; atomic_load_explicit(&w->finished, memory_order_acquire) != round; spins++) {
        RELAX();
        if ((spins & 4095) == 4095) {
            sched_yield(); /* a long chunk: leave the core to the workers */
        }
    }
}

/* In a forked child the workers' threads are gone: it starts its own (the old slots are left). */
static void forget_workers(void) {
    started = 0;
    pthread_mutex_init(&round_lock, NULL);
}

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long address;
    Py_ssize_t first_field, end_field;
    PyObject *chunks_obj;
    if (!PyArg_ParseTuple(args, "KnnO:run", &address, &first_field, &end_field, &chunks_obj)) {
        return NULL;
    }
    PyObject *chunks = PySequence_Fast(chunks_obj, "run: chunks must be a sequence of (ctx, first, end)");
    if (chunks == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(chunks);
    if (count < 1 || count > MAX_CHUNKS || first_field < 0 || end_field < 0) {
        Py_DECREF(chunks);
        return PyErr_Format(PyExc_ValueError, "run: 1 to %d chunks and field indices >= 0", MAX_CHUNKS);
    }
    int64_t *ctx[MAX_CHUNKS];
    long long first[MAX_CHUNKS], end[MAX_CHUNKS];
    int32_t status[MAX_CHUNKS];
    for (Py_ssize_t k = 0; k < count; k++) { /* every chunk read before any context is written */
        unsigned long long at;
        PyObject *chunk = PySequence_Fast_GET_ITEM(chunks, k);
        if (!PyTuple_Check(chunk) || !PyArg_ParseTuple(chunk, "KLL:run chunk", &at, &first[k], &end[k])) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "run: each chunk is a tuple (ctx address, first, end)");
            }
            Py_DECREF(chunks);
            return NULL;
        }
        ctx[k] = (int64_t *)(uintptr_t)at;
    }
    Py_DECREF(chunks);
    for (Py_ssize_t k = 0; k < count; k++) {
        ctx[k][first_field] = first[k];
        ctx[k][end_field] = end[k];
    }
    Launch launch = (Launch)(uintptr_t)address;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&round_lock);
    int helpers = ensure_workers((int)count - 1);
    uint64_t round = ++round_now;
    for (int k = 0; k < helpers; k++) {
        post(workers[k], launch, ctx[k + 1], round);
    }
    status[0] = launch(ctx[0]);
    for (Py_ssize_t k = helpers + 1; k < count; k++) { /* chunks no thread could be started for */
        status[k] = launch(ctx[k]);
    }
    for (int k = 0; k < helpers; k++) {
        await_finish(workers[k], round);
        status[k + 1] = workers[k]->status;
    }
    pthread_mutex_unlock(&round_lock);
    Py_END_ALLOW_THREADS
    PyObject *out = PyList_New(count);
    for (Py_ssize_t k = 0; out != NULL && k < count; k++) {
        PyObject *value = PyLong_FromLong(status[k]);
        if (value == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, k, value);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(launch, first_field, end_field, chunks): each (ctx, first, end) chunk's launch(ctx) status, "
     "chunk 0 on this thread and the others on the pool's."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_threads", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__threads(void) {
    static int registered;
    if (!registered) {
        pthread_atfork(NULL, NULL, forget_workers);
        registered = 1;
    }
    return PyModule_Create(&module);
}
