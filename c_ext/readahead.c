/* Readahead (mm/readahead.c, and the mmap halves in mm/filemap.c), as of Linux 6.16+: the folio
 * order lives in file_ra_state, mmap read-around starts at order 0, and each async round asks for
 * two orders more (capped by the mapping's maximum and by the window size). */
#include <string.h>
#include "mm.h"

static int ilog2_64(int64_t v) { int r = -1; while (v) { v >>= 1; r++; } return r; }

static int64_t roundup_pow_of_two(int64_t v) { int64_t r = 1; while (r < v) r <<= 1; return r; }

/* get_init_ra_size() */
static int64_t get_init_ra_size(int64_t size, int64_t max)
{
    int64_t newsize = roundup_pow_of_two(size);
    if (newsize <= max / 32) newsize *= 4;
    else if (newsize <= max / 4) newsize *= 2;
    else newsize = max;
    return newsize;
}

/* get_next_ra_size() */
static int64_t get_next_ra_size(const struct file_ra_state *ra, int64_t max)
{
    int64_t cur = ra->size;
    if (cur < max / 16) return 4 * cur;
    if (cur <= max / 2) return 2 * cur;
    return max;
}

/* ractl_max_pages() */
static int64_t ractl_max_pages(struct km_emu *e, struct file_ra_state *ra, int64_t req)
{
    int64_t max = ra->ra_pages;
    if (req > max && e->cfg.io_pages > max) max = req < e->cfg.io_pages ? req : e->cfg.io_pages;
    return max;
}

/* read_pages(): the window goes to the device (bio.c); without a storage time the reads complete
 * now and the window's folios are unlocked (PG_locked) */
static void read_pages(struct km_emu *e, int32_t obj, int64_t index, int64_t nr)
{
    if (e->io_on) { submit_read(e); return; }
    struct object *o = &e->objs[obj];
    if (index + nr > o->npages) nr = o->npages - index;
    for (int64_t p = index; p < index + nr;) {
        folio_id f = o->folio[p];
        if (f < 0) { p++; continue; }
        e->folios[f].flags &= ~PG_locked;
        p = e->folios[f].index + folio_nr_pages(&e->folios[f]);
    }
}

/* page_cache_ra_unbounded(): order-0 folios for [index, index + nr), skipping cached pages; the folio
 * at index + nr - lookahead gets PG_readahead. */
int64_t do_page_cache_ra(struct km_emu *e, int32_t obj, int64_t index, int64_t nr, int64_t lookahead)
{
    struct object *o = &e->objs[obj];
    if (index >= o->npages) return 0;
    if (index + nr > o->npages) nr = o->npages - index;
    int64_t added = 0;
    for (int64_t i = 0; i < nr; i++) {
        if (e->objs[obj].folio[index + i] >= 0) continue;
        /* readahead_gfp_mask(): a failed charge (-ENOMEM) or a killed task ends the window */
        if (filemap_add_folio(e, obj, index + i, 0, lookahead && i == nr - lookahead, 1) < 0) break;
        added++;
    }
    read_pages(e, obj, index, nr);
    count(e, VM_readahead_pages, added);
    return added;
}

/* page_cache_ra_order(): large folios over [start, start + size), the folio holding
 * start + size - async_size marked PG_readahead; falls back to order 0 where pages are cached or a
 * large folio's charge failed. */
int64_t page_cache_ra_order(struct km_emu *e, int32_t obj, int64_t start, int64_t size,
                            int64_t async_size, int new_order)
{
    struct object *o = &e->objs[obj];
    struct file_ra_state *ra = &o->ra;
    if (start >= o->npages || size <= 0) return 0;
    int64_t limit = o->npages - 1;
    int64_t mark = start + size - async_size;
    if (e->cfg.max_folio_order == 0 || size < 4) {
        ra->order = 0;
        return do_page_cache_ra(e, obj, start, size, async_size);
    }
    if (limit > start + size - 1) limit = start + size - 1;
    if (new_order > e->cfg.max_folio_order) new_order = e->cfg.max_folio_order;
    if (new_order > ilog2_64(size)) new_order = ilog2_64(size);
    ra->order = new_order;
    int64_t index = start, added = 0;
    while (index <= limit) {
        int order = new_order;
        if (index & ((1LL << order) - 1)) order = __builtin_ctzll((uint64_t)index);   /* align */
        while (order > 0 && index + (1LL << order) - 1 > limit) order--;
        if (!page_cache_range_empty(e->objs[obj].folio + index, 1LL << order))
            break;                                         /* -EEXIST: let the fallback fill gaps */
        int m = mark >= index && mark < index + (1LL << order);
        int r = filemap_add_folio(e, obj, index, order, m, 1);
        if (r == -1) { read_pages(e, obj, start, size); return added; }
        if (r == -2) break;                                /* ra_alloc_folio() -ENOMEM: the fallback goes on in order 0 */
        added += 1LL << order;
        index += 1LL << order;
    }
    count(e, VM_readahead_pages, added);
    if (index <= limit && size > index - start)
        added += do_page_cache_ra(e, obj, index, size - (index - start), async_size);
    read_pages(e, obj, start, size);
    return added;
}

/* file_ra_state_init() at open(2): a new struct file reads with the device's window, no history,
 * and without FMODE_RANDOM (the emulator keeps one struct file per file: the latest opened). */
void file_ra_state_init(struct km_emu *e, int32_t obj)
{
    struct object *o = &e->objs[obj];
    memset(&o->ra, 0, sizeof o->ra);
    o->ra.ra_pages = e->cfg.ra_pages;
    o->ra.prev_pos = -1;
    o->fmode_random = 0;
}

/* force_page_cache_ra(): fadvise/madvise WILLNEED, at most max(io_pages, ra_pages) pages. */
void force_page_cache_ra(struct km_emu *e, int32_t obj, int64_t index, int64_t nr)
{
    struct file_ra_state *ra = &e->objs[obj].ra;
    int64_t max = e->cfg.io_pages > ra->ra_pages ? e->cfg.io_pages : ra->ra_pages;
    if (nr > max) nr = max;
    while (nr > 0) {
        int64_t chunk = (2 << 20) / 4096;
        if (chunk > nr) chunk = nr;
        do_page_cache_ra(e, obj, index, chunk, 0);
        index += chunk;
        nr -= chunk;
    }
}

/* page_cache_sync_ra(): a miss at index while reading req pages. */
void page_cache_sync_ra(struct km_emu *e, int32_t obj, int64_t index, int64_t req)
{
    struct object *o = &e->objs[obj];
    struct file_ra_state *ra = &o->ra;
    int forced = o->fmode_random;
    if (!ra->ra_pages) { req = 1; forced = 1; }
    if (forced) { force_page_cache_ra(e, obj, index, req); return; }
    int64_t max = ractl_max_pages(e, ra, req);
    int64_t prev = ra->prev_pos;
    /* prev_pos starts at -1 (file_ra_state_init()): as an unsigned index it is far from any index,
     * so a first read past the start of the file is not taken for a sequential one */
    if (index == 0 || req > max || (prev >= 0 && index - prev <= 1 && index >= prev)) {
        ra->start = index;
        ra->size = get_init_ra_size(req, max);
        ra->async_size = ra->size > req ? ra->size - req : ra->size >> 1;
    } else {
        int64_t miss = index - 1, lim = index - 1 - max;      /* page_cache_prev_miss() */
        while (miss >= 0 && miss > lim && o->folio[miss] >= 0) miss--;
        int64_t contig = index - miss - 1;
        if (contig <= req) { do_page_cache_ra(e, obj, index, req, 0); return; }
        if (miss < 0) contig *= 2;                            /* cached from the start of the file */
        ra->start = index;
        ra->size = contig + req < max ? contig + req : max;
        ra->async_size = 1;
    }
    ra->order = 0;
    page_cache_ra_order(e, obj, ra->start, ra->size, ra->async_size, 0);
}

/* page_cache_async_ra(): a marked folio was reached; push the window forward. */
void page_cache_async_ra(struct km_emu *e, int32_t obj, folio_id fid, int64_t index, int64_t req)
{
    struct object *o = &e->objs[obj];
    struct file_ra_state *ra = &o->ra;
    struct folio *f = &e->folios[fid];
    if (!ra->ra_pages) return;
    f->flags &= ~PG_readahead;
    int64_t max = ractl_max_pages(e, ra, req);
    int64_t nrp = folio_nr_pages(f);
    int64_t expected = ((ra->start + ra->size - ra->async_size) / nrp) * nrp;
    if (index == expected) {
        ra->start += ra->size;
        int64_t next = get_next_ra_size(ra, max);
        ra->size = ra->size > next ? ra->size : next;
        ra->async_size = ra->size;
    } else {
        /* a marked folio without valid state (e.g. interleaved streams): page_cache_next_miss() */
        int64_t start = index + 1;
        while (start < o->npages && start - index <= max && o->folio[start] >= 0) start++;
        if (start - index > max) return;
        ra->start = start;
        ra->size = start - index + req;
        ra->size = get_next_ra_size(ra, max);
        ra->async_size = ra->size;
    }
    /* readit: two orders up, and the window's end rounded down to that folio size (at most the
     * alignment max_pages allows) so the next window starts aligned */
    ra->order += 2;
    int64_t align = 1LL << (ra->order < __builtin_ctzll((uint64_t)max) ? ra->order : __builtin_ctzll((uint64_t)max));
    int64_t end = ra->start + ra->size, aligned_end = end / align * align;
    if (aligned_end > ra->start) ra->size -= end - aligned_end;
    ra->async_size = ra->size;
    page_cache_ra_order(e, obj, ra->start, ra->size, ra->async_size, ra->order);
}

/* do_sync_mmap_readahead(): a major fault in an mmap'd file. */
void do_sync_mmap_readahead(struct km_emu *e, int32_t vi, int64_t pgoff)
{
    struct vma *v = &e->vmas[vi];
    int32_t obj = v->obj;
    struct file_ra_state *ra = &e->objs[obj].ra;
    int exec = (v->flags & MAP_F_EXEC) && e->cfg.exec_folio_order >= 0;
    if ((v->flags & VM_RAND_READ) && !exec) return;     /* the exec case below is meant for random access */
    if (!ra->ra_pages) return;
    if (v->flags & VM_SEQ_READ) {
        page_cache_sync_ra(e, obj, pgoff, ra->ra_pages);
        return;
    }
    if (ra->mmap_miss < MMAP_LOTSAMISS * 10) ra->mmap_miss++;
    if (ra->mmap_miss > MMAP_LOTSAMISS) return;          /* misses much more than hits: stop */
    if (exec) {
        /* Linux 6.17+ (3b61a3f08949, "allow arch to request folio size for exec memory"): code is
         * read from the fault forward, ra_pages at most, in folios of exec_folio_order() (x86 0,
         * arm64 64 KiB), never past the vma (no padding between sections), with no async part. */
        int64_t align = 1LL << e->cfg.exec_folio_order, end = v->pgoff + v->npages;
        int64_t start = pgoff & ~(align - 1), ra_end;
        if (start < v->pgoff) start = v->pgoff;
        ra_end = (start + ra->ra_pages + align - 1) & ~(align - 1);
        if (ra_end > end) ra_end = end;
        ra->start = start;
        ra->size = ra_end - start;
        ra->async_size = 0;
        ra->order = e->cfg.exec_folio_order;
    } else {                                              /* mmap read-around */
        ra->start = pgoff - ra->ra_pages / 2 > 0 ? pgoff - ra->ra_pages / 2 : 0;
        ra->size = ra->ra_pages;
        ra->async_size = ra->ra_pages / 4;
        ra->order = 0;
    }
    page_cache_ra_order(e, obj, ra->start, ra->size, ra->async_size, ra->order);
}

/* do_async_mmap_readahead(): a minor fault on a cached folio; a PG_readahead one pushes on. */
void do_async_mmap_readahead(struct km_emu *e, int32_t vi, folio_id f, int64_t pgoff)
{
    struct vma *v = &e->vmas[vi];
    struct file_ra_state *ra = &e->objs[v->obj].ra;
    if ((v->flags & VM_RAND_READ) || !ra->ra_pages) return;
    if (ra->mmap_miss) ra->mmap_miss--;
    if (e->folios[f].flags & PG_readahead) page_cache_async_ra(e, v->obj, f, pgoff, ra->ra_pages);
}
