/* Hints and locks: madvise (mm/madvise.c), fadvise (mm/fadvise.c), mlock (mm/mlock.c). */
#include <stdlib.h>
#include "mm.h"

/* madvise_cold_or_pageout_pte_range(): clear young bits and PG_referenced of folios this vma maps
 * exclusively; COLD deactivates them, PAGEOUT reclaims them (reclaim_pages()). */
static void madvise_cold_or_pageout(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int pageout)
{
    struct vma *v = &e->vmas[vi];
    folio_id *list = NULL;
    int64_t nlist = 0, cap = 0;
    folio_id last = -1;
    for (int64_t p = page; p < page + n; p++) {
        uint8_t pte = v->pte[p];
        if (!(pte & PTE_PRESENT) || (pte & PTE_ZERO)) continue;
        struct object *o = &e->objs[(pte & PTE_ANON) ? v->anon : v->obj];
        folio_id f = o->folio[(pte & PTE_ANON) ? p : v->pgoff + p];
        if (f < 0 || f == last) continue;
        last = f;
        struct folio *fo = &e->folios[f];
        v->pte[p] = pte & ~PTE_YOUNG;
        if (fo->lru == NO_LRU || (fo->flags & PG_unevictable) || fo->mapcount > folio_nr_pages(fo))
            continue;                                    /* not exclusively ours: leave it */
        fo->flags &= ~PG_referenced;
        if (pageout) {
            if (nlist == cap) {
                folio_id *l = realloc(list, sizeof(folio_id) * (size_t)(cap ? 2 * cap : 64));
                if (!l) { e->nomem = 1; break; }          /* km_replay() fails with "out of memory" */
                list = l;
                cap = cap ? 2 * cap : 64;
            }
            list[nlist++] = f;
        } else {
            folio_deactivate(e, f);
        }
    }
    if (nlist) reclaim_pages(e, list, nlist);
    free(list);
}

void do_madvise(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int advice)
{
    struct vma *v = &e->vmas[vi];
    switch (advice) {
    case ADV_NORMAL: v->flags &= ~(VM_SEQ_READ | VM_RAND_READ); break;
    case ADV_RANDOM: v->flags = (v->flags & ~VM_SEQ_READ) | VM_RAND_READ; break;
    case ADV_SEQUENTIAL: v->flags = (v->flags & ~VM_RAND_READ) | VM_SEQ_READ; break;
    case ADV_WILLNEED:
        /* madvise_willneed(): file mappings go through vfs_fadvise(POSIX_FADV_WILLNEED) */
        if (e->objs[v->obj].kind == OBJ_FILE) force_page_cache_ra(e, v->obj, v->pgoff + page, n);
        break;
    case ADV_DONTNEED: zap_page_range(e, vi, page, n, 1); break;
    case ADV_COLD: madvise_cold_or_pageout(e, vi, page, n, 0); break;
    case ADV_PAGEOUT: madvise_cold_or_pageout(e, vi, page, n, 1); break;
    default: break;
    }
}

/* generic_fadvise() */
void generic_fadvise(struct km_emu *e, int32_t obj, int64_t page, int64_t n, int advice)
{
    struct object *o = &e->objs[obj];
    switch (advice) {
    case ADV_NORMAL: o->ra.ra_pages = e->cfg.ra_pages; o->fmode_random = 0; break;
    case ADV_RANDOM: o->fmode_random = 1; break;
    case ADV_SEQUENTIAL: o->ra.ra_pages = e->cfg.ra_pages * 2; o->fmode_random = 0; break;
    case ADV_WILLNEED: force_page_cache_ra(e, obj, page, n); break;
    case ADV_DONTNEED:
        /* invalidate_mapping_pages(): drop clean, unmapped folios (no shadow: not reclaim) */
        for (int64_t p = page; p < page + n; p++) {
            folio_id f = o->folio[p];
            if (f < 0 || e->folios[f].mapcount > 0 || (e->folios[f].flags & (PG_unevictable | PG_locked))) continue;
            lruvec_del_folio(e, f);
            filemap_remove_folio(e, f, 0);
            folio_free(e, f);
        }
        break;
    default: break;
    }
}

/* mlock_range(): locked pages are faulted in and moved to the unevictable list; munlock puts
 * them back on the inactive list. (We lock whole folios the range touches.) */
void mlock_range(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int lock)
{
    struct vma *v = &e->vmas[vi];
    if (lock) {
        v->flags |= MAP_F_LOCKED;
        handle_range(e, vi, page, n, vma_populate_write(v) ? FAULT_WRITE_ZERO : FAULT_READ);   /* mlock faults pages in */
        v = &e->vmas[vi];
        if (!v->alive) return;
    } else {
        v->flags &= ~MAP_F_LOCKED;
    }
    for (int64_t p = page; p < page + n; p++) {
        uint8_t pte = v->pte[p];
        if (!(pte & PTE_PRESENT) || (pte & PTE_ZERO)) continue;
        struct object *o = &e->objs[(pte & PTE_ANON) ? v->anon : v->obj];
        folio_id f = o->folio[(pte & PTE_ANON) ? p : v->pgoff + p];
        if (f < 0) continue;
        struct folio *fo = &e->folios[f];
        if (lock == !!(fo->flags & PG_unevictable)) continue;
        lruvec_del_folio(e, f);
        if (lock) fo->flags |= PG_unevictable;
        else fo->flags &= ~(PG_unevictable | PG_active);
        lruvec_add_folio(e, f, folio_lru_list(fo));
    }
}
