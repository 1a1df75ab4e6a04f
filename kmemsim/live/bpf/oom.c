/* oom: the OOM killer picked a recorded process (memcg OOM when the limit cannot be met). */
struct oom_event {
    EVENT_HEADER
    u64 victim;
    u64 total_vm;       /* kB, as the tracepoint reports */
    u64 anon_rss;
    u64 file_rss;
    u64 shmem_rss;
    u64 oom_score_adj;
};
OUTPUT(oom_events, 16);

TRACEPOINT_PROBE(oom, mark_victim) {
    u32 victim = args->pid;
    if (!tracked.lookup(&victim))
        return 0;
    struct oom_event e = {};
    FILL_HEADER(e);
    e.victim = victim; e.total_vm = args->total_vm; e.anon_rss = args->anon_rss;
    e.file_rss = args->file_rss; e.shmem_rss = args->shmem_rss; e.oom_score_adj = args->oom_score_adj;
    if (oom_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        oom_events_dropped.increment(0);
    return 0;
}
