/* faults: every user page fault of a recorded process (address, error code). User space resolves the
 * address to a mapping and page through the mmap events (mmap.c) and /proc/PID/maps snapshots.
 * The tracepoint fires on entry, before the kernel knows whether the fault is major. */
struct fault_event {
    EVENT_HEADER
    u64 address;
    u64 ip;
    u64 error_code;     /* x86 page-fault error code: bit 1 write, bit 0 protection (page present) */
};
OUTPUT(fault_events, 1024);
BPF_ARRAY(fault_count, u64, 1);

TRACEPOINT_PROBE(exceptions, page_fault_user) {
    if (!is_tracked())
        return 0;
    int zero = 0;
    u64 *n = fault_count.lookup(&zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    struct fault_event e = {};
    FILL_HEADER(e);
    e.address = args->address;
    e.ip = args->ip;
    e.error_code = args->error_code;
    if (fault_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        fault_events_dropped.increment(0);
    return 0;
}
