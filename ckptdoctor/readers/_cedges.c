/* The heads and tails of many files in one call, read with the GIL released.
 *
 * The compiled twin of ckptdoctor/readers/_edges.py (python_read_edges), with the same results:
 * see that module for what is read and why. Only the bytes move here; judging stays in Python.
 *
 * How: with the GIL held, the arguments are checked and copied (the paths into a tuple of our
 * own, so that no other thread can drop a path while we read it) and every result's bytes object
 * is allocated at the size asked for. The GIL is then released and the files are read straight
 * into those objects, as os.read does: nothing else holds a reference to them yet. Workers (the
 * calling thread, and threads - 1 pthreads) take the files in small batches from one atomic
 * counter, so that a worker the scheduler parks does not hold up the rest. After the join, with
 * the GIL again, a file that failed gives None and a short read a shorter bytes object.
 *
 * Every descriptor is closed by the worker that opened it before it moves on; every object is
 * owned by the jobs array until it is handed to the result list, and released on every error.
 *
 * scan_block is verify --deep's per-block test (ckptdoctor/readers/deep_scan.py): its NaN/Inf count
 * and all-zero test, here so that --deep need not import numpy (80-130 ms before any scan).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef O_NOATIME
#define O_NOATIME 0
#endif

/* Files a worker takes from the counter at once: few enough to share the work evenly, enough to
 * keep the counter's cache line quiet. */
#define BATCH 8
/* No more threads than this, whatever is asked: the work is syscalls on one machine's files. */
#define MAX_THREADS 64

typedef struct {
    const char *path;  /* borrowed from the tuple of paths, which outlives the read */
    long long size;    /* the size the listing saw */
    int whole;         /* size <= head + tail: one read of the whole file */
    PyObject *first;   /* the whole file, or its head */
    PyObject *last;    /* its tail (NULL when whole) */
    char *first_bytes; /* their buffers, taken with the GIL held */
    char *last_bytes;
    Py_ssize_t got_first;
    Py_ssize_t got_last;
    int ok;
} Job;

typedef struct {
    Job *jobs;
    size_t count;
    atomic_size_t next;
} Work;

/* Read up to n bytes at offset into buffer, on until n or end of file; the count, or -1. */
static Py_ssize_t read_full(int fd, char *buffer, Py_ssize_t n, long long offset) {
    Py_ssize_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buffer + got, (size_t)(n - got), (off_t)(offset + got));
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        if (r == 0) {
            break;
        }
        got += (Py_ssize_t)r;
    }
    return got;
}

/* Open read-only without blocking, without following into a FIFO's writer; O_NOATIME while the
 * worker may ask for it (only a file's owner may: after one EPERM it stops asking, to save a
 * second open per file on a tree someone else owns). The descriptor, or -1. */
static int open_file(const char *path, int *noatime) {
    const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
    for (;;) {
        int fd = open(path, flags | (*noatime ? O_NOATIME : 0));
        if (fd >= 0) {
            return fd;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EPERM && *noatime) {
            *noatime = 0;
            continue;
        }
        return -1;
    }
}

static void read_job(Job *job, Py_ssize_t head, Py_ssize_t tail, int *noatime) {
    struct stat st;
    int fd = open_file(job->path, noatime);
    if (fd < 0) {
        return;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        if (job->whole) {
            job->got_first = read_full(fd, job->first_bytes, (Py_ssize_t)job->size, 0);
            job->ok = job->got_first >= 0;
        } else {
            job->got_first = read_full(fd, job->first_bytes, head, 0);
            job->got_last = job->got_first < 0 ? -1 : read_full(fd, job->last_bytes, tail, job->size - tail);
            job->ok = job->got_first >= 0 && job->got_last >= 0;
        }
    }
    /* A descriptor opened read-only has nothing to flush: Linux releases it even when close
     * reports an error, and the bytes read are good either way. */
    (void)close(fd);
}

typedef struct {
    Work *work;
    Py_ssize_t head;
    Py_ssize_t tail;
} Worker;

static void *work_on(void *arg) {
    Worker *worker = (Worker *)arg;
    Work *work = worker->work;
    int noatime = O_NOATIME != 0;
    for (;;) {
        size_t start = atomic_fetch_add(&work->next, BATCH);
        if (start >= work->count) {
            return NULL;
        }
        size_t end = start + BATCH < work->count ? start + BATCH : work->count;
        for (size_t i = start; i < end; i++) {
            read_job(&work->jobs[i], worker->head, worker->tail, &noatime);
        }
    }
}

/* Read every job: in the calling thread, helped by up to threads - 1 pthreads. A helper that
 * cannot be started leaves its share to the others. Called without the GIL. */
static void run_jobs(Job *jobs, size_t count, Py_ssize_t head, Py_ssize_t tail, Py_ssize_t threads) {
    Work work = {.jobs = jobs, .count = count};
    Worker worker = {.work = &work, .head = head, .tail = tail};
    pthread_t helpers[MAX_THREADS];
    int started = 0;
    atomic_init(&work.next, 0);
    for (Py_ssize_t i = 1; i < threads && (size_t)i < count; i++) {
        if (pthread_create(&helpers[started], NULL, work_on, &worker) != 0) {
            break;
        }
        started++;
    }
    (void)work_on(&worker);
    for (int i = 0; i < started; i++) {
        /* pthread_join fails only for a thread that is not joinable, and these all are */
        (void)pthread_join(helpers[i], NULL);
    }
}

static void release_jobs(Job *jobs, size_t count) {
    for (size_t i = 0; i < count; i++) {
        Py_XDECREF(jobs[i].first);
        Py_XDECREF(jobs[i].last);
    }
    PyMem_Free(jobs);
}

/* The bytes object read into, cut to what was read: a new reference, or NULL (MemoryError). */
static PyObject *as_read(PyObject *bytes, Py_ssize_t got) {
    if (got == PyBytes_GET_SIZE(bytes)) {
        Py_INCREF(bytes);
        return bytes;
    }
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(bytes), got);
}

static PyObject *result_of(const Job *job) {
    if (!job->ok) {
        Py_RETURN_NONE;
    }
    PyObject *first = as_read(job->first, job->got_first);
    if (first == NULL || job->whole) {
        return first;
    }
    PyObject *last = as_read(job->last, job->got_last);
    if (last == NULL) {
        Py_DECREF(first);
        return NULL;
    }
    PyObject *pair = PyTuple_Pack(2, first, last);
    Py_DECREF(first);
    Py_DECREF(last);
    return pair;
}

/* Check one path and its size, and allocate what its read fills. 0, or -1 with an exception. */
static int prepare_job(Job *job, PyObject *path, PyObject *size_obj, Py_ssize_t head, Py_ssize_t tail) {
    if (!PyBytes_Check(path)) {
        PyErr_Format(PyExc_TypeError, "paths must be bytes, not %.100s", Py_TYPE(path)->tp_name);
        return -1;
    }
    if ((size_t)PyBytes_GET_SIZE(path) != strlen(PyBytes_AS_STRING(path))) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return -1;
    }
    if (!PyLong_Check(size_obj)) {
        PyErr_Format(PyExc_TypeError, "sizes must be int, not %.100s", Py_TYPE(size_obj)->tp_name);
        return -1;
    }
    long long size = PyLong_AsLongLong(size_obj);
    if (size == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "a size must not be negative");
        return -1;
    }
    job->path = PyBytes_AS_STRING(path);
    job->size = size;
    job->whole = size <= (long long)(head + tail);
    job->first = PyBytes_FromStringAndSize(NULL, job->whole ? (Py_ssize_t)size : head);
    if (job->first == NULL) {
        return -1;
    }
    job->first_bytes = PyBytes_AS_STRING(job->first);
    if (!job->whole) {
        job->last = PyBytes_FromStringAndSize(NULL, tail);
        if (job->last == NULL) {
            return -1;
        }
        job->last_bytes = PyBytes_AS_STRING(job->last);
    }
    return 0;
}

static PyObject *read_edges(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"paths", "sizes", "head", "tail", "threads", NULL};
    PyObject *paths_arg, *sizes_arg;
    Py_ssize_t head, tail;
    Py_ssize_t threads = 1;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnn|n:read_edges", keywords, &paths_arg, &sizes_arg, &head, &tail, &threads)) {
        return NULL;
    }
    if (head < 0 || tail < 0) {
        PyErr_SetString(PyExc_ValueError, "head and tail must not be negative");
        return NULL;
    }
    if (head > PY_SSIZE_T_MAX - tail) {
        PyErr_SetString(PyExc_OverflowError, "head + tail is too large");
        return NULL;
    }
    /* tuples of our own: immutable, so another thread cannot drop a path while it is read */
    PyObject *paths = PySequence_Tuple(paths_arg);
    if (paths == NULL) {
        return NULL;
    }
    PyObject *sizes = PySequence_Tuple(sizes_arg);
    if (sizes == NULL) {
        Py_DECREF(paths);
        return NULL;
    }
    PyObject *result = NULL;
    Job *jobs = NULL;
    size_t count = (size_t)PyTuple_GET_SIZE(paths);
    if (PyTuple_GET_SIZE(sizes) != PyTuple_GET_SIZE(paths)) {
        PyErr_SetString(PyExc_ValueError, "paths and sizes differ in length");
        goto done;
    }
    jobs = PyMem_Calloc(count ? count : 1, sizeof(Job));
    if (jobs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < count; i++) {
        if (prepare_job(&jobs[i], PyTuple_GET_ITEM(paths, i), PyTuple_GET_ITEM(sizes, i), head, tail) < 0) {
            goto done;
        }
    }
    if (threads > MAX_THREADS) {
        threads = MAX_THREADS;
    }
    Py_BEGIN_ALLOW_THREADS
    run_jobs(jobs, count, head, tail, threads);
    Py_END_ALLOW_THREADS
    result = PyList_New((Py_ssize_t)count);
    if (result == NULL) {
        goto done;
    }
    for (size_t i = 0; i < count; i++) {
        PyObject *item = result_of(&jobs[i]);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, item);
    }
done:
    if (jobs != NULL) {
        release_jobs(jobs, count);
    }
    Py_DECREF(paths);
    Py_DECREF(sizes);
    return result;
}

/* scan_block: elements whose bits, masked, lie in [least, most], and whether every byte is zero.
 *
 * Every float type the deep check scans says "NaN or Inf" this way, by bits alone, so that no
 * floating-point environment (flush-to-zero, signalling NaN traps) matters: float32 and float64
 * (a complex number: two of them) with the sign masked off are non-finite from the all-ones
 * exponent up, NaN one above that; float16 and bfloat16 likewise; the 8-bit floats have their own
 * ranges. deep_scan.py holds the table. The data is read through memcpy, which is safe at any
 * alignment and which gcc turns into plain loads; each loop is one unsigned compare per element
 * (x - least <= most - least wraps below least), which it vectorises. A trailing partial element
 * is not counted, as numpy's view of length // size elements does not. */

/* Counted in the element's own width, a stretch of up to its largest value at a time, then
 * added up: SIMD lanes as wide as the data, not widened to 64 bits per element (measured here:
 * twice as fast for 32-bit floats, four times for 16-bit and 8-bit ones). */
#define COUNT_IN_RANGE(type, data, n, mask, least, most)                                   \
    do {                                                                                   \
        const type span_ = (type)((most) - (least));                                       \
        const size_t stretch_ = (size_t)(type)-1; /* all ones: SIZE_MAX where type is wider */ \
        for (size_t start_ = 0; start_ < (n);) {                                           \
            size_t stop_ = (n) - start_ > stretch_ ? start_ + stretch_ : (n);              \
            type partial_ = 0;                                                             \
            for (size_t i_ = start_; i_ < stop_; i_++) {                                   \
                type x_;                                                                   \
                memcpy(&x_, (data) + i_ * sizeof(type), sizeof(type));                     \
                partial_ = (type)(partial_ + ((type)((type)(x_ & (mask)) - (least)) <= span_)); \
            }                                                                              \
            found += partial_;                                                             \
            start_ = stop_;                                                                \
        }                                                                                  \
    } while (0)

static size_t count_in_range(const unsigned char *data, size_t length, int size, uint64_t mask, uint64_t least, uint64_t most) {
    size_t found = 0;
    switch (size) {
    case 1:
        COUNT_IN_RANGE(uint8_t, data, length, (uint8_t)mask, (uint8_t)least, (uint8_t)most);
        break;
    case 2:
        COUNT_IN_RANGE(uint16_t, data, length / 2, (uint16_t)mask, (uint16_t)least, (uint16_t)most);
        break;
    case 4:
        COUNT_IN_RANGE(uint32_t, data, length / 4, (uint32_t)mask, (uint32_t)least, (uint32_t)most);
        break;
    case 8:
        COUNT_IN_RANGE(uint64_t, data, length / 8, mask, least, most);
        break;
    default: /* 0: no float type, the zero test alone */
        break;
    }
    return found;
}

/* Bytes looked at between two checks for a non-zero one: the loop within stays branch-free (and
 * vectorised), the check after it stops a region's test at its first non-zero stretch. */
#define ZERO_STRETCH 4096

static int all_zero(const unsigned char *data, size_t length) {
    size_t done = 0;
    while (done + ZERO_STRETCH <= length) {
        uint64_t seen = 0;
        for (size_t i = 0; i < ZERO_STRETCH; i += sizeof(uint64_t)) {
            uint64_t word;
            memcpy(&word, data + done + i, sizeof(word));
            seen |= word;
        }
        if (seen != 0) {
            return 0;
        }
        done += ZERO_STRETCH;
    }
    unsigned char rest = 0;
    for (; done < length; done++) {
        rest |= data[done];
    }
    return rest == 0;
}

/* An unsigned value that fits in size bytes (any for size 0, which ignores it); -1 with an
 * exception otherwise. */
static int bits_of(PyObject *obj, int size, const char *name, uint64_t *out) {
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (size > 0 && size < 8 && value >> (8 * size) != 0) {
        PyErr_Format(PyExc_ValueError, "%s does not fit in %d bytes", name, size);
        return -1;
    }
    *out = (uint64_t)value;
    return 0;
}

static PyObject *scan_block(PyObject *module, PyObject *args) {
    PyObject *buffer_arg, *mask_arg, *least_arg, *most_arg;
    Py_ssize_t length;
    int size, zeros;
    uint64_t mask, least, most;
    (void)module;
    if (!PyArg_ParseTuple(args, "OniOOOp:scan_block", &buffer_arg, &length, &size, &mask_arg, &least_arg, &most_arg, &zeros)) {
        return NULL;
    }
    if (size != 0 && size != 1 && size != 2 && size != 4 && size != 8) {
        PyErr_Format(PyExc_ValueError, "size must be 0, 1, 2, 4 or 8, not %d", size);
        return NULL;
    }
    if (bits_of(mask_arg, size, "mask", &mask) < 0 || bits_of(least_arg, size, "least", &least) < 0 ||
        bits_of(most_arg, size, "most", &most) < 0) {
        return NULL;
    }
    if (least > most) {
        PyErr_SetString(PyExc_ValueError, "least must not be above most");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buffer_arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (length < 0 || length > view.len) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "length %zd is not within the buffer's %zd bytes", length, view.len);
        return NULL;
    }
    size_t found;
    int zero = 0;
    /* The buffer stays exported (a bytearray cannot be resized) until released below, so another
     * thread may run meanwhile; one writing into it gives a wrong count, never a bad read. */
    Py_BEGIN_ALLOW_THREADS
    found = count_in_range(view.buf, (size_t)length, size, mask, least, most);
    if (zeros) {
        zero = all_zero(view.buf, (size_t)length);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *count = PyLong_FromSize_t(found);
    if (count == NULL) {
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, count, zero ? Py_True : Py_False);
    Py_DECREF(count);
    return result;
}

static PyMethodDef methods[] = {
    {"read_edges", (PyCFunction)(void (*)(void))read_edges, METH_VARARGS | METH_KEYWORDS,
     "read_edges(paths, sizes, head, tail, threads=1)\n--\n\n"
     "Each regular file's bytes (size <= head + tail) or (head, tail) bytes, or None; "
     "see ckptdoctor.readers._edges."},
    {"scan_block", scan_block, METH_VARARGS,
     "scan_block(buffer, length, size, mask, least, most, zeros)\n--\n\n"
     "(elements of size bytes among the first length bytes whose bits & mask lie in [least, most], "
     "whether those bytes are all zero: False unless zeros); size 0 counts nothing. "
     "See ckptdoctor.readers.deep_scan."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_gil
    /* neither function keeps state between calls: safe without the GIL on a free-threaded build */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ckptdoctor.readers._cedges",
    .m_doc = "The compiled twins of ckptdoctor.readers._edges.python_read_edges and of the deep check's per-block tests.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__cedges(void) { return PyModuleDef_Init(&module); }
