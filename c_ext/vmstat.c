/* Counters (mm/vmstat.c): totals, per task, per phase, and the sampled timeline. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mm.h"

#define NAME_ITEM(n) #n,
static const char *counter_names[] = { KM_COUNTERS(NAME_ITEM) };
static const char *gauge_names[] = { KM_GAUGES(NAME_ITEM) };
#undef NAME_ITEM

int32_t km_nr_counters(void) { return NR_VM_COUNTERS; }
int32_t km_nr_gauges(void) { return NR_VM_GAUGES; }
const char *km_counter_name(int32_t i) { return i >= 0 && i < NR_VM_COUNTERS ? counter_names[i] : ""; }
const char *km_gauge_name(int32_t i) { return i >= 0 && i < NR_VM_GAUGES ? gauge_names[i] : ""; }


void gauges(struct km_emu *e, int64_t *g)
{
    g[VM_nr_free_pages] = free_pages(e);
    g[VM_nr_inactive_anon] = e->lru[LRU_INACTIVE_ANON].nr_pages;
    g[VM_nr_active_anon] = e->lru[LRU_ACTIVE_ANON].nr_pages;
    g[VM_nr_inactive_file] = e->lru[LRU_INACTIVE_FILE].nr_pages;
    g[VM_nr_active_file] = e->lru[LRU_ACTIVE_FILE].nr_pages;
    g[VM_nr_unevictable] = e->lru[LRU_UNEVICTABLE].nr_pages;
    int64_t file = 0, anon = 0, weights = 0, kv = 0, anon_weights = 0;
    for (int32_t i = 0; i < e->nr_objs; i++) {
        struct object *o = &e->objs[i];
        if (o->kind == OBJ_FILE) { file += o->nr_resident; if (o->weights) weights += o->nr_resident; }
        else {
            anon += o->nr_resident;
            if (class_is_kv(o->cls)) kv += o->nr_resident;
            if (class_is_weights(o->cls)) anon_weights += o->nr_resident;
        }
    }
    g[VM_nr_kv_anon_pages] = kv;
    g[VM_nr_weight_anon_pages] = anon_weights;
    g[VM_nr_file_pages] = file;
    g[VM_nr_anon_pages] = anon;
    g[VM_nr_weight_file_pages] = weights;
    g[VM_memcg_usage] = e->memcg_usage;
    g[VM_zram_orig_data_size] = e->zram_used_slots * 4096;
    g[VM_zram_compr_data_size] = e->zram_compr_bytes;
    g[VM_zram_mem_used_total] = zram_pool_pages(e) * 4096;
    g[VM_zram_same_pages] = e->zram_same;
    g[VM_zram_huge_pages] = e->zram_huge;
    g[VM_nr_swapped] = e->zram_used_slots;
    g[VM_peak_resident] = e->peak_used;
    g[VM_peak_memory] = e->peak_memory;
    g[VM_wmark_min] = e->wmark_min;
    g[VM_wmark_low] = e->wmark_low;
    g[VM_wmark_high] = e->wmark_high;
    g[VM_nr_page_table_pages] = e->nr_page_tables;
    g[VM_nr_xa_nodes] = e->nr_xa_nodes;
    g[VM_nr_kernel_pages] = e->kmem_pages;
}

void km_counters(struct km_emu *e, uint64_t *out) { memcpy(out, e->vm, sizeof e->vm); }
void km_gauges(struct km_emu *e, int64_t *out) { gauges(e, out); }
void km_task_counters(struct km_emu *e, uint64_t *out)
{
    memcpy(out, e->task_vm, sizeof(uint64_t) * e->nr_tasks * NR_VM_COUNTERS);
}
void km_phase_counters(struct km_emu *e, uint64_t *out)
{
    memcpy(out, e->phase_vm, sizeof(uint64_t) * (e->nr_phases > 0 ? e->nr_phases : 1) * NR_VM_COUNTERS);
}

#define TL_WIDTH (2 + NR_VM_COUNTERS + NR_VM_GAUGES)

void timeline_sample(struct km_emu *e, int64_t t)
{
    if (e->tl_rows == e->tl_cap) {             /* a row per sample: grows with the trace's time span */
        if (e->nomem) return;
        int64_t cap = e->tl_cap ? e->tl_cap * 2 : 1024;
        int64_t *tl = realloc(e->tl, sizeof(int64_t) * TL_WIDTH * (size_t)cap);
        if (!tl) { e->nomem = 1; return; }        /* km_replay() fails with "out of memory" */
        e->tl = tl;
        int64_t *rss = realloc(e->tl_rss, sizeof(int64_t) * (size_t)(e->nr_tasks ? e->nr_tasks : 1) * (size_t)cap);
        if (!rss) { e->nomem = 1; return; }
        e->tl_rss = rss;
        e->tl_cap = cap;
    }
    for (int32_t i = 0; i < e->nr_tasks; i++) e->tl_rss[e->tl_rows * e->nr_tasks + i] = e->tasks[i].rss;
    int64_t *row = e->tl + e->tl_rows++ * TL_WIDTH;
    row[0] = t;
    row[1] = e->cur_phase;
    for (int i = 0; i < NR_VM_COUNTERS; i++) row[2 + i] = (int64_t)e->vm[i];
    gauges(e, row + 2 + NR_VM_COUNTERS);
}

int64_t km_timeline_rows(struct km_emu *e) { return e->tl_rows; }
void km_timeline(struct km_emu *e, int64_t *out) { memcpy(out, e->tl, sizeof(int64_t) * TL_WIDTH * e->tl_rows); }
void km_timeline_rss(struct km_emu *e, int64_t *out)
{
    if (e->tl_rows) memcpy(out, e->tl_rss, sizeof(int64_t) * (size_t)e->nr_tasks * (size_t)e->tl_rows);
}

int km_fail(struct km_emu *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    return -1;
}
const char *km_error(struct km_emu *e) { return e->err; }

/* Which tasks the OOM killer or lmkd killed, and when (trace time of the event that needed the memory). */
void km_task_kills(struct km_emu *e, int64_t *out)
{
    for (int32_t t = 0; t < e->nr_tasks; t++) {
        out[2 * t] = e->tasks[t].killed_at;
        out[2 * t + 1] = e->tasks[t].killed_by;
    }
}
