/* filemap: page-cache insertions and deletions (one event per folio; pages = 1 << order) and
 * filemap faults, for files a recorded process touches. Insertions count when a tracked task does
 * them (which also registers the inode); deletions count for registered inodes in any context,
 * because reclaim may evict them from kswapd or another task. Totals are kept in the kernel, so they
 * stay exact even when the ring buffer drops records. */
struct file_count {
    u64 added;          /* pages */
    u64 deleted;        /* pages */
    u64 faults;         /* mm_filemap_fault calls by tracked tasks */
};
BPF_HASH(file_counts, struct file_key, struct file_count, 65536);

struct filemap_event {
    EVENT_HEADER
    u64 kind;           /* 0 add, 1 delete, 2 fault */
    u64 ino;
    u64 dev;
    u64 index;
    u64 order;
    u64 pfn;
    u64 tracked;        /* 1 when in a tracked task's context */
};
OUTPUT(filemap_events, 1024);

static __always_inline struct file_count *file_count_of(struct file_key *k) {
    struct file_count zero = {};
    return file_counts.lookup_or_try_init(k, &zero);
}

TRACEPOINT_PROBE(filemap, mm_filemap_add_to_page_cache) {
    struct file_key k = {};
    k.ino = args->i_ino;
    k.dev = args->s_dev;
    int tr = is_tracked();
    if (!tr && !inodes.lookup(&k))
        return 0;
    if (tr) {
        u8 one = 1;
        inodes.update(&k, &one);
    }
    struct file_count *c = file_count_of(&k);
    if (c)
        __sync_fetch_and_add(&c->added, 1ULL << args->order);
    struct filemap_event e = {};
    FILL_HEADER(e);
    e.kind = 0; e.ino = k.ino; e.dev = k.dev; e.index = args->index; e.order = args->order;
    e.pfn = args->pfn; e.tracked = tr;
    if (filemap_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        filemap_events_dropped.increment(0);
    return 0;
}

TRACEPOINT_PROBE(filemap, mm_filemap_delete_from_page_cache) {
    struct file_key k = {};
    k.ino = args->i_ino;
    k.dev = args->s_dev;
    if (!inodes.lookup(&k))
        return 0;
    struct file_count *c = file_count_of(&k);
    if (c)
        __sync_fetch_and_add(&c->deleted, 1ULL << args->order);
    struct filemap_event e = {};
    FILL_HEADER(e);
    e.kind = 1; e.ino = k.ino; e.dev = k.dev; e.index = args->index; e.order = args->order;
    e.pfn = args->pfn; e.tracked = is_tracked();
    if (filemap_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        filemap_events_dropped.increment(0);
    return 0;
}

#ifdef KM_HAVE_FILEMAP_FAULT    /* not in older kernels (6.1): probes.py defines it where it is */
TRACEPOINT_PROBE(filemap, mm_filemap_fault) {
    if (!is_tracked())
        return 0;
    struct file_key k = {};
    k.ino = args->i_ino;
    k.dev = args->s_dev;
    struct file_count *c = file_count_of(&k);
    if (c)
        __sync_fetch_and_add(&c->faults, 1);
    struct filemap_event e = {};
    FILL_HEADER(e);
    e.kind = 2; e.ino = k.ino; e.dev = k.dev; e.index = args->index; e.tracked = 1;
    if (filemap_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        filemap_events_dropped.increment(0);
    return 0;
}
#endif
