/* The OOM killer (mm/oom_kill.c) and Android's lmkd: pick a victim, tear it down. */
#include "mm.h"

void exit_mmap(struct km_emu *e, int32_t task);

void exit_task(struct km_emu *e, int32_t task)
{
    exit_mmap(e, task);
    e->tasks[task].alive = 0;
}

/* Tear the victim down: its memory is freed now and its later events vanish. `by` is KILLED_BY_OOM
 * or KILLED_BY_LMKD + lmkd's kill reason. */
void oom_kill_process(struct km_emu *e, int32_t victim, int by)
{
    e->tasks[victim].killed_at = e->now;
    e->tasks[victim].killed_by = by;
    for (int32_t v = 0; v < e->nr_vmas; v++)
        if (e->vmas[v].task == victim) e->vmas[v].killed = 1;
    exit_task(e, victim);
    e->tasks[victim].pid = -1;
}

/* oom_badness(): resident pages (swap entries are freed at exit too, but the kernel counts them;
 * we count resident + swapped via rss only) adjusted by oom_score_adj * totalpages / 1000.
 * Returns 1 if a task was killed, 0 if none could be. (lmkd's choice is lmkd.c's.) */
int out_of_memory(struct km_emu *e, int memcg)
{
    int32_t victim = -1;
    int64_t best = INT64_MIN;
    int64_t totalpages = memcg ? e->memcg_limit : e->total_pages;
    for (int32_t t = 0; t < e->nr_tasks; t++) {
        struct task *ts = &e->tasks[t];
        if (!ts->alive || ts->oom_score_adj <= -1000) continue;
        int64_t points = ts->rss + (int64_t)ts->oom_score_adj * totalpages / 1000;
        if (points > best) { best = points; victim = t; }
    }
    if (victim < 0) return 0;
    count(e, VM_oom_kill, 1);
    oom_kill_process(e, victim, KILLED_BY_OOM);
    return 1;
}
