/* Shared by every kmemsim BPF program (they are compiled together as one bcc object so they share
 * these maps). Programs read tracepoint arguments only (args->field), never kernel struct layouts:
 * bcc builds against Debian's older headers here, and tracepoint fields are a stable ABI. */
#include <uapi/linux/ptrace.h>

/* Processes we record: the command (or --pid) and, through tasks.c, every task it forks. Keyed by
 * tgid (threads share it); a cgroup-id filter would not work on cgroup v1's memory hierarchy. */
BPF_HASH(tracked, u32, u8, 65536);

struct file_key {
    u64 ino;
    u64 dev;            /* kernel dev_t: major << 20 | minor */
};

/* Files a tracked task brought into the page cache (or that user space seeded from its maps):
 * their page-cache deletions are counted in any context, since reclaim may run in another task. */
BPF_HASH(inodes, struct file_key, u8, 65536);

static __always_inline u32 cur_tgid(void) { return bpf_get_current_pid_tgid() >> 32; }
static __always_inline u32 cur_tid(void) { return (u32)bpf_get_current_pid_tgid(); }
static __always_inline int is_tracked(void) {
    u32 tgid = cur_tgid();
    return tracked.lookup(&tgid) != NULL;
}

/* Every event starts with these three u64 fields; all fields are u64 so user space decodes the
 * records with one numpy dtype per program, no padding rules. */
#define EVENT_HEADER u64 ts; u64 pid; u64 tid;
#define FILL_HEADER(e) do { (e).ts = bpf_ktime_get_ns(); (e).pid = cur_tgid(); (e).tid = cur_tid(); } while (0)

/* Each program writes its records to a BPF ring buffer of its own, so every record of a buffer has
 * one size and user space copies them out in bulk (c_ext/ringbuf.c), and with BPF_RB_NO_WAKEUP: the
 * recorder drains every buffer every 10 ms (kmemsim/recorder.py DRAIN_S). (Per-CPU perf buffers that woke the reader on
 * each record, read by a Python call per record, cost the traced task ~3.8 us per program run and
 * the recorder a CPU: docs/recorder.md.) A record the buffer has no room for is counted in
 * NAME_dropped; each program writes `if (NAME.ringbuf_output(...)) NAME_dropped.increment(0);`
 * itself, as bcc cannot rewrite a map call inside a macro. */
#define OUTPUT(name, pages) BPF_RINGBUF_OUTPUT(name, pages); BPF_ARRAY(name##_dropped, u64, 1)
