/* vmscan: reclaim done on behalf of a recorded process. Under a memcg limit the kernel reclaims at
 * charge time in the charging task (try_to_free_mem_cgroup_pages), so filtering on tracked tasks keeps
 * exactly that reclaim and drops other cgroups' and kswapd's. Begin/end pairs become one event with
 * the duration. write_folio is pageout() of one folio: RECLAIM_WB_ANON means swap-out. */
#define RECLAIM_WB_ANON 0x0001
#define RECLAIM_WB_FILE 0x0002

struct vmscan_event {
    EVENT_HEADER
    u64 kind;           /* 0 shrink_inactive, 1 shrink_active, 2 direct reclaim, 3 memcg reclaim, 4 write_folio */
    u64 a;              /* inactive: nr_scanned; active: nr_taken; reclaim: duration ns; write: pfn */
    u64 b;              /* inactive: nr_reclaimed; active: nr_deactivated; reclaim: nr_reclaimed */
    u64 c;              /* inactive: nr_dirty; active: nr_rotated (the tracepoint's nr_referenced: shrink_active_list()
                         * passes nr_rotated, the referenced VM_EXEC file folios it keeps active); reclaim: order */
    u64 d;              /* inactive: nr_writeback; active: nr_active; reclaim: gfp_flags */
    u64 e;              /* inactive: nr_activate0 (anon) | nr_activate1 (file) << 32 */
    u64 f;              /* inactive: nr_ref_keep | nr_unmap_fail << 32 (the rest of what is kept
                         * was locked, e.g. under readahead I/O, or under writeback) */
    u64 priority;
    u64 flags;          /* reclaim_flags (RECLAIM_WB_*) */
};
OUTPUT(vmscan_events, 1024);

struct reclaim_start { u64 ts; u64 order; u64 gfp; };
BPF_HASH(reclaim_begin, u32, struct reclaim_start, 4096);

/* Totals kept in the kernel (exact even if events are lost):
 * 0 anon folios written (swap-out), 1 file folios written, 2 scanned, 3 reclaimed (shrink_inactive),
 * 4 direct reclaim ns, 5 memcg reclaim ns, 6 direct reclaim count, 7 memcg reclaim count */
BPF_ARRAY(vmscan_totals, u64, 8);

static __always_inline void total_add(int i, u64 v) {
    u64 *p = vmscan_totals.lookup(&i);
    if (p)
        __sync_fetch_and_add(p, v);
}

TRACEPOINT_PROBE(vmscan, mm_vmscan_lru_shrink_inactive) {
    if (!is_tracked())
        return 0;
    total_add(2, args->nr_scanned);
    total_add(3, args->nr_reclaimed);
    struct vmscan_event e = {};
    FILL_HEADER(e);
    e.kind = 0; e.a = args->nr_scanned; e.b = args->nr_reclaimed; e.c = args->nr_dirty;
    e.d = args->nr_writeback; e.e = args->nr_activate0 | ((u64)args->nr_activate1 << 32);
    e.f = args->nr_ref_keep | ((u64)args->nr_unmap_fail << 32);
    e.priority = args->priority; e.flags = args->reclaim_flags;
    if (vmscan_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        vmscan_events_dropped.increment(0);
    return 0;
}

TRACEPOINT_PROBE(vmscan, mm_vmscan_lru_shrink_active) {
    if (!is_tracked())
        return 0;
    struct vmscan_event e = {};
    FILL_HEADER(e);
    e.kind = 1; e.a = args->nr_taken; e.b = args->nr_deactivated; e.c = args->nr_referenced;
    e.d = args->nr_active; e.priority = args->priority; e.flags = args->reclaim_flags;
    if (vmscan_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        vmscan_events_dropped.increment(0);
    return 0;
}

static __always_inline int begin(int order, u64 gfp) {
    if (!is_tracked())
        return 0;
    u32 tid = cur_tid();
    struct reclaim_start s = {bpf_ktime_get_ns(), order, gfp};
    reclaim_begin.update(&tid, &s);
    return 0;
}

static __always_inline int end(void *ctx, u64 kind, u64 nr_reclaimed) {
    u32 tid = cur_tid();
    struct reclaim_start *s = reclaim_begin.lookup(&tid);
    if (!s)
        return 0;
    struct vmscan_event e = {};
    FILL_HEADER(e);
    e.kind = kind; e.a = e.ts - s->ts; e.b = nr_reclaimed; e.c = s->order; e.d = s->gfp;
    reclaim_begin.delete(&tid);
    total_add(kind == 2 ? 4 : 5, e.a);
    total_add(kind == 2 ? 6 : 7, 1);
    if (vmscan_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        vmscan_events_dropped.increment(0);
    return 0;
}

TRACEPOINT_PROBE(vmscan, mm_vmscan_direct_reclaim_begin) { return begin(args->order, args->gfp_flags); }
TRACEPOINT_PROBE(vmscan, mm_vmscan_direct_reclaim_end) { return end(args, 2, args->nr_reclaimed); }
TRACEPOINT_PROBE(vmscan, mm_vmscan_memcg_reclaim_begin) { return begin(args->order, args->gfp_flags); }
TRACEPOINT_PROBE(vmscan, mm_vmscan_memcg_reclaim_end) { return end(args, 3, args->nr_reclaimed); }

TRACEPOINT_PROBE(vmscan, mm_vmscan_write_folio) {
    if (!is_tracked())
        return 0;
    int fl = args->reclaim_flags;
    total_add((fl & RECLAIM_WB_ANON) ? 0 : 1, 1);
    struct vmscan_event e = {};
    FILL_HEADER(e);
    e.kind = 4; e.a = args->pfn; e.flags = fl;
    if (vmscan_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        vmscan_events_dropped.increment(0);
    return 0;
}
