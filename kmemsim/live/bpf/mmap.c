/* mmap: mmap/munmap/mremap of recorded processes, taken from the syscall tracepoints so the address
 * space is known at the instant of each change (a /proc/PID/maps re-read would come too late). */
struct mmap_args {
    u64 addr, len, prot, flags, fd, off;
};
BPF_HASH(mmap_pending, u32, struct mmap_args, 4096);

struct mmap_event {
    EVENT_HEADER
    u64 kind;           /* 0 mmap, 1 munmap, 2 mremap */
    u64 addr;           /* mmap: returned address; munmap/mremap: old address */
    u64 len;            /* mremap: old length */
    u64 prot;           /* mremap: new length */
    u64 flags;
    u64 fd;
    u64 off;            /* mremap: new address (returned) */
    u64 ret;            /* syscall return value (negative errno on failure) */
};
OUTPUT(mmap_events, 16);

TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
    if (!is_tracked())
        return 0;
    struct mmap_args a = {};
    a.addr = args->addr; a.len = args->len; a.prot = args->prot;
    a.flags = args->flags; a.fd = args->fd; a.off = args->off;
    u32 tid = cur_tid();
    mmap_pending.update(&tid, &a);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mmap) {
    u32 tid = cur_tid();
    struct mmap_args *a = mmap_pending.lookup(&tid);
    if (!a)
        return 0;
    struct mmap_event e = {};
    FILL_HEADER(e);
    e.kind = 0;
    e.addr = args->ret; e.len = a->len; e.prot = a->prot; e.flags = a->flags;
    e.fd = a->fd; e.off = a->off; e.ret = args->ret;
    mmap_pending.delete(&tid);
    if (mmap_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        mmap_events_dropped.increment(0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_munmap) {
    if (!is_tracked())
        return 0;
    struct mmap_event e = {};
    FILL_HEADER(e);
    e.kind = 1;
    e.addr = args->addr;
    e.len = args->len;
    if (mmap_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        mmap_events_dropped.increment(0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mremap) {
    if (!is_tracked())
        return 0;
    struct mmap_args a = {};
    a.addr = args->addr; a.len = args->old_len; a.prot = args->new_len; a.flags = args->flags;
    u32 tid = cur_tid();
    mmap_pending.update(&tid, &a);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mremap) {
    u32 tid = cur_tid();
    struct mmap_args *a = mmap_pending.lookup(&tid);
    if (!a)
        return 0;
    struct mmap_event e = {};
    FILL_HEADER(e);
    e.kind = 2;
    e.addr = a->addr; e.len = a->len; e.prot = a->prot; e.flags = a->flags;
    e.off = args->ret; e.ret = args->ret;
    mmap_pending.delete(&tid);
    if (mmap_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        mmap_events_dropped.increment(0);
    return 0;
}
