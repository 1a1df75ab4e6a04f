/* zram (drivers/block/zram/zram_drv.c) over zsmalloc (mm/zsmalloc.c): each swapped page costs the
 * compressed size of its content class, rounded to a zsmalloc size class. Same-filled pages store
 * no data (same_pages); pages compressing worse than 3/4 of a page are stored raw (huge_pages). */
#include <stdlib.h>
#include "mm.h"

#define MAX_ZPAGE_SIZE (PAGE_SIZE / 4 * 3)    /* huge_class_size threshold */
#define ZS_HANDLE_SIZE 8
#define ZS_MIN_ALLOC_SIZE 32
#define ZS_SIZE_CLASS_DELTA 16

/* Compression ratio (original / compressed) by algorithm and PageClass (kmemsim/trace.py).
 * HEAP: LinuxReviews' mixed-data figures (linux-reclaim.md §4); KV_F16: mzCache's zstd residual
 * 0.92 on fp16 KV, lower for the LZ family, which finds fewer matches in float data; quantised
 * weights are near-incompressible (estimate). Order: HEAP ZERO KV_F16 KV_Q8 WEIGHTS_Q WEIGHTS_F16
 * COMPUTE. */
static const struct zram_class zram_algos[] = {
    { "lzo-rle", { 2.68, 0, 1.02, 1.10, 1.01, 1.05, 1.15 } },
    { "lzo",     { 2.69, 0, 1.02, 1.10, 1.01, 1.05, 1.15 } },
    { "lz4",     { 2.58, 0, 1.01, 1.08, 1.00, 1.03, 1.12 } },
    { "zstd",    { 3.96, 0, 1.087, 1.25, 1.05, 1.12, 1.30 } },
};
#define NR_ALGOS (int)(sizeof zram_algos / sizeof zram_algos[0])

/* Not the kernel's: the emulator's own arrays for the device's slots grow as slots are first used
 * (km_new() checked disksize <= KM_MAX_SWAP_SLOTS), so a large disksize costs nothing until it is
 * filled. */
void zram_init(struct km_emu *e)
{
    e->zram_disk_pages = e->cfg.zram_pages;
    e->zram_nr_free = e->zram_disk_pages;
}

/* The next free slot: the last freed, else the lowest never used; -1 if the arrays cannot grow. */
static int32_t zram_slot_get(struct km_emu *e)
{
    if (e->zram_nr_stack) return e->zram_free[--e->zram_nr_stack];
    if (e->zram_next == e->zram_cap) {
        int64_t cap = e->zram_cap ? e->zram_cap * 2 : 4096;
        if (cap > e->zram_disk_pages) cap = e->zram_disk_pages;
        int32_t *size = realloc(e->zram_size, sizeof(int32_t) * (size_t)cap);
        if (size) e->zram_size = size;
        int32_t *fr = size ? realloc(e->zram_free, sizeof(int32_t) * (size_t)cap) : NULL;
        if (!fr) { e->nomem = 1; return -1; }
        e->zram_free = fr;
        e->zram_cap = cap;
    }
    return (int32_t)e->zram_next++;
}

/* zs_malloc() size for a compressed length: handle, minimum, 16-byte size classes. */
static int32_t zs_size(int32_t comp_len)
{
    int32_t size = comp_len + ZS_HANDLE_SIZE;
    if (size < ZS_MIN_ALLOC_SIZE) size = ZS_MIN_ALLOC_SIZE;
    return (size + ZS_SIZE_CLASS_DELTA - 1) / ZS_SIZE_CLASS_DELTA * ZS_SIZE_CLASS_DELTA;
}

int zram_full(const struct km_emu *e) { return e->zram_nr_free == 0; }

static int32_t stored_bytes(int32_t comp_len)
{
    if (comp_len == 0) return 0;                        /* same-filled: no data */
    if (comp_len == PAGE_SIZE) return PAGE_SIZE;        /* huge: a page of its own */
    return zs_size(comp_len);
}

/* swap_writepage() -> zram_write_page(). Returns -1 when there is no swap or the device is full,
 * 1 when the page went to the swap zeromap instead (Linux 6.12+: is_folio_zero_filled() ->
 * swap_zeromap_folio_set(), no I/O, counted as SWPOUT_ZERO), 0 when zram stored it.
 * zram_size[slot] holds the compressed length (0 same-filled, PAGE_SIZE huge, ZEROMAP_SLOT). */
int zram_write(struct km_emu *e, int cls, int32_t *slot)
{
    if (!e->zram_nr_free) return -1;
    int algo = e->cfg.zram_algo >= 0 && e->cfg.zram_algo < NR_ALGOS ? e->cfg.zram_algo : 0;
    int32_t s = zram_slot_get(e);
    if (s < 0) return -1;                               /* out of memory: km_replay() fails */
    e->zram_nr_free--;
    if (cls == CLASS_ZERO && e->cfg.swap_zeromap) {
        e->zram_size[s] = ZEROMAP_SLOT;
        e->zram_used_slots++;
        *slot = s;
        return 1;
    }
    int32_t comp_len = 0;
    if (cls == CLASS_ZERO) {
        e->zram_same++;                                 /* zram_same_page_write() */
    } else {
        double ratio = zram_algos[algo].ratio[cls < 16 ? cls : 0];
        comp_len = (int32_t)(PAGE_SIZE / (ratio > 0 ? ratio : 1.0) + 0.5);
        if (comp_len >= MAX_ZPAGE_SIZE) { comp_len = PAGE_SIZE; e->zram_huge++; }
        e->zram_compr_bytes += comp_len;
    }
    e->zram_size[s] = comp_len;
    e->zram_alloc_bytes += stored_bytes(comp_len);
    e->zram_pages_used = (e->zram_alloc_bytes + PAGE_SIZE - 1) / PAGE_SIZE;
    e->zram_used_slots++;
    note_peak(e);
    *slot = s;
    return 0;
}

/* zram_free_page(), via swap_free() -> zram_slot_free_notify(); a zeromap slot stored nothing. */
void zram_free_slot(struct km_emu *e, int32_t slot)
{
    int32_t comp_len = e->zram_size[slot];
    if (comp_len != ZEROMAP_SLOT) {
        if (comp_len == 0) e->zram_same--;
        if (comp_len == PAGE_SIZE) e->zram_huge--;
        e->zram_compr_bytes -= comp_len;
        e->zram_alloc_bytes -= stored_bytes(comp_len);
        e->zram_pages_used = (e->zram_alloc_bytes + PAGE_SIZE - 1) / PAGE_SIZE;
    }
    e->zram_size[slot] = 0;
    e->zram_used_slots--;
    e->zram_nr_free++;
    e->zram_free[e->zram_nr_stack++] = slot;
}

