/* Reads in flight: what the page cache sees of the block layer. A folio added to the page cache is
 * locked until the device has read it: read_pages() submits the window's bios, and each bio's
 * completion unlocks its folios (mpage_end_io() -> folio_end_read()). Meanwhile reclaim cannot take
 * it (shrink_folio_list(): folio_trylock() fails, keep), fault-around does not map it
 * (next_uptodate_folio()), and a task that needs it waits (filemap_fault()'s
 * lock_folio_maybe_drop_mmap(), filemap_read()'s filemap_update_page()).
 *
 * The device serves the bios in flight together, each at an equal share of its bandwidth
 * (processor sharing), as a queue of several requests is served (virtio-blk, UFS, NVMe): a bio
 * completes when its pages x the time per page have been served at its share, plus the latency.
 * One bio alone gets the whole bandwidth; two windows submitted back to back complete together.
 * The live records show it on this machine's disk: llama.cpp's populate of the model, one 16 MiB
 * window ahead, waits at every second window and not at the one between (at 120%, 34 waits of
 * 24-45 ms and 34 of 0.2 ms in each of four runs), where reads in submission order would make it
 * wait at each. Sharing gives the populate long and short waits in turn too, but its short ones
 * are 5-14 ms: the disk also ends together two windows queued up to 12 ms apart, which sharing
 * does not (docs/validation-notes.md, item 7). The device's time is the furthest any thread's clock has
 * taken it: a matmul thread behind it (on its own clock, handle_range_threads()) submits at the
 * device's time, after the reads completed by then. A read a graph node's thread waits for is
 * slowed by the bios submitted while it waits. Without a storage time in the config (io_on 0), a
 * read completes as the readahead call returns (readahead.c unlocks the window itself).
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
        for (int k = 0; k < e->nr_bios; k++) {
            e->bios[k].first -= e->ioq_head;
            e->bios[k].last -= e->ioq_head;
        }
        e->ioq_head = 0;
        e->ioq_tail = live;
    }
    e->io_done[f] = INT64_MAX;
    e->ioq[e->ioq_tail++] = (struct bio_entry){ f, INT64_MAX };
}

/* The device's service up to now: each bio still transferring gets an equal share. */
static void device_advance(struct km_emu *e, int64_t now)
{
    int64_t dt = now - e->dev_t;
    while (dt > 0) {
        int n = 0;
        int64_t least = INT64_MAX;
        for (int i = 0; i < e->nr_bios; i++)
            if (e->bios[i].rem > 0) { n++; if (e->bios[i].rem < least) least = e->bios[i].rem; }
        if (!n) break;
        int64_t step = least <= dt / n ? least : dt / n;  /* to the first transfer's end, or to now */
        if (!step) break;
        for (int i = 0; i < e->nr_bios; i++)
            if (e->bios[i].rem > 0) e->bios[i].rem -= step;
        dt -= step * n;
    }
    if (now > e->dev_t) e->dev_t = now;
}

/* Each bio's completion if no other comes: the transfers end in order of what each has left, the
 * k-th of n after the time n, n - 1, ... bios took to serve the first k; then the latency. */
static void device_schedule(struct km_emu *e)
{
    static __thread int *order;
    static __thread int cap;
    if (cap < e->nr_bios) {
        cap = 2 * e->nr_bios;
        if (!(order = realloc(order, sizeof *order * (size_t)cap))) abort();
    }
    int n = 0;
    for (int i = 0; i < e->nr_bios; i++) {
        if (e->bios[i].rem <= 0) continue;
        int k = n++;                                      /* insertion sort: a few bios in flight */
        while (k > 0 && e->bios[order[k - 1]].rem > e->bios[i].rem) { order[k] = order[k - 1]; k--; }
        order[k] = i;
    }
    int64_t t = e->dev_t, prev = 0;
    for (int k = 0; k < n; k++) {
        struct bio_inflight *b = &e->bios[order[k]];
        t += (int64_t)(n - k) * (b->rem - prev);
        prev = b->rem;
        b->done = t + e->cfg.io_latency_ns;
    }
    e->io_next_done = INT64_MAX;
    for (int i = 0; i < e->nr_bios; i++) {
        struct bio_inflight *b = &e->bios[i];
        if (b->done == INT64_MAX) b->done = e->dev_t + e->cfg.io_latency_ns;   /* no transfer time */
        if (b->done < e->io_next_done) e->io_next_done = b->done;
        if (b->first == b->last || e->ioq[b->first].done == b->done) continue;   /* no folios (a direct
                                                          * read), or they have it already */
        for (int64_t q = b->first; q < b->last; q++) {
            struct bio_entry *x = &e->ioq[q];
            if (e->io_done[x->f] == x->done) e->io_done[x->f] = b->done;
            x->done = b->done;
        }
    }
}

/* read_pages() -> submit_bio(): the folios added since the last submission go to the device, in
 * bios as ext4_mpage_readpages() builds them: consecutive folios of one file, at most BIO_MAX_VECS
 * of them; a bio completes as a whole (mpage_end_io() ends the read of each of its folios). A
 * thread whose clock is behind the device's submits at the device's time. */
#define BIO_MAX_VECS 256
void submit_read(struct km_emu *e)
{
    int64_t i = e->ioq_unsubmitted;
    if (i == e->ioq_tail) return;
    device_advance(e, io_clock(e));
    while (i < e->ioq_tail) {
        int64_t j = i, next = -1, pages = 0;
        int32_t obj = e->folios[e->ioq[i].f].obj;
        for (; j < e->ioq_tail && j - i < BIO_MAX_VECS; j++) {
            struct folio *f = &e->folios[e->ioq[j].f];
            if (f->obj != obj || (next >= 0 && f->index != next)) break;
            next = f->index + folio_nr_pages(f);
            pages += folio_nr_pages(f);
        }
        if (e->nr_bios == e->cap_bios) {
            e->cap_bios = e->cap_bios ? 2 * e->cap_bios : 64;
            e->bios = realloc(e->bios, sizeof *e->bios * (size_t)e->cap_bios);
            if (!e->bios) abort();
        }
        e->bios[e->nr_bios++] = (struct bio_inflight){ i, j, pages * e->cfg.io_ns_per_page, INT64_MAX, e->dev_t };
        i = j;
    }
    e->ioq_unsubmitted = i;
    device_schedule(e);
}

/* A direct read (direct_io.c): n pages from the device straight into the task's buffer, no folio
 * of the page cache. iomap_dio_bio_iter() builds the bios, each of at most BIO_MAX_VECS bvecs
 * (bio_iov_vecs_to_alloc()): 256 pages where no two pages of the task's buffer are physically
 * contiguous (bio_iov_iter_get_pages() merges those that are into one bvec; the live kernel sent a
 * 4 MiB O_DIRECT read into a fresh anonymous buffer as 3 or 4 bios, tests/test_direct_io_live.py);
 * the block layer splits any larger than the queue's max_sectors_kb (bio_split_to_limits();
 * Config.io_pages). submit_bio()
 * sends them all at once at the task's clock (at the device's time if that is ahead, as
 * submit_read()); they share the device with whatever else is in flight, as page-cache reads do,
 * and each is a bio of bio_reads when it ends. dio numbers them for direct_read_wait(). */
void submit_direct_read(struct km_emu *e, int64_t dio, int64_t n)
{
    int64_t max = e->cfg.io_pages > 0 && e->cfg.io_pages < BIO_MAX_VECS ? e->cfg.io_pages : BIO_MAX_VECS;
    device_advance(e, io_clock(e));
    for (int64_t off = 0; off < n; off += max) {
        int64_t pages = n - off < max ? n - off : max;
        if (e->nr_bios == e->cap_bios) {
            e->cap_bios = e->cap_bios ? 2 * e->cap_bios : 64;
            e->bios = realloc(e->bios, sizeof *e->bios * (size_t)e->cap_bios);
            if (!e->bios) abort();
        }
        e->bios[e->nr_bios++] = (struct bio_inflight){ 0, 0, pages * e->cfg.io_ns_per_page, INT64_MAX,
                                                       e->dev_t, dio };
    }
    device_schedule(e);
}

/* The bios the device has finished by now: their folios are unlocked (folio_end_read()). A
 * queued folio that has since gone (a later read of the same id) is passed over. */
void bio_endio(struct km_emu *e)
{
    int64_t now = io_clock(e);
    if (e->io_next_done > now) return;
    device_advance(e, now);                               /* the finished ones leave the shares */
    int k = 0;
    e->io_next_done = INT64_MAX;
    for (int i = 0; i < e->nr_bios; i++) {
        struct bio_inflight b = e->bios[i];
        if (b.done <= now) {
            count(e, VM_bio_reads, 1);
            count(e, VM_bio_read_ns, b.done - b.submitted);
            for (int64_t q = b.first; q < b.last; q++)
                if (e->io_done[e->ioq[q].f] == e->ioq[q].done) e->folios[e->ioq[q].f].flags &= ~PG_locked;
            continue;
        }
        if (b.done < e->io_next_done) e->io_next_done = b.done;
        e->bios[k++] = b;
    }
    e->nr_bios = k;
    while (e->ioq_head < e->ioq_unsubmitted && e->ioq[e->ioq_head].done <= now) e->ioq_head++;
}

/* When direct read dio completes: its last bio still in flight, or `until` if that is later (a bio
 * that has ended is no longer in bios[]; one still in flight only moves later as others join). */
static int64_t direct_read_done(const struct km_emu *e, int64_t dio, int64_t until)
{
    for (int i = 0; i < e->nr_bios; i++)
        if (e->bios[i].dio == dio && e->bios[i].done > until) until = e->bios[i].done;
    return until;
}

/* When a waiting thread's read completes: later bios may have slowed it since it began to wait. */
static int64_t io_waiter_until(const struct km_emu *e, const struct io_waiter *w)
{
    if (w->dio) return direct_read_done(e, w->dio, w->until);
    int64_t d = e->io_done[w->f];
    return (e->folios[w->f].flags & PG_locked) && d != INT64_MAX && d > w->until ? d : w->until;
}

static void io_wait_node(struct km_emu *e, struct io_waiter me);

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
    io_wait_node(e, (struct io_waiter){ f, u, 0 });
}

/* The task sleeps until direct read dio has ended (__iomap_dio_rw() of a synchronous kiocb:
 * blk_io_schedule() until the last bio's iomap_dio_bio_end_io() wakes it), a wait like a folio's
 * (io_waits, io_wait_ns; the threads of a graph node as in folio_wait_locked()). */
void direct_read_wait(struct km_emu *e, int64_t dio)
{
    int64_t u = direct_read_done(e, dio, 0), now = io_clock(e);
    if (u <= now) { bio_endio(e); return; }
    count(e, VM_io_waits, 1);
    if (e->th.on) { thread_wait_until(e, u); bio_endio(e); return; }
    io_wait_node(e, (struct io_waiter){ -1, u, dio });
}

/* A thread of the graph node waits until me.until: another thread goes on if one is free,
 * else the clock moves to the first read any of them waits for. */
static void io_wait_node(struct km_emu *e, struct io_waiter me)
{
    int64_t u = me.until, now = io_clock(e);
    for (int i = 0; i < e->nr_io_wait; i++) e->io_wait[i].until = io_waiter_until(e, &e->io_wait[i]);
    for (int i = 0; i < e->nr_io_wait;)                  /* threads whose reads are done go on */
        if (e->io_wait[i].until <= now) e->io_wait[i] = e->io_wait[--e->nr_io_wait];
        else i++;
    int max = e->cfg.nr_threads - 1 < 64 ? e->cfg.nr_threads - 1 : 64;
    if (e->nr_io_wait < max) { e->io_wait[e->nr_io_wait++] = me; return; }   /* another thread goes on */
    int k = -1;                                          /* all wait: the first read to complete */
    int64_t first = u;
    for (int i = 0; i < e->nr_io_wait; i++)
        if (e->io_wait[i].until < first) { first = e->io_wait[i].until; k = i; }
    if (k >= 0) e->io_wait[k] = me;                      /* that thread goes on; this one waits */
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
    for (int i = 0; i < e->nr_io_wait; i++) {
        int64_t until = io_waiter_until(e, &e->io_wait[i]);
        if (until > last) last = until;
    }
    e->nr_io_wait = 0;
    int64_t start = next + e->io_delay;
    if (last > start) {
        count(e, VM_io_wait_ns, last - start);
        e->io_delay = last - next;
    }
}
