/* Plain LRU, for cross-checks against libCacheSim: one list, no anon/file split, no swap, no
 * readahead or fault-around, no watermarks; every reference moves a page to the head and a full
 * memory evicts exactly the tail. Anonymous pages are dropped like clean pages, and every page of
 * a vma is a page of the object it maps (no COW). Touched ranges take a short path of their own
 * (lru_handle_range); the hooks below serve the other ways in (read(2), populate, mlock). */
#include "mm.h"

static void lru_init(struct km_emu *e)
{
    e->cfg.ra_pages = 0;
    e->cfg.fault_around_pages = 1;
    e->cfg.max_folio_order = 0;
    e->cfg.zram_pages = 0;
    e->cfg.min_free_kbytes = -1;                     /* no watermarks: evict only when full */
}

static int lru_add(struct km_emu *e, struct folio *f) { (void)e; (void)f; return LRU_INACTIVE_FILE; }

static void lru_accessed(struct km_emu *e, folio_id id)
{
    if (e->lru[LRU_INACTIVE_FILE].head == id) return;
    lruvec_del_folio(e, id);
    lruvec_add_folio(e, id, LRU_INACTIVE_FILE);
}

static int64_t lru_reclaim(struct km_emu *e, int64_t nr, int who)
{
    (void)who;
    int64_t freed = 0;
    if (nr < 1) nr = 1;
    while (freed < nr && e->lru[LRU_INACTIVE_FILE].tail >= 0) {
        folio_id id = e->lru[LRU_INACTIVE_FILE].tail;
        struct folio *f = &e->folios[id];
        int n = folio_nr_pages(f);
        lruvec_del_folio(e, id);
        if (f->flags & PG_swapbacked) {
            struct vma *v = &e->vmas[e->objs[f->obj].vmas[0]];
            if (v->pte[f->index] & PTE_PRESENT) { v->pte[f->index] = 0; e->tasks[v->task].rss--; }
            e->objs[f->obj].folio[f->index] = -1;
            e->objs[f->obj].nr_resident--;
            folio_free(e, id);
        } else {
            folio_evict(e, id);
        }
        freed += n;
    }
    return freed;
}

/* Evictions walk the list back from the tail, through folios nobody touched for a long time (cold
 * in the cache). At each eviction, prefetch the folio three before the tail, and the page-cache
 * slot and PTE of the one two before (its folio was prefetched at the previous eviction), so they
 * arrive before they are needed. Hints only: a hit may move these folios to the head first. */
static inline void lru_prefetch_tail(const struct km_emu *e, const struct folio *tail)
{
    folio_id p1 = tail->prev;
    if (p1 < 0) return;
    folio_id p2 = e->folios[p1].prev;
    if (p2 < 0) return;
    const struct folio *f2 = &e->folios[p2];
    if (f2->prev >= 0) __builtin_prefetch(&e->folios[f2->prev]);
    if (f2->obj < 0 || f2->obj >= e->nr_objs) return;
    const struct object *o = &e->objs[f2->obj];
    if (f2->index < 0 || f2->index >= o->npages) return;
    __builtin_prefetch(&o->folio[f2->index]);
    if (o->nvmas > 0) {                                   /* the first mapping's PTE */
        const struct vma *v = &e->vmas[o->vmas[0]];
        int64_t p = o->kind == OBJ_FILE ? vma_pte_index(v, f2->index) : f2->index;
        if (v->alive && p >= 0 && p < v->npages) __builtin_prefetch(&v->pte[p]);
    }
}

/* Drop the tail folio: unmap it everywhere, free it (no shadow: plain LRU keeps no history). */
static void lru_evict_tail(struct km_emu *e)
{
    folio_id id = e->lru[LRU_INACTIVE_FILE].tail;
    struct folio *f = &e->folios[id];
    struct object *o = &e->objs[f->obj];
    lru_prefetch_tail(e, f);
    lruvec_del_folio(e, id);
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

static int64_t lru_handle_range(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int write)
{
    (void)write;
    struct vma *v = &e->vmas[vi];
    struct object *o = &e->objs[v->obj];
    int file = o->kind == OBJ_FILE;
    int64_t base = file ? v->pgoff : 0;
    int64_t cap = e->total_pages ? e->total_pages : e->memcg_limit;
    struct lru_head *h = &e->lru[LRU_INACTIVE_FILE];
    count(e, VM_accesses, n);
    for (int64_t p = page; p < page + n; p++) {
        folio_id id = o->folio[base + p];
        if (id >= 0) {                                        /* hit: to the head */
            if (h->head != id) { lruvec_del_folio(e, id); lruvec_add_folio(e, id, LRU_INACTIVE_FILE); }
            if (!(v->pte[p] & PTE_PRESENT)) { e->folios[id].mapcount++; e->tasks[v->task].rss++; }
            v->pte[p] = PTE_PRESENT | PTE_YOUNG;
            continue;
        }
        count(e, VM_misses, 1);
        count(e, VM_pgfault, 1);
        count(e, VM_pgmajfault, 1);
        if (cap && e->used_pages >= cap) {
            if (h->tail < 0) return p - page;                 /* nothing to evict: memory too small */
            lru_evict_tail(e);
        }
        if (e->memcg_limit) e->memcg_usage++;
        id = folio_alloc(e, 0);
        struct folio *f = &e->folios[id];
        f->obj = v->obj;
        f->index = base + p;
        f->flags = file ? 0 : PG_swapbacked;
        f->mapcount = 1;
        o->folio[base + p] = id;
        o->nr_resident++;
        if (file) { o->pages_added++; count(e, VM_file_pages_added, 1); count(e, VM_pgpgin, 1); }
        lruvec_add_folio(e, id, LRU_INACTIVE_FILE);
        if (v->pte[p] & PTE_PRESENT) e->tasks[v->task].rss--;    /* the zero page, say */
        v->pte[p] = PTE_PRESENT | PTE_YOUNG;
        e->tasks[v->task].rss++;
    }
    return n;
}

const struct policy_ops lru_ops = {
    .handle_range = lru_handle_range,
    .name = "lru",
    .init = lru_init,
    .folio_add_lru = lru_add,
    .folio_accessed = lru_accessed,
    .reclaim = lru_reclaim,
};
