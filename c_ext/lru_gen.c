/*
 * The multi-generational LRU (CONFIG_LRU_GEN): mm/vmscan.c's lru_gen half, include/linux/mm_inline.h's
 * lru_gen_add_folio()/lru_gen_del_folio() and mm/swap.c's folio_inc_refs() (workingset_lru_gen.c
 * holds mm/workingset.c's half). lru_gen.h says which kernel it follows; docs/mglru.md what is
 * modelled and what is simplified. Each function carries its kernel counterpart's name.
 *
 * Where it plugs in (the hooks, each a line or two): lruvec_add_folio()/lruvec_del_folio() (mm.h)
 * dispatch to the generations; shrink_node() (vmscan.c) to lru_gen_shrink_node(); balance_pgdat() calls
 * lru_gen_age_node() (kswapd_age_node()); folio_referenced() walks a folio's PTEs through
 * lru_gen_look_around(); folio_mark_accessed() becomes folio_inc_refs(); folio_add_lru() makes a
 * folio added in a fault active (youngest generation); handle_mm_fault() sets in_lru_fault;
 * workingset_eviction()/workingset_refault() go to lru_gen_eviction()/lru_gen_refault().
 *
 * Simplifications (also at their code): one node, one zone, one memcg (the memcg LRU of shrink_many()
 * is the one lruvec; no memory.min/low protection); should_skip_mm()'s per-mm bitmap, set when a task
 * is scheduled, is taken as set for every live task (a task that has not run since the last walk has
 * no young PTE the walk could find), and its size test uses the task's rss (file and anon together);
 * the mm list is the live tasks in the order the walks first found them; walks and look-arounds
 * update a folio's generation size at once, not in walk->nr_pages batches (the totals match at the
 * end of each evict_folios()/walk_mm()); the non-leaf PMD accessed bit is not modelled
 * (should_clear_pmd_young() false, as on arm64); no dirty or writeback file folios (PG_reclaim has
 * no use); the per-cpu folio_activate() batch is applied at once; the aging's own CPU time is not
 * charged to the task.
 */
#include <stdlib.h>
#include <string.h>
#include "lru_gen.h"

static const int scan_item[] = { VM_pgscan_kswapd, VM_pgscan_direct, VM_pgscan_memcg };
static const int steal_item[] = { VM_pgsteal_kswapd, VM_pgsteal_direct, VM_pgsteal_memcg };

/****************************************************************************************************
 *                          the lists (list_add(), list_move() on lrugen->folios[gen][type])
 ****************************************************************************************************/

static inline void gen_list_add(struct km_emu *e, folio_id id, int l, int tail)
{
    struct folio *f = &e->folios[id];
    struct lru_head *h = &e->lru[l];
    struct lru_link *k = &e->links[id];
    f->lru = (uint8_t)l;
    if (tail) {
        k->next = -1;
        k->prev = h->tail;
        if (h->tail >= 0) e->links[h->tail].next = id; else h->head = id;
        h->tail = id;
    } else {
        k->prev = -1;
        k->next = h->head;
        if (h->head >= 0) e->links[h->head].prev = id; else h->tail = id;
        h->head = id;
    }
    h->nr_pages += folio_nr_pages(f);
}

static inline void gen_list_del(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    struct lru_head *h = &e->lru[f->lru];
    struct lru_link *k = &e->links[id];
    if (k->prev >= 0) e->links[k->prev].next = k->next; else h->head = k->next;
    if (k->next >= 0) e->links[k->next].prev = k->prev; else h->tail = k->prev;
    h->nr_pages -= folio_nr_pages(f);
    f->lru = NO_LRU;
    k->prev = k->next = -1;
}

/* list_move() (head) and list_move_tail() to generation gen's list of the folio's type */
static inline void gen_list_move(struct km_emu *e, folio_id id, int gen, int tail)
{
    gen_list_del(e, id);
    gen_list_add(e, id, LRU_GEN_LIST(gen, folio_is_file_lru(&e->folios[id])), tail);
}

/****************************************************************************************************
 *                          include/linux/mm_inline.h
 ****************************************************************************************************/

/* lru_gen_is_active(): the two youngest generations count as active (see the comment on MIN_NR_GENS) */
static inline int lru_gen_is_active(const struct lru_gen_folio *g, int gen)
{
    return gen == lru_gen_from_seq(g->max_seq) || gen == lru_gen_from_seq(g->max_seq - 1);
}

/* lru_gen_update_size(): the generation's size and the active/inactive sizes kept for compatibility
 * (e->lru[LRU_*].nr_pages, what /proc/vmstat, memory.stat and lmkd read) */
static void lru_gen_update_size(struct km_emu *e, const struct folio *f, int old_gen, int new_gen)
{
    struct lru_gen_folio *g = e->lrugen;
    int type = folio_is_file_lru(f);
    int delta = folio_nr_pages(f);
    int lru = type * LRU_INACTIVE_FILE;
    if (old_gen >= 0) g->nr_pages[old_gen][type] -= delta;
    if (new_gen >= 0) g->nr_pages[new_gen][type] += delta;
    if (old_gen < 0) {                                   /* addition */
        e->lru[lru + (lru_gen_is_active(g, new_gen) ? LRU_ACTIVE : 0)].nr_pages += delta;
        return;
    }
    if (new_gen < 0) {                                   /* deletion */
        e->lru[lru + (lru_gen_is_active(g, old_gen) ? LRU_ACTIVE : 0)].nr_pages -= delta;
        return;
    }
    if (!lru_gen_is_active(g, old_gen) && lru_gen_is_active(g, new_gen)) {   /* promotion */
        e->lru[lru].nr_pages -= delta;
        e->lru[lru + LRU_ACTIVE].nr_pages += delta;
    }
    /* demotion requires isolation, e.g., lru_deactivate_fn() */
}

/* lru_gen_add_folio(): which generation a folio joins. Called for every evictable folio
 * lruvec_add_folio() or lruvec_add_folio_tail() (reclaiming) puts on the LRU with MGLRU on. */
void lru_gen_add_folio(struct km_emu *e, folio_id id, int reclaiming)
{
    struct lru_gen_folio *g = e->lrugen;
    struct folio *f = &e->folios[id];
    int type = folio_is_file_lru(f);
    uint64_t seq;
    /*
     * There are four common cases for this page:
     * 1. If it's hot, i.e., freshly faulted in, add it to the youngest generation, and it's protected
     *    over the rest below.
     * 2. If it can't be evicted immediately, i.e., a dirty page pending writeback, add it to the
     *    second youngest generation. (Anon folios outside the swap cache: zram skips the swap cache,
     *    so every anon folio here.)
     * 3. If it should be evicted first, e.g., cold and clean from folio_rotate_reclaimable(), add it
     *    to the oldest generation.
     * 4. Everything else falls between 2 & 3 above and is added to the second oldest generation if
     *    it's considered inactive, or the oldest generation otherwise. See lru_gen_is_active().
     */
    if (f->flags & PG_active)
        seq = g->max_seq;
    else if (type == LRU_GEN_ANON)
        seq = g->max_seq - 1;
    else if (reclaiming || g->min_seq[type] + MIN_NR_GENS >= g->max_seq)
        seq = g->min_seq[type];
    else
        seq = g->min_seq[type] + 1;
    int gen = lru_gen_from_seq(seq);
    /* see the comment on MIN_NR_GENS about PG_active */
    f->flags = (uint16_t)((f->flags & ~(LRU_GEN_MASK | PG_active)) | ((gen + 1) << LRU_GEN_PGOFF));
    lru_gen_update_size(e, f, -1, gen);
    gen_list_add(e, id, LRU_GEN_LIST(gen, type), reclaiming);
}

/* lru_gen_del_folio(): off its generation; not reclaiming (migration, mlock, MADV_COLD, unmap), a
 * folio of an active generation leaves with PG_active (for folio_migrate_flags()). */
void lru_gen_del_folio(struct km_emu *e, folio_id id, int reclaiming)
{
    struct folio *f = &e->folios[id];
    int gen = folio_lru_gen(f);
    int flags = !reclaiming && lru_gen_is_active(e->lrugen, gen) ? PG_active : 0;
    f->flags = (uint16_t)((f->flags & ~LRU_GEN_MASK) | flags);
    lru_gen_update_size(e, f, gen, -1);
    gen_list_del(e, id);
}

/****************************************************************************************************
 *                          mm/swap.c
 ****************************************************************************************************/

/* folio_inc_refs(): folio_mark_accessed() with MGLRU (read(2), munmap of a young PTE, GUP). The first
 * access sets PG_referenced, the second PG_workingset, then LRU_REFS counts up to 3; the tier is
 * lru_tier_from_refs(). No list moves. */
void lru_gen_inc_refs(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    if (f->flags & PG_unevictable) return;
    if (!(f->flags & PG_referenced)) { f->flags |= PG_referenced; return; }
    if (!(f->flags & PG_workingset)) { f->flags |= PG_workingset; return; }
    /* see the comment on MAX_NR_TIERS */
    if ((f->flags & LRU_REFS_MASK) == LRU_REFS_MASK) return;
    f->flags = (uint16_t)(f->flags + (1 << LRU_REFS_PGOFF));
}

/* folio_activate() -> folio_activate_fn(): to the youngest generation now (the kernel's per-cpu batch
 * is applied at once) */
static void folio_activate(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    if (f->lru == NO_LRU || (f->flags & (PG_active | PG_unevictable))) return;
    lruvec_del_folio(e, id);
    f->flags |= PG_active;
    lruvec_add_folio(e, id, 0);
    count(e, VM_pgactivate, folio_nr_pages(f));
}

/****************************************************************************************************
 *                          shorthand helpers (mm/vmscan.c)
 ****************************************************************************************************/

static int can_reclaim_anon_pages(struct km_emu *e) { return mem_cgroup_get_nr_swap_pages(e) > 0; }

/* get_swappiness(): 0 when anon cannot be reclaimed (fewer than MIN_LRU_BATCH swap slots free) */
static int get_swappiness(struct km_emu *e, struct scan_control *sc)
{
    if (!sc->may_swap) return 0;
    if (mem_cgroup_get_nr_swap_pages(e) < MIN_LRU_BATCH) return 0;
    return e->cfg.swappiness;
}

/* The task's own reclaim time (vmscan.c's reclaim_time()) */
static void reclaim_time(struct km_emu *e, int64_t ns)
{
    task_time(e, ns);
    count(e, VM_stall_reclaim_ns, ns);
}

/****************************************************************************************************
 *                          Bloom filters
 ****************************************************************************************************/

/* get_item_key(): hash_ptr(pmd, 30) split in two 15-bit keys. The item is the PTE table, the PMD
 * entry pointing to it: here (vma, its 2 MiB range), each vma having tables of its own. */
static void get_item_key(int32_t vi, int64_t pmd, int key[2])
{
    uint64_t item = ((uint64_t)(uint32_t)vi << 32) ^ (uint64_t)pmd;
    uint32_t hash = (uint32_t)((item * 0x61C8864680B583EBULL) >> (64 - BLOOM_FILTER_SHIFT * 2));
    key[0] = (int)(hash & ((1u << BLOOM_FILTER_SHIFT) - 1));
    key[1] = (int)(hash >> BLOOM_FILTER_SHIFT);
}

static int filter_gen_from_seq(uint64_t seq) { return (int)(seq % NR_BLOOM_FILTERS); }

/* test_bloom_filter(): a filter not allocated yet lets everything through */
static int test_bloom_filter(const struct lru_gen_folio *g, uint64_t seq, int32_t vi, int64_t pmd)
{
    int gen = filter_gen_from_seq(seq), key[2];
    if (!g->filter_on[gen]) return 1;
    get_item_key(vi, pmd, key);
    return ((g->filters[gen][key[0] >> 6] >> (key[0] & 63)) & 1) &&
           ((g->filters[gen][key[1] >> 6] >> (key[1] & 63)) & 1);
}

static void update_bloom_filter(struct lru_gen_folio *g, uint64_t seq, int32_t vi, int64_t pmd)
{
    int gen = filter_gen_from_seq(seq), key[2];
    if (!g->filter_on[gen]) return;
    get_item_key(vi, pmd, key);
    g->filters[gen][key[0] >> 6] |= 1ULL << (key[0] & 63);
    g->filters[gen][key[1] >> 6] |= 1ULL << (key[1] & 63);
}

static void reset_bloom_filter(struct lru_gen_folio *g, uint64_t seq)
{
    int gen = filter_gen_from_seq(seq);
    memset(g->filters[gen], 0, sizeof g->filters[gen]);
    g->filter_on[gen] = 1;
}

/****************************************************************************************************
 *                          PID controller
 ****************************************************************************************************/

/* The P term is refaulted/(evicted+protected) from a tier in the generation currently being evicted;
 * the I term is the exponential moving average of the P term over the generations previously
 * evicted, using the smoothing factor 1/2; no D term. The setpoint (SP) is always the first tier of
 * one type; the process variable (PV) is either any tier of the other type or any other tier of the
 * same type. */
struct ctrl_pos { uint64_t refaulted, total; int gain; };

/* read_ctrl_pos() */
static void read_ctrl_pos(const struct lru_gen_folio *g, int type, int tier, int gain, struct ctrl_pos *pos)
{
    int hist = lru_hist_from_seq(g->min_seq[type]);
    pos->refaulted = g->avg_refaulted[type][tier] + g->refaulted[hist][type][tier];
    pos->total = g->avg_total[type][tier] + g->evicted[hist][type][tier];
    if (tier) pos->total += g->protected_[hist][type][tier - 1];
    pos->gain = gain;
}

/* reset_ctrl_pos(): carried over into the averages as min_seq moves on; with NR_HIST_GENS 1 the
 * counters start again from zero */
static void reset_ctrl_pos(struct lru_gen_folio *g, int type, int carryover)
{
    int clear = carryover ? NR_HIST_GENS == 1 : NR_HIST_GENS > 1;
    uint64_t seq = carryover ? g->min_seq[type] : g->max_seq + 1;
    if (!carryover && !clear) return;
    int hist = lru_hist_from_seq(seq);
    for (int tier = 0; tier < MAX_NR_TIERS; tier++) {
        if (carryover) {
            g->avg_refaulted[type][tier] = (g->avg_refaulted[type][tier] + g->refaulted[hist][type][tier]) / 2;
            uint64_t sum = g->avg_total[type][tier] + g->evicted[hist][type][tier];
            if (tier) sum += g->protected_[hist][type][tier - 1];
            g->avg_total[type][tier] = sum / 2;
        }
        if (clear) {
            g->refaulted[hist][type][tier] = 0;
            g->evicted[hist][type][tier] = 0;
            if (tier) g->protected_[hist][type][tier - 1] = 0;
        }
    }
}

/* positive_ctrl_err(): the PV has a limited number of refaults or a lower refaulted/total than the SP */
static int positive_ctrl_err(const struct ctrl_pos *sp, const struct ctrl_pos *pv)
{
    return pv->refaulted < MIN_LRU_BATCH ||
           pv->refaulted * (sp->total + MIN_LRU_BATCH) * (uint64_t)sp->gain <=
           (sp->refaulted + 1) * pv->total * (uint64_t)pv->gain;
}

/****************************************************************************************************
 *                          the aging
 ****************************************************************************************************/

/* folio_update_gen(): promote a folio accessed through page tables, lazily: its gen bits change, it
 * stays where it is on its list until sort_folio() or inc_min_seq() meets it. An isolated folio
 * gets PG_referenced instead (for shrink_folio_list()). Returns the old generation or -1. */
static int folio_update_gen(struct km_emu *e, folio_id id, int gen)
{
    struct folio *f = &e->folios[id];
    int old_gen = folio_lru_gen(f);
    if (old_gen < 0) {                   /* lru_gen_del_folio() has isolated this page? */
        f->flags |= PG_referenced;
        return -1;
    }
    f->flags = (uint16_t)((f->flags & ~(LRU_GEN_MASK | LRU_REFS_MASK | LRU_REFS_FLAGS)) | ((gen + 1) << LRU_GEN_PGOFF));
    if (old_gen != gen) lru_gen_update_size(e, f, old_gen, gen);   /* update_batch_size() */
    return old_gen;
}

/* folio_inc_gen(): protect a folio accessed multiple times through file descriptors (or one under
 * read): to min_seq + 1, its refs cleared; a folio folio_update_gen() promoted keeps its generation. */
static int folio_inc_gen(struct km_emu *e, folio_id id)
{
    struct lru_gen_folio *g = e->lrugen;
    struct folio *f = &e->folios[id];
    int type = folio_is_file_lru(f);
    int old_gen = lru_gen_from_seq(g->min_seq[type]);
    int new_gen = folio_lru_gen(f);
    if (new_gen >= 0 && new_gen != old_gen) return new_gen;   /* folio_update_gen() has promoted this page? */
    new_gen = (old_gen + 1) % MAX_NR_GENS;
    f->flags = (uint16_t)((f->flags & ~(LRU_GEN_MASK | LRU_REFS_MASK | LRU_REFS_FLAGS)) | ((new_gen + 1) << LRU_GEN_PGOFF));
    lru_gen_update_size(e, f, old_gen, new_gen);
    return new_gen;
}

/* suitable_to_scan(): the average number of young PTEs per cache line (8 PTEs) is >= 1 */
static int suitable_to_scan(int64_t total, int64_t young) { return young * 8 >= total; }

#define BYTES(x) (0x0101010101010101ULL * (x))

/* The folio a present PTE maps (get_pte_pfn() + get_pfn_folio()): -1 for none, or for an anon folio
 * (a COW page in a file vma too) when anon cannot be reclaimed. */
static inline folio_id pte_folio(const struct km_emu *e, const struct vma *v, int64_t p, uint8_t pte, int can_swap)
{
    folio_id t = (pte & PTE_ANON) ? e->objs[v->anon].folio[p] : e->objs[v->obj].folio[v->pgoff + p];
    if (t >= 0 && !can_swap && !folio_is_file_lru(&e->folios[t])) return -1;
    return t;
}

/* walk_pte_range(): the PTE table of vma range [base, end): clear each young PTE and move its folio
 * to the generation of max_seq. Returns suitable_to_scan(). */
static int walk_pte_range(struct km_emu *e, int32_t vi, int64_t base, int64_t end, int new_gen, int can_swap)
{
    struct vma *v = &e->vmas[vi];
    uint8_t *pte = v->pte;
    int64_t young = 0;
    for (int64_t i = base; i < end;) {
        if (i + 8 <= end && !(i & 7)) {                   /* eight PTEs at a time: none young, skip */
            uint64_t w;
            memcpy(&w, pte + i, 8);
            uint64_t y = w & (w >> 1) & ~(w >> 4) & BYTES(1);   /* present, young, not the zero page */
            if (!y) { i += 8; continue; }
        }
        uint8_t b = pte[i];
        if ((b & (PTE_PRESENT | PTE_YOUNG | PTE_ZERO)) == (PTE_PRESENT | PTE_YOUNG)) {
            folio_id t = pte_folio(e, v, i, b, can_swap);
            if (t >= 0) {
                pte[i] = b & ~PTE_YOUNG;                 /* ptep_test_and_clear_young() */
                young++;
                folio_update_gen(e, t, new_gen);
            }
        }
        i++;
    }
    e->lrugen->nr_walk_young += young;
    return suitable_to_scan(end - base, young);
}

/* should_skip_vma(): no recency (MADV_SEQUENTIAL/RANDOM), VM_LOCKED, anonymous without swap */
static int should_skip_vma(const struct vma *v, int can_swap)
{
    if (v->flags & (VM_SEQ_READ | VM_RAND_READ | MAP_F_LOCKED)) return 1;
    if (v->anon == v->obj) return !can_swap;
    return 0;
}

/* walk_mm() -> walk_pud_range() -> walk_pmd_range(): a task's page tables. A PTE table is walked only
 * if the Bloom filter of max_seq holds it (unless force_scan), and carried over to max_seq + 1's if
 * it had young PTEs enough; a PMD-mapped folio is looked at by its PMD's young bit
 * (walk_pmd_range_locked()). The non-leaf PMD accessed bit (should_clear_pmd_young()) is not
 * modelled: as on arm64. */
static void walk_mm(struct km_emu *e, int32_t task, uint64_t max_seq, int can_swap, int force_scan)
{
    struct lru_gen_folio *g = e->lrugen;
    int new_gen = lru_gen_from_seq(max_seq);
    g->nr_mm_walks++;
    for (int32_t k = g->task_first[task]; k < g->task_first[task + 1]; k++) {
        int32_t vi = g->vma_order[k];
        struct vma *v = &e->vmas[vi];
        if (!v->alive || should_skip_vma(v, can_swap)) continue;
        for (int64_t r = 0; r < (v->npages + (1 << PMD_ORDER) - 1) >> PMD_ORDER; r++) {
            int64_t base = r << PMD_ORDER;
            int64_t end = base + (1 << PMD_ORDER) < v->npages ? base + (1 << PMD_ORDER) : v->npages;
            if (v->pmdtab[r] == PMD_TABLE) {
                if (!force_scan && !test_bloom_filter(g, max_seq, vi, r)) { g->nr_tables_filtered++; continue; }
                g->nr_tables_walked++;
                if (!walk_pte_range(e, vi, base, end, new_gen, can_swap)) continue;
                update_bloom_filter(g, max_seq + 1, vi, r);   /* carry over to the next generation */
                v = &e->vmas[vi];
            } else if (!v->pmdtab[r] && (v->pte[base] & PTE_PRESENT) && end - base == (1 << PMD_ORDER)) {
                /* pmd_trans_huge(): map_pmd() set all 512 PTEs; the PMD is young if any is */
                uint8_t *p = v->pte + base;
                uint64_t any = 0;
                for (int64_t q = 0; q < (1 << PMD_ORDER); q += 8) {
                    uint64_t w;
                    memcpy(&w, p + q, 8);
                    any |= w;
                }
                if (!(any & BYTES(PTE_YOUNG))) continue;
                folio_id t = pte_folio(e, v, base, p[0], can_swap);
                if (t < 0) continue;
                for (int64_t q = 0; q < (1 << PMD_ORDER); q++) p[q] &= ~PTE_YOUNG;   /* pmdp_test_and_clear_young() */
                g->nr_walk_young++;
                folio_update_gen(e, t, new_gen);
            }
        }
    }
}

/* The mm list (lru_gen_add_mm()/lru_gen_del_mm()): live tasks, in the order a walk first found them;
 * tasks gone are dropped. Returns the index of the first task added since the last iteration. */
static int32_t refresh_mm_list(struct km_emu *e)
{
    struct lru_gen_folio *g = e->lrugen;
    int32_t n = 0;
    for (int32_t k = 0; k < g->nr_mm; k++) {
        int32_t t = g->mm_list[k];
        if (e->tasks[t].alive) g->mm_list[n++] = t;
        else g->mm_listed[t] = 0;                        /* lru_gen_del_mm() at exit */
    }
    int32_t first_new = n;
    for (int32_t t = 0; t < e->nr_tasks; t++)
        if (e->tasks[t].alive && !g->mm_listed[t]) { g->mm_listed[t] = 1; g->mm_list[n++] = t; }
    g->nr_mm = n;
    /* the vmas of each task, in the order they were mapped (a counting sort by task) */
    if (g->cap_vma_order < e->nr_vmas) {
        int32_t cap = e->nr_vmas * 2;
        int32_t *o = realloc(g->vma_order, sizeof(int32_t) * (size_t)cap);
        if (!o) { e->nomem = 1; g->nr_mm = 0; return 0; }
        g->vma_order = o;
        g->cap_vma_order = cap;
    }
    memset(g->task_first, 0, sizeof(int32_t) * (size_t)(e->nr_tasks + 1));
    for (int32_t v = 0; v < e->nr_vmas; v++) if (e->vmas[v].alive) g->task_first[e->vmas[v].task + 1]++;
    for (int32_t t = 0; t < e->nr_tasks; t++) g->task_first[t + 1] += g->task_first[t];
    for (int32_t v = 0; v < e->nr_vmas; v++)
        if (e->vmas[v].alive) g->vma_order[g->task_first[e->vmas[v].task]++] = v;
    for (int32_t t = e->nr_tasks; t > 0; t--) g->task_first[t] = g->task_first[t - 1];
    g->task_first[0] = 0;
    return first_new;
}

/* inc_min_seq(): the oldest generation of a type is retired: its folios go to the next one
 * (folio_inc_gen(), their refs cleared: "prevent cold/hot inversion"), unless anon cannot be
 * swapped, where they are left to join the youngest. */
static void inc_min_seq(struct km_emu *e, int type, int can_swap)
{
    struct lru_gen_folio *g = e->lrugen;
    int old_gen = lru_gen_from_seq(g->min_seq[type]);
    if (!(type == LRU_GEN_ANON && !can_swap)) {
        struct lru_head *h = &e->lru[LRU_GEN_LIST(old_gen, type)];
        while (h->tail >= 0) {
            folio_id id = h->tail;
            int new_gen = folio_inc_gen(e, id);
            gen_list_move(e, id, new_gen, 1);
        }
    }
    reset_ctrl_pos(g, type, 1);
    g->min_seq[type]++;
}

/* try_to_inc_min_seq(): min_seq moves past empty generations, file never past anon when swapping */
static int try_to_inc_min_seq(struct km_emu *e, int can_swap)
{
    struct lru_gen_folio *g = e->lrugen;
    uint64_t min_seq[2] = { g->min_seq[0], g->min_seq[1] };
    int success = 0;
    /* find the oldest populated generation */
    for (int type = !can_swap; type < 2; type++)
        while (min_seq[type] + MIN_NR_GENS <= g->max_seq &&
               e->lru[LRU_GEN_LIST(lru_gen_from_seq(min_seq[type]), type)].head < 0)
            min_seq[type]++;
    /* see the comment on lru_gen_folio */
    if (can_swap) {
        min_seq[LRU_GEN_ANON] = min_seq[LRU_GEN_ANON] < min_seq[LRU_GEN_FILE] ? min_seq[LRU_GEN_ANON] : min_seq[LRU_GEN_FILE];
        min_seq[LRU_GEN_FILE] = min_seq[LRU_GEN_ANON] > g->min_seq[LRU_GEN_FILE] ? min_seq[LRU_GEN_ANON] : g->min_seq[LRU_GEN_FILE];
    }
    for (int type = !can_swap; type < 2; type++) {
        if (min_seq[type] == g->min_seq[type]) continue;
        reset_ctrl_pos(g, type, 1);
        g->min_seq[type] = min_seq[type];
        success = 1;
    }
    return success;
}

/* inc_max_seq(): a new youngest generation; a type already at MAX_NR_GENS retires its oldest first */
static void inc_max_seq(struct km_emu *e, int can_swap)
{
    struct lru_gen_folio *g = e->lrugen;
    for (int type = 1; type >= 0; type--)
        if (get_nr_gens(g, type) == MAX_NR_GENS) inc_min_seq(e, type, can_swap);
    /* Update the active/inactive LRU sizes for compatibility. Both sides of the current max_seq need
     * to be covered, since max_seq+1 can overlap with min_seq[LRU_GEN_ANON] if swapping is
     * constrained. And if they do overlap, cold/hot inversion happens. */
    int prev = lru_gen_from_seq(g->max_seq - 1), next = lru_gen_from_seq(g->max_seq + 1);
    for (int type = 0; type < 2; type++) {
        int64_t delta = g->nr_pages[prev][type] - g->nr_pages[next][type];
        e->lru[type * LRU_INACTIVE_FILE].nr_pages += delta;
        e->lru[type * LRU_INACTIVE_FILE + LRU_ACTIVE].nr_pages -= delta;
    }
    for (int type = 0; type < 2; type++) reset_ctrl_pos(g, type, 0);
    g->timestamps[next] = io_clock(e);
    g->max_seq++;
    g->nr_aging++;
}

/* try_to_inc_max_seq(): the aging. One iteration of the mm list walks each task's page tables
 * (walk_mm(); should_walk_mmu(): hardware-set young bits, on x86 and on arm64 with FEAT_HAFDBS), then
 * inc_max_seq(). A task first met since the last iteration is walked whole (force_scan). */
static int try_to_inc_max_seq(struct km_emu *e, uint64_t max_seq, int can_swap, int force_scan)
{
    struct lru_gen_folio *g = e->lrugen;
    if (max_seq <= g->mm_seq) return 0;                  /* see the comment in iterate_mm_list() */
    g->have_walk = 1;                                    /* set_mm_walk(NULL, true) */
    int first_iteration = g->mm_seq == MIN_NR_GENS && g->max_seq == MIN_NR_GENS + 1 && !g->nr_aging;
    int32_t first_new = refresh_mm_list(e);
    if (first_iteration) first_new = 0;                  /* !mm_state->tail: force scan from the first */
    int reset = 0;
    for (int32_t k = 0; k < g->nr_mm; k++) {
        int32_t t = g->mm_list[k];
        if (k >= first_new) force_scan = 1;              /* force scan for those added after the last iteration */
        if (!e->tasks[t].alive || e->tasks[t].rss < MIN_LRU_BATCH) continue;   /* should_skip_mm() */
        if (!reset) { reset_bloom_filter(g, max_seq + 1); reset = 1; }   /* iterate_mm_list(): mm && first */
        walk_mm(e, t, max_seq, can_swap, force_scan);
    }
    g->mm_seq++;
    inc_max_seq(e, can_swap);
    return 1;
}

/****************************************************************************************************
 *                          working set protection
 ****************************************************************************************************/

static int fls_long(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

/* set_initial_priority(): (total >> priority) * reclaimed_to_scanned_ratio = nr_to_reclaim, where
 * reclaimed_to_scanned_ratio = inactive / total */
static void set_initial_priority(struct km_emu *e, struct scan_control *sc)
{
    if (sc->priority != DEF_PRIORITY || sc->nr_to_reclaim < MIN_LRU_BATCH) return;
    int64_t reclaimable = e->lru[LRU_INACTIVE_FILE].nr_pages;
    if (can_reclaim_anon_pages(e)) reclaimable += e->lru[LRU_INACTIVE_ANON].nr_pages;
    /* round down reclaimable and round up sc->nr_to_reclaim */
    int priority = fls_long((uint64_t)(reclaimable > 0 ? reclaimable : 0)) - 1 - fls_long((uint64_t)(sc->nr_to_reclaim - 1));
    /* the estimation is based on LRU pages only, so cap it */
    sc->priority = priority < DEF_PRIORITY / 2 ? DEF_PRIORITY / 2 : priority > DEF_PRIORITY ? DEF_PRIORITY : priority;
}

/* lruvec_is_sizable(): the generations hold enough to be helpful at this priority */
static int lruvec_is_sizable(struct km_emu *e, struct scan_control *sc)
{
    struct lru_gen_folio *g = e->lrugen;
    int can_swap = get_swappiness(e, sc) != 0;
    int64_t total = 0;
    for (int type = !can_swap; type < 2; type++)
        for (uint64_t seq = g->min_seq[type]; seq <= g->max_seq; seq++) {
            int64_t n = g->nr_pages[lru_gen_from_seq(seq)][type];
            total += n > 0 ? n : 0;
        }
    return (total >> sc->priority) != 0;
}

/* lruvec_is_reclaimable(): the oldest file generation is older than min_ttl */
static int lruvec_is_reclaimable(struct km_emu *e, struct scan_control *sc, int64_t min_ttl)
{
    struct lru_gen_folio *g = e->lrugen;
    if (!lruvec_is_sizable(e, sc)) return 0;
    int64_t birth = g->timestamps[lru_gen_from_seq(g->min_seq[LRU_GEN_FILE])];   /* see the comment on lru_gen_folio */
    return io_clock(e) > birth + min_ttl;                /* time_is_before_jiffies(birth + min_ttl) */
}

/* lru_gen_age_node(), kswapd's (kswapd_age_node() at each priority of balance_pgdat()): to protect
 * the working set of the last min_ttl, OOM-kill if every generation is younger than that. */
void lru_gen_age_node(struct km_emu *e, struct scan_control *sc)
{
    struct lru_gen_folio *g = e->lrugen;
    int64_t min_ttl = g->min_ttl_ns;
    int reclaimable = !min_ttl;
    set_initial_priority(e, sc);
    if (!reclaimable) reclaimable = lruvec_is_reclaimable(e, sc, min_ttl);
    /* The main goal is to OOM kill if every generation from all memcgs is younger than min_ttl.
     * However, another possibility is all memcgs are either too small or below min. */
    if (!reclaimable && out_of_memory(e, 0)) g->nr_min_ttl_oom++;
}

/****************************************************************************************************
 *                          rmap/PT walk feedback
 ****************************************************************************************************/

/* lru_gen_look_around(): shrink_folio_list() found a young PTE of folio id (vma vi, page k) walking
 * the rmap: the young PTEs around it in its PTE table (at most MIN_LRU_BATCH of them) are cleared
 * and their folios promoted: lazily by folio_update_gen() while this reclaimer has a walk (kswapd;
 * others after an aging), else folio_activate(); an isolated folio (the one being reclaimed too)
 * gets PG_referenced. If the scan was cache-line efficient the PTE table goes into the Bloom filter:
 * the feedback from eviction to aging. */
static void lru_gen_look_around(struct km_emu *e, folio_id id, int32_t vi, int64_t k)
{
    struct lru_gen_folio *g = e->lrugen;
    struct vma *v = &e->vmas[vi];
    int can_swap = !folio_is_file_lru(&e->folios[id]);
    int new_gen = lru_gen_from_seq(g->max_seq);
    int64_t start = k & ~(int64_t)((1 << PMD_ORDER) - 1);
    int64_t end = start + (1 << PMD_ORDER) < v->npages ? start + (1 << PMD_ORDER) : v->npages;
    if (end - start > MIN_LRU_BATCH) {
        if (k - start < MIN_LRU_BATCH / 2) end = start + MIN_LRU_BATCH;
        else if (end - k < MIN_LRU_BATCH / 2) start = end - MIN_LRU_BATCH;
        else { start = k - MIN_LRU_BATCH / 2; end = k + MIN_LRU_BATCH / 2; }
    }
    int64_t young = 0;
    g->nr_look_around++;
    for (int64_t i = start; i < end; i++) {
        uint8_t b = v->pte[i];
        if ((b & (PTE_PRESENT | PTE_YOUNG | PTE_ZERO)) != (PTE_PRESENT | PTE_YOUNG)) continue;
        folio_id t = pte_folio(e, v, i, b, can_swap);
        if (t < 0) continue;
        v->pte[i] = b & ~PTE_YOUNG;                      /* ptep_test_and_clear_young() */
        young++;
        if (g->have_walk) {
            folio_update_gen(e, t, new_gen);
            continue;
        }
        int old_gen = folio_lru_gen(&e->folios[t]);
        if (old_gen < 0) e->folios[t].flags |= PG_referenced;
        else if (old_gen != new_gen) folio_activate(e, t);
    }
    g->nr_look_around_young += young;
    /* feedback from rmap walkers to page table walkers */
    if (suitable_to_scan(end - start, young)) update_bloom_filter(g, g->max_seq, vi, k >> PMD_ORDER);
}

/* folio_referenced_one() with MGLRU, over the folio's PTEs [first, first + n) in vma vi: each young
 * one is lru_gen_look_around()'s (which clears it). Returns 1 if one was young. */
int lru_gen_referenced_ptes(struct km_emu *e, folio_id id, int32_t vi, int64_t first, int64_t n, int anon,
                            int *mapped)
{
    int young = 0;
    struct vma *v = &e->vmas[vi];
    if (e->folios[id].order == PMD_ORDER && !v->pmdtab[first >> PMD_ORDER] && !anon) {
        /* PMD-mapped (no pvmw.pte): pmdp_clear_flush_young_notify(), no look-around */
        for (int64_t k = first; k < first + n; k++) {
            uint8_t b = v->pte[k];
            if (!(b & PTE_PRESENT) || (b & (PTE_ZERO | PTE_ANON))) continue;
            *mapped = 1;
            if (b & PTE_YOUNG) { young = 1; v->pte[k] = b & ~PTE_YOUNG; }
        }
        return young;
    }
    for (int64_t k = first; k < first + n; k++) {
        uint8_t b = e->vmas[vi].pte[k];
        if (!(b & PTE_PRESENT) || (b & PTE_ZERO) || !(b & PTE_ANON) != !anon) continue;
        *mapped = 1;
        if (!(b & PTE_YOUNG)) continue;
        lru_gen_look_around(e, id, vi, k);
        young = 1;
    }
    return young;
}

/****************************************************************************************************
 *                          the eviction
 ****************************************************************************************************/

/* sort_folio(): a folio at the tail of the oldest generation that is not to be isolated goes where it
 * belongs: unevictable, promoted (its gen bits moved on), protected (its tier above tier_idx, or
 * refs == BIT(LRU_REFS_WIDTH): one more generation, counted in protected[]), or under read
 * (PG_locked: "waiting for writeback", bumped a generation). */
static int sort_folio(struct km_emu *e, folio_id id, int tier_idx)
{
    struct lru_gen_folio *g = e->lrugen;
    struct folio *f = &e->folios[id];
    int gen = folio_lru_gen(f);
    int type = folio_is_file_lru(f);
    int delta = folio_nr_pages(f);
    int refs = folio_lru_refs(f);
    int tier = lru_tier_from_refs(refs);
    /* unevictable */
    if (f->flags & PG_unevictable) {
        lru_gen_del_folio(e, id, 1);
        lruvec_add_folio(e, id, LRU_UNEVICTABLE);
        return 1;
    }
    /* promoted */
    if (gen != lru_gen_from_seq(g->min_seq[type])) {
        gen_list_move(e, id, gen, 0);
        return 1;
    }
    /* protected */
    if (tier > tier_idx || refs == (1 << LRU_REFS_WIDTH)) {
        int hist = lru_hist_from_seq(g->min_seq[type]);
        gen = folio_inc_gen(e, id);
        gen_list_move(e, id, gen, 1);
        g->protected_[hist][type][tier - 1] += delta;
        return 1;
    }
    /* waiting for writeback: here a folio under read (folio_test_locked()) */
    if (f->flags & PG_locked) {
        gen = folio_inc_gen(e, id);
        gen_list_move(e, id, gen, 0);
        return 1;
    }
    return 0;
}

/* isolate_folio(): off the list for shrink_folio_list(); refs kept only with PG_referenced (see the
 * comment on MAX_NR_TIERS), PG_referenced cleared */
static void isolate_folio(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    if (!(f->flags & PG_referenced)) f->flags &= (uint16_t)~(LRU_REFS_MASK | LRU_REFS_FLAGS);
    f->flags &= (uint16_t)~PG_referenced;
    lru_gen_del_folio(e, id, 1);
}

struct folio_list { folio_id *ids; int64_t n, cap; };

static void list_push(struct km_emu *e, struct folio_list *l, folio_id id)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 256;
        folio_id *ids = realloc(l->ids, sizeof(folio_id) * (size_t)cap);
        if (!ids) abort();                               /* (as isolate_lru_folios() in vmscan.c) */
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    (void)e;
}

/* scan_folios(): from the tail of the oldest generation of one type, sort or isolate folios until
 * MIN_LRU_BATCH pages are isolated or MAX_LRU_BATCH folios were looked at. Returns the pages
 * scanned, or 0 if it isolated none and did not run out of budget. */
static int64_t scan_folios(struct km_emu *e, struct scan_control *sc, int type, int tier, struct folio_list *list)
{
    struct lru_gen_folio *g = e->lrugen;
    int64_t scanned = 0, sorted = 0, isolated = 0;
    int remaining = MAX_LRU_BATCH;
    if (get_nr_gens(g, type) == MIN_NR_GENS) return 0;
    struct lru_head *h = &e->lru[LRU_GEN_LIST(lru_gen_from_seq(g->min_seq[type]), type)];
    while (h->tail >= 0) {
        folio_id id = h->tail;
        int delta = folio_nr_pages(&e->folios[id]);
        scanned += delta;
        if (sort_folio(e, id, tier)) {
            sorted += delta;
        } else {
            isolate_folio(e, id);
            list_push(e, list, id);
            isolated += delta;
        }
        if (!--remaining || isolated >= MIN_LRU_BATCH) break;
    }
    count(e, scan_item[sc->who], isolated);
    count(e, VM_pgrefill, sorted);
    count(e, type ? VM_pgscan_file : VM_pgscan_anon, isolated);
    return isolated || !remaining ? scanned : 0;
}

/* get_tier_idx(): the tiers of one type that are not protected: to leave a margin for fluctuations,
 * use a larger gain factor (1:2) */
static int get_tier_idx(const struct lru_gen_folio *g, int type)
{
    struct ctrl_pos sp, pv;
    int tier;
    read_ctrl_pos(g, type, 0, 1, &sp);
    for (tier = 1; tier < MAX_NR_TIERS; tier++) {
        read_ctrl_pos(g, type, tier, 2, &pv);
        if (!positive_ctrl_err(&sp, &pv)) break;
    }
    return tier - 1;
}

/* get_type_to_scan(): compare the first tier of anon with that of file (gains swappiness and
 * MAX_SWAPPINESS - swappiness) to pick the type; then the other tiers of that type with the first
 * tier of the other to find the last tier to evict. */
static int get_type_to_scan(const struct lru_gen_folio *g, int swappiness, int *tier_idx)
{
    struct ctrl_pos sp, pv;
    int gain[2] = { swappiness, MAX_SWAPPINESS - swappiness };
    read_ctrl_pos(g, LRU_GEN_ANON, 0, gain[LRU_GEN_ANON], &sp);
    read_ctrl_pos(g, LRU_GEN_FILE, 0, gain[LRU_GEN_FILE], &pv);
    int type = positive_ctrl_err(&sp, &pv), tier;
    read_ctrl_pos(g, !type, 0, gain[!type], &sp);
    for (tier = 1; tier < MAX_NR_TIERS; tier++) {
        read_ctrl_pos(g, type, tier, gain[type], &pv);
        if (!positive_ctrl_err(&sp, &pv)) break;
    }
    *tier_idx = tier - 1;
    return type;
}

/* isolate_folios(): try to make the obvious choice first. When anon and file are both available
 * from the same generation, interpret swappiness 1 as file first and 200 as anon first. */
static int64_t isolate_folios(struct km_emu *e, struct scan_control *sc, int swappiness, int *type_scanned,
                              struct folio_list *list)
{
    struct lru_gen_folio *g = e->lrugen;
    int type, tier = -1;
    int64_t scanned = 0;
    if (!swappiness) type = LRU_GEN_FILE;
    else if (g->min_seq[LRU_GEN_ANON] < g->min_seq[LRU_GEN_FILE]) { type = LRU_GEN_ANON; g->nr_anon_behind++; }
    else if (swappiness == 1) type = LRU_GEN_FILE;
    else if (swappiness == MAX_SWAPPINESS) type = LRU_GEN_ANON;
    else { type = get_type_to_scan(g, swappiness, &tier); g->nr_pid_choice[type]++; }
    for (int i = !swappiness; i < 2; i++) {
        if (tier < 0) tier = get_tier_idx(g, type);
        scanned = scan_folios(e, sc, type, tier, list);
        if (scanned) break;
        if (i + 1 < 2) g->nr_type_fallback++;
        type = !type;
        tier = -1;
    }
    *type_scanned = type;
    return scanned;
}

/* evict_folios(): isolate a batch from the oldest generation, shrink_folio_list() it, put back what
 * stays (in the youngest generation: "don't add rejected folios to the oldest generation") and
 * retry once the clean, unmapped ones that may have missed folio_rotate_reclaimable(). Returns the
 * pages scanned (plus one if min_seq moved), 0 when there is nothing to evict. */
static int64_t evict_folios(struct km_emu *e, struct scan_control *sc, int swappiness, int *need_swapping)
{
    static __thread struct folio_list list, clean;
    struct lru_gen_folio *g = e->lrugen;
    int type;
    list.n = clean.n = 0;
    bio_poll(e);
    int64_t scanned = isolate_folios(e, sc, swappiness, &type, &list);
    scanned += try_to_inc_min_seq(e, swappiness != 0);
    if (get_nr_gens(g, !swappiness) == MIN_NR_GENS) scanned = 0;
    if (!list.n) return scanned;
    if (need_swapping && type == LRU_GEN_ANON) *need_swapping = 1;   /* 6.1: set after the retry; same */
    int skip_retry = 0;
retry:;
    int64_t pages = 0;
    for (int64_t i = 0; i < list.n; i++) pages += folio_nr_pages(&e->folios[list.ids[i]]);
    sc->nr_scanned += pages;                             /* shrink_folio_list(): the base pages */
    if (sc->who != RECLAIM_KSWAPD) {
        count(e, VM_stall_reclaim_scanned, pages);
        count(e, VM_stall_reclaim_lists, 1);
        reclaim_time(e, pages * e->cfg.scan_ns + e->cfg.list_ns);
    }
    int64_t nr_pageout = 0, nr_activate = 0;
    sc->lru_gen_keep = 1;
    sc->nr_kept = 0;
    int64_t reclaimed = lru_gen_shrink_folio_list(e, list.ids, list.n, sc, &nr_pageout, &nr_activate);
    sc->lru_gen_keep = 0;
    sc->nr_reclaimed += reclaimed;
    /* the folios left, in the order shrink_folio_list() met them */
    int64_t kept = 0;
    clean.n = 0;
    for (int64_t i = 0; i < sc->nr_kept; i++) {
        folio_id id = list.ids[i];
        struct folio *f = &e->folios[id];
        if (f->flags & PG_unevictable) {                 /* folio_putback_lru() */
            lruvec_add_folio(e, id, LRU_UNEVICTABLE);
            continue;
        }
        if (skip_retry || (f->flags & (PG_active | PG_referenced | PG_locked)) || f->mapcount > 0) {
            /* don't add rejected folios to the oldest generation */
            f->flags = (uint16_t)((f->flags & ~(LRU_REFS_MASK | LRU_REFS_FLAGS)) | PG_active);
            list.ids[kept++] = id;
            continue;
        }
        /* retry folios that may have missed folio_rotate_reclaimable() */
        list_push(e, &clean, id);
    }
    /* move_folios_to_lru() */
    for (int64_t i = 0; i < kept; i++) lruvec_add_folio(e, list.ids[i], 0);
    count(e, steal_item[sc->who], reclaimed);
    count(e, type ? VM_pgsteal_file : VM_pgsteal_anon, reclaimed);
    if (clean.n) {
        struct folio_list t = list;
        list = clean;
        clean = t;
        skip_retry = 1;
        goto retry;
    }
    return scanned;
}

/* should_run_aging(): the aging is lazy; the eviction stalls at MIN_NR_GENS generations, so the ideal
 * is MIN_NR_GENS + 1 of them with pages spread evenly. *nr_to_scan: the pages at this priority. */
static int should_run_aging(struct km_emu *e, uint64_t max_seq, struct scan_control *sc, int can_swap,
                            int64_t *nr_to_scan)
{
    struct lru_gen_folio *g = e->lrugen;
    uint64_t min_seq[2] = { g->min_seq[0], g->min_seq[1] };
    int64_t old = 0, young = 0, total = 0;
    /* whether this lruvec is completely out of cold folios (6.3+; 6.1 sizes nr_to_scan first) */
    if (!e->cfg.lru_gen_fairness_safeguards && min_seq[!can_swap] + MIN_NR_GENS > max_seq) {
        *nr_to_scan = 0;
        return 1;
    }
    for (int type = !can_swap; type < 2; type++)
        for (uint64_t seq = min_seq[type]; seq <= max_seq; seq++) {
            int64_t size = g->nr_pages[lru_gen_from_seq(seq)][type];
            if (size < 0) size = 0;
            total += size;
            if (seq == max_seq) young += size;
            else if (seq + MIN_NR_GENS == max_seq) old += size;
        }
    *nr_to_scan = total >> sc->priority;
    if (min_seq[!can_swap] + MIN_NR_GENS > max_seq) return 1;
    if (min_seq[!can_swap] + MIN_NR_GENS < max_seq) return 0;
    /* It's also ideal to spread pages out evenly, i.e., 1/(MIN_NR_GENS+1) of the total number of
     * pages for each generation. A reasonable range for this average portion is [1/MIN_NR_GENS,
     * 1/(MIN_NR_GENS+2)]. The aging cares about the upper bound of hot pages, while the eviction
     * cares about the lower bound of cold pages. */
    if (young * MIN_NR_GENS > total) return 1;
    if (old * (MIN_NR_GENS + 2) < total) return 1;
    return 0;
}

/* get_nr_to_scan(): -1 when this lruvec is low on cold folios and the aging made a generation (the
 * aging is skipped at the default priority) */
static int64_t get_nr_to_scan(struct km_emu *e, struct scan_control *sc, int can_swap)
{
    uint64_t max_seq = e->lrugen->max_seq;
    int64_t nr_to_scan;
    if (!should_run_aging(e, max_seq, sc, can_swap, &nr_to_scan)) return nr_to_scan;
    /* skip the aging path at the default priority */
    if (sc->priority == DEF_PRIORITY) return nr_to_scan;
    /* skip this lruvec as it's low on cold folios */
    return try_to_inc_max_seq(e, max_seq, can_swap, 0) ? -1 : 0;
}

/* should_abort_scan(): memcg reclaim never (fairness); global reclaim once nr_to_reclaim is met, and
 * kswapd once free memory clears the high watermark by MIN_LRU_BATCH */
static int should_abort_scan(struct km_emu *e, struct scan_control *sc)
{
    if (sc->who == RECLAIM_MEMCG) return 0;
    if (sc->nr_reclaimed >= (sc->nr_to_reclaim > 2 ? sc->nr_to_reclaim : 2)) return 1;   /* compact_gap(0) */
    if (sc->who != RECLAIM_KSWAPD) return 0;
    return free_pages(e) > e->wmark_high + MIN_LRU_BATCH;
}

/* try_to_shrink_lruvec(): evict until nr_to_scan pages are scanned or there is nothing left to evict */
static int try_to_shrink_lruvec(struct km_emu *e, struct scan_control *sc)
{
    int64_t nr_to_scan, scanned = 0;
    int swappiness = get_swappiness(e, sc);
    for (;;) {
        nr_to_scan = get_nr_to_scan(e, sc, swappiness != 0);
        if (nr_to_scan <= 0) break;
        int64_t delta = evict_folios(e, sc, swappiness, NULL);
        if (!delta) break;
        scanned += delta;
        if (scanned >= nr_to_scan) break;
        if (should_abort_scan(e, sc)) break;
    }
    /* whether this lruvec should be rotated */
    return nr_to_scan < 0;
}

/* Linux 6.1's memcg reclaim (mm/vmscan.c, 6.1.y; the "fairness safeguards" 6.3's memcg LRU series
 * removed). get_nr_to_scan(): at a lower priority than DEF_PRIORITY a lruvec low on cold folios is
 * aged and then evicted from in the same call (6.3+ skips it: -1). should_abort_scan(): a memcg
 * reclaimer stops once it aged twice ("age each memcg at most once") or met nr_to_reclaim having
 * evicted anon ("over-swapping can increase allocation latency"); 6.3+ never stops memcg reclaim
 * short of nr_to_scan. */
static int64_t get_nr_to_scan_v61(struct km_emu *e, struct scan_control *sc, int can_swap, int *need_aging)
{
    struct lru_gen_folio *g = e->lrugen;
    uint64_t max_seq = g->max_seq, min_seq = g->min_seq[!can_swap];
    int64_t nr_to_scan;
    *need_aging = should_run_aging(e, max_seq, sc, can_swap, &nr_to_scan);
    if (!*need_aging) return nr_to_scan;
    /* skip the aging path at the default priority */
    if (sc->priority != DEF_PRIORITY && try_to_inc_max_seq(e, max_seq, can_swap, 0)) return nr_to_scan;
    return min_seq + MIN_NR_GENS <= max_seq ? nr_to_scan : 0;
}

static int should_abort_scan_v61(struct km_emu *e, uint64_t seq, struct scan_control *sc, int need_swapping)
{
    /* age each memcg at most once to ensure fairness */
    if (e->lrugen->max_seq - seq > 1) return 1;
    /* over-swapping can increase allocation latency */
    return sc->nr_reclaimed >= sc->nr_to_reclaim && need_swapping;
}

/* lru_gen_shrink_lruvec(), 6.1.y, for memcg reclaim */
static void lru_gen_shrink_lruvec_v61(struct km_emu *e, struct scan_control *sc)
{
    struct lru_gen_folio *g = e->lrugen;
    uint64_t max_seq = g->max_seq;
    int need_aging = 0, need_swapping = 0;
    int64_t scanned = 0;
    g->have_walk = 0;                                    /* set_mm_walk(pgdat): none but kswapd's */
    for (;;) {
        int swappiness = get_swappiness(e, sc);
        int64_t nr_to_scan = get_nr_to_scan_v61(e, sc, swappiness != 0, &need_aging);
        if (!nr_to_scan) break;
        int64_t delta = evict_folios(e, sc, swappiness, &need_swapping);
        if (!delta) break;
        scanned += delta;
        if (scanned >= nr_to_scan) break;
        if (should_abort_scan_v61(e, max_seq, sc, need_swapping)) break;
    }
    g->have_walk = 0;                                    /* clear_mm_walk() */
}

/* shrink_node() with MGLRU: lru_gen_shrink_node() for global reclaim (kswapd, direct) and
 * shrink_node_memcgs() -> shrink_lruvec() -> lru_gen_shrink_lruvec() for memcg reclaim; one lruvec
 * either way (shrink_many()'s memcg LRU has one memcg, shrink_one() no protection to honour). */
void lru_gen_shrink_node(struct km_emu *e, struct scan_control *sc)
{
    struct lru_gen_folio *g = e->lrugen;
    if (sc->who == RECLAIM_MEMCG && e->cfg.lru_gen_fairness_safeguards) {
        lru_gen_shrink_lruvec_v61(e, sc);
        return;
    }
    if (sc->who == RECLAIM_MEMCG) {                      /* lru_gen_shrink_lruvec() */
        g->have_walk = 0;                                /* set_mm_walk(NULL, sc->proactive) */
        try_to_shrink_lruvec(e, sc);
        g->have_walk = 0;                                /* clear_mm_walk() */
        return;
    }
    g->have_walk = sc->who == RECLAIM_KSWAPD;            /* set_mm_walk(pgdat, ...): kswapd's own */
    set_initial_priority(e, sc);
    int64_t reclaimed = sc->nr_reclaimed;
    if (sc->who == RECLAIM_KSWAPD) sc->nr_reclaimed = 0;
    try_to_shrink_lruvec(e, sc);                         /* shrink_one() */
    if (sc->who == RECLAIM_KSWAPD) sc->nr_reclaimed += reclaimed;
    g->have_walk = 0;
}

/****************************************************************************************************
 *                          initialization, checks, state
 ****************************************************************************************************/

/* lru_gen_init_lruvec(): max_seq = MIN_NR_GENS + 1, all timestamps now, mm_state.seq MIN_NR_GENS.
 * MGLRU stays off for a policy that keeps a list of its own (the plain LRU). */
int lru_gen_init(struct km_emu *e, int32_t nr_tasks)
{
    for (int l = LRU_GEN_BASE; l < NR_LRU_HEADS; l++) e->lru[l].head = e->lru[l].tail = -1;
    if (e->cfg.lru_gen < 0 || e->cfg.lru_gen > 1) return km_fail(e, "config: lru_gen is 0 (classic) or 1 (MGLRU)");
    if (e->cfg.lru_gen_min_ttl_ns < 0 || e->cfg.lru_gen_min_ttl_ns > ((int64_t)1 << 62))
        return km_fail(e, "config: lru_gen_min_ttl_ns out of range");
    if (!e->cfg.lru_gen || e->policy->handle_range || e->policy->sync_lists) return 0;
    struct lru_gen_folio *g = calloc(1, sizeof *g);
    size_t nt = (size_t)(nr_tasks > 0 ? nr_tasks : 1);
    if (g) {
        g->mm_list = calloc(nt, sizeof(int32_t));
        g->mm_listed = calloc(nt, 1);
        g->task_first = calloc(nt + 1, sizeof(int32_t));
    }
    e->lrugen = g;
    if (!g || !g->mm_list || !g->mm_listed || !g->task_first)
        return km_fail(e, "out of memory: the multi-generational LRU for %d tasks", nr_tasks);
    g->max_seq = MIN_NR_GENS + 1;
    for (int i = 0; i <= MIN_NR_GENS + 1; i++) g->timestamps[i] = 0;
    g->mm_seq = MIN_NR_GENS;
    g->min_ttl_ns = e->cfg.lru_gen_min_ttl_ns;
    e->lru_gen_enabled = 1;
    return 0;
}

void lru_gen_free(struct km_emu *e)
{
    struct lru_gen_folio *g = e->lrugen;
    if (!g) return;
    free(g->mm_list); free(g->mm_listed); free(g->task_first); free(g->vma_order);
    free(g);
    e->lrugen = NULL;
}

/* For km_check_invariants(): the classic evictable lists empty, each generation list well linked and
 * of one type, every folio's generation live, the generation sizes and the compatibility sizes what
 * the folios add up to, seq_is_valid(). Returns the pages on the generation lists, or -1 (km_error()). */
int64_t lru_gen_check_invariants(struct km_emu *e)
{
    struct lru_gen_folio *g = e->lrugen;
    if (!g) return 0;
    int64_t sizes[MAX_NR_GENS][2] = {{0}}, total = 0, nr_listed = 0;
    for (int l = 0; l < LRU_UNEVICTABLE; l++)
        if (e->lru[l].head >= 0) return km_fail(e, "MGLRU: classic list %d holds folios", l);
    for (int type = 0; type < 2; type++) {
        int nr_gens = get_nr_gens(g, type);
        if (nr_gens < (type ? MIN_NR_GENS : 1) || nr_gens > MAX_NR_GENS)
            return km_fail(e, "MGLRU: %d generations of type %d", nr_gens, type);
    }
    if (get_nr_gens(g, LRU_GEN_FILE) > get_nr_gens(g, LRU_GEN_ANON))
        return km_fail(e, "MGLRU: min_seq file %llu below anon %llu", (unsigned long long)g->min_seq[1],
                       (unsigned long long)g->min_seq[0]);
    for (int gen = 0; gen < MAX_NR_GENS; gen++)
        for (int type = 0; type < 2; type++) {
            int l = LRU_GEN_LIST(gen, type);
            int live = (uint64_t)((gen - lru_gen_from_seq(g->min_seq[type]) + MAX_NR_GENS) % MAX_NR_GENS) <
                       (uint64_t)get_nr_gens(g, type);
            int64_t pages = 0;
            folio_id prev = -1;
            for (folio_id id = e->lru[l].head; id >= 0; id = e->links[id].next) {
                struct folio *f = &e->folios[id];
                int fg = folio_lru_gen(f);
                if (f->lru != l) return km_fail(e, "MGLRU: folio %d on list %d says %d", id, l, f->lru);
                if (e->links[id].prev != prev) return km_fail(e, "MGLRU: folio %d: broken prev link", id);
                if (folio_is_file_lru(f) != type) return km_fail(e, "MGLRU: folio %d of the other type", id);
                if (f->flags & (PG_active | PG_unevictable)) return km_fail(e, "MGLRU: folio %d active or unevictable", id);
                if (fg < 0) return km_fail(e, "MGLRU: folio %d on list %d without a generation", id, l);
                if ((uint64_t)((fg - lru_gen_from_seq(g->min_seq[type]) + MAX_NR_GENS) % MAX_NR_GENS) >=
                    (uint64_t)get_nr_gens(g, type))
                    return km_fail(e, "MGLRU: folio %d in retired generation %d", id, fg);
                sizes[fg][type] += folio_nr_pages(f);
                pages += folio_nr_pages(f);
                prev = id;
                if (++nr_listed > e->nr_folios) return km_fail(e, "MGLRU: list %d loops", l);
            }
            if (prev != e->lru[l].tail) return km_fail(e, "MGLRU: list %d: tail mismatch", l);
            if (pages != e->lru[l].nr_pages) return km_fail(e, "MGLRU: list %d holds %lld pages, counter %lld", l,
                                                            (long long)pages, (long long)e->lru[l].nr_pages);
            if (pages && !live) return km_fail(e, "MGLRU: retired generation %d of type %d holds folios", gen, type);
            total += pages;
        }
    for (int type = 0; type < 2; type++) {
        int64_t active = 0, inactive = 0;
        for (int gen = 0; gen < MAX_NR_GENS; gen++) {
            if (sizes[gen][type] != g->nr_pages[gen][type])
                return km_fail(e, "MGLRU: generation %d type %d holds %lld pages, counter %lld", gen, type,
                               (long long)sizes[gen][type], (long long)g->nr_pages[gen][type]);
            if (lru_gen_is_active(g, gen)) active += sizes[gen][type]; else inactive += sizes[gen][type];
        }
        if (e->lru[type * LRU_INACTIVE_FILE].nr_pages != inactive ||
            e->lru[type * LRU_INACTIVE_FILE + LRU_ACTIVE].nr_pages != active)
            return km_fail(e, "MGLRU: type %d compatibility sizes %lld/%lld, generations %lld/%lld", type,
                           (long long)e->lru[type * LRU_INACTIVE_FILE].nr_pages,
                           (long long)e->lru[type * LRU_INACTIVE_FILE + LRU_ACTIVE].nr_pages,
                           (long long)inactive, (long long)active);
    }
    return total;
}

/* km_lru_gen_state(): KM_LRU_GEN_STATE values. [0] enabled, [1] max_seq, [2..3] min_seq anon, file,
 * [4..11] nr_pages[gen][type] (gen * 2 + type), [12..15] timestamps[gen] (ns), [16..23]
 * avg_refaulted[type][tier] (type * 4 + tier), [24..31] avg_total, [32..39] refaulted, [40..47]
 * evicted, [48..53] protected[type][tier - 1] (type * 3 + tier - 1), [54] mm_state.seq, [55] agings
 * (inc_max_seq()), [56] mm walks, [57] PTE tables walked, [58] PTE tables the Bloom filter left out,
 * [59] young PTEs the walks cleared, [60] look-arounds, [61] young PTEs they cleared, [62] min_ttl OOM
 * kills, [63] min_ttl (ns), [64..65] get_type_to_scan() chose anon, file, [66] anon taken first as its
 * min_seq lagged, [67] the first type had nothing to isolate; the rest 0. */
void km_lru_gen_state(struct km_emu *e, int64_t *out)
{
    memset(out, 0, sizeof(int64_t) * KM_LRU_GEN_STATE);
    struct lru_gen_folio *g = e ? e->lrugen : NULL;
    if (!g) return;
    out[0] = 1;
    out[1] = (int64_t)g->max_seq;
    out[2] = (int64_t)g->min_seq[0];
    out[3] = (int64_t)g->min_seq[1];
    for (int gen = 0; gen < MAX_NR_GENS; gen++) {
        for (int type = 0; type < 2; type++) out[4 + gen * 2 + type] = g->nr_pages[gen][type];
        out[12 + gen] = g->timestamps[gen];
    }
    for (int type = 0; type < 2; type++)
        for (int tier = 0; tier < MAX_NR_TIERS; tier++) {
            out[16 + type * 4 + tier] = (int64_t)g->avg_refaulted[type][tier];
            out[24 + type * 4 + tier] = (int64_t)g->avg_total[type][tier];
            out[32 + type * 4 + tier] = (int64_t)g->refaulted[0][type][tier];
            out[40 + type * 4 + tier] = (int64_t)g->evicted[0][type][tier];
            if (tier) out[48 + type * 3 + tier - 1] = (int64_t)g->protected_[0][type][tier - 1];
        }
    out[54] = (int64_t)g->mm_seq;
    out[55] = g->nr_aging;
    out[56] = g->nr_mm_walks;
    out[57] = g->nr_tables_walked;
    out[58] = g->nr_tables_filtered;
    out[59] = g->nr_walk_young;
    out[60] = g->nr_look_around;
    out[61] = g->nr_look_around_young;
    out[62] = g->nr_min_ttl_oom;
    out[63] = g->min_ttl_ns;
    out[64] = g->nr_pid_choice[0];
    out[65] = g->nr_pid_choice[1];
    out[66] = g->nr_anon_behind;
    out[67] = g->nr_type_fallback;
}
