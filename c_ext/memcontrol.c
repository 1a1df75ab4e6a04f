/* The memory cgroup (mm/memcontrol.c): charge at allocation, reclaim at the limit. The zram pool is
 * not charged to the cgroup; page cache is. */
#include "mm.h"

int64_t mem_cgroup_get_nr_swap_pages(const struct km_emu *e)
{
    return e->zram_disk_pages ? e->zram_disk_pages - e->zram_used_slots : 0;
}

void mem_cgroup_uncharge(struct km_emu *e, int64_t nr)
{
    if (e->memcg_limit) e->memcg_usage -= nr;
}

/* try_charge_memcg() for a __GFP_NORETRY charge (readahead_gfp_mask(): readahead folios): one
 * try_to_free_mem_cgroup_pages(), then drain_all_stock() and a second; if the margin is still short of
 * nr, "goto nomem": the charge fails (-2, -ENOMEM) and the readahead stops short. */
int mem_cgroup_charge_noretry(struct km_emu *e, int64_t nr)
{
    for (int round = 0; e->memcg_usage + nr > e->memcg_limit; round++) {
        if (round == 2) return -2;
        try_to_free_pages(e, nr, RECLAIM_MEMCG);
    }
    e->memcg_usage += nr;
    return 0;
}

/* try_charge_memcg(): over the limit, try_to_free_mem_cgroup_pages() up to MAX_RECLAIM_RETRIES
 * times, then the memcg OOM killer. Returns -1 if the charging task died. */
int mem_cgroup_charge(struct km_emu *e, int64_t nr)
{
    int retries = MAX_RECLAIM_RETRIES;
    while (e->memcg_usage + nr > e->memcg_limit) {
        /* try_charge_memcg() asks for nr_pages (not the charge batch); the callee rounds up to
         * SWAP_CLUSTER_MAX */
        int64_t got = try_to_free_pages(e, nr, RECLAIM_MEMCG);   /* try_to_free_mem_cgroup_pages */
        if (e->memcg_usage + nr <= e->memcg_limit) break;
        if (got > 0 || retries-- > 0) continue;
        if (out_of_memory(e, 1) <= 0) return -1;          /* mem_cgroup_out_of_memory(): none to kill */
        if (e->cur_task >= 0 && !e->tasks[e->cur_task].alive) return -1;
        retries = MAX_RECLAIM_RETRIES;
    }
    e->memcg_usage += nr;
    return 0;
}

/* __memcg_kmem_charge_page() / __memcg_kmem_uncharge_page(): kernel pages allocated with
 * __GFP_ACCOUNT (page tables: GFP_PGTABLE_USER) count against the limit like folios, but sit on no
 * LRU, so reclaim cannot take them back. Simplified: the charge never reclaims by itself (it may
 * run over the limit by a few pages); the next folio's charge reclaims for both. */
void memcg_kmem_charge(struct km_emu *e, int64_t nr)
{
    if (e->kmem_off) return;
    e->kmem_pages += nr;
    if (e->memcg_limit) e->memcg_usage += nr;
    if (nr > 0) note_peak(e);
}

/* obj_cgroup_charge() / obj_cgroup_uncharge(): slab objects are charged in bytes; the page counter
 * moves in whole pages as the bytes cross page boundaries (the per-cpu obj_stock's remainder). */
void obj_cgroup_charge(struct km_emu *e, int64_t bytes)
{
    int64_t before = (e->kmem_obj_bytes + PAGE_SIZE - 1) / PAGE_SIZE;
    e->kmem_obj_bytes += bytes;
    memcg_kmem_charge(e, (e->kmem_obj_bytes + PAGE_SIZE - 1) / PAGE_SIZE - before);
}

/* lruvec_page_state(): a memcg's statistics are per-cpu deltas folded into its totals by an rstat
 * flush (mem_cgroup_flush_stats()), and reclaim reads the totals as of the last flush. Flushes come
 * from flush_memcg_stats_dwork() every FLUSH_TIME (2 s) and from readers of memory.stat, such as a
 * recorder sampling it; reclaim's own mem_cgroup_flush_stats_ratelimited() flushes only when the
 * periodic one is a full cycle late. So inactive_is_low(), prepare_scan_control()'s refault check
 * and workingset_test_recent()'s workingset size see the lists as they were up to one interval
 * (cfg.stats_flush_ns) ago; 0 reads them as they are. The periodic flush runs on a timer of its own,
 * so its phase against the run is the run's chance (cfg.stats_flush_phase_ns); until the first
 * flush the statistics are those of the memcg as the run starts: new, nothing charged. */
static int64_t memcg_stat_now(const struct km_emu *e, int item)
{
    if (item < NR_LRU_LISTS) return e->lru[item].nr_pages;
    return (int64_t)e->vm[item == WORKINGSET_ACTIVATE_BASE ? VM_workingset_activate_anon
                                                          : VM_workingset_activate_file];
}

/* flush_memcg_stats_dwork(), when due: checked at every event and every read, so the flushed copies
 * are the lists as they stood when it fell due (to within one event). */
void memcg_flush_stats_due(struct km_emu *e)
{
    int64_t t = io_clock(e);
    if (t < e->stat_next_flush) return;                  /* INT64_MAX when they are always fresh */
    for (int i = 0; i < NR_MEMCG_STATS; i++) e->stat[i] = memcg_stat_now(e, i);
    int64_t period = e->cfg.stats_flush_ns, phase = e->cfg.stats_flush_phase_ns;
    e->stat_next_flush = ((t - phase) / period + 1) * period + phase;
}

int64_t lruvec_page_state(struct km_emu *e, int item)
{
    if (e->cfg.stats_flush_ns <= 0) return memcg_stat_now(e, item);
    memcg_flush_stats_due(e);
    return e->stat[item];
}
