/* One folder's entries, listed and stat'ed in C: the compiled twin of discover.python_list.
 *
 * ckptdoctor/discover.py says what a listing holds; this file gives the same (entries,
 * subfolders), byte for byte, in the same (readdir) order. Every decision mirrors what CPython's
 * os.scandir and DirEntry do for the Python twin, and each place says which:
 * - the name is the bytes readdir gives, decoded as os.fsdecode decodes them, and the path is
 *   the folder's bytes joined with them ("/" between, unless the folder ends with one) and
 *   decoded whole, as DirEntry.path is;
 * - d_type decides what needs a stat: a folder needs none; a symlink is stat'ed through, other
 *   entries are lstat'ed; DT_UNKNOWN (and a platform without d_type) lstats first;
 * - a stat that fails with ENOENT drops the entry (it vanished since readdir), except for a
 *   symlink, which is dangling; EACCES or EPERM (a folder that may be read but not searched)
 *   makes an entry this user may not look at (denied), and any other failure (ELOOP) a
 *   dangling symlink, as discover's except OSError does;
 * - the stat fields become Python values as os.stat_result makes them (st_mtime is
 *   sec + nsec * 1e-9, CPython's fill_time, not the nanoseconds divided).
 *
 * Speed comes from three things: the entries are read and stat'ed in batches with the GIL
 * released; each is stat'ed relative to the open folder (fstatat), so that its path is not walked
 * again; and an Entry (a NamedTuple, a tuple subclass without slots) is allocated and filled
 * directly, without a Python __new__ per file, where its type allows that (fits_in_place).
 *
 * Every batch's names live in one arena of our own, every object is released on every error
 * path, and the folder is closed before the function returns, whatever happens.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Entries read and stat'ed per release of the GIL: enough that the release costs nothing per
 * entry, few enough that a Ctrl-C is seen soon, the batch stays in the cache, and the call for a
 * folder of a few files (an HF checkpoint-N/) allocates little. */
#define BATCH 256
/* The arena's first size: a batch of names with their folder's path, grown when a folder's path
 * is long. */
#define ARENA 65536
/* The fields of model.Entry, in order; the tests compare every one with the Python twin's. */
#define FIELDS 12

/* os.readlink reads into a buffer of MAXPATHLEN + 1 and asks for MAXPATHLEN bytes: the same. */
#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* Where readdir gives no type, every entry is lstat'ed first, as DirEntry does */
#ifndef DT_UNKNOWN
#define DT_UNKNOWN 0
#define DT_DIR 4
#define DT_LNK 10
#endif

typedef enum {
    VANISHED, /* gone between readdir and stat: not listed */
    FOLDER,   /* a folder, not followed: no stat */
    DANGLING, /* a symlink that cannot be resolved, or an entry that cannot be stat'ed */
    DENIED,   /* an entry this user may not stat (EACCES, EPERM) */
    STATTED,  /* stat'ed (through it, when a symlink) */
} Outcome;

typedef struct {
    size_t path;          /* arena offset of the joined path, NUL-terminated */
    size_t path_len;      /* its length; the name is its last name_len bytes */
    size_t name_len;
    size_t link;          /* arena offset of where a symlink points, when link_len >= 0 */
    Py_ssize_t link_len;  /* -1: no link read (not a symlink, or readlink failed) */
    Outcome outcome;
    int is_symlink;
    struct stat st;       /* STATTED only */
} Found;

typedef struct {
    DIR *dir;
    int fd;
    const char *folder;   /* the folder's bytes, borrowed from our bytes object */
    size_t folder_len;
    int separator;        /* 1 when "/" goes between the folder and a name */
    Found *found;
    size_t count;
    char *arena;
    size_t used;
    size_t capacity;
    int error;            /* errno of a failed readdir, else 0 */
    int no_memory;        /* the arena could not grow */
    int done;             /* readdir reached the end (or failed) */
} Listing;

/* Room for n more bytes in the arena: 0, or -1 when memory runs out. Called without the GIL,
 * hence the raw allocator. Offsets, never pointers, are kept across a call. */
static int reserve(Listing *l, size_t n) {
    if (l->capacity - l->used >= n) {
        return 0;
    }
    size_t capacity = l->capacity;
    while (capacity - l->used < n) {
        if (capacity > ((size_t)PY_SSIZE_T_MAX) / 2) {
            return -1;
        }
        capacity *= 2;
    }
    char *arena = PyMem_RawRealloc(l->arena, capacity);
    if (arena == NULL) {
        return -1;
    }
    l->arena = arena;
    l->capacity = capacity;
    return 0;
}

/* What a failed stat (other than a vanished entry) makes of an entry: denied where this user may
 * not look (discover.DENIED), else a dangling symlink. */
static Outcome failed(int error) {
    return error == EACCES || error == EPERM ? DENIED : DANGLING;
}

/* Stat one entry as DirEntry.is_symlink, is_dir(follow_symlinks=False) and stat() do for
 * discover. `at` and `where` name it: the open folder and the name, or, where the joined path is
 * too long for the kernel, that path itself, so that the call fails as CPython's stat of
 * DirEntry.path fails (ENAMETOOLONG). Without the GIL. */
static void look_at(Listing *l, Found *f, int at, const char *where, int d_type) {
    f->link_len = -1;
    if (d_type == DT_DIR) {
        f->outcome = FOLDER;
        return;
    }
    int is_symlink = d_type == DT_LNK;
    if (d_type == DT_UNKNOWN) {
        /* DirEntry lstats to learn the type: a FileNotFoundError there reads as "not a
         * symlink, not a folder", and the stat after it fails the same way: vanished */
        if (fstatat(at, where, &f->st, AT_SYMLINK_NOFOLLOW) != 0) {
            f->outcome = errno == ENOENT ? VANISHED : failed(errno);
            return;
        }
        if (S_ISDIR(f->st.st_mode)) {
            f->outcome = FOLDER;
            return;
        }
        is_symlink = S_ISLNK(f->st.st_mode);
        if (!is_symlink) {
            f->outcome = STATTED; /* DirEntry.stat() returns the lstat it holds */
            return;
        }
    }
    f->is_symlink = is_symlink;
    if (fstatat(at, where, &f->st, is_symlink ? 0 : AT_SYMLINK_NOFOLLOW) != 0) {
        f->outcome = errno == ENOENT && !is_symlink ? VANISHED : failed(errno);
        return;
    }
    f->outcome = STATTED;
    if (is_symlink) {
        /* reserve() made room for PATH_MAX + 1 bytes after the path */
        char *buffer = l->arena + l->used;
        ssize_t got = readlinkat(at, where, buffer, PATH_MAX);
        if (got >= 0) {
            f->link = l->used;
            f->link_len = (Py_ssize_t)got;
            l->used += (size_t)got;
        }
    }
}

/* Read and stat up to BATCH entries into l->found. Without the GIL. */
static void fill_batch(Listing *l) {
    l->count = 0;
    l->used = 0;
    while (l->count < BATCH) {
        errno = 0;
        struct dirent *d = readdir(l->dir);
        if (d == NULL) {
            l->error = errno;
            l->done = 1;
            return;
        }
        const char *name = d->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) {
            continue; /* scandir skips . and .. */
        }
        size_t name_len = strlen(name);
        size_t path_len = l->folder_len + (size_t)l->separator + name_len;
        if (reserve(l, path_len + 1 + PATH_MAX + 1) < 0) {
            l->no_memory = 1;
            l->done = 1;
            return;
        }
        Found *f = &l->found[l->count++];
        memset(f, 0, sizeof(*f));
        char *path = l->arena + l->used;
        memcpy(path, l->folder, l->folder_len);
        if (l->separator) {
            path[l->folder_len] = '/';
        }
        memcpy(path + path_len - name_len, name, name_len + 1);
        f->path = l->used;
        f->path_len = path_len;
        f->name_len = name_len;
        l->used += path_len + 1;
#ifdef HAVE_DIRENT_D_TYPE
        int d_type = d->d_type;
#else
        int d_type = DT_UNKNOWN;
#endif
        /* a path the kernel refuses (PATH_MAX counts its NUL) is looked up whole, to fail alike */
        int too_long = path_len >= PATH_MAX;
        look_at(l, f, too_long ? AT_FDCWD : l->fd, too_long ? path : path + path_len - name_len, d_type);
    }
}

/* The nanoseconds of st_mtime, from the field CPython's _pystat_fromstructstat reads. */
#if defined(HAVE_STAT_TV_NSEC)
#define MTIME_NSEC(st) ((unsigned long)(st)->st_mtim.tv_nsec)
#elif defined(HAVE_STAT_TV_NSEC2)
#define MTIME_NSEC(st) ((unsigned long)(st)->st_mtimespec.tv_nsec)
#elif defined(HAVE_STAT_NSEC)
#define MTIME_NSEC(st) ((unsigned long)(st)->st_mtime_nsec)
#else
#define MTIME_NSEC(st) 0UL
#endif

typedef struct {
    unsigned long long value;
    PyObject *number; /* NULL until the first file's */
} Device;

typedef struct {
    PyObject *entry_type;
    int in_place; /* fill Entry objects directly (fits_in_place) */
    PyObject *display;
    PyObject *never;
    PyObject *skipped;
    PyObject *shown_prefix;
    PyObject *zero;       /* the defaults of an Entry's size, mtime and links */
    PyObject *zero_float;
    PyObject *one;
    Device *device; /* the last device number made: a folder's files are on one device */
} Context;

/* Whether an Entry can be allocated and filled as a bare tuple: a tuple subclass whose instances
 * are exactly a tuple's memory (no __dict__, no slots, no weak references), with no __init__ of
 * its own, whose _fields are the FIELDS we fill (a NamedTuple's __new__ only packs its
 * arguments). Not where the tuple carries a field of the interpreter's own (a cached hash, in
 * newer CPythons), which only tuple's own constructors know how to set. 1, 0, or -1 (error). */
static int fits_in_place(PyObject *type) {
    if (offsetof(PyTupleObject, ob_item) != sizeof(PyVarObject) || !PyType_Check(type)) {
        return 0;
    }
    PyTypeObject *t = (PyTypeObject *)type;
    if (!PyType_IsSubtype(t, &PyTuple_Type) || t->tp_basicsize != PyTuple_Type.tp_basicsize ||
        t->tp_itemsize != PyTuple_Type.tp_itemsize || t->tp_dictoffset != 0 || t->tp_init != PyTuple_Type.tp_init) {
        return 0;
    }
    PyObject *fields = PyObject_GetAttrString(type, "_fields");
    if (fields == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        return 0;
    }
    int fits = PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == FIELDS;
    Py_DECREF(fields);
    return fits;
}

/* An Entry of the FIELDS new references in `fields`, which it takes over (released on failure
 * too): a new reference, or NULL. */
static PyObject *make_entry(const Context *c, PyObject *fields[FIELDS]) {
    PyObject *entry;
    if (c->in_place) {
        /* what tuple's constructor does for a subclass (tuple_subtype_new): tp_alloc, then the
         * items; nothing can run the collector between the two */
        PyTypeObject *type = (PyTypeObject *)c->entry_type;
        entry = type->tp_alloc(type, FIELDS);
        if (entry != NULL) {
            for (int i = 0; i < FIELDS; i++) {
                PyTuple_SET_ITEM(entry, i, fields[i]);
            }
            return entry;
        }
    } else {
        entry = PyObject_Vectorcall(c->entry_type, fields, FIELDS, NULL);
    }
    for (int i = 0; i < FIELDS; i++) {
        Py_DECREF(fields[i]);
    }
    return entry;
}

/* Where a symlink points, as os.readlink gives it for a str path; None when it was not read. */
static PyObject *link_of(const Listing *l, const Found *f) {
    if (f->link_len < 0) {
        Py_RETURN_NONE;
    }
    return PyUnicode_DecodeFSDefaultAndSize(l->arena + f->link, f->link_len);
}

/* Device `value` as an int: a new reference, or NULL. One object serves a folder's files, which
 * are on one device (32 bytes a file, where a scan holds an entry per file). */
static PyObject *device_number(Device *device, unsigned long long value) {
    if (device->number == NULL || device->value != value) {
        PyObject *number = PyLong_FromUnsignedLongLong(value);
        if (number == NULL) {
            return NULL;
        }
        Py_XSETREF(device->number, number);
        device->value = value;
    }
    return Py_NewRef(device->number);
}

/* The entry of a stat'ed file (discover._entry): a new reference, or NULL. */
static PyObject *statted_entry(const Context *c, const Listing *l, const Found *f, PyObject *name, PyObject *shown, PyObject *path) {
    const struct stat *st = &f->st;
    int is_dir = S_ISDIR(st->st_mode);
    PyObject *fields[FIELDS] = {NULL};
    fields[0] = Py_NewRef(name);
    fields[1] = Py_NewRef(shown);
    fields[2] = Py_NewRef(path);
    fields[3] = is_dir ? Py_NewRef(c->zero) : PyLong_FromLongLong((long long)st->st_size);
    fields[4] = Py_NewRef(is_dir ? Py_True : Py_False);
    fields[5] = Py_NewRef(f->is_symlink ? Py_True : Py_False);
    fields[6] = Py_NewRef(Py_False);
    /* os.stat_result: st_dev as dev_t (kernel device numbers are far below 2**63, where the
     * signed and unsigned conversions of CPython's versions agree), st_ino unsigned, st_nlink
     * through long */
    PyObject *device = device_number(c->device, (unsigned long long)st->st_dev);
    PyObject *inode = PyLong_FromUnsignedLongLong((unsigned long long)st->st_ino);
    fields[7] = device != NULL && inode != NULL ? PyTuple_New(2) : NULL;
    if (fields[7] != NULL) {
        PyTuple_SET_ITEM(fields[7], 0, device);
        PyTuple_SET_ITEM(fields[7], 1, inode);
    } else {
        Py_XDECREF(device);
        Py_XDECREF(inode);
    }
    /* fill_time's expression, in its order: the seconds plus the nanoseconds times 1e-9 */
    fields[8] = PyFloat_FromDouble((double)st->st_mtime + (double)MTIME_NSEC(st) * 1e-9);
    fields[9] = link_of(l, f);
    fields[10] = PyLong_FromLong((long)st->st_nlink);
    fields[11] = Py_NewRef(Py_False);
    for (int i = 0; i < FIELDS; i++) {
        if (fields[i] == NULL) {
            for (int j = 0; j < FIELDS; j++) {
                Py_XDECREF(fields[j]);
            }
            return NULL;
        }
    }
    return make_entry(c, fields);
}

/* The entry of a folder (is_dir), of a dangling symlink (is_symlink, dangling) or of an entry
 * this user may not look at (its symlink flag, denied), all else as model.Entry's defaults: a new
 * reference, or NULL. */
static PyObject *plain_entry(const Context *c, const Found *f, PyObject *name, PyObject *shown, PyObject *path) {
    int is_dir = f->outcome == FOLDER, denied = f->outcome == DENIED;
    int is_symlink = denied ? f->is_symlink : !is_dir;
    PyObject *fields[FIELDS] = {
        Py_NewRef(name),
        Py_NewRef(shown),
        Py_NewRef(path),
        Py_NewRef(c->zero),
        Py_NewRef(is_dir ? Py_True : Py_False),
        Py_NewRef(is_symlink ? Py_True : Py_False),
        Py_NewRef(f->outcome == DANGLING ? Py_True : Py_False),
        Py_NewRef(Py_None),
        Py_NewRef(c->zero_float),
        Py_NewRef(Py_None),
        Py_NewRef(c->one),
        Py_NewRef(denied ? Py_True : Py_False),
    };
    return make_entry(c, fields);
}

/* The shown path: the prefix, then the name as it is where it is ASCII (str.isascii) with no
 * backslash, else as display() prints it. A new reference, or NULL. */
static PyObject *shown_path(const Context *c, PyObject *name) {
    if (PyUnicode_IS_ASCII(name) && PyUnicode_FindChar(name, '\\', 0, PyUnicode_GET_LENGTH(name), 1) == -1) {
        return PyUnicode_Concat(c->shown_prefix, name);
    }
    PyObject *printable = PyObject_CallOneArg(c->display, name);
    if (printable == NULL) {
        return NULL;
    }
    PyObject *shown = PyUnicode_Concat(c->shown_prefix, printable);
    Py_DECREF(printable);
    return shown;
}

/* Append one entry (and the folder to enter, if it is one) to the lists. 0, or -1 (error). */
static int add(const Context *c, const Listing *l, const Found *f, PyObject *entries, PyObject *subfolders) {
    const char *path_bytes = l->arena + f->path;
    PyObject *name = PyUnicode_DecodeFSDefaultAndSize(path_bytes + f->path_len - f->name_len, (Py_ssize_t)f->name_len);
    if (name == NULL) {
        return -1;
    }
    PyObject *shown = NULL, *path = NULL, *entry = NULL;
    int result = -1;
    int never = PySequence_Contains(c->never, name);
    if (never != 0 || f->outcome == VANISHED) {
        result = never < 0 ? -1 : 0;
        goto done;
    }
    shown = shown_path(c, name);
    if (shown == NULL) {
        goto done;
    }
    path = PyUnicode_DecodeFSDefaultAndSize(path_bytes, (Py_ssize_t)f->path_len);
    if (path == NULL) {
        goto done;
    }
    if (PyUnicode_Compare(shown, path) == 0) { /* as it most often is: one string serves both */
        Py_SETREF(shown, Py_NewRef(path));
    }
    if (f->outcome == STATTED) {
        entry = statted_entry(c, l, f, name, shown, path);
    } else {
        entry = plain_entry(c, f, name, shown, path);
    }
    if (entry == NULL || PyList_Append(entries, entry) < 0) {
        goto done;
    }
    if (f->outcome == FOLDER) {
        int skipped = PySequence_Contains(c->skipped, name);
        if (skipped < 0) {
            goto done;
        }
        if (!skipped) {
            PyObject *pair = PyTuple_Pack(2, path, shown);
            if (pair == NULL) {
                goto done;
            }
            int appended = PyList_Append(subfolders, pair);
            Py_DECREF(pair);
            if (appended < 0) {
                goto done;
            }
        }
    }
    result = 0;
done:
    Py_DECREF(name);
    Py_XDECREF(shown);
    Py_XDECREF(path);
    Py_XDECREF(entry);
    return result;
}

/* Read the open folder to its end into the lists, a batch at a time. 0, or -1 (error set). */
static int list_all(const Context *c, Listing *l, PyObject *os_dir, PyObject *entries, PyObject *subfolders) {
    while (!l->done) {
        Py_BEGIN_ALLOW_THREADS
        fill_batch(l);
        Py_END_ALLOW_THREADS
        if (l->no_memory) {
            PyErr_NoMemory();
            return -1;
        }
        if (l->error != 0) {
            /* scandir's iterator raises for the folder when readdir fails part-way */
            errno = l->error;
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, os_dir);
            return -1;
        }
        for (size_t i = 0; i < l->count; i++) {
            if (add(c, l, &l->found[i], entries, subfolders) < 0) {
                return -1;
            }
        }
        /* a Ctrl-C during a big folder stops it here, as it would stop the Python loop */
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *list_folder(PyObject *module, PyObject *args) {
    PyObject *os_dir;
    Context c = {0};
    (void)module;
    if (!PyArg_ParseTuple(args, "UUOOOO:list_folder", &os_dir, &c.shown_prefix, &c.entry_type, &c.display, &c.never, &c.skipped)) {
        return NULL;
    }
    Device device = {0};
    c.device = &device;
    PyObject *folder = NULL; /* os_dir's bytes: "embedded null byte" refused as os.scandir refuses it */
    if (!PyUnicode_FSConverter(os_dir, &folder)) {
        return NULL;
    }
    PyObject *result = NULL, *entries = NULL, *subfolders = NULL;
    Listing l = {.fd = -1};
    c.in_place = fits_in_place(c.entry_type);
    if (c.in_place < 0) {
        goto done;
    }
    c.zero = PyLong_FromLong(0);
    c.zero_float = PyFloat_FromDouble(0.0);
    c.one = PyLong_FromLong(1);
    entries = PyList_New(0);
    subfolders = PyList_New(0);
    l.found = PyMem_RawMalloc(BATCH * sizeof(Found));
    l.arena = PyMem_RawMalloc(ARENA);
    l.capacity = ARENA;
    if (c.zero == NULL || c.zero_float == NULL || c.one == NULL || entries == NULL || subfolders == NULL) {
        goto done;
    }
    if (l.found == NULL || l.arena == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    l.folder = PyBytes_AS_STRING(folder);
    l.folder_len = (size_t)PyBytes_GET_SIZE(folder);
    /* DirEntry.path: a "/" between, unless the folder ends with one (join_path_filename) */
    l.separator = l.folder_len > 0 && l.folder[l.folder_len - 1] != '/';
    Py_BEGIN_ALLOW_THREADS
    l.dir = opendir(l.folder);
    if (l.dir != NULL) {
        l.fd = dirfd(l.dir);
    }
    Py_END_ALLOW_THREADS
    if (l.dir == NULL) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, os_dir);
        goto done;
    }
    if (list_all(&c, &l, os_dir, entries, subfolders) == 0) {
        PyObject *listed = PyList_AsTuple(entries);
        if (listed != NULL) {
            result = PyTuple_Pack(2, listed, subfolders);
            Py_DECREF(listed);
        }
    }
done:
    if (l.dir != NULL) {
        /* a folder opened to read has nothing to flush: an error closing it changes nothing */
        Py_BEGIN_ALLOW_THREADS
        (void)closedir(l.dir);
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(l.found);
    PyMem_RawFree(l.arena);
    Py_XDECREF(entries);
    Py_XDECREF(subfolders);
    Py_XDECREF(c.zero);
    Py_XDECREF(c.zero_float);
    Py_XDECREF(c.one);
    Py_XDECREF(device.number);
    Py_DECREF(folder);
    return result;
}

static PyMethodDef methods[] = {
    {"list_folder", list_folder, METH_VARARGS,
     "list_folder(os_dir, shown_prefix, entry_type, display, never, skipped)\n--\n\n"
     "One folder's (entries, subfolders), as ckptdoctor.discover.python_list gives them."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_gil
    /* list_folder keeps no state between calls: safe without the GIL on a free-threaded build */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ckptdoctor._clisting",
    .m_doc = "The compiled twin of ckptdoctor.discover.python_list.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__clisting(void) { return PyModuleDef_Init(&module); }
