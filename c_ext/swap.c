/* LRU list handling (mm/swap.c, include/linux/mm_inline.h). */
#include "mm.h"

/* folio_add_lru() -> lru_add(): new folios join the inactive list of their type (anon too, since
 * 5.9) unless refault activation set PG_active. A policy may choose the list. */
void folio_add_lru(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    /* MGLRU: a folio added in a fault is hot, the youngest generation (see lru_gen_add_folio()) */
    if (e->lru_gen_enabled && e->in_lru_fault && !(f->flags & PG_unevictable)) f->flags |= PG_active;
    int lru = e->policy->folio_add_lru ? e->policy->folio_add_lru(e, f) : -1;
    lruvec_add_folio(e, id, lru >= 0 ? lru : folio_lru_list(f));
}

static void folio_activate(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    if (f->lru == NO_LRU || (f->flags & (PG_active | PG_unevictable))) return;
    lruvec_del_folio(e, id);
    f->flags |= PG_active;
    lruvec_add_folio(e, id, folio_lru_list(f));
    count(e, VM_pgactivate, folio_nr_pages(f));
}

/* folio_mark_accessed(): inactive,unreferenced -> inactive,referenced -> active,unreferenced ->
 * active,referenced. Used for read(2), munmap of young PTEs and GUP (MAP_POPULATE). */
void folio_mark_accessed(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    if (e->lru_gen_enabled) { lru_gen_inc_refs(e, id); return; }   /* folio_inc_refs() */
    if (f->flags & PG_unevictable) return;
    if (!(f->flags & PG_referenced)) {
        f->flags |= PG_referenced;
    } else if (!(f->flags & PG_active)) {
        folio_activate(e, id);
        f->flags &= ~PG_referenced;
        workingset_age_nonresident(e, folio_nr_pages(f));   /* workingset_activation() */
    }
}

/* folio_deactivate() -> lru_deactivate(): MADV_COLD moves a folio to the inactive head. */
void folio_deactivate(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    if (f->lru == NO_LRU || (f->flags & PG_unevictable)) return;
    int was_active = f->flags & PG_active;
    lruvec_del_folio(e, id);
    f->flags &= ~(PG_active | PG_referenced);
    lruvec_add_folio(e, id, folio_lru_list(f));
    if (was_active || e->lru_gen_enabled) count(e, VM_pgdeactivate, folio_nr_pages(f));   /* MGLRU: every one */
}

/* lru_note_cost(): the scan balance's memory of recent I/O and rotations, decayed when the costs
 * exceed a quarter of the LRU. */
void lru_note_cost(struct km_emu *e, int file, int64_t nr_io, int64_t nr_rotated)
{
    int64_t cost = nr_io * SWAP_CLUSTER_MAX + nr_rotated;
    if (file) e->file_cost += cost; else e->anon_cost += cost;
    int64_t lrusize = lruvec_page_state(e, LRU_INACTIVE_ANON) + lruvec_page_state(e, LRU_ACTIVE_ANON) +
                      lruvec_page_state(e, LRU_INACTIVE_FILE) + lruvec_page_state(e, LRU_ACTIVE_FILE);
    if (e->file_cost + e->anon_cost > lrusize / 4) {
        e->file_cost /= 2;
        e->anon_cost /= 2;
    }
}

/* lru_note_cost_refault() */
void lru_note_cost_refault(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    lru_note_cost(e, folio_is_file_lru(f), folio_nr_pages(f), 0);
}
