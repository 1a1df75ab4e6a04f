/* Plain LRU, for cross-checks against libCacheSim: one list, no anon/file split, no swap, no
 * readahead or fault-around, no watermarks; every reference moves a page to the head and a full
 * memory evicts exactly the tail. Anonymous pages are dropped like clean pages. */
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

const struct policy_ops lru_ops = {
    .name = "lru",
    .init = lru_init,
    .folio_add_lru = lru_add,
    .folio_accessed = lru_accessed,
    .reclaim = lru_reclaim,
};
