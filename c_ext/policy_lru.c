/* Plain LRU, for cross-checks against libCacheSim: one list, no anon/file split, no swap, no
 * readahead (nor WILLNEED's) or fault-around, no watermarks; every reference moves a page to the head
 * and a full memory evicts exactly the tail. Anonymous pages are dropped like clean pages, and every
 * page of a vma is a page of the object it maps (no COW). PTEs are never young (the young bit is
 * reclaim's scan, which a plain LRU has not), so an unmap marks nothing (zap_pte_range() marks a young
 * PTE's folio accessed): only the trace's references order the list, as only requests order
 * libCacheSim's (`kmemsim trace export`, tests/test_trace_export.py). Touched ranges take a short path
 * of their own (lru_handle_range); the hooks below serve the other ways in (read(2), populate, mlock). */
#include <stdio.h>
#include <stdlib.h>
#include "mm.h"

static void lru_init(struct km_emu *e)
{
    e->cfg.ra_pages = 0;
    e->cfg.io_pages = 0;                             /* nor WILLNEED: force_page_cache_ra() reads 0 */
    e->cfg.fault_around_pages = 1;
    e->cfg.max_folio_order = 0;
    e->cfg.zram_pages = 0;
    e->cfg.min_free_kbytes = -1;                     /* no watermarks: evict only when full */
    e->kmem_off = 1;                                 /* a cache of pages: no kernel memory beside */
}

static int lru_add(struct km_emu *e, struct folio *f) { (void)f; lists_sync(e); return LRU_INACTIVE_FILE; }

static void lru_accessed(struct km_emu *e, folio_id id)
{
    lists_sync(e);
    if (e->lru[LRU_INACTIVE_FILE].head == id) return;
    lruvec_del_folio(e, id);
    lruvec_add_folio(e, id, LRU_INACTIVE_FILE);
}

/* Drop a folio taken off the list: unmap it everywhere, free it (no shadow: plain LRU keeps no
 * history). */
static void lru_evict(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    struct object *o = &e->objs[f->obj];
    for (int i = 0; i < o->nvmas; i++) {
        struct vma *v = &e->vmas[o->vmas[i]];
        int64_t p = o->kind == OBJ_FILE ? vma_pte_index(v, f->index) : f->index;
        if (v->alive && p >= 0 && (v->pte[p] & PTE_PRESENT)) { v->pte[p] = 0; e->tasks[v->task].rss--; }
    }
    o->folio[f->index] = -1;
    o->nr_resident--;
    if (o->kind == OBJ_FILE) { o->pages_deleted++; count(e, VM_file_pages_deleted, 1); }
    folio_free(e, id);
}

static int64_t lru_reclaim(struct km_emu *e, int64_t nr, int who)
{
    (void)who;
    lists_sync(e);
    int64_t freed = 0;
    if (nr < 1) nr = 1;
    while (freed < nr && e->lru[LRU_INACTIVE_FILE].tail >= 0) {
        folio_id id = e->lru[LRU_INACTIVE_FILE].tail;
        struct folio *f = &e->folios[id];
        int n = folio_nr_pages(f);
        lruvec_del_folio(e, id);
        if (f->flags & PG_swapbacked) lru_evict(e, id);     /* anon: dropped like a clean page */
        else folio_evict(e, id);
        freed += n;
    }
    return freed;
}

/* The order between range events. Relinking a folio at the head on every hit touches its two
 * neighbours, and evicting follows the tail's links one dependent load at a time: the two costs
 * that dominate a random trace. So lru_handle_range keeps the order as a FIFO of references
 * instead: each reference appends (folio, stamp) and stamps the folio; the live entry of a folio
 * is the one whose stamp it still carries, and the oldest live entry is the list's tail. The same
 * order as the list, so the same evictions; the FIFO is read in order, so its folios are
 * prefetched well ahead of the evictions that need them. While deferred, the list's links are
 * stale: lru_sync_lists rebuilds them before anything else reads them. */
struct lru_ref { folio_id id; uint32_t stamp; };
struct lru_fifo {
    uint64_t head, tail;            /* entries [head, tail), indices mod cap */
    uint64_t cap;                   /* a power of two */
    uint32_t clock;                 /* the last stamp given */
    struct lru_ref q[];
};
#define FIFO_PF_FOLIO 16            /* prefetch the folio of the entry this far past the head */
#define FIFO_PF_SLOT 8              /* and the page-cache slot and PTE of a live one this far */

static inline uint32_t *folio_stamp(struct folio *f) { return &f->stamp; }

static inline int lru_ref_live(const struct km_emu *e, struct lru_ref r)
{
    struct folio *f = &e->folios[r.id];
    return f->lru == LRU_INACTIVE_FILE && *folio_stamp(f) == r.stamp;
}

/* Drop the stale entries (in place: the write index never passes the read index). */
static void lru_fifo_compact(struct km_emu *e, struct lru_fifo *q)
{
    uint64_t m = q->cap - 1, w = q->head;
    for (uint64_t r = q->head; r < q->tail; r++) {
        if (r + 16 < q->tail) __builtin_prefetch(&e->folios[q->q[(r + 16) & m].id]);
        if (lru_ref_live(e, q->q[r & m])) q->q[w++ & m] = q->q[r & m];
    }
    q->tail = w;
}

/* Room for n more entries: compact, and grow while live entries would fill over half the ring. */
static struct lru_fifo *lru_fifo_reserve(struct km_emu *e, struct lru_fifo *q, uint64_t n)
{
    if (q && q->tail - q->head + n <= q->cap) return q;
    if (q) lru_fifo_compact(e, q);
    uint64_t len = q ? q->tail - q->head : 0, cap = q ? q->cap : 1024;
    while (2 * (len + n) > cap) cap *= 2;
    if (q && cap == q->cap) return q;
    struct lru_fifo *nq = malloc(sizeof *nq + cap * sizeof(struct lru_ref));
    if (!nq) { fprintf(stderr, "kmemsim: out of memory\n"); abort(); }
    nq->cap = cap; nq->head = 0; nq->tail = len; nq->clock = q ? q->clock : 0;
    for (uint64_t i = 0; i < len; i++) nq->q[i] = q->q[(q->head + i) & (q->cap - 1)];
    free(q);
    e->policy_data = nq;
    return nq;
}

static inline void lru_fifo_push(struct km_emu *e, struct lru_fifo *q, folio_id id)
{
    uint32_t s = ++q->clock;
    *folio_stamp(&e->folios[id]) = s;
    q->q[q->tail++ & (q->cap - 1)] = (struct lru_ref){ id, s };
}

/* Defer the order: the list, tail first, becomes the FIFO (with room for n references). */
static struct lru_fifo *lru_defer(struct km_emu *e, uint64_t n)
{
    struct lru_head *h = &e->lru[LRU_INACTIVE_FILE];
    struct lru_fifo *q = e->policy_data;
    if (q) q->head = q->tail = 0;
    q = lru_fifo_reserve(e, q, (uint64_t)h->nr_pages + n);
    q->clock = 0;
    for (folio_id id = h->tail; id >= 0; ) {
        folio_id prev = e->links[id].prev;
        lru_fifo_push(e, q, id);
        id = prev;
    }
    e->lists_deferred = 1;
    return q;
}

/* The list again, from the live entries, oldest at the tail. */
static void lru_sync_lists(struct km_emu *e)
{
    struct lru_fifo *q = e->policy_data;
    struct lru_head *h = &e->lru[LRU_INACTIVE_FILE];
    lru_fifo_compact(e, q);                     /* the live entries, oldest first */
    h->head = h->tail = -1;
    h->nr_pages = 0;
    for (uint64_t r = q->head; r < q->tail; r++) lruvec_add_folio(e, q->q[r & (q->cap - 1)].id, LRU_INACTIVE_FILE);
    q->head = q->tail = 0;
    e->lists_deferred = 0;
}

/* Pop the tail: the oldest live entry (-1 when the list is empty). Prefetch the folios of the
 * entries ahead, and the slot and PTE of live ones nearer, so evictions do not wait on memory. */
static folio_id lru_fifo_pop_tail(struct km_emu *e, struct lru_fifo *q)
{
    uint64_t m = q->cap - 1;
    while (q->head < q->tail) {
        if (q->head + FIFO_PF_FOLIO < q->tail) __builtin_prefetch(&e->folios[q->q[(q->head + FIFO_PF_FOLIO) & m].id]);
        if (q->head + FIFO_PF_SLOT < q->tail) {
            struct lru_ref a = q->q[(q->head + FIFO_PF_SLOT) & m];
            if (lru_ref_live(e, a)) {
                const struct folio *f = &e->folios[a.id];
                const struct object *o = &e->objs[f->obj];
                __builtin_prefetch(&o->folio[f->index]);
                if (o->nvmas > 0) {                              /* the first mapping's PTE */
                    const struct vma *v = &e->vmas[o->vmas[0]];
                    int64_t p = o->kind == OBJ_FILE ? vma_pte_index(v, f->index) : f->index;
                    if (v->alive && p >= 0 && p < v->npages) __builtin_prefetch(&v->pte[p]);
                }
            }
        }
        struct lru_ref r = q->q[q->head++ & m];
        if (lru_ref_live(e, r)) return r.id;
    }
    return -1;
}

/* What one range or run of references works on, set up once. */
struct lru_ctx {
    struct vma *v;
    struct object *o;
    int file, deferred;
    int64_t base, cap;
    struct lru_head *h;
    struct lru_fifo *q;
};

/* The order is deferred (the FIFO above) while READ/WRITE events of the trace are served; populate
 * and mlock fault pages in one call at a time between list operations of their own, so they keep
 * the list. */
static struct lru_ctx lru_begin(struct km_emu *e, int32_t vi, int64_t n)
{
    struct lru_ctx c;
    c.v = &e->vmas[vi];
    c.o = &e->objs[c.v->obj];
    c.file = c.o->kind == OBJ_FILE;
    c.base = c.file ? c.v->pgoff : 0;
    c.cap = e->total_pages ? e->total_pages : e->memcg_limit;
    c.h = &e->lru[LRU_INACTIVE_FILE];
    c.q = e->policy_data;
    if (e->lists_deferred && (!e->trace_range || (uint64_t)c.q->clock + (uint64_t)n >= UINT32_MAX))
        lru_sync_lists(e);                                    /* a caller of its own, or stamps wrap */
    c.deferred = e->trace_range;
    if (c.deferred) c.q = e->lists_deferred ? lru_fifo_reserve(e, c.q, (uint64_t)n) : lru_defer(e, (uint64_t)n);
    count(e, VM_accesses, n);
    return c;
}

/* A PTE maps page p: its table exists (counted, charged to no one: kmem_off), so a populate walks the
 * range page by page as over any PTE-mapped range (populate_vma_page_range() in mmap.c). */
static inline void lru_pte_table(struct km_emu *e, struct vma *v, int64_t p)
{
    if (v->pmdtab[p >> PMD_ORDER] != PMD_TABLE) {
        v->pmdtab[p >> PMD_ORDER] = PMD_TABLE;
        e->nr_page_tables++;
    }
}

/* Page p of the vma referenced: a hit goes to the head; a miss evicts the tail when memory is
 * full and faults the page in. -1: nothing to evict (memory too small). */
static inline __attribute__((always_inline)) int lru_ref(struct km_emu *e, struct lru_ctx *c, int64_t p)
{
    struct vma *v = c->v;
    struct object *o = c->o;
    struct lru_head *h = c->h;
    folio_id id = o->folio[c->base + p];
    if (id >= 0) {                                            /* hit: to the head */
        struct folio *f = &e->folios[id];
        if (!c->deferred) {
            if (h->head != id) { lruvec_del_folio(e, id); lruvec_add_folio(e, id, LRU_INACTIVE_FILE); }
        } else {
            if (f->lru != LRU_INACTIVE_FILE) {                /* on a list of its own (mlocked) */
                lruvec_del_folio(e, id);
                f->lru = LRU_INACTIVE_FILE;
                h->nr_pages += folio_nr_pages(f);
            }
            lru_fifo_push(e, c->q, id);
        }
        if (!(v->pte[p] & PTE_PRESENT)) {
            f->mapcount++;
            e->tasks[v->task].rss++;
            lru_pte_table(e, v, p);
        }
        v->pte[p] = PTE_PRESENT;
        return 0;
    }
    count(e, VM_misses, 1);
    count(e, VM_pgfault, 1);
    count(e, VM_pgmajfault, 1);
    if (c->cap && e->used_pages >= c->cap) {
        folio_id tail = c->deferred ? lru_fifo_pop_tail(e, c->q) : h->tail;
        if (tail < 0) return -1;
        if (c->deferred) {
            h->nr_pages -= folio_nr_pages(&e->folios[tail]);
            e->folios[tail].lru = NO_LRU;
        } else {
            lruvec_del_folio(e, tail);
        }
        lru_evict(e, tail);
    }
    if (e->memcg_limit) e->memcg_usage++;
    id = folio_alloc(e, 0);
    struct folio *f = &e->folios[id];
    f->obj = v->obj;
    f->index = c->base + p;
    f->flags = c->file ? 0 : PG_swapbacked;
    f->mapcount = 1;
    o->folio[c->base + p] = id;
    o->nr_resident++;
    if (c->file) { o->pages_added++; count(e, VM_file_pages_added, 1); count(e, VM_pgpgin, 1); }
    if (c->deferred) {
        f->lru = LRU_INACTIVE_FILE;
        h->nr_pages += 1;
        lru_fifo_push(e, c->q, id);
    } else {
        lruvec_add_folio(e, id, LRU_INACTIVE_FILE);
    }
    if (v->pte[p] & PTE_PRESENT) e->tasks[v->task].rss--;    /* the zero page, say */
    v->pte[p] = PTE_PRESENT;
    lru_pte_table(e, v, p);
    e->tasks[v->task].rss++;
    return 0;
}

static int64_t lru_handle_range(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int write)
{
    (void)write;
    struct lru_ctx c = lru_begin(e, vi, n);
    for (int64_t p = page; p < page + n; p++)
        if (lru_ref(e, &c, p) < 0) return p - page;          /* the rest of the range is dropped */
    return n;
}

/* A run of single-page events, one page each (a libCacheSim trace): the event loop's per-event
 * work is done once, and the slots, PTEs and folios of the pages ahead are prefetched here. */
#define RUN_PF_SLOT 16
#define RUN_PF_FOLIO 8
static void lru_handle_pages(struct km_emu *e, int32_t vi, const int64_t *pages, int64_t n, int write)
{
    (void)write;
    struct lru_ctx c = lru_begin(e, vi, n);
    for (int64_t k = 0; k < n; k++) {
        if (k + RUN_PF_SLOT < n) {
            __builtin_prefetch(&c.o->folio[c.base + pages[k + RUN_PF_SLOT]]);
            __builtin_prefetch(&c.v->pte[pages[k + RUN_PF_SLOT]]);
        }
        if (k + RUN_PF_FOLIO < n) {
            folio_id id = c.o->folio[c.base + pages[k + RUN_PF_FOLIO]];
            if (id >= 0) __builtin_prefetch(&e->folios[id]);
        }
        lru_ref(e, &c, pages[k]);               /* a failure drops that event's page only */
    }
}

const struct policy_ops lru_ops = {
    .handle_range = lru_handle_range,
    .handle_pages = lru_handle_pages,
    .name = "lru",
    .init = lru_init,
    .folio_add_lru = lru_add,
    .folio_accessed = lru_accessed,
    .reclaim = lru_reclaim,
    .sync_lists = lru_sync_lists,
};
