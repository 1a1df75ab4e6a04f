/* Reads in flight: what the page cache sees of the block layer. A folio added to the page cache is
 * locked until the device has read it: read_pages() submits the window's bios, and each bio's
 * completion unlocks its folios (mpage_end_io() -> folio_end_read()). Meanwhile reclaim cannot take
 * it (shrink_folio_list(): folio_trylock() fails, keep), fault-around does not map it
 * (next_uptodate_folio()), and a task that needs it waits (filemap_fault()'s
 * lock_folio_maybe_drop_mmap(), filemap_read()'s filemap_update_page()).
 *
 * The device reads what was submitted in order, one bio after another: a bio's folios complete at
 * the window's start (when the device is free) + latency + the bio's pages and those before it in
 * the queue x the time per page. Without a storage time in the config (io_on 0), a read completes as
 * the readahead call returns (readahead.c unlocks the window itself).
 *
 * The clock is trace time (the compute) plus what the tasks waited for reads (io_delay). The
 * events at one trace time are one graph node that cfg.nr_threads threads share: while one waits
 * for a folio the others go on, until all wait (the clock moves to the first read they wait for),
 * and the node ends when every waiting thread has its folio (ggml's barrier: io_barrier()). */
#include <stdlib.h>
#include <string.h>
#include "mm.h"

/* A new folio of the page cache, locked: it joins the device's queue without a time until
 * submit_read(). */
void bio_add_folio(struct km_emu *e, folio_id f)
{
    if (e->cap_folios > 0 && !e->io_done) {
        e->io_done = malloc(sizeof(int64_t) * (size_t)e->cap_folios);
        if (!e->io_done) abort();
    }
    if (e->ioq_tail == e->ioq_cap) {
        int64_t live = e->ioq_tail - e->ioq_head;
        if (e->ioq_head > 0 && live <= e->ioq_cap / 2) {   /* slide the queue to the front */
            memmove(e->ioq, e->ioq + e->ioq_head, sizeof *e->ioq * (size_t)live);
        } else {
            e->ioq_cap = e->ioq_cap ? 2 * e->ioq_cap : 4096;
            struct bio_entry *q = malloc(sizeof *q * (size_t)e->ioq_cap);
            if (!q) abort();
            if (live) memcpy(q, e->ioq + e->ioq_head, sizeof *q * (size_t)live);
            free(e->ioq);
            e->ioq = q;
        }
        e->ioq_unsubmitted -= e->ioq_head;
        e->ioq_head = 0;
        e->ioq_tail = live;
    }
    e->io_done[f] = INT64_MAX;
    e->ioq[e->ioq_tail++] = (struct bio_entry){ f, INT64_MAX };
}

/* read_pages() -> submit_bio(): the folios added since the last submission go to the device, in
 * bios as ext4_mpage_readpages() builds them: consecutive folios of one file, at most BIO_MAX_VECS
 * of them; a bio completes as a whole (mpage_end_io() ends the read of each of its folios). */
#define BIO_MAX_VECS 256
void submit_read(struct km_emu *e)
{
    int64_t i = e->ioq_unsubmitted;
    if (i == e->ioq_tail) return;
    int64_t now = io_clock(e);
    int64_t t = e->dev_free > now ? e->dev_free : now;
    while (i < e->ioq_tail) {
        int64_t j = i, next = -1;
        int32_t obj = e->folios[e->ioq[i].f].obj;
        for (; j < e->ioq_tail && j - i < BIO_MAX_VECS; j++) {
            struct folio *f = &e->folios[e->ioq[j].f];
            if (f->obj != obj || (next >= 0 && f->index != next)) break;
            next = f->index + folio_nr_pages(f);
            t += folio_nr_pages(f) * e->cfg.io_ns_per_page;
        }
        for (; i < j; i++) e->ioq[i].done = e->io_done[e->ioq[i].f] = t + e->cfg.io_latency_ns;
    }
    e->dev_free = t;
    e->ioq_unsubmitted = i;
}

/* The bios the device has finished by now: their folios are unlocked (folio_end_read()). A
 * queued folio that has since gone (a later read of the same id) is passed over. */
void bio_endio(struct km_emu *e)
{
    int64_t now = io_clock(e);
    while (e->ioq_head < e->ioq_unsubmitted && e->ioq[e->ioq_head].done <= now) {
        struct bio_entry b = e->ioq[e->ioq_head++];
        if (e->io_done[b.f] == b.done) e->folios[b.f].flags &= ~PG_locked;
    }
}

/* A task needs folio f: if it is still being read, the task waits for it (see the head comment
 * for the threads of a graph node). */
void folio_wait_locked(struct km_emu *e, folio_id f)
{
    /* a thread on its own clock (handle_range_threads()) may lag reads another has seen complete
     * and unlocked: the read's own completion time decides */
    if (!e->io_on || (!e->th.on && !(e->folios[f].flags & PG_locked))) return;
    if (e->io_done[f] == INT64_MAX) submit_read(e);
    int64_t u = e->io_done[f], now = io_clock(e);
    if (u <= now) { bio_endio(e); return; }
    count(e, VM_io_waits, 1);
    if (e->th.on) { thread_wait_until(e, u); bio_endio(e); return; }
    for (int i = 0; i < e->nr_io_wait;)                  /* threads whose reads are done go on */
        if (e->io_wait[i] <= now) e->io_wait[i] = e->io_wait[--e->nr_io_wait];
        else i++;
    int max = e->cfg.nr_threads - 1 < 64 ? e->cfg.nr_threads - 1 : 64;
    if (e->nr_io_wait < max) { e->io_wait[e->nr_io_wait++] = u; return; }   /* another thread goes on */
    int k = -1;                                          /* all wait: the first read to complete */
    int64_t first = u;
    for (int i = 0; i < e->nr_io_wait; i++)
        if (e->io_wait[i] < first) { first = e->io_wait[i]; k = i; }
    if (k >= 0) e->io_wait[k] = u;                       /* that thread goes on; this one waits */
    count(e, VM_io_wait_ns, first - now);
    e->io_delay += first - now;
    bio_endio(e);
}

/* A thread with its own clock (handle_range_threads()) waits: only its clock moves. */
void thread_wait_until(struct km_emu *e, int64_t until)
{
    int64_t now = io_clock(e);
    if (until <= now) return;
    e->th.wait[e->th.cur] += until - now;
    e->io_delay = until - e->now;
}

/* The graph node ends: every thread has its folio before the next node starts, which starts no
 * earlier than its trace time either (the waits overlapped the others' compute). Called with
 * e->now still the node's trace time and next the next event's. */
void io_barrier(struct km_emu *e, int64_t next)
{
    int64_t last = 0;
    for (int i = 0; i < e->nr_io_wait; i++)
        if (e->io_wait[i] > last) last = e->io_wait[i];
    e->nr_io_wait = 0;
    int64_t start = next + e->io_delay;
    if (last > start) {
        count(e, VM_io_wait_ns, last - start);
        e->io_delay = last - next;
    }
}
