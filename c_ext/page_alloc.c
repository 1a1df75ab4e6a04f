/* Free memory and watermarks (mm/page_alloc.c): folio structs, kswapd wake-up, direct reclaim. */
#include <stdlib.h>
#include "mm.h"


/* __setup_per_zone_wmarks(), with min_free_kbytes from init_per_zone_wmark_min() when unset. */
void setup_per_zone_wmarks(struct km_emu *e)
{
    if (!e->total_pages) return;
    int64_t min_kb = e->cfg.min_free_kbytes;
    if (min_kb < 0) { e->wmark_min = e->wmark_low = e->wmark_high = 0; return; }   /* none */
    if (!min_kb) {
        int64_t lowmem_kb = e->total_pages * 4, r = 0;
        while ((r + 1) * (r + 1) <= lowmem_kb * 16) r++;
        min_kb = r < 128 ? 128 : r > 262144 ? 262144 : r;
    }
    int wsf = e->cfg.watermark_scale_factor ? e->cfg.watermark_scale_factor : 10;
    e->wmark_min = min_kb / 4;
    int64_t tmp = e->wmark_min >> 2, scaled = e->total_pages * wsf / 10000;
    if (scaled > tmp) tmp = scaled;
    e->wmark_low = e->wmark_min + tmp;
    e->wmark_high = e->wmark_low + tmp;
}

folio_id folio_alloc(struct km_emu *e, int order)
{
    folio_id id = e->free_folio;
    if (id >= 0) {
        e->free_folio = e->folios[id].next;
    } else {
        if (e->nr_folios == e->cap_folios) {
            e->cap_folios = e->cap_folios ? e->cap_folios * 2 : 4096;
            e->folios = realloc(e->folios, sizeof(struct folio) * e->cap_folios);
        }
        id = (folio_id)e->nr_folios++;
    }
    struct folio *f = &e->folios[id];
    f->prev = f->next = -1;
    f->obj = -1;
    f->index = 0;
    f->flags = 0;
    f->order = (uint8_t)order;
    f->lru = NO_LRU;
    f->cls = 0;
    f->mapcount = 0;
    f->policy_count = 0;
    e->used_pages += 1 << order;
    note_peak(e);
    count(e, VM_pgalloc, 1 << order);
    return id;
}

void folio_free(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    int nr = folio_nr_pages(f);
    e->used_pages -= nr;
    mem_cgroup_uncharge(e, nr);
    count(e, VM_pgfree, nr);
    f->obj = -1;
    f->lru = NO_LRU;
    f->next = e->free_folio;
    e->free_folio = id;
}

void wakeup_kswapd(struct km_emu *e)
{
    if (e->kswapd_running) return;
    e->kswapd_running = 1;
    count(e, VM_kswapd_wake, 1);
    balance_pgdat(e);
    e->kswapd_running = 0;
}

/* The allocation path for nr pages (__alloc_pages_slowpath, simplified): memcg charge, which may
 * reclaim; below the low watermark wake kswapd; below min, lmkd (if configured) or direct reclaim,
 * and when reclaim makes no progress MAX_RECLAIM_RETRIES times, the OOM killer. Returns -1 if the
 * allocating task was killed or nothing could be freed. */
int alloc_pages_may_reclaim(struct km_emu *e, int64_t nr)
{
    if (e->memcg_limit && mem_cgroup_charge(e, nr) < 0) return -1;
    if (!e->total_pages) return 0;
    if (free_pages(e) - nr < e->wmark_low) wakeup_kswapd(e);
    int no_progress = 0;
    while (free_pages(e) - nr < e->wmark_min) {
        int killed = 0;
        if (e->cfg.lmk) killed = out_of_memory(e, 0) == 1;   /* lmkd kills before reclaim stalls */
        if (!killed) {
            if (try_to_free_pages(e, SWAP_CLUSTER_MAX, RECLAIM_DIRECT) > 0) { no_progress = 0; continue; }
            if (no_progress++ < MAX_RECLAIM_RETRIES) continue;
            killed = out_of_memory(e, 0) == 1;
        }
        if (!killed || (e->cur_task >= 0 && !e->tasks[e->cur_task].alive)) {
            mem_cgroup_uncharge(e, nr);
            return -1;
        }
        no_progress = 0;
    }
    return 0;
}
