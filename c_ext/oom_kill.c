/* The OOM killer (mm/oom_kill.c) and Android's lmkd: pick a victim, tear it down. */
#include "mm.h"

void exit_mmap(struct km_emu *e, int32_t task);

void exit_task(struct km_emu *e, int32_t task)
{
    exit_mmap(e, task);
    e->tasks[task].alive = 0;
}

/* oom_badness(): resident pages (swap entries are freed at exit too, but the kernel counts them;
 * we count resident + swapped via rss only) adjusted by oom_score_adj * totalpages / 1000.
 * lmkd instead kills the highest oom_score_adj first, the largest among equals.
 * Returns 1 if a task was killed, 0 if none could be. */
int out_of_memory(struct km_emu *e, int memcg)
{
    int32_t victim = -1;
    int64_t best = INT64_MIN;
    int64_t totalpages = memcg ? e->memcg_limit : e->total_pages;
    for (int32_t t = 0; t < e->nr_tasks; t++) {
        struct task *ts = &e->tasks[t];
        if (!ts->alive || ts->oom_score_adj <= -1000) continue;
        int64_t points;
        if (e->cfg.lmk && !memcg) points = (int64_t)ts->oom_score_adj * (1LL << 40) + ts->rss;
        else points = ts->rss + (int64_t)ts->oom_score_adj * totalpages / 1000;
        if (points > best) { best = points; victim = t; }
    }
    if (victim < 0) return 0;
    if (e->cfg.lmk && !memcg && e->tasks[victim].oom_score_adj < 0) return 0;
    count(e, e->cfg.lmk && !memcg ? VM_lmk_kill : VM_oom_kill, 1);
    for (int32_t v = 0; v < e->nr_vmas; v++)
        if (e->vmas[v].task == victim) e->vmas[v].killed = 1;
    exit_task(e, victim);
    e->tasks[victim].pid = -1;                          /* killed: its later events are dropped */
    return 1;
}
