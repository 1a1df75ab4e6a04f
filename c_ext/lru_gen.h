/*
 * The multi-generational LRU's state (CONFIG_LRU_GEN, include/linux/mmzone.h: struct lru_gen_folio,
 * struct lru_gen_mm_state), private to lru_gen.c and workingset_lru_gen.c. mm.h holds what the rest
 * of the core sees: the folio flag bits (LRU_GEN_MASK, LRU_REFS_MASK), the list heads (LRU_GEN_BASE)
 * and the entry points.
 *
 * Modelled on Linux 6.6.y as Android 15's GKI (android15-6.6) builds it, read from the SM8750 tree
 * (872446136-source/android_kernel_common_oneplus_sm8750_xkse4 @ 27a341f8: mm/vmscan.c) with its
 * vendor hooks left out (trace_android_vh_*, anon_only, the workingset_protection sysctls,
 * oplus_context_swappiness); include/linux/mm_inline.h and mm/workingset.c as in 6.1.y/6.6.y after
 * "mm/mglru: fix underprotected page cache" (sort_folio() protects refs == BIT(LRU_REFS_WIDTH)).
 * NR_HIST_GENS is 1 (CONFIG_LRU_GEN_STATS off, as in GKI), one node, one zone, one memcg.
 */
#ifndef KMEMSIM_LRU_GEN_H
#define KMEMSIM_LRU_GEN_H
#include "mm.h"

#define MAX_NR_TIERS 4
#define NR_HIST_GENS 1
#define LRU_REFS_WIDTH 2            /* MAX_NR_TIERS - 2 */
#define MIN_LRU_BATCH 64            /* BITS_PER_LONG */
#define MAX_LRU_BATCH (MIN_LRU_BATCH * 64)
#define LRU_GEN_ANON 0
#define LRU_GEN_FILE 1
#define BLOOM_FILTER_SHIFT 15
#define NR_BLOOM_FILTERS 2
#define LRU_REFS_FLAGS (PG_referenced | PG_workingset)

struct lru_gen_folio {
    /* struct lru_gen_folio */
    uint64_t max_seq;
    uint64_t min_seq[2];
    int64_t timestamps[MAX_NR_GENS];            /* the birth of each generation (ns, the task clock) */
    int64_t nr_pages[MAX_NR_GENS][2];           /* pages per generation by the folios' gen bits */
    uint64_t avg_refaulted[2][MAX_NR_TIERS];    /* the PID controller's I term */
    uint64_t avg_total[2][MAX_NR_TIERS];
    uint64_t protected_[NR_HIST_GENS][2][MAX_NR_TIERS - 1];
    uint64_t evicted[NR_HIST_GENS][2][MAX_NR_TIERS];
    uint64_t refaulted[NR_HIST_GENS][2][MAX_NR_TIERS];
    int64_t min_ttl_ns;                         /* lru_gen_min_ttl (/sys/kernel/mm/lru_gen/min_ttl_ms) */
    /* struct lru_gen_mm_state + the memcg's lru_gen_mm_list: the tasks (mm_structs) in the order
     * they joined, and where the last complete iteration ended */
    uint64_t mm_seq;
    int32_t *mm_list; int32_t nr_mm;
    uint8_t *mm_listed;                         /* per task: on mm_list */
    uint64_t filters[NR_BLOOM_FILTERS][(1 << BLOOM_FILTER_SHIFT) / 64];
    int filter_on[NR_BLOOM_FILTERS];            /* filters[] allocated (reset_bloom_filter() ran) */
    /* current->reclaim_state->mm_walk: set_mm_walk() gave this reclaimer a walk (kswapd always; others
     * once try_to_inc_max_seq() allocated one), until clear_mm_walk() */
    int have_walk;
    int32_t *vma_order; int32_t cap_vma_order;  /* walk scratch: the vmas bucketed by task */
    int32_t *task_first;                        /* [nr_tasks + 1] */
    /* what the kernel shows only through debugfs and tracepoints, kept for Result.lru_gen */
    int64_t nr_aging, nr_mm_walks, nr_tables_walked, nr_tables_filtered, nr_walk_young;
    int64_t nr_look_around, nr_look_around_young, nr_min_ttl_oom;
    int64_t nr_pid_choice[2];                   /* get_type_to_scan() chose anon, file */
    int64_t nr_anon_behind;                     /* isolate_folios(): anon first, min_seq[anon] < min_seq[file] */
    int64_t nr_type_fallback;                   /* isolate_folios(): the first type had nothing to isolate */
};

static inline int lru_gen_from_seq(uint64_t seq) { return (int)(seq % MAX_NR_GENS); }
static inline int lru_hist_from_seq(uint64_t seq) { return (int)(seq % NR_HIST_GENS); }
static inline int order_base_2(int n) { int r = 0; while ((1 << r) < n) r++; return r; }
/* lru_tier_from_refs(): see the comment in folio_lru_refs() */
static inline int lru_tier_from_refs(int refs) { return order_base_2(refs + 1); }
/* folio_lru_refs(): accesses through file descriptors beyond PG_referenced */
static inline int folio_lru_refs(const struct folio *f)
{
    return ((f->flags & LRU_REFS_MASK) >> LRU_REFS_PGOFF) + !!(f->flags & PG_workingset);
}
static inline int folio_lru_gen(const struct folio *f)
{
    return ((f->flags & LRU_GEN_MASK) >> LRU_GEN_PGOFF) - 1;
}
static inline int get_nr_gens(const struct lru_gen_folio *g, int type)
{
    return (int)(g->max_seq - g->min_seq[type] + 1);
}

#endif
