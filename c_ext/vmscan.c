/* Page reclaim (mm/vmscan.c), classic two-list LRU (CONFIG_LRU_GEN off), one node, one lruvec. */
#include <stdlib.h>
#include <string.h>
#include "mm.h"

static int is_file_lru(int lru) { return lru == LRU_INACTIVE_FILE || lru == LRU_ACTIVE_FILE; }
static int is_active_lru(int lru) { return lru == LRU_ACTIVE_ANON || lru == LRU_ACTIVE_FILE; }

/* int_sqrt() */
static int64_t int_sqrt(int64_t x) { int64_t r = 0; while ((r + 1) * (r + 1) <= x) r++; return r; }

/* inactive_is_low(): the inactive list is too small for the total (the ratio table in vmscan.c). */
int inactive_is_low(struct km_emu *e, int inactive_lru)
{
    int64_t inactive = lruvec_page_state(e, inactive_lru);
    int64_t active = lruvec_page_state(e, inactive_lru + LRU_ACTIVE);
    int64_t gb = (inactive + active) >> (30 - 12);
    int64_t ratio = gb ? int_sqrt(10 * gb) : 1;
    return inactive * ratio < active;
}

/* The vma pages [*first, *first + *n) that can map folio f (rmap: vma_address() range). */
static int folio_vma_range(const struct folio *f, const struct vma *v, int anon, int64_t *first, int64_t *n)
{
    *n = folio_nr_pages(f);
    if (anon) {
        if (v->anon != f->obj) return 0;
        *first = f->index;
        return 1;
    }
    int64_t lo = f->index > v->pgoff ? f->index : v->pgoff;
    int64_t hi = f->index + *n < v->pgoff + v->npages ? f->index + *n : v->pgoff + v->npages;
    if (lo >= hi) return 0;
    *first = lo - v->pgoff;
    *n = hi - lo;
    return 1;
}

#define BYTES(x) (0x0101010101010101ULL * (x))

/* Bytes of an 8-PTE word that map the folio's kind of page: present, not the zero page, and anon
 * exactly when the folio is anonymous. One bit (0x01) per matching byte. */
static inline uint64_t pte_match(uint64_t w, int anon)
{
    uint64_t present = w & BYTES(PTE_PRESENT);
    uint64_t is_anon = (w >> 3) & BYTES(1);               /* PTE_ANON = 8 */
    uint64_t is_zero = (w >> 4) & BYTES(1);               /* PTE_ZERO = 16 */
    return present & ~is_zero & (anon ? is_anon : ~is_anon);
}

/* Scan (and, for clear_young, age) the PTEs p[0..n) eight at a time. */
static void scan_ptes(uint8_t *p, int64_t n, int anon, int *mapped, int *young)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (!w) continue;
        uint64_t m = pte_match(w, anon);
        if (!m) continue;
        *mapped = 1;
        uint64_t y = (w >> 1) & m;                         /* PTE_YOUNG = 2 */
        if (y) { *young = 1; w &= ~(y << 1); memcpy(p + i, &w, 8); }
    }
    for (; i < n; i++) {
        uint64_t m = pte_match(p[i], anon);
        if (!m) continue;
        *mapped = 1;
        if (p[i] & PTE_YOUNG) { *young = 1; p[i] &= ~PTE_YOUNG; }
    }
}

/* folio_referenced(): walk the rmap, count the vmas with a young PTE on the folio and clear them.
 * vmas without recency (MADV_SEQUENTIAL/RANDOM: vma_has_recency()) are skipped. */
int folio_referenced(struct km_emu *e, folio_id id, uint32_t *vm_flags)
{
    struct folio *f = &e->folios[id];
    struct object *o = &e->objs[f->obj];
    int referenced = 0;
    *vm_flags = 0;
    if (f->mapcount <= 0) return 0;
    int anon = o->kind == OBJ_ANON;
    for (int i = 0; i < o->nvmas; i++) {
        struct vma *v = &e->vmas[o->vmas[i]];
        int64_t first, n;
        if (!v->alive || !folio_vma_range(f, v, anon, &first, &n)) continue;
        int young = 0, mapped = 0;
        if (e->lru_gen_enabled && !(v->flags & (VM_SEQ_READ | VM_RAND_READ | MAP_F_LOCKED)))
            young = lru_gen_referenced_ptes(e, id, o->vmas[i], first, n, anon, &mapped);   /* look-around */
        else
            scan_ptes(v->pte + first, n, anon, &mapped, &young);
        if (!mapped) continue;
        if (v->flags & MAP_F_LOCKED) { *vm_flags |= MAP_F_LOCKED; return 1; }
        if (v->flags & (VM_SEQ_READ | VM_RAND_READ)) continue;
        if (young) { referenced++; *vm_flags |= v->flags; }
    }
    return referenced;
}

/* folio_check_references() */
static enum folio_references folio_check_references(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    uint32_t vm_flags;
    int referenced_ptes = folio_referenced(e, id, &vm_flags);
    enum folio_references ret;
    if (vm_flags & MAP_F_LOCKED) {
        f->flags |= PG_unevictable;                   /* now marked mlocked: to the unevictable list */
        ret = FOLIOREF_ACTIVATE;
    } else {
        int referenced_folio = f->flags & PG_referenced;
        f->flags &= ~PG_referenced;
        if (referenced_ptes) {
            /* mapped folios start with a PTE reference from the faulting access: look twice */
            f->flags |= PG_referenced;
            if (referenced_folio || referenced_ptes > 1) ret = FOLIOREF_ACTIVATE;
            else if ((vm_flags & MAP_F_EXEC) && folio_is_file_lru(f)) ret = FOLIOREF_ACTIVATE;
            else ret = FOLIOREF_KEEP;
        } else if (referenced_folio && folio_is_file_lru(f)) {
            ret = FOLIOREF_RECLAIM_CLEAN;
        } else {
            ret = FOLIOREF_RECLAIM;
        }
    }
    if (e->policy->check_references) ret = e->policy->check_references(e, id, ret);
    return ret;
}

/* try_to_unmap(): clear every PTE mapping the folio; anonymous PTEs become swap entries. */
static void try_to_unmap(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    struct object *o = &e->objs[f->obj];
    if (f->mapcount <= 0) return;
    int anon = o->kind == OBJ_ANON;
    for (int i = 0; i < o->nvmas && f->mapcount > 0; i++) {
        struct vma *v = &e->vmas[o->vmas[i]];
        int64_t first, n;
        if (!v->alive || !folio_vma_range(f, v, anon, &first, &n)) continue;
        uint8_t *p = v->pte + first;
        int64_t unmapped = 0, k = 0;
        for (; k + 8 <= n; k += 8) {                       /* eight PTEs at a time */
            uint64_t w;
            memcpy(&w, p + k, 8);
            uint64_t m = w ? pte_match(w, anon) : 0;
            if (!m) continue;
            unmapped += __builtin_popcountll(m);
            w &= ~(m * 0xff);                              /* clear the matching bytes */
            memcpy(p + k, &w, 8);
        }
        for (; k < n; k++)
            if (pte_match(p[k], anon)) { p[k] = 0; unmapped++; }
        f->mapcount -= (int32_t)unmapped;
        e->tasks[v->task].rss -= unmapped;
    }
    f->mapcount = 0;
}

/* The task's own reclaim takes ns of its time (kswapd's is nobody's): on its clock, and counted. */
static void reclaim_time(struct km_emu *e, int64_t ns)
{
    task_time(e, ns);
    count(e, VM_stall_reclaim_ns, ns);
}

/* Reclaim one isolated folio that is to go: unmap, swap out (anon), remove, free. Returns 1 if freed. */
int folio_evict(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    struct object *o = &e->objs[f->obj];
    int32_t slot = -1;
    if (f->flags & PG_swapbacked) {
        /* add_to_swap() + pageout() -> zram_write(): synchronous, so the folio is freed now */
        int r = zram_write(e, f->cls, &slot);
        if (r < 0) return 0;
        if (class_is_kv(o->cls)) count(e, VM_kv_swapout_pages, 1);
        if (r == 1) {
            count(e, VM_swpout_zero, 1);                 /* swap_zeromap_folio_set(): no I/O */
        } else {
            count(e, VM_pswpout, 1);
            count(e, VM_pgpgout, 1);
            if (e->in_sync_reclaim) {                    /* compressed while waiting */
                count(e, VM_stall_reclaim_swapout, 1);
                reclaim_time(e, e->cfg.swapout_ns);
            }
        }
    }
    try_to_unmap(e, id);
    uint64_t shadow = workingset_eviction(e, id);         /* __remove_mapping() */
    if (f->flags & PG_swapbacked) {
        o->folio[f->index] = -1;
        o->swap[f->index] = slot;
        o->shadow[f->index] = shadow;
        o->nr_resident--;
    } else {
        int64_t pages = folio_nr_pages(f);
        filemap_remove_folio(e, id, shadow);
        if (e->in_sync_reclaim) {                        /* the reclaimer's own time */
            count(e, VM_stall_reclaim_file_folios, 1);
            count(e, VM_stall_reclaim_file_pages, pages);
            reclaim_time(e, e->cfg.file_folio_ns + pages * e->cfg.file_page_ns);
        }
    }
    folio_free(e, id);
    return 1;
}

/* shrink_folio_list(): decide each isolated folio's fate. Survivors go back to the lists (the
 * move_folios_to_lru() half lives here too; with sc->lru_gen_keep, MGLRU's evict_folios() takes them
 * back instead). Returns pages reclaimed; *nr_pageout pages written. */
static int64_t shrink_folio_list(struct km_emu *e, folio_id *list, int64_t n, struct scan_control *sc,
                                 int64_t *nr_pageout, int64_t *nr_activate)
{
    int64_t reclaimed = 0;
    for (int64_t i = 0; i < n; i++) {
        folio_id id = list[i];
        struct folio *f = &e->folios[id];
        int nr = folio_nr_pages(f);
        /* folio_trylock() fails on a folio under read (readahead): keep, references untouched */
        int busy = (f->flags & PG_locked) != 0;
        enum folio_references ref = busy ? FOLIOREF_KEEP
                                  : sc->ignore_references ? FOLIOREF_RECLAIM
                                  /* MGLRU: folio_update_gen() tried to promote this page? (keep_locked) */
                                  : e->lru_gen_enabled && f->mapcount > 0 && (f->flags & PG_referenced) ? FOLIOREF_KEEP
                                  : folio_check_references(e, id);
        if ((ref == FOLIOREF_RECLAIM || ref == FOLIOREF_RECLAIM_CLEAN) && e->policy->reclaim_candidate &&
            !sc->ignore_references && !e->policy->reclaim_candidate(e, id, sc)) {
            sc->deferred += nr;
            ref = FOLIOREF_KEEP;
        }
        if ((ref == FOLIOREF_RECLAIM || ref == FOLIOREF_RECLAIM_CLEAN) && (f->flags & PG_pinned)) {
            ref = FOLIOREF_KEEP;                         /* __remove_mapping(): extra reference, keep */
            busy = 1;
        }
        /* what the kernel's mm_vmscan_lru_shrink_inactive leaves unnamed: scanned, not reclaimed,
         * activated nor kept by reference */
        if (busy && !(f->flags & PG_swapbacked)) count(e, VM_file_scan_busy, nr);
        if (ref == FOLIOREF_RECLAIM || ref == FOLIOREF_RECLAIM_CLEAN) {
            int anon = f->flags & PG_swapbacked;
            if (anon && !sc->may_swap) {
                ref = FOLIOREF_ACTIVATE;                 /* no swap: activate_locked */
            } else if (folio_evict(e, id)) {
                reclaimed += nr;
                if (anon) *nr_pageout += nr;
                continue;
            } else {
                ref = FOLIOREF_ACTIVATE;                 /* swap full: activate_locked_split */
            }
        }
        if (ref == FOLIOREF_ACTIVATE) {
            if (!(f->flags & PG_unevictable)) {
                f->flags |= PG_active;
                *nr_activate += nr;
                count(e, VM_pgactivate, nr);
                workingset_age_nonresident(e, nr);       /* move_folios_to_lru() */
            }
        }
        if (sc->lru_gen_keep) { list[sc->nr_kept++] = id; continue; }   /* evict_folios() puts it back */
        lruvec_add_folio(e, id, folio_lru_list(f));
    }
    return reclaimed;
}

/* shrink_folio_list() for MGLRU's evict_folios() (lru_gen.c); the classic callers keep theirs static */
int64_t lru_gen_shrink_folio_list(struct km_emu *e, folio_id *list, int64_t n, struct scan_control *sc,
                                  int64_t *nr_pageout, int64_t *nr_activate)
{
    return shrink_folio_list(e, list, n, sc, nr_pageout, nr_activate);
}

/* isolate_lru_folios(): take up to nr_to_scan pages' worth from the tail. As the kernel does, in
 * batches (nr_to_scan is at most SWAP_CLUSTER_MAX from shrink_lruvec()): the batch's folios are
 * found by following the links from the tail first, each folio fetched as it is found, so the
 * folios' cache misses overlap instead of coming one after another; then they are taken off in the
 * same order, as many as the pages allow (a folio is at least a page: never more than nr_to_scan
 * folios). The same folios as taking the tail one at a time. */
#define ISOLATE_BATCH SWAP_CLUSTER_MAX
static int64_t isolate_lru_folios(struct km_emu *e, int lru, int64_t nr_to_scan, folio_id **buf,
                                  int64_t *cap, int64_t *nr_scanned)
{
    int64_t n = 0, scanned = 0;
    while (scanned < nr_to_scan && e->lru[lru].tail >= 0) {
        folio_id batch[ISOLATE_BATCH];
        int64_t want = nr_to_scan - scanned < ISOLATE_BATCH ? nr_to_scan - scanned : ISOLATE_BATCH, nb = 0;
        for (folio_id id = e->lru[lru].tail; id >= 0 && nb < want; id = e->links[id].prev) {
            __builtin_prefetch(&e->folios[id], 1);
            batch[nb++] = id;
        }
        for (int64_t i = 0; i < nb && scanned < nr_to_scan; i++) {
            folio_id id = batch[i];
            scanned += folio_nr_pages(&e->folios[id]);
            lruvec_del_folio(e, id);
            if (n == *cap) { *cap = *cap ? *cap * 2 : 64; *buf = realloc(*buf, sizeof(folio_id) * *cap); }
            (*buf)[n++] = id;
        }
    }
    *nr_scanned = scanned;
    return n;
}

static const int scan_item[] = { VM_pgscan_kswapd, VM_pgscan_direct, VM_pgscan_memcg };
static const int steal_item[] = { VM_pgsteal_kswapd, VM_pgsteal_direct, VM_pgsteal_memcg };

/* shrink_inactive_list() */
static int64_t shrink_inactive_list(struct km_emu *e, int64_t nr_to_scan, struct scan_control *sc, int lru)
{
    static __thread folio_id *buf;
    static __thread int64_t cap;
    int64_t nr_scanned;
    int file = is_file_lru(lru);
    bio_poll(e);
    int64_t n = isolate_lru_folios(e, lru, nr_to_scan, &buf, &cap, &nr_scanned);
    if (!n) return 0;
    count(e, scan_item[sc->who], nr_scanned);
    if (sc->who != RECLAIM_KSWAPD) {
        count(e, VM_stall_reclaim_scanned, nr_scanned);
        count(e, VM_stall_reclaim_lists, 1);
        reclaim_time(e, nr_scanned * e->cfg.scan_ns + e->cfg.list_ns);
    }
    count(e, file ? VM_pgscan_file : VM_pgscan_anon, nr_scanned);
    sc->nr_scanned += nr_scanned;
    int64_t nr_pageout = 0, nr_activate = 0;
    int64_t reclaimed = shrink_folio_list(e, buf, n, sc, &nr_pageout, &nr_activate);
    count(e, steal_item[sc->who], reclaimed);
    count(e, file ? VM_pgsteal_file : VM_pgsteal_anon, reclaimed);
    lru_note_cost(e, file, nr_pageout, nr_scanned - reclaimed);
    return reclaimed;
}

/* shrink_active_list(): deactivate from the tail, except referenced executable file folios (and
 * whatever a policy wants kept), which get another trip around the active list. */
static void shrink_active_list(struct km_emu *e, int64_t nr_to_scan, struct scan_control *sc, int lru)
{
    static __thread folio_id *buf;
    static __thread int64_t cap;
    int64_t nr_scanned, nr_rotated = 0, nr_deactivate = 0;
    int file = is_file_lru(lru);
    int64_t n = isolate_lru_folios(e, lru, nr_to_scan, &buf, &cap, &nr_scanned);
    count(e, VM_pgrefill, nr_scanned);
    /* l_active and l_inactive are put back in isolation order, each at its list head */
    for (int64_t i = 0; i < n; i++) {
        folio_id id = buf[i];
        struct folio *f = &e->folios[id];
        uint32_t vm_flags;
        int keep = 0;
        if (folio_referenced(e, id, &vm_flags) && (vm_flags & MAP_F_EXEC) && folio_is_file_lru(f))
            keep = 1;
        if (e->policy->keep_active && e->policy->keep_active(e, id)) keep = 1;
        if (keep) {
            nr_rotated += folio_nr_pages(f);
            lruvec_add_folio(e, id, lru);
            continue;
        }
        f->flags &= ~PG_active;
        f->flags |= PG_workingset;
        nr_deactivate += folio_nr_pages(f);
        lruvec_add_folio(e, id, lru - LRU_ACTIVE);
    }
    count(e, VM_pgdeactivate, nr_deactivate);
    lru_note_cost(e, file, 0, nr_rotated);
}

static int64_t shrink_list(struct km_emu *e, int lru, int64_t nr_to_scan, struct scan_control *sc)
{
    if (is_active_lru(lru)) {
        if (sc->may_deactivate & (is_file_lru(lru) ? DEACTIVATE_FILE : DEACTIVATE_ANON))
            shrink_active_list(e, nr_to_scan, sc, lru);
        else
            sc->skipped_deactivate = 1;
        return 0;
    }
    return shrink_inactive_list(e, nr_to_scan, sc, lru);
}

static int can_reclaim_anon_pages(struct km_emu *e) { return mem_cgroup_get_nr_swap_pages(e) > 0; }

enum scan_balance { SCAN_EQUAL, SCAN_FRACT, SCAN_ANON, SCAN_FILE };

/* get_scan_count(): how many pages of each list to scan at this priority. */
static void get_scan_count(struct km_emu *e, struct scan_control *sc, int64_t nr[NR_LRU_LISTS])
{
    int swappiness = e->cfg.swappiness;
    int64_t fraction[2] = {0, 0}, denominator = 1;
    enum scan_balance balance;
    if (!sc->may_swap || !can_reclaim_anon_pages(e)) balance = SCAN_FILE;
    else if (sc->who == RECLAIM_MEMCG && !swappiness) balance = SCAN_FILE;
    else if (!sc->priority && swappiness) balance = SCAN_EQUAL;
    else if (sc->file_is_tiny) balance = SCAN_ANON;
    else if (sc->cache_trim_mode) balance = SCAN_FILE;
    else {
        balance = SCAN_FRACT;
        int64_t total_cost = sc->anon_cost + sc->file_cost;
        int64_t anon_cost = total_cost + sc->anon_cost;
        int64_t file_cost = total_cost + sc->file_cost;
        total_cost = anon_cost + file_cost;
        int64_t ap = swappiness * (total_cost + 1) / (anon_cost + 1);
        int64_t fp = (MAX_SWAPPINESS - swappiness) * (total_cost + 1) / (file_cost + 1);
        fraction[0] = ap;
        fraction[1] = fp;
        denominator = ap + fp;
    }
    for (int lru = 0; lru < LRU_UNEVICTABLE; lru++) {
        int file = is_file_lru(lru);
        int64_t scan = e->lru[lru].nr_pages >> sc->priority;
        switch (balance) {
        case SCAN_EQUAL: break;
        case SCAN_FRACT: scan = denominator ? scan * fraction[file] / denominator : 0; break;
        case SCAN_FILE: if (!file) scan = 0; break;
        case SCAN_ANON: if (file) scan = 0; break;
        }
        nr[lru] = scan;
    }
}

/* shrink_lruvec() */
static void shrink_lruvec(struct km_emu *e, struct scan_control *sc)
{
    int64_t nr[NR_LRU_LISTS] = {0}, targets[NR_LRU_LISTS];
    int64_t nr_reclaimed = 0, nr_to_reclaim = sc->nr_to_reclaim;
    get_scan_count(e, sc, nr);
    for (int l = 0; l < NR_LRU_LISTS; l++) targets[l] = nr[l];
    int proportional_reclaim = sc->who == RECLAIM_DIRECT && sc->priority == DEF_PRIORITY;
    while (nr[LRU_INACTIVE_ANON] || nr[LRU_ACTIVE_FILE] || nr[LRU_INACTIVE_FILE]) {
        for (int lru = 0; lru < LRU_UNEVICTABLE; lru++) {
            if (nr[lru]) {
                int64_t nr_to_scan = nr[lru] < SWAP_CLUSTER_MAX ? nr[lru] : SWAP_CLUSTER_MAX;
                nr[lru] -= nr_to_scan;
                nr_reclaimed += shrink_list(e, lru, nr_to_scan, sc);
            }
        }
        if (nr_reclaimed < nr_to_reclaim || proportional_reclaim) continue;
        /* scan the lists proportionally to what get_scan_count() asked, then stop */
        int64_t nr_file = nr[LRU_INACTIVE_FILE] + nr[LRU_ACTIVE_FILE];
        int64_t nr_anon = nr[LRU_INACTIVE_ANON] + nr[LRU_ACTIVE_ANON];
        if (!nr_file || !nr_anon) break;
        int lru;
        int64_t percentage;
        if (nr_file > nr_anon) {
            int64_t scan_target = targets[LRU_INACTIVE_ANON] + targets[LRU_ACTIVE_ANON] + 1;
            lru = 0;
            percentage = nr_anon * 100 / scan_target;
        } else {
            int64_t scan_target = targets[LRU_INACTIVE_FILE] + targets[LRU_ACTIVE_FILE] + 1;
            lru = LRU_FILE;
            percentage = nr_file * 100 / scan_target;
        }
        nr[lru] = 0;
        nr[lru + LRU_ACTIVE] = 0;
        lru = (lru == LRU_FILE) ? 0 : LRU_FILE;
        int64_t nr_scanned = targets[lru] - nr[lru];
        nr[lru] = targets[lru] * (100 - percentage) / 100;
        nr[lru] -= nr[lru] < nr_scanned ? nr[lru] : nr_scanned;
        lru += LRU_ACTIVE;
        nr_scanned = targets[lru] - nr[lru];
        nr[lru] = targets[lru] * (100 - percentage) / 100;
        nr[lru] -= nr[lru] < nr_scanned ? nr[lru] : nr_scanned;
    }
    sc->nr_reclaimed += nr_reclaimed;
    /* keep enough anon reclaim candidates for the next cycle */
    if (can_reclaim_anon_pages(e) && inactive_is_low(e, LRU_INACTIVE_ANON))
        shrink_active_list(e, SWAP_CLUSTER_MAX, sc, LRU_ACTIVE_ANON);
}

/* prepare_scan_control() + shrink_node() */
static void shrink_node(struct km_emu *e, struct scan_control *sc)
{
    if (e->lru_gen_enabled) { lru_gen_shrink_node(e, sc); return; }   /* lru_gen.c */
    sc->anon_cost = e->anon_cost;
    sc->file_cost = e->file_cost;
    /* refaults since the last cycle mean a new workingset: deactivate stale active pages */
    if (!sc->force_deactivate) {
        uint64_t ra = lruvec_page_state(e, WORKINGSET_ACTIVATE_BASE);
        uint64_t rf = lruvec_page_state(e, WORKINGSET_ACTIVATE_BASE + 1);
        sc->may_deactivate = 0;
        if (ra != e->refaults_snap[0] || inactive_is_low(e, LRU_INACTIVE_ANON)) sc->may_deactivate |= DEACTIVATE_ANON;
        if (rf != e->refaults_snap[1] || inactive_is_low(e, LRU_INACTIVE_FILE)) sc->may_deactivate |= DEACTIVATE_FILE;
    } else {
        sc->may_deactivate = DEACTIVATE_ANON | DEACTIVATE_FILE;
    }
    int64_t file = lruvec_page_state(e, LRU_INACTIVE_FILE);
    sc->cache_trim_mode = (file >> sc->priority) && !(sc->may_deactivate & DEACTIVATE_FILE);
    sc->file_is_tiny = 0;
    if (sc->who != RECLAIM_MEMCG && e->total_pages) {
        int64_t free = free_pages(e);
        int64_t f = e->lru[LRU_ACTIVE_FILE].nr_pages + e->lru[LRU_INACTIVE_FILE].nr_pages;
        int64_t anon = e->lru[LRU_INACTIVE_ANON].nr_pages;
        sc->file_is_tiny = f + free <= e->wmark_high && !(sc->may_deactivate & DEACTIVATE_ANON) &&
                           (anon >> sc->priority);
    }
    shrink_lruvec(e, sc);
}

/* Not in the kernel: when a policy deferred candidates and even the last priorities (which scan
 * whole lists) fell short, scan once more with last_resort set, so deferral never becomes an OOM. */
static void shrink_node_policy(struct km_emu *e, struct scan_control *sc)
{
    sc->deferred = 0;
    shrink_node(e, sc);
    if (sc->deferred && sc->nr_reclaimed < sc->nr_to_reclaim && sc->priority <= 1) {
        sc->last_resort = 1;
        shrink_node(e, sc);
        sc->last_resort = 0;
    }
}

/* snapshot_refaults() */
static void snapshot_refaults(struct km_emu *e)
{
    e->refaults_snap[0] = lruvec_page_state(e, WORKINGSET_ACTIVATE_BASE);
    e->refaults_snap[1] = lruvec_page_state(e, WORKINGSET_ACTIVATE_BASE + 1);
}

/* do_try_to_free_pages(): raise the priority until enough is reclaimed. Direct reclaim
 * (try_to_free_pages) and memcg reclaim (try_to_free_mem_cgroup_pages) both come here. */
int64_t try_to_free_pages(struct km_emu *e, int64_t nr, int who)
{
    if (e->policy->reclaim) {
        int64_t r = e->policy->reclaim(e, nr, who);
        if (r >= 0) return r;
    }
    struct scan_control sc = {0};
    sc.nr_to_reclaim = nr > SWAP_CLUSTER_MAX ? nr : SWAP_CLUSTER_MAX;
    sc.may_swap = 1;
    sc.may_unmap = 1;
    sc.who = who;
    count(e, VM_reclaim_runs, 1);
    if (who == RECLAIM_DIRECT) count(e, VM_allocstall, 1);
    int outer = e->in_sync_reclaim;
    e->in_sync_reclaim = 1;
retry:
    for (sc.priority = DEF_PRIORITY; sc.priority >= 0; sc.priority--) {
        shrink_node_policy(e, &sc);
        if (sc.nr_reclaimed >= sc.nr_to_reclaim) break;
    }
    snapshot_refaults(e);
    /* Nothing reclaimed, and an active list was left alone because its ratio looked fine (as of
     * the memcg statistics' last flush: lruvec_page_state()): retry deactivating regardless. */
    if (!sc.nr_reclaimed && sc.skipped_deactivate) {
        sc.force_deactivate = 1;
        sc.skipped_deactivate = 0;
        goto retry;
    }
    e->in_sync_reclaim = outer;
    return sc.nr_reclaimed;
}

/* balance_pgdat(): kswapd reclaims until free pages reach the high watermark. We run it to
 * completion when woken (the kernel runs it beside the allocating tasks). */
int64_t balance_pgdat(struct km_emu *e)
{
    if (e->policy->reclaim) {
        int64_t r = e->policy->reclaim(e, e->wmark_high - free_pages(e), RECLAIM_KSWAPD);
        if (r >= 0) return r;
    }
    struct scan_control sc = {0};
    sc.may_swap = 1;
    sc.may_unmap = 1;
    sc.who = RECLAIM_KSWAPD;
    sc.priority = DEF_PRIORITY;
    int64_t total = 0;
    count(e, VM_reclaim_runs, 1);
    while (free_pages(e) < e->wmark_high && sc.priority >= 1) {
        if (e->lru_gen_enabled) lru_gen_age_node(e, &sc);   /* kswapd_age_node() */
        sc.nr_to_reclaim = e->wmark_high > SWAP_CLUSTER_MAX ? e->wmark_high : SWAP_CLUSTER_MAX;
        sc.nr_scanned = 0;
        int64_t before = sc.nr_reclaimed;
        shrink_node_policy(e, &sc);
        total += sc.nr_reclaimed - before;
        /* kswapd_shrink_node(): keep the priority while scanning enough; raise it otherwise */
        if (sc.nr_scanned < sc.nr_to_reclaim || sc.nr_reclaimed == before) sc.priority--;
        sc.nr_reclaimed = 0;
    }
    snapshot_refaults(e);
    return total;
}

/* reclaim_pages(): MADV_PAGEOUT reclaims the given folios ignoring references. */
int64_t reclaim_pages(struct km_emu *e, folio_id *ids, int64_t n)
{
    struct scan_control sc = {0};
    sc.may_swap = 1; sc.may_unmap = 1; sc.ignore_references = 1; sc.who = RECLAIM_DIRECT;
    int64_t nr_pageout = 0, nr_activate = 0;
    for (int64_t i = 0; i < n; i++) {
        lruvec_del_folio(e, ids[i]);
        if (e->lru_gen_enabled) e->folios[ids[i]].flags &= ~PG_active;   /* folio_clear_active() */
    }
    int outer = e->in_sync_reclaim;
    e->in_sync_reclaim = 1;                          /* the madvise caller compresses */
    int64_t r = shrink_folio_list(e, ids, n, &sc, &nr_pageout, &nr_activate);
    e->in_sync_reclaim = outer;
    return r;
}
