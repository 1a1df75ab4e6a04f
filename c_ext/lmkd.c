/* Android's lmkd (system/memory/lmkd/lmkd.cpp), as it decides with PSI monitors: mp_event_psi().
 *
 * lmkd is a user-space daemon woken by PSI memory-pressure events; it reads /proc/vmstat, meminfo
 * and zoneinfo and kills when one of its conditions holds, never merely because reclaim is running:
 * - swap low (free swap below swap_free_low_percentage of total) and the page cache thrashing
 *   (LOW_SWAP_AND_THRASHING), or swap low and free memory below the high watermark (LOW_MEM_AND_SWAP);
 * - free memory below the high watermark and thrashing above thrashing_limit (LOW_MEM_AND_THRASHING),
 *   or direct reclaim and thrashing (DIRECT_RECL_AND_THRASHING): each such kill cuts the limit by
 *   thrashing_limit_decay until the window resets;
 * - still below the low watermark on the poll after a kill (PRESSURE_AFTER_KILL);
 * - a complete stall, every task blocked on memory (NOT_RESPONDING): here, direct reclaim that can
 *   make no progress, where the kernel would otherwise reach its OOM killer.
 * Thrashing is workingset_refault_file since the window (1 s) began, as a percentage of the file LRU
 * at its start, plus the previous window's, halved per window passed. Perceptible and more important
 * processes (oom_score_adj <= 200) are spared unless below the min watermark or thrashing above
 * thrashing_limit_critical. find_and_kill_process() then kills from oom_score_adj 1000 down.
 *
 * PSI events come while reclaim is running: kswapd's balance_pgdat() runs under psi_memstall_enter().
 * kswapd's work is instantaneous here, so lmkd is polled when kswapd wakes, with free memory as it
 * woke kswapd (below the low watermark), and at most every PSI_POLL_PERIOD_SHORT_MS of trace time. */
#include "mm.h"

/* lmkd's defaults for a device that is not ro.config.low_ram (lmkd.cpp, ro.lmk.* properties). */
#define THRASHING_LIMIT_PCT 100            /* ro.lmk.thrashing_limit */
#define THRASHING_LIMIT_DECAY_PCT 10       /* ro.lmk.thrashing_limit_decay */
#define THRASHING_CRITICAL_PCT (2 * THRASHING_LIMIT_PCT)   /* ro.lmk.thrashing_limit_critical */
#define SWAP_FREE_LOW_PCT 10               /* ro.lmk.swap_free_low_percentage */
#define THRASHING_RESET_INTERVAL_NS 1000000000LL
#define PSI_POLL_PERIOD_SHORT_NS 10000000LL
#define PERCEPTIBLE_APP_ADJ 200

enum { WMARK_MIN, WMARK_LOW, WMARK_HIGH, WMARK_NONE };   /* get_lowest_watermark() */

int lmkd_watermark(const struct km_emu *e, int64_t free)
{
    if (free < e->wmark_min) return WMARK_MIN;
    if (free < e->wmark_low) return WMARK_LOW;
    if (free < e->wmark_high) return WMARK_HIGH;
    return WMARK_NONE;
}

/* find_and_kill_process(): from oom_score_adj 1000 down to min_score_adj. Within one score, a
 * background process (above PERCEPTIBLE_APP_ADJ) is taken from the tail of its adj slot list, the one
 * that has held that score longest (proc_adj_tail()); a perceptible or more important one is the
 * heaviest by resident pages (proc_get_heaviest(), "to hopefully minimize the number of victims"). */
static int find_and_kill_process(struct km_emu *e, int min_score_adj, int reason)
{
    int32_t victim = -1;
    for (int32_t t = 0; t < e->nr_tasks; t++) {
        const struct task *ts = &e->tasks[t], *v = victim >= 0 ? &e->tasks[victim] : NULL;
        if (!ts->alive || ts->oom_score_adj < min_score_adj) continue;
        if (ts->oom_score_adj <= PERCEPTIBLE_APP_ADJ && ts->rss <= 0) continue;
        if (!v || ts->oom_score_adj > v->oom_score_adj ||
            (ts->oom_score_adj == v->oom_score_adj &&
             (ts->oom_score_adj > PERCEPTIBLE_APP_ADJ ? ts->adj_seq < v->adj_seq : ts->rss > v->rss)))
            victim = t;
    }
    if (victim < 0) return 0;
    count(e, VM_lmk_kill, 1);
    oom_kill_process(e, victim, KILLED_BY_LMKD + reason);
    return 1;
}

/* One poll of mp_event_psi(): `wmark` is where free memory stood when pressure woke lmkd.
 * Returns 1 if it killed. */
int lmkd_poll(struct km_emu *e, int wmark)
{
    struct lmkd *l = &e->lmkd;
    if (l->polled && e->now - l->last_poll < PSI_POLL_PERIOD_SHORT_NS) return 0;
    int cycle_after_kill = l->killing;
    l->killing = 0;
    l->last_poll = e->now;
    int64_t refault = (int64_t)e->vm[VM_workingset_refault_file];
    int64_t file_lru = e->lru[LRU_INACTIVE_FILE].nr_pages + e->lru[LRU_ACTIVE_FILE].nr_pages;
    if (!l->polled) {                  /* lmkd's first event: the window starts here */
        l->polled = 1;
        l->reset_t = e->now;
        l->init_ws_refault = l->prev_refault = refault;
        l->base_file_lru = file_lru;
        l->thrashing_limit = THRASHING_LIMIT_PCT;
    }
    int swap_is_low = e->zram_disk_pages && e->zram_nr_free < e->zram_disk_pages * SWAP_FREE_LOW_PCT / 100;

    int direct = 0;                    /* reclaim state: bail out when nothing reclaims or refaults */
    if ((int64_t)e->vm[VM_pgscan_direct] > l->init_pgscan_direct) {
        l->init_pgscan_direct = (int64_t)e->vm[VM_pgscan_direct];
        l->init_pgscan_kswapd = (int64_t)e->vm[VM_pgscan_kswapd];
        direct = 1;
    } else if ((int64_t)e->vm[VM_pgscan_kswapd] > l->init_pgscan_kswapd) {
        l->init_pgscan_kswapd = (int64_t)e->vm[VM_pgscan_kswapd];
    } else if (refault == l->prev_refault) {
        return 0;
    }
    l->prev_refault = refault;

    int64_t thrashing = 0, since = e->now - l->reset_t;
    if (since > THRASHING_RESET_INTERVAL_NS) {
        int64_t windows = since / THRASHING_RESET_INTERVAL_NS;
        l->prev_thrash_growth = (refault - l->init_ws_refault) * 100 / (l->base_file_lru + 1);
        /* decay it, unless over-the-limit thrashing found nothing to kill in the window just past */
        if (windows > 1 || l->prev_thrash_growth < l->thrashing_limit)
            l->prev_thrash_growth = windows >= 63 ? 0 : l->prev_thrash_growth >> windows;
        l->base_file_lru = file_lru;
        l->init_ws_refault = refault;
        l->reset_t = e->now;
        l->thrashing_limit = THRASHING_LIMIT_PCT;
    } else {
        thrashing = (refault - l->init_ws_refault) * 100 / (l->base_file_lru + 1);
    }
    thrashing += l->prev_thrash_growth;

    int reason = -1, min_adj = 0, cut = 0;
    if (cycle_after_kill && wmark < WMARK_LOW) {
        reason = LMKD_PRESSURE_AFTER_KILL;
    } else if (swap_is_low && thrashing > THRASHING_LIMIT_PCT) {
        reason = LMKD_LOW_SWAP_AND_THRASHING;
        if (wmark > WMARK_MIN && thrashing < THRASHING_CRITICAL_PCT) min_adj = PERCEPTIBLE_APP_ADJ + 1;
    } else if (swap_is_low && wmark < WMARK_HIGH) {
        reason = LMKD_LOW_MEM_AND_SWAP;
        if (wmark > WMARK_MIN && thrashing < THRASHING_CRITICAL_PCT) min_adj = PERCEPTIBLE_APP_ADJ + 1;
    } else if (wmark < WMARK_HIGH && thrashing > l->thrashing_limit) {
        reason = LMKD_LOW_MEM_AND_THRASHING;
        cut = 1;
        if (thrashing < THRASHING_CRITICAL_PCT) min_adj = PERCEPTIBLE_APP_ADJ + 1;
    } else if (direct && thrashing > l->thrashing_limit) {
        reason = LMKD_DIRECT_RECL_AND_THRASHING;
        cut = 1;
        if (thrashing < THRASHING_CRITICAL_PCT) min_adj = PERCEPTIBLE_APP_ADJ + 1;
    }
    if (reason < 0 || !find_and_kill_process(e, min_adj, reason)) return 0;
    l->killing = 1;
    if (cut) l->thrashing_limit = l->thrashing_limit * (100 - THRASHING_LIMIT_DECAY_PCT) / 100;
    return 1;
}

/* NOT_RESPONDING: PSI's critical level (a complete stall) while direct reclaim makes no progress. */
int lmkd_not_responding(struct km_emu *e)
{
    if (!find_and_kill_process(e, 0, LMKD_NOT_RESPONDING)) return 0;
    e->lmkd.killing = 1;
    e->lmkd.last_poll = e->now;
    return 1;
}

#define LMKD_NAME(n) #n,
static const char *const reason_names[] = { LMKD_REASONS(LMKD_NAME) };
int32_t km_nr_lmkd_reasons(void) { return NR_LMKD_REASONS; }
const char *km_lmkd_reason(int32_t i) { return i >= 0 && i < NR_LMKD_REASONS ? reason_names[i] : "?"; }
