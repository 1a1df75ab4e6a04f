/*
 * mm/workingset.c's lru_gen half (CONFIG_LRU_GEN): a shadow entry holds the oldest generation's seq
 * at eviction and the folio's refs (lru_gen_eviction()); a refault is "recent" when that seq is still
 * the oldest (lru_gen_test_recent(), 6.1.y/6.6.y), and is counted in refaulted[][type][tier], the PID
 * controller's input (lru_gen_refault()). workingset_eviction() and workingset_refault() come here
 * when MGLRU is on. Shadows are packed as workingset.c packs them (bit 63 present, bit 62 the
 * pack_shadow() workingset bit, the token below), without the memcg and node ids (one of each).
 */
#include "lru_gen.h"

#define SHADOW_PRESENT (1ULL << 63)
#define SHADOW_WORKINGSET (1ULL << 62)
#define EVICTION_MASK (SHADOW_WORKINGSET - 1)

/* lru_gen_eviction(): token = (min_seq << LRU_REFS_WIDTH) | max(refs - 1, 0), and the eviction counted
 * in evicted[hist][type][tier] */
uint64_t lru_gen_eviction(struct km_emu *e, folio_id id)
{
    struct lru_gen_folio *g = e->lrugen;
    struct folio *f = &e->folios[id];
    int type = folio_is_file_lru(f);
    int delta = folio_nr_pages(f);
    int refs = folio_lru_refs(f);
    int tier = lru_tier_from_refs(refs);
    uint64_t min_seq = g->min_seq[type];
    uint64_t token = ((min_seq << LRU_REFS_WIDTH) | (uint64_t)(refs > 1 ? refs - 1 : 0)) & EVICTION_MASK;
    int hist = lru_hist_from_seq(min_seq);
    g->evicted[hist][type][tier] += delta;
    /* pack_shadow(memcg id, pgdat, token, refs): its workingset bit is refs != 0 */
    return SHADOW_PRESENT | (refs ? SHADOW_WORKINGSET : 0) | token;
}

/* lru_gen_test_recent(): evicted from the generation that is still the oldest of its type */
static int lru_gen_test_recent(const struct lru_gen_folio *g, uint64_t token, int type)
{
    return (token >> LRU_REFS_WIDTH) == (g->min_seq[type] & (EVICTION_MASK >> LRU_REFS_WIDTH));
}

/* lru_gen_refault(): the folio is being added back (before folio_add_lru()). A recent refault counts
 * in refaulted[hist][type][tier] and as WORKINGSET_ACTIVATE; in a fault (hotter pages pushed out hot
 * pages that refaulted at once) or with refs at the top (they would have been protected by
 * sort_folio()) it comes back with all refs and PG_workingset: WORKINGSET_RESTORE, and sort_folio()
 * protects it once (refs == BIT(LRU_REFS_WIDTH)). */
void lru_gen_refault(struct km_emu *e, folio_id id, uint64_t shadow)
{
    struct lru_gen_folio *g = e->lrugen;
    struct folio *f = &e->folios[id];
    int type = folio_is_file_lru(f);
    int delta = folio_nr_pages(f);
    uint64_t token = shadow & EVICTION_MASK;
    int workingset = (shadow & SHADOW_WORKINGSET) != 0;
    int recent = lru_gen_test_recent(g, token, type);
    count(e, type ? VM_workingset_refault_file : VM_workingset_refault_anon, delta);
    if (!recent) return;
    int hist = lru_hist_from_seq(g->min_seq[type]);
    /* see the comment in folio_lru_refs() */
    int refs = (int)(token & ((1 << LRU_REFS_WIDTH) - 1)) + workingset;
    int tier = lru_tier_from_refs(refs);
    g->refaulted[hist][type][tier] += delta;
    count(e, type ? VM_workingset_activate_file : VM_workingset_activate_anon, delta);
    /* Count the following two cases as stalls:
     * 1. For pages accessed through page tables, hotter pages pushed out hot pages which refaulted
     *    immediately.
     * 2. For pages accessed multiple times through file descriptors, they would have been protected
     *    by sort_folio(). */
    if (e->in_lru_fault || refs >= (1 << LRU_REFS_WIDTH) - 1) {
        f->flags |= LRU_REFS_MASK | PG_workingset;
        count(e, type ? VM_workingset_restore_file : VM_workingset_restore_anon, delta);
    }
}
