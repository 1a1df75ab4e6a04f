/* Free memory and watermarks (mm/page_alloc.c): folio structs, kswapd wake-up, direct reclaim. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "mm.h"

#define HPAGE_SIZE ((size_t)2 << 20)

/* Not the kernel's: the emulator's own memory. The per-page arrays (folios, page-cache slots,
 * PTEs) are read at random on every reference; with 4 KiB pages each such read is also a TLB miss.
 * Ask for transparent huge pages (THP is often "madvise" only) on the 2 MiB-aligned part of a
 * large array. A hint: it changes nothing but speed. */
void km_hugepage_hint(void *p, size_t bytes)
{
    if (bytes < HPAGE_SIZE) return;
    uintptr_t lo = ((uintptr_t)p + HPAGE_SIZE - 1) & ~(uintptr_t)(HPAGE_SIZE - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(HPAGE_SIZE - 1);
#ifdef MADV_HUGEPAGE
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#endif
}

/* Grow the folio array to cap entries. Cache-line aligned, so a 32-byte folio never straddles two
 * lines (glibc's large blocks start 16 bytes into a page); 2 MiB-aligned and huge-page hinted when
 * large. realloc() cannot keep an alignment, so copy. */
static void folios_grow(struct km_emu *e, int64_t cap)
{
    size_t bytes = sizeof(struct folio) * (size_t)cap;
    size_t align = bytes >= HPAGE_SIZE ? HPAGE_SIZE : 64;
    bytes = (bytes + align - 1) & ~(align - 1);           /* aligned_alloc wants a multiple */
    struct folio *n = aligned_alloc(align, bytes);
    if (!n) abort();
    km_hugepage_hint(n, bytes);
    if (e->nr_folios) memcpy(n, e->folios, sizeof(struct folio) * (size_t)e->nr_folios);
    free(e->folios);
    e->folios = n;
    e->cap_folios = cap;
    if (!(e->links = realloc(e->links, sizeof(struct lru_link) * (size_t)cap))) abort();
    km_hugepage_hint(e->links, sizeof(struct lru_link) * (size_t)cap);
    if (e->io_done && !(e->io_done = realloc(e->io_done, sizeof(int64_t) * (size_t)cap))) abort();
    if (e->added_at && !(e->added_at = realloc(e->added_at, sizeof(int64_t) * (size_t)cap))) abort();
}


/* __setup_per_zone_wmarks(), with min_free_kbytes from init_per_zone_wmark_min() when unset. */
void setup_per_zone_wmarks(struct km_emu *e)
{
    if (!e->total_pages) return;
    int64_t min_kb = e->cfg.min_free_kbytes;
    if (min_kb < 0) { e->wmark_min = e->wmark_low = e->wmark_high = 0; return; }   /* none */
    if (!min_kb) {
        int64_t lowmem_kb = e->total_pages * 4, r = 0;
        while (r <= 262144 && (r + 1) * (r + 1) <= lowmem_kb * 16) r++;   /* int_sqrt(), up to the cap */
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
        folio_id next = e->free_folio = e->links[id].next;
        /* reclaim frees folios in batches, so the free list is a chain through memory in no order:
         * ask now for what the next allocation will read and write */
        if (next >= 0) {
            __builtin_prefetch(&e->links[next]);
            __builtin_prefetch(&e->folios[next], 1);
        }
    } else {
        if (e->nr_folios == e->cap_folios) folios_grow(e, e->cap_folios ? e->cap_folios * 2 : 4096);
        id = (folio_id)e->nr_folios++;
    }
    struct folio *f = &e->folios[id];
    e->links[id].prev = e->links[id].next = -1;
    f->stamp = 0;
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
    e->links[id].next = e->free_folio;
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
 * reclaim; below the low watermark wake kswapd (and lmkd, if configured, looks: lmkd.c); below min,
 * direct reclaim, and when it makes no progress MAX_RECLAIM_RETRIES times, lmkd's critical kill or
 * the OOM killer. Returns -1 if the allocating task was killed or nothing could be freed. */
int alloc_pages_may_reclaim(struct km_emu *e, int64_t nr)
{
    return alloc_pages_gfp(e, nr, 0);
}

/* noretry (readahead_gfp_mask()'s __GFP_NORETRY): the memcg charge gives up after two reclaim rounds,
 * and the page allocator after one round of direct reclaim ("goto nopage": no retries, no OOM killer,
 * no lmkd kill on its behalf); either returns -2, -ENOMEM. */
int alloc_pages_gfp(struct km_emu *e, int64_t nr, int noretry)
{
    if (e->memcg_limit) {
        int r = noretry ? mem_cgroup_charge_noretry(e, nr) : mem_cgroup_charge(e, nr);
        if (r < 0) return r;
    }
    if (!e->total_pages) return 0;
    if (free_pages(e) - nr < e->wmark_low) {
        int wmark = lmkd_watermark(e, free_pages(e) - nr);
        wakeup_kswapd(e);
        /* kswapd reclaiming is memory pressure PSI reports: lmkd looks, seeing free memory as it
         * was when kswapd woke (here kswapd has finished at once) */
        if (e->cfg.lmk && lmkd_poll(e, wmark) && e->cur_task >= 0 && !e->tasks[e->cur_task].alive) {
            mem_cgroup_uncharge(e, nr);
            return -1;
        }
    }
    if (noretry && free_pages(e) - nr < e->wmark_min) {
        try_to_free_pages(e, SWAP_CLUSTER_MAX, RECLAIM_DIRECT);
        if (free_pages(e) - nr < e->wmark_min) {
            mem_cgroup_uncharge(e, nr);
            return -2;
        }
    }
    int no_progress = 0;
    while (free_pages(e) - nr < e->wmark_min) {
        int killed = 0;
        if (e->cfg.lmk) killed = lmkd_poll(e, lmkd_watermark(e, free_pages(e) - nr));
        if (!killed) {
            if (try_to_free_pages(e, SWAP_CLUSTER_MAX, RECLAIM_DIRECT) > 0) { no_progress = 0; continue; }
            if (no_progress++ < MAX_RECLAIM_RETRIES) continue;
            /* no progress: a complete stall, lmkd's critical level, before the kernel's OOM killer */
            killed = (e->cfg.lmk && lmkd_not_responding(e)) || out_of_memory(e, 0) == 1;
        }
        if (!killed || (e->cur_task >= 0 && !e->tasks[e->cur_task].alive)) {
            mem_cgroup_uncharge(e, nr);
            return -1;
        }
        no_progress = 0;
    }
    return 0;
}
