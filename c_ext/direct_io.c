/* Direct I/O (fs/iomap/direct-io.c, with mm/filemap.c's and mm/truncate.c's parts of it): pread(2)
 * and pwrite(2) of an O_DIRECT file descriptor, as ext4 serves them (ext4_dio_read_iter() and
 * ext4_dio_write_iter() -> iomap_dio_rw()). The data moves between the device and the task's own
 * buffer: nothing goes through the page cache, no folio is allocated or charged to the memcg, no
 * readahead, no workingset. The buffer is the task's own memory, which the trace touches with READ and
 * WRITE events of its mapping if it models it (get_user_pages() faulting it in is not done here).
 * The replay cuts a range at the end of the file, as __iomap_dio_rw() stops a read at i_size (a
 * write past the file's end, which would extend it, is cut there too: the trace's files have a
 * fixed size). */
#include "mm.h"

/* A direct read of file pages [index, index + n):
 * - kiocb_write_and_wait() first writes back and waits for the range's dirty folios: the emulator has
 *   no dirty file folio, so nothing. The folios cached in the range stay as they are: not referenced,
 *   not moved on their lists, not removed (a direct read invalidates nothing);
 * - iomap_dio_bio_iter() builds the bios (BIO_MAX_VECS pages each, no larger than max_sectors_kb:
 *   bio.c, submit_direct_read()) and submit_bio() counts them in PGPGIN (pgpgin; pages, the
 *   emulator's unit everywhere);
 * - a synchronous kiocb: the task sleeps until the last bio ends (bio.c, direct_read_wait()). It is
 *   a read the task waits for, counted for the time model as filemap_read() counts one: one
 *   stall_read_ios for the wait, however many bios it is (as a readahead window is one, whatever
 *   bios read_pages() makes of it), and its pages in stall_read_pages. With a storage time in the
 *   Config the bios go through bio.c's device, sharing it with the reads in flight; the task's clock
 *   waits for the last (io_waits, io_wait_ns), and each ended bio counts in bio_reads, bio_read_ns.
 * A read of a batch (the event's arg 1) is submitted and not waited for: the batch's next read
 * without it waits for every read of the batch, one stall for all. */
void direct_read(struct km_emu *e, int32_t obj, int64_t index, int64_t n, int batched)
{
    (void)obj; (void)index;                  /* where on the device does not matter to the model */
    count(e, VM_pgpgin, n);
    count(e, VM_stall_read_pages, n);
    /* batched: one of a set of reads in flight together (a pool of I/O workers each in its own
     * pread(), or io_submit()): submitted, not waited for; the set's last (batched 0) waits for all
     * of them, one stall for the set, as one readahead window of several bios is one */
    if (!batched) count(e, VM_stall_read_ios, 1);
    if (!e->io_on) return;
    int64_t dio = ++e->nr_dio;
    submit_direct_read(e, dio, n);
    if (batched) {
        if (!e->dio_batch) e->dio_batch = dio;
        return;
    }
    for (int64_t d = e->dio_batch ? e->dio_batch : dio; d <= dio; d++) direct_read_wait(e, d);
    e->dio_batch = 0;
}

/* invalidate_inode_pages2_range() (mm/truncate.c) of pages [start, end]. find_get_entries() finds every
 * entry of the range, folios and shadow entries, a large folio also where it starts before start.
 * - The first mapped folio unmaps the rest of the range at once (unmap_mapping_pages(..., even_cows =
 *   false), did_range_unmap), and folio_unmap_invalidate()'s unmap_mapping_folio() any page of a folio
 *   still mapped outside it: every PTE of every folio found goes, from every vma; a private mapping's
 *   COW copies stay.
 * - folio_lock() waits for a folio still being read (folio_wait_locked(), as filemap_update_page()
 *   waits for one).
 * - folio_unmap_invalidate(): the folio is clean (no dirty file folio here: folio_launder() has
 *   nothing to do) and without private data ext4 would not release, so __filemap_remove_folio(folio,
 *   NULL): it leaves the page cache whole with no shadow entry (NULL: this is no reclaim, no
 *   workingset_eviction()) and is freed, uncharged. Unlike mapping_evict_folio() (fadvise DONTNEED,
 *   generic_fadvise()), it does not look at the folio's references, nor whether it is mapped or
 *   mlocked (unevictable: the unmap munlocks it).
 * - clear_shadow_entries(): the shadow entries found are erased as well (filemap.c), so a later read
 *   of these pages finds none: no refault.
 * Simplification: a graph node's thread that waits for a folio's read (folio_wait_locked() lets the
 * others go on, bio.c) leaves that folio cached; nothing else keeps one. */
static void invalidate_inode_pages2_range(struct km_emu *e, int32_t obj, int64_t start, int64_t end)
{
    struct object *o = &e->objs[obj];
    int64_t lo = start, hi = end + 1;
    int mapped = 0;
    for (int64_t p = start; p <= end; p++) {
        folio_id f = o->folio[p];
        if (f < 0) continue;
        struct folio *fo = &e->folios[f];
        if (fo->index < lo) lo = fo->index;
        if (fo->index + folio_nr_pages(fo) > hi) hi = fo->index + folio_nr_pages(fo);
        mapped |= fo->mapcount > 0;
        p = fo->index + folio_nr_pages(fo) - 1;
    }
    if (mapped) unmap_mapping_pages(e, obj, lo, hi - lo);
    for (int64_t p = start; p <= end; p++) {
        o = &e->objs[obj];
        folio_id f = o->folio[p];
        if (f < 0) continue;
        int64_t next = e->folios[f].index + folio_nr_pages(&e->folios[f]);
        if (e->folios[f].flags & PG_locked) folio_wait_locked(e, f);
        if (!(e->folios[f].flags & PG_locked)) {
            lruvec_del_folio(e, f);
            filemap_remove_folio(e, f, 0);
            folio_free(e, f);
        }
        p = next - 1;
    }
    clear_shadow_entries(e, obj, start, end);
}

/* A direct write of file pages [index, index + n) (__iomap_dio_rw() for a write):
 * - kiocb_invalidate_pages() before the bios: filemap_write_and_wait_range() (nothing dirty here),
 *   then invalidate_inode_pages2_range() of the range; once they have ended, iomap_dio_complete()'s
 *   kiocb_invalidate_post_direct_write() invalidates the range again, which finds nothing more
 *   (nothing can read it in between here);
 * - submit_bio() counts the bios in PGPGOUT (pgpgout, pages).
 * Its storage time is left out: the device model (bio.c) times reads only, and no write is waited
 * for anywhere in the emulator (file writeback is not modelled; a swap-out to zram costs the
 * compression's CPU time, not storage), so the task does not wait for these bios and they take no
 * share of the device from the reads in flight. */
void direct_write(struct km_emu *e, int32_t obj, int64_t index, int64_t n)
{
    invalidate_inode_pages2_range(e, obj, index, index + n - 1);
    count(e, VM_pgpgout, n);
}
