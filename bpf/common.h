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
 * perf records with one numpy dtype per program, no padding rules. */
#define EVENT_HEADER u64 ts; u64 pid; u64 tid;
#define FILL_HEADER(e) do { (e).ts = bpf_ktime_get_ns(); (e).pid = cur_tgid(); (e).tid = cur_tid(); } while (0)
