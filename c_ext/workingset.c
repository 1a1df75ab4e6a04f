/* Workingset detection (mm/workingset.c): shadow entries and refault distance. */
#include "mm.h"

#define SHADOW_PRESENT (1ULL << 63)
#define SHADOW_WORKINGSET (1ULL << 62)

void workingset_age_nonresident(struct km_emu *e, int64_t nr) { e->nonresident_age += nr; }

/* workingset_eviction(): remember when the folio left (bucket_order 0: we have the bits). */
uint64_t workingset_eviction(struct km_emu *e, folio_id id)
{
    if (e->lru_gen_enabled) return lru_gen_eviction(e, id);    /* workingset_lru_gen.c */
    struct folio *f = &e->folios[id];
    uint64_t eviction = e->nonresident_age & ~(SHADOW_PRESENT | SHADOW_WORKINGSET);
    workingset_age_nonresident(e, folio_nr_pages(f));
    return SHADOW_PRESENT | (f->flags & PG_workingset ? SHADOW_WORKINGSET : 0) | eviction;
}

/* workingset_test_recent(): could the folio have stayed resident had all the memory the
 * workingset competes for been given to the inactive list? */
static int workingset_test_recent(struct km_emu *e, uint64_t shadow, int file)
{
    uint64_t eviction = shadow & ~(SHADOW_PRESENT | SHADOW_WORKINGSET);
    uint64_t refault_distance = e->nonresident_age - eviction;
    int64_t workingset_size = lruvec_page_state(e, LRU_ACTIVE_FILE);
    if (!file) workingset_size += lruvec_page_state(e, LRU_INACTIVE_FILE);
    if (mem_cgroup_get_nr_swap_pages(e) > 0) {
        workingset_size += lruvec_page_state(e, LRU_ACTIVE_ANON);
        if (file) workingset_size += lruvec_page_state(e, LRU_INACTIVE_ANON);
    }
    return refault_distance <= (uint64_t)workingset_size;
}

/* workingset_refault(): called as the folio is added back, before it joins the LRU. */
void workingset_refault(struct km_emu *e, folio_id id, uint64_t shadow)
{
    if (e->lru_gen_enabled) { lru_gen_refault(e, id, shadow); return; }   /* workingset_lru_gen.c */
    struct folio *f = &e->folios[id];
    int file = folio_is_file_lru(f);
    int nr = folio_nr_pages(f);
    count(e, file ? VM_workingset_refault_file : VM_workingset_refault_anon, nr);
    int recent = workingset_test_recent(e, shadow, file);
    if (e->policy->refault) {
        int v = e->policy->refault(e, id, recent);
        if (v >= 0) recent = v;
    }
    if (!recent) return;
    f->flags |= PG_active;
    workingset_age_nonresident(e, nr);
    count(e, file ? VM_workingset_activate_file : VM_workingset_activate_anon, nr);
    if (shadow & SHADOW_WORKINGSET) {                   /* folio was active before eviction */
        f->flags |= PG_workingset;
        lru_note_cost_refault(e, id);
        count(e, file ? VM_workingset_restore_file : VM_workingset_restore_anon, nr);
    }
}
