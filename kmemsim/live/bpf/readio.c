/* readio: reads from block devices by recorded tasks (the model file's pages, the libraries'), each
 * bio from submit_bio() to its request's completion: what the emulator's device model (c_ext/bio.c)
 * predicts. swapio.c's block:block_bio_queue handler notes every read bio not bound for swap
 * (read_bio_queued()) by its first sector; block:block_split moves the rest of a split bio to its new
 * first sector (bio_submit_split(): the front part goes on, the rest is resubmitted); and
 * block:block_rq_complete (blk_update_request(), in interrupt context) ends the request's bios in
 * sector order. blk-mq ends its bios without block:block_bio_complete (blk_update_request() clears
 * BIO_TRACE_COMPLETION), so the request's completion is the one to use. Keyed by sector alone: a
 * partition's bios carry the partition's dev, its requests the disk's; the sectors are the disk's
 * (blk_partition_remap() runs before the queue tracepoint). Untracked reads are noted too, so a
 * request that merged them with tracked ones is walked to its end; an LRU hash drops what no request
 * ends (bio-based devices). */
struct read_bio {
    u64 queued;         /* block_bio_queue time */
    u64 sector;         /* the bio's first sector as submitted (a split part keeps it) */
    u64 nr_sector;      /* this part's length */
    u64 pid;
    u64 tid;
    u64 tracked;
};
BPF_TABLE("lru_hash", u64, struct read_bio, read_bios, 65536);

/* 0 read bios submitted by tracked tasks, 1 their pages, 2 parts of them completed */
BPF_ARRAY(read_totals, u64, 3);

struct read_event {
    EVENT_HEADER        /* ts: the request's completion; pid, tid: the submitting task */
    u64 queued;
    u64 sector;
    u64 nr_sector;
    u64 error;
};
OUTPUT(read_events, 1024);

static __always_inline void read_total(int i, u64 v) {
    u64 *p = read_totals.lookup(&i);
    if (p)
        __sync_fetch_and_add(p, v);
}

static __always_inline void read_bio_queued(u64 sector, u64 nr_sector) {
    struct read_bio b = {};
    b.queued = bpf_ktime_get_ns();
    b.sector = sector; b.nr_sector = nr_sector;
    b.pid = cur_tgid(); b.tid = cur_tid(); b.tracked = is_tracked();
    read_bios.update(&sector, &b);
    if (b.tracked) {
        read_total(0, 1);
        read_total(1, nr_sector >> 3);
    }
}

TRACEPOINT_PROBE(block, block_split) {
    if (args->rwbs[0] != 'R')
        return 0;
    u64 sector = args->sector, rest = args->new_sector;
    struct read_bio *b = read_bios.lookup(&sector);
    if (!b || rest <= sector || rest - sector >= b->nr_sector)
        return 0;
    struct read_bio r = *b;
    r.nr_sector = b->nr_sector - (rest - sector);
    b->nr_sector = rest - sector;
    read_bios.update(&rest, &r);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete) {
    if (args->rwbs[0] != 'R')
        return 0;
    u64 pos = args->sector, end = args->sector + args->nr_sector, now = bpf_ktime_get_ns();
    for (int i = 0; i < 256 && pos < end; i++) {        /* a request's bios: at most max_segments */
        struct read_bio *p = read_bios.lookup(&pos);
        if (!p)
            break;
        struct read_bio b = *p;
        read_bios.delete(&pos);
        if (b.tracked) {
            read_total(2, 1);
            struct read_event e = {};
            e.ts = now; e.pid = b.pid; e.tid = b.tid;
            e.queued = b.queued; e.sector = b.sector; e.nr_sector = b.nr_sector; e.error = args->error;
            if (read_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
                read_events_dropped.increment(0);
        }
        if (!b.nr_sector)
            break;
        pos += b.nr_sector;
    }
    return 0;
}
