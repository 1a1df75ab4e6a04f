/* The page cache (mm/filemap.c): folios of a file, added by readahead and faults, removed by
 * reclaim with a shadow entry left behind for workingset refault detection. */
#include <stdlib.h>
#include <string.h>
#include "mm.h"

/* The i_pages xarray's leaf nodes (lib/xarray.c), slab objects charged to the memcg
 * (address_space_init_once(): XA_FLAGS_ACCOUNT). A leaf covers 64 pages and lives while any of its
 * slots holds a folio or a shadow entry. A folio of order >= 6 is one multi-index entry a level up
 * and needs no leaf, nor does its shadow; a smaller folio added inside such a shadow splits it
 * (__filemap_add_folio(): xas_split(), a leaf full of the old entry per 64 pages). The nodes above
 * the leaves (1/64 as many) are left out. */
static void xa_node_charge(struct km_emu *e, int64_t nr)
{
    e->nr_xa_nodes += nr;
    obj_cgroup_charge(e, nr * XA_NODE_BYTES);
}

static int xa_multi(int64_t index, int order)
{
    return order >= XA_CHUNK_SHIFT && !(index & ((1LL << order) - 1));
}

/* xas_store() of a new folio over [index, index + nr): nothing cached there, maybe shadows. */
static void xa_store_folio(struct km_emu *e, struct object *o, int64_t index, int order)
{
    uint8_t *leaf = o->xa_leaf;
    if (e->kmem_off) return;
    int64_t nr = 1LL << order;
    if (xa_multi(index, order)) {
        for (int64_t g = index >> XA_CHUNK_SHIFT; g < (index + nr) >> XA_CHUNK_SHIFT; g++) {
            if (leaf[g] && leaf[g] <= 64) xa_node_charge(e, -1);   /* the leaf it replaces */
            leaf[g] = XA_MULTI + order;
        }
        return;
    }
    for (int64_t i = index; i < index + nr; i++) {
        int64_t g = i >> XA_CHUNK_SHIFT;
        if (leaf[g] > 64) {                               /* xas_split() of a multi-index shadow */
            uint8_t old = leaf[g];
            int64_t n = 1LL << (old - XA_MULTI - XA_CHUNK_SHIFT), g0 = g & ~(n - 1);
            for (int64_t k = g0; k < g0 + n; k++)
                if (leaf[k] == old) { leaf[k] = 64; xa_node_charge(e, 1); }
        }
        if (o->folio[i] < 0 && !o->shadow[i] && leaf[g]++ == 0) xa_node_charge(e, 1);
    }
}

/* The folio's slots emptied (no shadow left: truncation). With a shadow nothing changes. */
static void xa_erase_folio(struct km_emu *e, struct object *o, int64_t index, int order)
{
    uint8_t *leaf = o->xa_leaf;
    if (e->kmem_off) return;
    int64_t nr = 1LL << order;
    if (xa_multi(index, order)) {
        for (int64_t g = index >> XA_CHUNK_SHIFT; g < (index + nr) >> XA_CHUNK_SHIFT; g++) leaf[g] = 0;
        return;
    }
    for (int64_t i = index; i < index + nr; i++)
        if (--leaf[i >> XA_CHUNK_SHIFT] == 0) xa_node_charge(e, -1);
}

/* filemap_add_folio(): allocate a folio of 1 << order pages at index, charge it, insert it, run
 * workingset_refault() on any shadow it replaces, and put it on the LRU. The caller has checked
 * that [index, index + nr) is not cached. Returns 0, or -1 when the allocation failed (OOM). */
int filemap_add_folio(struct km_emu *e, int32_t obj, int64_t index, int order, int readahead_mark, int noretry)
{
    int nr = 1 << order;
    int32_t task = e->cur_task;
    int r = alloc_pages_gfp(e, nr, noretry);
    if (r < 0) return r;
    if (task >= 0 && !e->tasks[task].alive) { mem_cgroup_uncharge(e, nr); return -1; }
    struct object *o = &e->objs[obj];
    /* reclaim cannot add pages, but be exact */
    if (!page_cache_range_empty(o->folio + index, nr)) { mem_cgroup_uncharge(e, nr); return 0; }
    folio_id id = folio_alloc(e, order);
    if (e->cfg.nr_threads > 1) {                 /* in the xarray once charged: the others see it from now */
        if (!e->added_at && !(e->added_at = malloc(sizeof(int64_t) * (size_t)e->cap_folios))) abort();
        e->added_at[id] = io_clock(e);
    }
    struct folio *f = &e->folios[id];
    f->obj = obj;
    f->index = index;
    /* locked until read: readahead's (noretry) until the call returns, or all until the device
     * has read them when storage takes time (bio.c) */
    f->flags = (readahead_mark ? PG_readahead : 0) | (noretry || e->io_on ? PG_locked : 0);
    if (e->io_on) bio_add_folio(e, id);
    if (o->weights) f->flags |= PG_weights;
    uint64_t shadow = 0;
    for (int i = nr - 1; i >= 0; i--)                  /* __filemap_add_folio: the last shadow */
        if (o->shadow[index + i]) { shadow = o->shadow[index + i]; break; }
    xa_store_folio(e, o, index, order);
    /* (separate loops: each is a plain fill the compiler vectorizes) */
    for (int i = 0; i < nr; i++) o->folio[index + i] = id;
    memset(o->shadow + index, 0, sizeof(uint64_t) * nr);
    o->nr_resident += nr;
    o->pages_added += nr;
    count(e, VM_file_folios_added, 1);          /* trace_mm_filemap_add_to_page_cache */
    count(e, VM_file_pages_added, nr);
    if (!order) count(e, VM_file_pages_added_order0, 1);   /* small folios: read-around, ramps, fallbacks */
    count(e, VM_pgpgin, nr);                      /* read from storage (folio is !uptodate) */
    if (shadow) workingset_refault(e, id, shadow);
    folio_add_lru(e, id);
    thread_yield(e);                              /* the other threads go on meanwhile */
    return 0;
}

/* __filemap_remove_folio() + the shadow from workingset_eviction() (0: no shadow, e.g. truncate). */
void filemap_remove_folio(struct km_emu *e, folio_id id, uint64_t shadow)
{
    struct folio *f = &e->folios[id];
    struct object *o = &e->objs[f->obj];
    int nr = folio_nr_pages(f);
    if (!shadow) xa_erase_folio(e, o, f->index, f->order);
    for (int i = 0; i < nr; i++) o->folio[f->index + i] = -1;      /* (two plain fills) */
    for (int i = 0; i < nr; i++) o->shadow[f->index + i] = shadow;
    o->nr_resident -= nr;
    o->pages_deleted += nr;
    count(e, VM_file_pages_deleted, nr);
}

/* clear_shadow_entries() (mm/truncate.c; invalidate_inode_pages2_range()'s, for the shadows among
 * the entries it found): every shadow entry of pages [start, end] is erased (xas_store(NULL)), a
 * multi-index one (a large folio's, order >= 6) whole, its sibling slots with it, also where it
 * reaches outside the range. The leaf nodes left empty are freed. */
void clear_shadow_entries(struct km_emu *e, int32_t obj, int64_t start, int64_t end)
{
    struct object *o = &e->objs[obj];
    if (end >= o->npages) end = o->npages - 1;
    for (int64_t p = start; p <= end; p++) {
        if (!o->shadow[p]) continue;
        int64_t g = p >> XA_CHUNK_SHIFT;
        uint8_t l = e->kmem_off ? 0 : o->xa_leaf[g];
        if (l > 64) {                                     /* a multi-index entry: all of it */
            int64_t nr = 1LL << (l - XA_MULTI), first = p & ~(nr - 1);
            int64_t last = first + nr < o->npages ? first + nr : o->npages;
            memset(o->shadow + first, 0, sizeof(uint64_t) * (size_t)(last - first));
            for (int64_t k = first >> XA_CHUNK_SHIFT; k <= (last - 1) >> XA_CHUNK_SHIFT; k++) o->xa_leaf[k] = 0;
            p = last - 1;
            continue;
        }
        o->shadow[p] = 0;
        if (!e->kmem_off && --o->xa_leaf[g] == 0) xa_node_charge(e, -1);
    }
}

/* filemap_read(): read(2) of pages [index, index + n): sync readahead on a miss, async readahead at
 * a marked folio, and folio_mark_accessed() once per folio (as pos_same_folio() allows). */
int64_t filemap_read(struct km_emu *e, int32_t obj, int64_t index, int64_t n)
{
    struct object *o = &e->objs[obj];
    folio_id last = -1;
    count(e, VM_accesses, n);
    for (int64_t p = index; p < index + n; p++) {
        folio_id f = e->objs[obj].folio[p];
        if (f < 0) {
            count(e, VM_misses, 1);
            uint64_t before = e->vm[VM_pgpgin];
            page_cache_sync_ra(e, obj, p, index + n - p);
            f = e->objs[obj].folio[p];
            if (f < 0) {
                if (filemap_add_folio(e, obj, p, 0, 0, 0) < 0) return p - index;
                f = e->objs[obj].folio[p];
                if (e->io_on) submit_read(e);            /* filemap_read_folio() */
            }
            count(e, VM_stall_read_ios, 1);
            count(e, VM_stall_read_pages, (int64_t)(e->vm[VM_pgpgin] - before));
        } else if (e->folios[f].flags & PG_readahead) {
            /* filemap_get_pages(): the batch's folios are referenced across page_cache_async_ra() */
            e->folios[f].flags |= PG_pinned;
            page_cache_async_ra(e, obj, f, p, index + n - p);
            e->folios[f].flags &= ~PG_pinned;
        }
        if (f >= 0 && f != last) folio_wait_locked(e, f);   /* filemap_update_page() */
        if (f >= 0 && f != last) {                   /* a reference by the trace, as a fault's is */
            if (e->policy->folio_accessed) e->policy->folio_accessed(e, f);
            else folio_mark_accessed(e, f);
        }
        last = f;
    }
    o = &e->objs[obj];
    o->ra.prev_pos = index + n - 1;
    return n;
}
