/* ptxbridge.loaders.emulator._threads: the compiled CPU tier's blocks on several threads, handed
 * over in microseconds.
 *
 * run(launch, first_field, end_field, contexts, first, end, piece) runs blocks [first, end) in
 * pieces of `piece` blocks: each thread that takes part claims the next piece (one atomic add),
 * writes its range into its own context's words first_field and end_field and calls
 * launch(context).  Thread k uses context k: the calling thread context 0, the pool's workers the
 * others.  Returns (status, k): 0 and -1 once every block ran, else the failing status of the piece
 * that comes first in block order and the context that ran it (a run in order would have stopped
 * there; every piece before it was claimed, so it ran, and after a failure no piece is claimed).
 * The GIL is released meanwhile.
 *
 * Why native: a Jacobi step of 256 small blocks is 150 us of work, and a Python thread pool's
 * hand-over (a future, a lock, a wake-up through the GIL) costs tens of microseconds a thread, more
 * than such a launch's share saves.  Here a round is posted by one store into each worker's slot; a
 * worker that finished spins for SPIN_NS on its slot before it sleeps on a condition variable, so
 * the launches of a loop find it awake.  Pieces are claimed, not dealt: a worker the system has not
 * scheduled yet takes none, and the round does not wait for it (the calling thread closes the round
 * when no piece is left and waits only for the workers inside it).  Workers block every signal (a
 * Ctrl-C is taken by the calling thread once the round returns); a forked child starts a pool of its
 * own.
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

enum { MAX_CONTEXTS = 1024 };
static const int64_t SPIN_NS = 200000; /* a worker's wait before it sleeps: a loop's next launch */

typedef int32_t (*Launch)(int64_t *ctx);

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint_fast64_t posted; /* the round posted last */
    atomic_int sleeping;
} Worker;

/* The round in progress: written by the calling thread while no worker is inside one. */
static struct {
    Launch launch;
    int64_t **ctx;
    int contexts;
    Py_ssize_t first_field, end_field;
    int64_t end, piece;
    atomic_int_fast64_t next;   /* the first block no thread has claimed */
    atomic_int open;            /* pieces may still be claimed */
    atomic_int inside;          /* workers taking part now */
    atomic_int_fast64_t failed; /* the lowest failing piece's first block (INT64_MAX: none) */
    int32_t *status;            /* per context: its failing status (0: none) */
    int64_t *failed_at;         /* per context: the first block of its failing piece */
} job;

static Worker *workers[MAX_CONTEXTS];
static int started;        /* workers with a running thread */
static uint64_t round_now; /* rounds posted, for the slots' round numbers */
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER; /* one round at a time */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Pieces of the round claimed and run with context k until none is left or some piece failed. */
static void take_part(int k) {
    int64_t *ctx = job.ctx[k];
    while (atomic_load_explicit(&job.failed, memory_order_relaxed) == INT64_MAX) {
        int64_t lo = atomic_fetch_add(&job.next, job.piece);
        if (lo >= job.end) {
            break;
        }
        ctx[job.first_field] = lo;
        ctx[job.end_field] = lo + job.piece < job.end ? lo + job.piece : job.end;
        int32_t status = job.launch(ctx);
        if (status != 0) {
            job.status[k] = status;
            job.failed_at[k] = lo;
            int64_t seen = atomic_load(&job.failed);
            while (lo < seen && !atomic_compare_exchange_weak(&job.failed, &seen, lo)) {
            }
            break;
        }
    }
}

/* The round posted to w after round seen: spinning a while, then asleep. */
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

typedef struct {
    Worker *slot;
    int index; /* the context it uses: its place in workers, plus one */
} Seat;

static void *work(void *arg) {
    Seat seat = *(Seat *)arg;
    free(arg);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    uint64_t seen = 0;
    for (;;) {
        seen = await_post(seat.slot, seen);
        /* enter the round unless it closed (Dekker with run(): it closes, then waits for inside 0) */
        atomic_fetch_add(&job.inside, 1);
        if (atomic_load(&job.open) && seat.index < job.contexts) {
            take_part(seat.index);
        }
        atomic_fetch_sub(&job.inside, 1);
    }
    return NULL;
}

/* Workers up to count; returns how many there are (fewer where a thread could not start). */
static int ensure_workers(int count) {
    while (started < count) {
        Worker *w = calloc(1, sizeof *w);
        Seat *seat = malloc(sizeof *seat);
        if (w == NULL || seat == NULL) {
            free(w);
            free(seat);
            break;
        }
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, NULL);
        *seat = (Seat){w, started + 1};
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attr, work, seat);
        pthread_attr_destroy(&attr);
        if (failed) {
            free(w);
            free(seat);
            break;
        }
        workers[started++] = w;
    }
    return started < count ? started : count;
}

static void post(Worker *w, uint64_t round) {
    atomic_store(&w->posted, round);
    if (atomic_load(&w->sleeping)) {
        pthread_mutex_lock(&w->lock);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
    }
}

/* In a forked child the workers' threads are gone: it starts its own (the old slots are left). */
static void forget_workers(void) {
    started = 0;
    atomic_store(&job.inside, 0);
    pthread_mutex_init(&round_lock, NULL);
}

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long address;
    Py_ssize_t first_field, end_field;
    long long first, end, piece;
    PyObject *contexts_obj;
    if (!PyArg_ParseTuple(args, "KnnOLLL:run", &address, &first_field, &end_field, &contexts_obj, &first,
                          &end, &piece)) {
        return NULL;
    }
    PyObject *contexts = PySequence_Fast(contexts_obj, "run: contexts must be a sequence of addresses");
    if (contexts == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(contexts);
    if (count < 1 || count > MAX_CONTEXTS || first_field < 0 || end_field < 0 || piece < 1 || first > end) {
        Py_DECREF(contexts);
        return PyErr_Format(PyExc_ValueError,
                            "run: 1 to %d contexts, field indices >= 0, pieces of >= 1 block, first <= end",
                            MAX_CONTEXTS);
    }
    int64_t *ctx[MAX_CONTEXTS];
    int32_t status[MAX_CONTEXTS] = {0};
    int64_t failed_at[MAX_CONTEXTS];
    for (Py_ssize_t k = 0; k < count; k++) {
        unsigned long long at = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(contexts, k));
        if (PyErr_Occurred()) {
            Py_DECREF(contexts);
            return NULL;
        }
        ctx[k] = (int64_t *)(uintptr_t)at;
    }
    Py_DECREF(contexts);
    int failing = -1;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&round_lock);
    int helpers = ensure_workers((int)count - 1);
    job.launch = (Launch)(uintptr_t)address;
    job.ctx = ctx;
    job.contexts = helpers + 1;
    job.first_field = first_field;
    job.end_field = end_field;
    job.end = end;
    job.piece = piece;
    job.status = status;
    job.failed_at = failed_at;
    atomic_store(&job.next, first);
    atomic_store(&job.failed, INT64_MAX);
    atomic_store(&job.open, 1);
    uint64_t round = ++round_now;
    for (int k = 0; k < helpers; k++) {
        post(workers[k], round);
    }
    take_part(0);
    atomic_store(&job.open, 0);
    for (unsigned spins = 0; atomic_load(&job.inside) != 0; spins++) {
        RELAX();
        if ((spins & 4095) == 4095) {
            sched_yield(); /* a long piece: leave the core to the workers */
        }
    }
    for (int k = 0; k <= helpers; k++) {
        if (status[k] != 0 && (failing < 0 || failed_at[k] < failed_at[failing])) {
            failing = k;
        }
    }
    pthread_mutex_unlock(&round_lock);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(ii)", failing < 0 ? 0 : (int)status[failing], failing);
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(launch, first_field, end_field, contexts, first, end, piece): blocks [first, end) in pieces "
     "claimed by this thread and the pool's, context k per thread; (status, k): the first failing "
     "piece's status in block order and its context, or (0, -1)."},
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
