/* tasks: follow the recorded process tree (fork adds the child, exit removes it) and mark exec, so
 * user space can re-read /proc/PID/maps when a new image appears. */
struct task_event {
    EVENT_HEADER
    u64 kind;           /* 0 fork, 1 exec, 2 exit */
    u64 other;          /* fork: child pid; exec: old pid; exit: group_dead */
};
OUTPUT(task_events, 16);

TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent = args->parent_pid;
    if (!tracked.lookup(&parent) && !is_tracked())
        return 0;
    u32 child = args->child_pid;
    u8 one = 1;
    tracked.update(&child, &one);
    struct task_event e = {};
    FILL_HEADER(e);
    e.kind = 0;
    e.other = child;
    if (task_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        task_events_dropped.increment(0);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exec) {
    if (!is_tracked())
        return 0;
    struct task_event e = {};
    FILL_HEADER(e);
    e.kind = 1;
    e.other = args->old_pid;
    if (task_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        task_events_dropped.increment(0);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    if (!is_tracked())
        return 0;
    struct task_event e = {};
    FILL_HEADER(e);
    e.kind = 2;
#ifdef KM_HAVE_EXIT_GROUP_DEAD
    e.other = args->group_dead;
#else
    e.other = cur_tgid() == cur_tid();  /* no group_dead (6.1): the leader's exit stands for the process's */
#endif
    if (task_events.ringbuf_output(&e, sizeof(e), BPF_RB_NO_WAKEUP))
        task_events_dropped.increment(0);
    return 0;
}
