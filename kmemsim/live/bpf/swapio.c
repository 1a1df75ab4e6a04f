/* swapio: block I/O submitted to the swap devices (user space fills swap_devs from /proc/swaps).
 * There is no swap tracepoint group; every swap-out and swap-in to a block device (zram included)
 * passes submit_bio -> block:block_bio_queue, with its size in sectors, so this counts pages exactly
 * (large folios included), in the task that does it: the faulting task for swap-in, the reclaiming
 * task for swap-out under a memcg limit. */
BPF_HASH(swap_devs, u32, u8, 64);

/* 0 pages read (tracked), 1 pages written (tracked), 2 pages read (all tasks), 3 pages written (all) */
BPF_ARRAY(swap_totals, u64, 4);

struct swap_event {
    EVENT_HEADER
    u64 write;
    u64 sector;
    u64 nr_sector;
    u64 dev;
    u64 tracked;
};
OUTPUT(swap_events, 1024);

TRACEPOINT_PROBE(block, block_bio_queue) {
    u32 dev = args->dev;
    char op = args->rwbs[0];
    if (!swap_devs.lookup(&dev)) {
        if (op == 'R')          /* one handler per tracepoint in the shared object: readio.c's reads */
            read_bio_queued(args->sector, args->nr_sector);
        return 0;
    }
    if (op != 'R' && op != 'W')
        return 0;
    int w = op == 'W';
    u64 pages = args->nr_sector >> 3;
    int tr = is_tracked();
    int i = 2 + w;
    u64 *p = swap_totals.lookup(&i);
    if (p)
        __sync_fetch_and_add(p, pages);
    if (!tr)
        return 0;
    i = w;
    p = swap_totals.lookup(&i);
    if (p)
        __sync_fetch_and_add(p, pages);
    struct swap_event e = {};
    FILL_HEADER(e);
    e.write = w; e.sector = args->sector; e.nr_sector = args->nr_sector; e.dev = dev; e.tracked = tr;
    if (swap_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        swap_events_dropped.increment(0);
    return 0;
}
