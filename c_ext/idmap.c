/* Not the kernel's: dense ids for a libCacheSim trace's objects (kmemsim/workload/libcachesim_io.py).
 * An open-addressing hash table (linear probing, a power-of-two size kept at most half full, so a
 * probe ends after a few slots) from a 64-bit object id to its index in order of first appearance.
 * One pass over the requests, read where they lie (stride: a mapped file's 24-byte records). */
#include <stdlib.h>
#include <string.h>
#include "kmemsim.h"

struct slot {
    uint64_t key;           /* an id */
    int32_t idx;            /* and its index; -1: an empty slot */
};                          /* together: one cache line read per probe, not two */

struct km_idmap {
    struct slot *t;         /* the table */
    uint64_t mask;          /* table size - 1 */
    uint64_t *values;       /* the distinct ids, in order of first appearance */
    uint32_t *sizes;        /* and each one's largest size */
    int64_t n, cap;
};

/* splitmix64's finalizer: ids of real traces are often small consecutive integers */
static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int table_alloc(struct km_idmap *m, uint64_t size)
{
    struct slot *t = malloc(sizeof *t * size);
    if (!t) return -1;
    for (uint64_t h = 0; h < size; h++) t[h].idx = -1;
    /* rehash what is there: the distinct ids in order, each into its new slot */
    for (int64_t i = 0; i < m->n; i++) {
        uint64_t h = mix(m->values[i]) & (size - 1);
        while (t[h].idx >= 0) h = (h + 1) & (size - 1);
        t[h].key = m->values[i];
        t[h].idx = (int32_t)i;
    }
    free(m->t);
    m->t = t; m->mask = size - 1;
    return 0;
}

struct km_idmap *km_idmap_new(void)
{
    struct km_idmap *m = calloc(1, sizeof *m);
    if (m && table_alloc(m, 1 << 12) < 0) { free(m); return NULL; }
    return m;
}

void km_idmap_free(struct km_idmap *m)
{
    if (!m) return;
    free(m->t); free(m->values); free(m->sizes); free(m);
}

int64_t km_idmap_size(struct km_idmap *m) { return m->n; }

void km_idmap_values(struct km_idmap *m, uint64_t *out) { memcpy(out, m->values, sizeof *out * (size_t)m->n); }

void km_idmap_sizes(struct km_idmap *m, uint32_t *out) { memcpy(out, m->sizes, sizeof *out * (size_t)m->n); }

/* The slot holding id, or the empty one where it would go. */
static inline uint64_t probe(const struct km_idmap *m, uint64_t id)
{
    uint64_t h = mix(id) & m->mask;
    while (m->t[h].idx >= 0 && m->t[h].key != id) h = (h + 1) & m->mask;
    return h;
}

int64_t km_idmap_add(struct km_idmap *m, const uint8_t *base, int64_t n, int64_t stride, int32_t *first,
                     const uint8_t *sizes)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t id;
        uint32_t size = 0;
        memcpy(&id, base + i * stride, sizeof id);         /* records need not be aligned */
        if (sizes) memcpy(&size, sizes + i * stride, sizeof size);
        uint64_t h = probe(m, id);
        int32_t k = m->t[h].idx;
        if (k >= 0) {
            first[i] = k;
            if (size > m->sizes[k]) m->sizes[k] = size;
            continue;
        }
        if (m->n >= INT32_MAX) return -1;                  /* indexes are int32 (page ids fit) */
        if (m->n == m->cap) {
            int64_t cap = m->cap ? 2 * m->cap : 4096;
            uint64_t *v = realloc(m->values, sizeof *v * (size_t)cap);
            if (!v) return -1;
            m->values = v;
            uint32_t *z = realloc(m->sizes, sizeof *z * (size_t)cap);
            if (!z) return -1;
            m->sizes = z; m->cap = cap;
        }
        if (2 * (uint64_t)(m->n + 1) > m->mask + 1) {      /* keep it at most half full */
            if (table_alloc(m, 2 * (m->mask + 1)) < 0) return -1;
            h = probe(m, id);
        }
        m->t[h].key = id;
        m->t[h].idx = (int32_t)m->n;
        m->values[m->n] = id;
        m->sizes[m->n] = size;
        first[i] = (int32_t)m->n++;
    }
    return m->n;
}

int64_t km_idmap_find(const struct km_idmap *m, const uint8_t *base, int64_t n, int64_t stride,
                      const int64_t *val, int64_t *out)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t id;
        memcpy(&id, base + i * stride, sizeof id);
        int32_t k = m->t[probe(m, id)].idx;
        if (k < 0) return i;                                   /* not in the table */
        out[i] = val[k];
    }
    return n;
}
