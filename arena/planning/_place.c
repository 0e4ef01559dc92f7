/*
 * arena.planning._place: the compiled best-fit placement behind plan_offsets.
 *
 * The same algorithm as _place_dense and _place_sparse in arena/planning/offsets.py
 * (Pisarchyk & Lee, 2020, "Greedy by Size for Offset Calculation"): blocks are placed one
 * at a time in a given order; a block looks at the placed blocks live at some step of its
 * lifetime, walks them by offset and collects the holes between them that are big enough
 * (a hole lies between the highest end below a block and that block's offset); the
 * smallest hole wins, the lowest on ties; when none fits, the block goes just above the
 * highest of them.
 *
 * Two ways to find the placed blocks live with a block, as the Python has:
 *
 * place(order, size, first, last, out) -> total keeps the placed blocks sorted by offset
 * (equal offsets in placement order) in chunks of at most CHUNK entries, each holding its
 * entries' first and last use and offset and end in separate arrays: a placement scans
 * every placed block, finds the live ones with a branch-free comparison per block and
 * walks only those, and an insertion moves at most one chunk. The walk stops early at a
 * hole of exactly the block's size (no smaller one exists, and none lower comes later).
 * ``first`` and ``last`` are int32: the Python side passes ranks of the uses, which keep
 * their order, so which blocks are live together.
 *
 * place_graph(order, size, bounds, flat, out) -> total reads each block's co-live blocks
 * from the conflict graph (flat[bounds[i] .. bounds[i + 1]], all int64) and sorts the
 * placed ones by offset: for blocks with few conflicts.
 *
 * ``order`` is int64, m distinct indices below n; ``size`` int64, n, each > 0, summing
 * within int64; ``out`` writable int64, n: the offsets of the placed blocks are written
 * there. Both return the highest end, run without the GIL and depend only on their
 * arguments.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 512

typedef struct {
    int32_t count;
    int32_t first[CHUNK];
    int32_t last[CHUNK];
    int64_t off[CHUNK];
    int64_t end[CHUNK];
} Chunk;

typedef struct {
    Chunk **chunks;
    Py_ssize_t nchunks, cap;
} Placed;

static void placed_free(Placed *p) {
    for (Py_ssize_t c = 0; c < p->nchunks; c++) free(p->chunks[c]);
    free(p->chunks);
}

/* Insert (f, l, off, end) after every entry whose offset is <= off. 0, or -1 on no memory. */
static int placed_insert(Placed *p, int32_t f, int32_t l, int64_t off, int64_t end) {
    if (p->nchunks == 0) {
        p->cap = 16;
        p->chunks = malloc(sizeof(Chunk *) * (size_t)p->cap);
        if (p->chunks == NULL) return -1;
        p->chunks[0] = malloc(sizeof(Chunk));
        if (p->chunks[0] == NULL) return -1;
        p->chunks[0]->count = 0;
        p->nchunks = 1;
    }
    /* The first chunk whose last entry's offset is > off (else the last chunk). */
    Py_ssize_t c = 0;
    while (c < p->nchunks - 1) {
        Chunk *k = p->chunks[c];
        if (k->count && k->off[k->count - 1] > off) break;
        c++;
    }
    Chunk *k = p->chunks[c];
    if (k->count == CHUNK) { /* split it in two halves */
        if (p->nchunks == p->cap) {
            Py_ssize_t cap = p->cap * 2;
            Chunk **grown = realloc(p->chunks, sizeof(Chunk *) * (size_t)cap);
            if (grown == NULL) return -1;
            p->chunks = grown;
            p->cap = cap;
        }
        Chunk *right = malloc(sizeof(Chunk));
        if (right == NULL) return -1;
        int32_t half = CHUNK / 2, rest = CHUNK - half;
        memcpy(right->first, k->first + half, sizeof(int32_t) * (size_t)rest);
        memcpy(right->last, k->last + half, sizeof(int32_t) * (size_t)rest);
        memcpy(right->off, k->off + half, sizeof(int64_t) * (size_t)rest);
        memcpy(right->end, k->end + half, sizeof(int64_t) * (size_t)rest);
        right->count = rest;
        k->count = half;
        memmove(p->chunks + c + 2, p->chunks + c + 1, sizeof(Chunk *) * (size_t)(p->nchunks - c - 1));
        p->chunks[c + 1] = right;
        p->nchunks++;
        if (k->off[half - 1] <= off) k = right;
    }
    /* Upper bound of off within the chunk. */
    int32_t lo = 0, hi = k->count;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (k->off[mid] <= off) lo = mid + 1;
        else hi = mid;
    }
    int32_t tail = k->count - lo;
    memmove(k->first + lo + 1, k->first + lo, sizeof(int32_t) * (size_t)tail);
    memmove(k->last + lo + 1, k->last + lo, sizeof(int32_t) * (size_t)tail);
    memmove(k->off + lo + 1, k->off + lo, sizeof(int64_t) * (size_t)tail);
    memmove(k->end + lo + 1, k->end + lo, sizeof(int64_t) * (size_t)tail);
    k->first[lo] = f;
    k->last[lo] = l;
    k->off[lo] = off;
    k->end[lo] = end;
    k->count++;
    return 0;
}

typedef struct {
    int64_t off, end;
} Span;

#ifdef __SSE2__
#include <emmintrin.h>

/* For each 4-bit mask, the positions of its set bits (lowest first), and how many. */
static const int32_t packs[16][4] __attribute__((aligned(16))) = {
    {0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
    {2, 0, 0, 0}, {0, 2, 0, 0}, {1, 2, 0, 0}, {0, 1, 2, 0},
    {3, 0, 0, 0}, {0, 3, 0, 0}, {1, 3, 0, 0}, {0, 1, 3, 0},
    {2, 3, 0, 0}, {0, 2, 3, 0}, {1, 2, 3, 0}, {0, 1, 2, 3},
};
static const int32_t pack_count[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
#endif

/* Best fit of a block of size s live over [f, l] among the placed blocks. */
static int64_t best_fit(const Placed *p, int64_t s, int32_t f, int32_t l) {
    int32_t live[CHUNK + 4];
    int64_t top = 0, best = -1, best_hole = INT64_MAX;
    for (Py_ssize_t c = 0; c < p->nchunks; c++) {
        const Chunk *k = p->chunks[c];
        const int32_t *kf = k->first, *kl = k->last;
        int32_t count = k->count, m = 0, j = 0;
#ifdef __SSE2__
        /* Four entries at a time: which are live, as 4 bits, then their indices from a
         * table, stored whole (the next store overwrites the unused ones). */
        const __m128i later = _mm_set1_epi32(l), earlier = _mm_set1_epi32(f);
        for (; j + 4 <= count; j += 4) {
            __m128i dead = _mm_or_si128(
                _mm_cmpgt_epi32(_mm_loadu_si128((const __m128i *)(kf + j)), later),
                _mm_cmpgt_epi32(earlier, _mm_loadu_si128((const __m128i *)(kl + j))));
            int bits = _mm_movemask_ps(_mm_castsi128_ps(dead)) ^ 0xF;
            __m128i at = _mm_add_epi32(_mm_load_si128((const __m128i *)packs[bits]),
                                       _mm_set1_epi32(j));
            _mm_storeu_si128((__m128i *)(live + m), at);
            m += pack_count[bits];
        }
#endif
        for (; j < count; j++) {
            live[m] = j; /* written always, kept where live: no branch */
            m += (kf[j] <= l) & (kl[j] >= f);
        }
        const int64_t *off = k->off, *end = k->end;
        for (int32_t q = 0; q < m; q++) {
            int32_t j = live[q];
            int64_t hole = off[j] - top;
            /* The smallest hole that fits, the lowest on ties, without a branch. */
            int better = (hole >= s) & (hole < best_hole);
            best = better ? top : best;
            best_hole = better ? hole : best_hole;
            top = end[j] > top ? end[j] : top;
        }
        if (best_hole == s) return best; /* none smaller; a later one is higher */
    }
    return best < 0 ? top : best;
}

/* Whether a buffer format is a native signed integer of itemsize bytes. */
static int signed_integer(const char *format, Py_ssize_t itemsize) {
    if (format == NULL) return 0; /* unsigned bytes */
    if (*format == '@' || *format == '=') format++;
    if (format[0] == '\0' || format[1] != '\0') return 0;
    switch (format[0]) {
    case 'i': return itemsize == sizeof(int);
    case 'l': return itemsize == sizeof(long);
    case 'q': return itemsize == sizeof(long long);
    case 'n': return itemsize == sizeof(Py_ssize_t);
    default: return 0;
    }
}

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable,
                      const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if (view->itemsize != itemsize || !signed_integer(view->format, itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd-byte signed integers, got format "
                     "'%s' with items of %zd bytes", name, itemsize,
                     view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Sizes > 0 summing within int64, order distinct indices below n; else -1 with an error. */
static int check_blocks(const int64_t *order, Py_ssize_t m, const int64_t *size, Py_ssize_t n) {
    int64_t sum = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (size[i] <= 0) {
            PyErr_Format(PyExc_ValueError, "size[%zd] must be > 0, got %lld", i, (long long)size[i]);
            return -1;
        }
        if (__builtin_add_overflow(sum, size[i], &sum)) {
            PyErr_SetString(PyExc_OverflowError, "the sizes sum past 2**63 - 1");
            return -1;
        }
    }
    char *seen = calloc((size_t)n + 1, 1);
    if (seen == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = order[k];
        if (i < 0 || i >= n || seen[i]) {
            free(seen);
            PyErr_Format(PyExc_ValueError, "order[%zd] = %lld: not a block index below %zd, or "
                         "repeated", k, (long long)i, n);
            return -1;
        }
        seen[i] = 1;
    }
    free(seen);
    return 0;
}

static PyObject *place(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[5];
    if (!PyArg_ParseTuple(args, "OOOOO:place", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    static const char *names[5] = {"order", "size", "first", "last", "out"};
    static const Py_ssize_t sizes[5] = {8, 8, 4, 4, 8};
    Py_buffer views[5];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 5; got++) {
        if (get_buffer(objs[got], &views[got], sizes[got], got == 4, names[got]) < 0) goto done;
    }
    Py_ssize_t m = views[0].len / 8, n = views[1].len / 8;
    if (views[2].len / 4 != n || views[3].len / 4 != n || views[4].len / 8 != n || m > n) {
        PyErr_SetString(PyExc_ValueError,
                        "size, first, last and out must have one length, and order no more");
        goto done;
    }
    const int64_t *order = views[0].buf, *size = views[1].buf;
    const int32_t *first = views[2].buf, *last = views[3].buf;
    int64_t *out = views[4].buf;
    if (check_blocks(order, m, size, n) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (first[i] < 0) {
            PyErr_Format(PyExc_ValueError, "first[%zd] must be >= 0, got %d", i, (int)first[i]);
            goto done;
        }
        if (first[i] > last[i]) {
            PyErr_Format(PyExc_ValueError, "block %zd: first (%d) must be <= last (%d)", i,
                         (int)first[i], (int)last[i]);
            goto done;
        }
    }
    int64_t total = 0;
    int failed = 0;
    Placed placed = {NULL, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = order[k], s = size[i];
        int64_t off = best_fit(&placed, s, first[i], last[i]);
        if (placed_insert(&placed, first[i], last[i], off, off + s) < 0) {
            failed = 1;
            break;
        }
        out[i] = off;
        if (off + s > total) total = off + s;
    }
    placed_free(&placed);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyLong_FromLongLong(total);
done:
    for (int v = 0; v < got; v++) PyBuffer_Release(&views[v]);
    return result;
}

static int cmp_span(const void *pa, const void *pb) {
    int64_t a = ((const Span *)pa)->off, b = ((const Span *)pb)->off;
    return (a > b) - (a < b);
}

static PyObject *place_graph(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[5];
    if (!PyArg_ParseTuple(args, "OOOOO:place_graph", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4]))
        return NULL;
    static const char *names[5] = {"order", "size", "bounds", "flat", "out"};
    Py_buffer views[5];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 5; got++) {
        if (get_buffer(objs[got], &views[got], 8, got == 4, names[got]) < 0) goto done;
    }
    Py_ssize_t m = views[0].len / 8, n = views[1].len / 8, e = views[3].len / 8;
    if (views[2].len / 8 != n + 1 || views[4].len / 8 != n || m > n) {
        PyErr_SetString(PyExc_ValueError, "size and out must have one length n, bounds n + 1, "
                        "and order no more than n");
        goto done;
    }
    const int64_t *order = views[0].buf, *size = views[1].buf, *bounds = views[2].buf;
    const int64_t *flat = views[3].buf;
    int64_t *out = views[4].buf;
    if (check_blocks(order, m, size, n) < 0) goto done;
    int64_t widest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (bounds[i] < 0 || bounds[i] > bounds[i + 1] || bounds[i + 1] > e) {
            PyErr_Format(PyExc_ValueError, "bounds[%zd] out of order or past flat", i);
            goto done;
        }
        if (bounds[i + 1] - bounds[i] > widest) widest = bounds[i + 1] - bounds[i];
    }
    if (bounds[0] != 0) {
        PyErr_SetString(PyExc_ValueError, "bounds[0] must be 0");
        goto done;
    }
    for (Py_ssize_t k = 0; k < e; k++) {
        if (flat[k] < 0 || flat[k] >= n) {
            PyErr_Format(PyExc_ValueError, "flat[%zd] = %lld: not a block index below %zd", k,
                         (long long)flat[k], n);
            goto done;
        }
    }
    Span *below = malloc(sizeof(Span) * (size_t)(widest + 1));
    if (below == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) out[i] = -1;
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = order[k], s = size[i];
        Py_ssize_t count = 0;
        for (int64_t q = bounds[i]; q < bounds[i + 1]; q++) {
            int64_t j = flat[q];
            if (out[j] >= 0) {
                below[count].off = out[j];
                below[count].end = out[j] + size[j];
                count++;
            }
        }
        /* Two at one offset give the same holes in either order. */
        qsort(below, (size_t)count, sizeof(Span), cmp_span);
        int64_t top = 0, best = -1, best_hole = 0;
        for (Py_ssize_t q = 0; q < count; q++) {
            int64_t hole = below[q].off - top;
            if (hole >= s && (best < 0 || hole < best_hole)) {
                best = top;
                best_hole = hole;
            }
            if (below[q].end > top) top = below[q].end;
        }
        int64_t off = best < 0 ? top : best;
        out[i] = off;
        if (off + s > total) total = off + s;
    }
    Py_END_ALLOW_THREADS
    free(below);
    result = PyLong_FromLongLong(total);
done:
    for (int v = 0; v < got; v++) PyBuffer_Release(&views[v]);
    return result;
}

static PyMethodDef methods[] = {
    {"place", place, METH_VARARGS,
     "place(order, size, first, last, out) -> total: best fit of the blocks in order; "
     "their offsets are written to out."},
    {"place_graph", place_graph, METH_VARARGS,
     "place_graph(order, size, bounds, flat, out) -> total: the same, each block's co-live "
     "blocks given as flat[bounds[i]:bounds[i + 1]]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "arena.planning._place",
    "The compiled best-fit placement behind arena.planning.plan_offsets.", -1, methods,
};

PyMODINIT_FUNC PyInit__place(void) { return PyModule_Create(&module); }
