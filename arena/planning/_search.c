/*
 * arena.planning._search: the compiled offset search behind plan_offsets(time_limit=...).
 *
 * A port to C of the solver of MiniMalloc (https://github.com/google/minimalloc,
 * src/solver.cc and src/sweeper.cc, Copyright 2023 Google LLC, licensed under the Apache
 * License, Version 2.0: https://www.apache.org/licenses/LICENSE-2.0). Moffitt, "MiniMalloc:
 * A Lightweight Memory Allocator for Hardware-Accelerated Machine Learning", ASPLOS 2023.
 * Changes from the original: C instead of C++ with Abseil; buffers without gaps, fixed
 * offsets or per-buffer alignment (sizes come in alignment units); the round robin over
 * preorders and the capacity loop are driven from Python (arena/planning/search.py); a
 * node's candidates are collected from its partition's buffer list (filtered by the
 * canonical and dominance rules before sorting) instead of a re-sorted full ordering; a
 * placement whose own sections overflow fails before the minimum offsets are raised; the
 * section check tries the section that failed last first; a section's unallocated floor
 * is recomputed only where it may rise and could fail a check; the clock is read every
 * 256 nodes. None of these visits a node the original does not (the floors left as they
 * were could fail no check, and floors worked out later may only be higher). One
 * addition: a fourth key for the preorders, E (the end, latest first), beside
 * MiniMalloc's W, A and T.
 *
 * The search decides whether every buffer fits below a capacity. It places buffers in
 * non-decreasing offset order, each at its minimum offset (the highest top among the
 * placed buffers live with it): the canonical solutions. Sections are the maximal sets of
 * buffers live at once; a partial plan is pruned when some section's floor plus the sizes
 * of its unplaced buffers passes the capacity (section inference, with the floor raised to
 * the lowest minimum offset of the section's unplaced buffers and to the current offset),
 * when a buffer would leave a gap some unplaced buffer fits in (dominance), and after a
 * buffer with nothing unplaced live with it fails (hatless pruning). Where no unplaced
 * buffer crosses between two sections any more, the rest splits into independent
 * sub-problems (dynamic decomposition), each solved under its own preorder.
 *
 * Two functions: sweep(sizes, starts, ends, widths=None) -> capsule (the instance's
 * sections, overlaps and partitions; lifetimes half-open; widths the lifetimes' lengths the
 * W and A preorders rank by, default end - start), and decide(capsule, capacity, heuristic,
 * node_limit, seconds) -> (status, offsets or None, nodes visited), status 0 found, 1 none
 * exists, 2 node limit, 3 time limit. The search runs without the GIL and depends only on
 * its arguments (and, through `seconds`, on the clock).
 *
 * The widths must be the lifetimes' real lengths, as MiniMalloc's preorders use them, even
 * where starts and ends are ranks of the time points (the sweep needs only their order):
 * ranked lengths reorder W and A. On MiniMalloc's challenging instances at capacity
 * 1,048,576, ranked lengths left D, G, I, J and K unsolved in 10 s; real ones decide all 11
 * within 1.7 s (scripts/bench-challenging.py --at-best-known, load average 7.4).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FOUND = 0, NONE = 1, ABORT = 2, TIMEOUT = 3 };

#define CAPSULE_NAME "arena.planning._search.Sweep"

typedef struct {
    int32_t n, nsec, npart;
    int64_t *size, *start, *end;
    int64_t *width;       /* each buffer's lifetime length, in the caller's time steps */
    int32_t *slo, *shi;   /* each buffer's sections, half-open */
    int64_t *ovs;         /* overlaps: ov[ovs[b] .. ovs[b + 1]] */
    int32_t *ov;
    int64_t *mems;        /* section members: mem[mems[s] .. mems[s + 1]] */
    int32_t *mem;
    int64_t *total0;      /* each section's total size */
    int32_t *cuts0;       /* buffers live in both section s and s + 1 */
    int32_t *parts;       /* partitions: part[parts[p] .. parts[p + 1]] */
    int32_t *part;
    int32_t *pslo, *pshi; /* each partition's sections */
} Sweep;

static void sweep_free(Sweep *w) {
    if (w == NULL) return;
    free(w->size); free(w->start); free(w->end); free(w->width); free(w->slo); free(w->shi);
    free(w->ovs); free(w->ov); free(w->mems); free(w->mem); free(w->total0);
    free(w->cuts0); free(w->parts); free(w->part); free(w->pslo); free(w->pshi);
    free(w);
}

static void capsule_free(PyObject *capsule) {
    sweep_free((Sweep *)PyCapsule_GetPointer(capsule, CAPSULE_NAME));
}

typedef struct {
    int64_t t;
    int32_t type; /* 0 right (an end), 1 left (a start): ends first at one time */
    int32_t b;
} Point;

static int cmp_point(const void *pa, const void *pb) {
    const Point *a = pa, *b = pb;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    if (a->type != b->type) return a->type < b->type ? -1 : 1;
    return (a->b > b->b) - (a->b < b->b);
}

/* The sweep: sections, each buffer's section range, partitions, overlaps and cuts. */
static Sweep *build(int32_t n, int64_t *size, int64_t *start, int64_t *end, int64_t *width) {
    Sweep *w = calloc(1, sizeof(Sweep));
    Point *pts = malloc(sizeof(Point) * 2 * (size_t)n + 1);
    int32_t *alive = malloc(sizeof(int32_t) * (size_t)n + 1);
    int32_t *where = malloc(sizeof(int32_t) * (size_t)n + 1);
    if (w == NULL || pts == NULL || alive == NULL || where == NULL) goto fail;
    w->n = n;
    w->size = size; w->start = start; w->end = end; w->width = width;
    size = start = end = width = NULL;
    w->slo = malloc(sizeof(int32_t) * (size_t)n + 1);
    w->shi = malloc(sizeof(int32_t) * (size_t)n + 1);
    w->parts = malloc(sizeof(int32_t) * ((size_t)n + 1));
    w->part = malloc(sizeof(int32_t) * (size_t)n + 1);
    w->pslo = malloc(sizeof(int32_t) * (size_t)n + 1);
    w->pshi = malloc(sizeof(int32_t) * (size_t)n + 1);
    if (!w->slo || !w->shi || !w->parts || !w->part || !w->pslo || !w->pshi) goto fail;
    for (int32_t b = 0; b < n; b++) {
        pts[2 * b] = (Point){w->start[b], 1, b};
        pts[2 * b + 1] = (Point){w->end[b], 0, b};
    }
    qsort(pts, 2 * (size_t)n, sizeof(Point), cmp_point);
    int32_t nsec = 0, nalive = 0, npart = 0, nmember = 0;
    int64_t last_t = n ? pts[0].t : 0;
    for (int64_t k = 0; k < 2 * (int64_t)n; k++) {
        const Point p = pts[k];
        if (p.type == 0) {
            if (last_t < p.t) {
                last_t = p.t;
                nsec++;
            }
            int32_t i = where[p.b];
            alive[i] = alive[--nalive];
            where[alive[i]] = i;
            w->shi[p.b] = nsec;
            if (nalive == 0) w->pshi[npart - 1] = nsec;
        } else {
            if (nalive == 0) {
                w->parts[npart] = nmember;
                w->pslo[npart] = nsec;
                npart++;
            }
            w->part[nmember++] = p.b;
            where[p.b] = nalive;
            alive[nalive++] = p.b;
            w->slo[p.b] = nsec;
        }
    }
    w->parts[npart] = nmember;
    w->nsec = nsec;
    w->npart = npart;
    /* Two buffers are live at once exactly when their section ranges meet. Buffers in
       sweep order (by first section): the ones after b that meet it form a run. */
    int32_t *order = w->part; /* the sweep's left order is by start, so by slo */
    w->ovs = calloc((size_t)n + 1, sizeof(int64_t));
    if (w->ovs == NULL) goto fail;
    for (int32_t a = 0; a < n; a++) {
        int32_t i = order[a];
        for (int32_t c = a + 1; c < n && w->slo[order[c]] < w->shi[i]; c++) {
            w->ovs[i + 1]++;
            w->ovs[order[c] + 1]++;
        }
    }
    for (int32_t b = 0; b < n; b++) w->ovs[b + 1] += w->ovs[b];
    w->ov = malloc(sizeof(int32_t) * (size_t)w->ovs[n] + 1);
    int64_t *fill = malloc(sizeof(int64_t) * (size_t)n + 1);
    if (w->ov == NULL || fill == NULL) {
        free(fill);
        goto fail;
    }
    memcpy(fill, w->ovs, sizeof(int64_t) * (size_t)n);
    for (int32_t a = 0; a < n; a++) {
        int32_t i = order[a];
        for (int32_t c = a + 1; c < n && w->slo[order[c]] < w->shi[i]; c++) {
            int32_t j = order[c];
            w->ov[fill[i]++] = j;
            w->ov[fill[j]++] = i;
        }
    }
    free(fill);
    /* Section members, totals and cuts. */
    w->mems = calloc((size_t)nsec + 1, sizeof(int64_t));
    w->total0 = calloc((size_t)nsec + 1, sizeof(int64_t));
    w->cuts0 = calloc((size_t)nsec + 1, sizeof(int32_t));
    if (!w->mems || !w->total0 || !w->cuts0) goto fail;
    for (int32_t b = 0; b < n; b++) {
        for (int32_t s = w->slo[b]; s < w->shi[b]; s++) {
            w->mems[s + 1]++;
            w->total0[s] += w->size[b];
        }
        for (int32_t s = w->slo[b]; s + 1 < w->shi[b]; s++) w->cuts0[s]++;
    }
    for (int32_t s = 0; s < nsec; s++) w->mems[s + 1] += w->mems[s];
    w->mem = malloc(sizeof(int32_t) * (size_t)w->mems[nsec] + 1);
    int64_t *sfill = malloc(sizeof(int64_t) * (size_t)nsec + 1);
    if (w->mem == NULL || sfill == NULL) {
        free(sfill);
        goto fail;
    }
    memcpy(sfill, w->mems, sizeof(int64_t) * (size_t)nsec);
    for (int32_t b = 0; b < n; b++)
        for (int32_t s = w->slo[b]; s < w->shi[b]; s++) w->mem[sfill[s]++] = b;
    free(sfill);
    free(pts); free(alive); free(where);
    return w;
fail:
    free(size); free(start); free(end); free(width);
    free(pts); free(alive); free(where);
    sweep_free(w);
    return NULL;
}

/* ---------------------------------------------------------------- the search */

typedef struct {
    int32_t idx;
    int64_t old;
} Change;

typedef struct {
    Change *a;
    size_t n, cap;
} Stack;

typedef struct {
    const Sweep *w;
    int64_t capacity;
    char heur[3];
    int64_t *off, *minoff, *floor, *total, *sol;
    int32_t *cuts, *pidx, *witness;
    int32_t last_fail; /* the section check() last found too full */
    Stack och, sch;
    int64_t nodes_left;
    uint32_t ticks;
    double deadline;
    int oom;
} State;

typedef struct {
    const int32_t *bufs;
    int32_t nb, slo, shi;
} Part;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int push(State *S, Stack *st, int32_t idx, int64_t old) {
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 1024;
        Change *a = realloc(st->a, cap * sizeof(Change));
        if (a == NULL) {
            S->oom = 1;
            return -1;
        }
        st->a = a;
        st->cap = cap;
    }
    st->a[st->n++] = (Change){idx, old};
    return 0;
}

typedef struct {
    int64_t off;
    int32_t pidx, b;
} Cand;

static int cmp_cand(const void *pa, const void *pb) {
    const Cand *a = pa, *b = pb;
    if (a->off != b->off) return a->off < b->off ? -1 : 1;
    return (a->pidx > b->pidx) - (a->pidx < b->pidx);
}

typedef struct {
    int64_t k[3];
    int32_t b;
} Pre;

static int cmp_pre(const void *pa, const void *pb) {
    const Pre *a = pa, *b = pb;
    for (int i = 0; i < 3; i++)
        if (a->k[i] != b->k[i]) return a->k[i] > b->k[i] ? -1 : 1; /* descending */
    return (a->b > b->b) - (a->b < b->b);
}

static int subsolve(State *S, const Part *P);

/* Whether every section of the partition can still hold its unplaced buffers. The section
   that failed last is tried first: failures cluster, and most placements tried fail. */
static int check(State *S, const Part *P, int64_t offset) {
    int32_t t = S->last_fail;
    if (t >= P->slo && t < P->shi) {
        int64_t f = S->floor[t] > offset ? S->floor[t] : offset;
        if (f + S->total[t] > S->capacity) return 0;
    }
    for (int32_t s = P->slo; s < P->shi; s++) {
        int64_t f = S->floor[s] > offset ? S->floor[s] : offset;
        if (f + S->total[s] > S->capacity) {
            S->last_fail = s;
            return 0;
        }
    }
    return 1;
}

static int search(State *S, const Part *P, int64_t min_off, int32_t min_pidx);

/* After placing b: solve on, split where no unplaced buffer crosses a section boundary. */
static int decompose(State *S, const Part *P, int64_t o, int32_t pidx, int32_t b) {
    const Sweep *w = S->w;
    int32_t lo = w->slo[b], hi = w->shi[b];
    int32_t *cp = malloc(sizeof(int32_t) * (size_t)(hi - lo + 2));
    if (cp == NULL) {
        S->oom = 1;
        return ABORT;
    }
    int32_t nc = 0;
    cp[nc++] = P->slo;
    for (int32_t s = lo; s + 1 < hi; s++)
        if (--S->cuts[s] == 0) cp[nc++] = s + 1;
    int status;
    if (nc == 1) {
        status = search(S, P, o, pidx);
    } else {
        cp[nc++] = P->shi;
        status = FOUND;
        int32_t *sub = malloc(sizeof(int32_t) * (size_t)P->nb + 1);
        if (sub == NULL) {
            S->oom = 1;
            status = ABORT;
        }
        for (int32_t c = 1; sub != NULL && c < nc; c++) {
            int32_t nb = 0;
            for (int32_t i = 0; i < P->nb; i++) {
                int32_t k = P->bufs[i];
                if (S->off[k] >= 0) continue;
                if (w->shi[k] <= cp[c - 1] || cp[c] <= w->slo[k]) continue;
                sub[nb++] = k;
            }
            if (nb == 0) continue;
            Part Q = {sub, nb, cp[c - 1], cp[c]};
            status = subsolve(S, &Q);
            if (status != FOUND) break;
        }
        free(sub);
    }
    for (int32_t s = lo; s + 1 < hi; s++) S->cuts[s]++;
    free(cp);
    return status;
}

static int search(State *S, const Part *P, int64_t min_off, int32_t min_pidx) {
    const Sweep *w = S->w;
    if (S->nodes_left <= 0) return ABORT;
    S->nodes_left--;
    if ((++S->ticks & 255u) == 0 && now() > S->deadline) return TIMEOUT;
    /* The lowest top any unplaced buffer can reach: nothing goes at or above it. */
    int64_t min_height = INT64_MAX;
    int32_t left = 0;
    for (int32_t i = 0; i < P->nb; i++) {
        int32_t k = P->bufs[i];
        if (S->off[k] >= 0) continue;
        left++;
        int64_t h = S->minoff[k] + w->size[k];
        if (h < min_height) min_height = h;
    }
    if (left == 0) return FOUND;
    Cand *cand = malloc(sizeof(Cand) * (size_t)left);
    if (cand == NULL) {
        S->oom = 1;
        return ABORT;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < P->nb; i++) {
        int32_t k = P->bufs[i];
        if (S->off[k] >= 0) continue;
        int64_t o = S->minoff[k];
        int32_t p = S->pidx[k];
        if (o < min_off || (o == min_off && p < min_pidx)) continue; /* canonical */
        if (o >= min_height) continue;                               /* dominance */
        cand[m++] = (Cand){o, p, k};
    }
    qsort(cand, (size_t)m, sizeof(Cand), cmp_cand);
    int status = NONE;
    for (int32_t i = 0; i < m; i++) {
        const int64_t o = cand[i].off;
        const int32_t b = cand[i].b;
        const int64_t top = o + w->size[b];
        const size_t omark = S->och.n, smark = S->sch.n;
        S->off[b] = o;
        S->sol[b] = o;
        /* b's sections: the floor rises to its top, the unplaced total drops. */
        for (int32_t s = w->slo[b]; s < w->shi[b]; s++) {
            if (push(S, &S->sch, s, S->floor[s])) break;
            S->floor[s] = top;
            S->total[s] -= w->size[b];
        }
        /* Where b's own sections overflow, the check below fails whatever else changes
           (floors only rise): skip the rest, only finding out whether b is hatless. */
        int full = 0;
        for (int32_t s = w->slo[b]; s < w->shi[b] && !full; s++)
            full = top + S->total[s] > S->capacity;
        int hatless = 1;
        if (full) {
            for (int64_t e = w->ovs[b]; e < w->ovs[b + 1] && hatless; e++)
                hatless = S->off[w->ov[e]] >= 0;
        }
        /* Raise the minimum offsets of the unplaced buffers live with b. */
        int32_t span_lo = w->slo[b], span_hi = w->shi[b];
        for (int64_t e = w->ovs[b]; e < w->ovs[b + 1] && !S->oom && !full; e++) {
            int32_t k = w->ov[e];
            if (S->off[k] >= 0) continue;
            hatless = 0;
            if (S->minoff[k] >= top) continue;
            if (push(S, &S->och, k, S->minoff[k])) break;
            S->minoff[k] = top;
            if (w->slo[k] < span_lo) span_lo = w->slo[k];
            if (w->shi[k] > span_hi) span_hi = w->shi[k];
        }
        /* Nothing unplaced in a section goes below the lowest of their minimum offsets. A
           raised buffer is unplaced in each of its sections at minimum offset top, so only
           floors below top may rise, in the raised buffers' sections outside b's (where
           the floor is top already). Each raised buffer's sections meet b's, so together
           they are the sections from span_lo to span_hi outside b's. A section whose
           unplaced total fits above top is left as it is: no floor up to top fails it,
           here or below this node (totals only drop there), and a later raise works its
           floor out from the minimum offsets of then, never lower than now. Scanning them
           all took 85% of the time of the TAW preorder on Inception v3's training step
           (2.0 against 0.3 CPU s for 2,256 nodes). */
        for (int32_t s = span_lo; s < span_hi && !S->oom && !full; s++) {
            if (s == w->slo[b]) {
                s = w->shi[b] - 1;
                continue;
            }
            int64_t fl = S->floor[s];
            if (fl >= top || top + S->total[s] <= S->capacity) continue;
            int32_t seen = S->witness[s];
            if (S->off[seen] < 0 && S->minoff[seen] <= fl) continue; /* it stays */
            int64_t low = INT64_MAX;
            for (int64_t e = w->mems[s]; e < w->mems[s + 1]; e++) {
                int32_t k = w->mem[e];
                if (S->off[k] < 0 && S->minoff[k] < low) {
                    low = S->minoff[k];
                    if (low <= fl) {
                        S->witness[s] = k;
                        break;
                    }
                }
            }
            if (low != INT64_MAX && fl < low) {
                if (push(S, &S->sch, s, fl)) break;
                S->floor[s] = low;
            }
        }
        int st = NONE;
        if (S->oom)
            st = ABORT;
        else if (!full && check(S, P, o))
            st = decompose(S, P, o, cand[i].pidx, b);
        while (S->sch.n > smark) {
            Change c = S->sch.a[--S->sch.n];
            S->floor[c.idx] = c.old;
        }
        for (int32_t s = w->slo[b]; s < w->shi[b]; s++) S->total[s] += w->size[b];
        while (S->och.n > omark) {
            Change c = S->och.a[--S->och.n];
            S->minoff[c.idx] = c.old;
        }
        S->off[b] = -1;
        if (st != NONE) {
            status = st;
            break;
        }
        if (hatless) break; /* nothing rests on b: every other choice here fails too */
    }
    free(cand);
    return status;
}

/* One partition under the state's preorder: width (W), area (A), the largest total of
   unplaced sizes over the buffer's sections (T) and the end (E, not MiniMalloc's: the
   latest end first), descending, in the heuristic's order. */
static int subsolve(State *S, const Part *P) {
    const Sweep *w = S->w;
    Pre *pre = malloc(sizeof(Pre) * (size_t)P->nb);
    int32_t *saved = malloc(sizeof(int32_t) * (size_t)P->nb);
    if (pre == NULL || saved == NULL) {
        free(pre);
        free(saved);
        S->oom = 1;
        return ABORT;
    }
    for (int32_t i = 0; i < P->nb; i++) {
        int32_t b = P->bufs[i];
        int64_t total = 0;
        for (int32_t s = w->slo[b]; s < w->shi[b]; s++)
            if (S->total[s] > total) total = S->total[s];
        int64_t width = w->width[b];
        int64_t area = w->size[b] > INT64_MAX / width ? INT64_MAX : w->size[b] * width;
        for (int c = 0; c < 3; c++) {
            char h = S->heur[c];
            pre[i].k[c] = h == 'W' ? width : h == 'A' ? area : h == 'E' ? w->end[b] : total;
        }
        pre[i].b = b;
    }
    qsort(pre, (size_t)P->nb, sizeof(Pre), cmp_pre);
    /* Preorder ranks are this partition's; an enclosing partition's come back after. */
    for (int32_t i = 0; i < P->nb; i++) {
        saved[i] = S->pidx[pre[i].b];
        S->pidx[pre[i].b] = i;
    }
    int status = search(S, P, 0, 0);
    for (int32_t i = 0; i < P->nb; i++) S->pidx[pre[i].b] = saved[i];
    free(pre);
    free(saved);
    return status;
}

static int run(State *S) {
    const Sweep *w = S->w;
    int status = FOUND;
    for (int32_t p = 0; p < w->npart && status == FOUND; p++) {
        Part P = {w->part + w->parts[p], w->parts[p + 1] - w->parts[p], w->pslo[p], w->pshi[p]};
        status = subsolve(S, &P);
    }
    return status;
}

/* ---------------------------------------------------------------- Python API */

static int64_t *int64s(PyObject *seq, Py_ssize_t n, const char *what) {
    int64_t *out = malloc(sizeof(int64_t) * (size_t)n + 1);
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            free(out);
            return NULL;
        }
        if (v < 0) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] must be >= 0, got %lld", what, i, v);
            free(out);
            return NULL;
        }
        out[i] = (int64_t)v;
    }
    return out;
}

static PyObject *py_sweep(PyObject *self, PyObject *args) {
    PyObject *a, *b, *c, *d = Py_None;
    if (!PyArg_ParseTuple(args, "OOO|O:sweep", &a, &b, &c, &d)) return NULL;
    PyObject *fa = PySequence_Fast(a, "sizes must be a sequence");
    PyObject *fb = fa ? PySequence_Fast(b, "starts must be a sequence") : NULL;
    PyObject *fc = fb ? PySequence_Fast(c, "ends must be a sequence") : NULL;
    PyObject *fd = NULL;
    PyObject *result = NULL;
    int64_t *size = NULL, *start = NULL, *end = NULL, *width = NULL;
    if (fc == NULL) goto done;
    if (d != Py_None && (fd = PySequence_Fast(d, "widths must be a sequence or None")) == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fa);
    if (PySequence_Fast_GET_SIZE(fb) != n || PySequence_Fast_GET_SIZE(fc) != n ||
        (fd != NULL && PySequence_Fast_GET_SIZE(fd) != n)) {
        PyErr_SetString(PyExc_ValueError,
                        "sizes, starts, ends (and widths) must have one length");
        goto done;
    }
    if (n > INT32_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "at most %d buffers, got %zd", INT32_MAX / 2, n);
        goto done;
    }
    if (!(size = int64s(fa, n, "sizes")) || !(start = int64s(fb, n, "starts")) ||
        !(end = int64s(fc, n, "ends")))
        goto done;
    if (fd != NULL ? !(width = int64s(fd, n, "widths"))
                   : !(width = malloc(sizeof(int64_t) * (size_t)n + 1))) {
        if (fd == NULL) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (end[i] <= start[i] || size[i] == 0) {
            PyErr_Format(PyExc_ValueError,
                         "buffer %zd: needs start < end and size > 0, got [%lld, %lld) "
                         "of size %lld",
                         i, (long long)start[i], (long long)end[i], (long long)size[i]);
            goto done;
        }
        if (fd == NULL) width[i] = end[i] - start[i];
        else if (width[i] == 0) {
            PyErr_Format(PyExc_ValueError, "widths[%zd] must be > 0, got 0", i);
            goto done;
        }
    }
    Sweep *w = build((int32_t)n, size, start, end, width);
    size = start = end = width = NULL; /* build owns them now */
    if (w == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyCapsule_New(w, CAPSULE_NAME, capsule_free);
    if (result == NULL) sweep_free(w);
done:
    free(size); free(start); free(end); free(width);
    Py_XDECREF(fa); Py_XDECREF(fb); Py_XDECREF(fc); Py_XDECREF(fd);
    return result;
}

static PyObject *py_decide(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long capacity, node_limit;
    const char *heur;
    Py_ssize_t heur_len;
    double seconds;
    if (!PyArg_ParseTuple(args, "OLs#Ld:decide", &capsule, &capacity, &heur, &heur_len,
                          &node_limit, &seconds))
        return NULL;
    const Sweep *w = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (w == NULL) return NULL;
    if (heur_len != 3 || strspn(heur, "WATE") != 3) {
        PyErr_Format(PyExc_ValueError, "heuristic must be 3 of W, A, T, E, got %R",
                     PyTuple_GET_ITEM(args, 2));
        return NULL;
    }
    int32_t n = w->n, nsec = w->nsec;
    State S;
    memset(&S, 0, sizeof(S));
    S.w = w;
    S.capacity = capacity;
    memcpy(S.heur, heur, 3);
    S.nodes_left = node_limit;
    S.off = malloc(sizeof(int64_t) * (size_t)n + 1);
    S.minoff = calloc((size_t)n + 1, sizeof(int64_t));
    S.sol = calloc((size_t)n + 1, sizeof(int64_t));
    S.pidx = calloc((size_t)n + 1, sizeof(int32_t));
    S.floor = calloc((size_t)nsec + 1, sizeof(int64_t));
    S.total = malloc(sizeof(int64_t) * ((size_t)nsec + 1));
    S.cuts = malloc(sizeof(int32_t) * ((size_t)nsec + 1));
    S.witness = malloc(sizeof(int32_t) * ((size_t)nsec + 1)); /* a member of each section */
    PyObject *result = NULL;
    if (!S.off || !S.minoff || !S.sol || !S.pidx || !S.floor || !S.total || !S.cuts ||
        !S.witness) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t b = 0; b < n; b++) S.off[b] = -1;
    memcpy(S.total, w->total0, sizeof(int64_t) * ((size_t)nsec + 1));
    memcpy(S.cuts, w->cuts0, sizeof(int32_t) * ((size_t)nsec + 1));
    for (int32_t s = 0; s < nsec; s++) S.witness[s] = w->mem[w->mems[s]];
    int status;
    Py_BEGIN_ALLOW_THREADS
    S.deadline = now() + (seconds > 0 ? seconds : 0);
    status = run(&S);
    Py_END_ALLOW_THREADS
    if (S.oom) {
        PyErr_NoMemory();
        goto done;
    }
    long long nodes = node_limit - S.nodes_left;
    if (status != FOUND) {
        result = Py_BuildValue("(iOL)", status, Py_None, nodes);
        goto done;
    }
    PyObject *offsets = PyList_New(n);
    if (offsets == NULL) goto done;
    for (int32_t b = 0; b < n; b++) {
        PyObject *v = PyLong_FromLongLong(S.sol[b]);
        if (v == NULL) {
            Py_DECREF(offsets);
            goto done;
        }
        PyList_SET_ITEM(offsets, b, v);
    }
    result = Py_BuildValue("(iNL)", status, offsets, nodes);
done:
    free(S.off); free(S.minoff); free(S.sol); free(S.pidx); free(S.floor); free(S.total);
    free(S.cuts); free(S.witness); free(S.och.a); free(S.sch.a);
    return result;
}

static PyMethodDef methods[] = {
    {"sweep", py_sweep, METH_VARARGS,
     "sweep(sizes, starts, ends, widths=None) -> the instance prepared for decide\n"
     "(lifetimes half-open; widths, each lifetime's length for the W and A preorders,\n"
     "default end - start)."},
    {"decide", py_decide, METH_VARARGS,
     "decide(sweep, capacity, heuristic, node_limit, seconds) -> (status, offsets or None,\n"
     "nodes): status 0 found, 1 no plan within capacity, 2 node limit, 3 time limit; nodes\n"
     "the search nodes visited."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "arena.planning._search",
    "MiniMalloc's search (Moffitt, ASPLOS 2023), ported to C: see arena/planning/search.py.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__search(void) { return PyModule_Create(&module); }
