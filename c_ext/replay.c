/* The emulator object and the event loop: one call replays a whole trace in C. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mm.h"

void timeline_sample(struct km_emu *e, int64_t t);
int do_mmap(struct km_emu *e, int32_t id, int32_t task, int64_t file, int64_t pgoff, int64_t npages,
            uint32_t flags);
void do_munmap(struct km_emu *e, int32_t vma, int64_t page, int64_t n);
void exit_mmap(struct km_emu *e, int32_t task);
void zram_init(struct km_emu *e);

/* The config's values within what the core can hold (km_new() refuses the rest): the Python side
 * checks them first with friendlier names (kmemsim/engine/kernel.py, kmemsim/core/limits.py). */
static const char *config_error(const struct km_config *c)
{
    if (c->mem_pages < 0 || c->mem_pages > KM_MAX_PAGES) return "mem_pages out of range";
    if (c->memcg_limit_pages < 0 || c->memcg_limit_pages > KM_MAX_PAGES) return "memcg_limit_pages out of range";
    if (c->swappiness < 0 || c->swappiness > MAX_SWAPPINESS) return "swappiness outside 0..200";
    if (c->zram_pages < 0 || c->zram_pages > KM_MAX_SWAP_SLOTS) return "zram_pages out of range (swap slots are 32-bit)";
    if (c->zram_algo < 0 || c->zram_algo > 3) return "zram_algo unknown";
    if (c->min_free_kbytes < -1 || c->min_free_kbytes > KM_MAX_PAGES * 4) return "min_free_kbytes out of range";
    if (c->watermark_scale_factor < 0 || c->watermark_scale_factor > 3000) return "watermark_scale_factor outside 0..3000";
    if (c->ra_pages < 0 || c->ra_pages > KM_MAX_PAGES) return "ra_pages out of range";
    if (c->io_pages < 0 || c->io_pages > KM_MAX_PAGES) return "io_pages out of range";
    if (c->fault_around_pages < 0 || c->fault_around_pages > (1 << PMD_ORDER)) return "fault_around_pages outside 0..512";
    if (c->max_folio_order < 0 || c->max_folio_order > PMD_ORDER) return "max_folio_order outside 0..9";
    if (c->exec_folio_order < -1 || c->exec_folio_order > PMD_ORDER) return "exec_folio_order outside -1..9";
    if (c->io_latency_ns < 0 || c->io_ns_per_page < 0) return "negative storage time";
    if (c->nr_threads < 0 || c->nr_threads > 64) return "nr_threads outside 1..64";
    if (c->swapin_ns < 0 || c->zero_ns < 0 || c->swapout_ns < 0 || c->file_folio_ns < 0 || c->scan_ns < 0
        || c->list_ns < 0 || c->file_page_ns < 0)
        return "negative task time";
    if (c->sample_ns < 0 || c->stats_flush_ns < 0 || c->stats_flush_phase_ns < 0) return "negative period";
    if (!memchr(c->policy, 0, sizeof c->policy)) return "policy name not terminated";
    return NULL;
}

/* A new emulator. NULL only when the emulator itself cannot be allocated; otherwise check
 * km_failed(): a config or size it cannot hold, or memory it cannot get, leaves it failed with
 * km_error() saying why (km_free() it all the same). */
struct km_emu *km_new(const struct km_config *cfg, int32_t nr_files, const int64_t *file_pages,
                      int32_t nr_phases, int32_t nr_tasks)
{
    struct km_emu *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->failed = 1;                                /* until the end */
    e->cfg = *cfg;
    const char *bad = config_error(cfg);
    if (bad) { km_fail(e, "config: %s", bad); return e; }
    const struct policy_ops *pol = policy_lookup(cfg->policy);
    if (!pol) { km_fail(e, "unknown policy '%s'", cfg->policy); return e; }
    if (nr_files < 0 || nr_phases < 0 || nr_tasks < 0 || (nr_files && !file_pages)) {
        km_fail(e, "%d files, %d phases, %d tasks", nr_files, nr_phases, nr_tasks);
        return e;
    }
    for (int32_t f = 0; f < nr_files; f++)
        if (file_pages[f] < 0 || file_pages[f] > KM_MAX_PAGES) {
            km_fail(e, "file %d of %lld pages (at most %lld)", f, (long long)file_pages[f], (long long)KM_MAX_PAGES);
            return e;
        }
    e->policy = pol;
    if (pol->init) pol->init(e);                  /* may adjust the config before anything uses it */
    e->free_folio = -1;
    e->io_on = e->cfg.io_latency_ns > 0 || e->cfg.io_ns_per_page > 0;
    e->io_next_done = INT64_MAX;
    if (e->cfg.nr_threads < 1) e->cfg.nr_threads = 1;
    e->task_row = e->scratch[0];
    e->phase_row = e->scratch[1];
    e->next_sample = e->cfg.sample_ns > 0 ? INT64_MIN : INT64_MAX;
    e->stat_next_flush = e->cfg.stats_flush_ns > 0 ? e->cfg.stats_flush_phase_ns : INT64_MAX;
    for (int l = 0; l < NR_LRU_LISTS; l++) e->lru[l].head = e->lru[l].tail = -1;
    e->cur_task = -1;
    e->cur_phase = -1;
    e->file_obj = calloc(nr_files ? (size_t)nr_files : 1, sizeof(int32_t));
    e->phase_vm = calloc((size_t)(nr_phases > 0 ? nr_phases : 1) * NR_VM_COUNTERS, sizeof(uint64_t));
    e->tasks = calloc(nr_tasks ? (size_t)nr_tasks : 1, sizeof(struct task));
    e->task_vm = calloc((size_t)(nr_tasks > 0 ? nr_tasks : 1) * NR_VM_COUNTERS, sizeof(uint64_t));
    if (!e->file_obj || !e->phase_vm || !e->tasks || !e->task_vm) {
        km_fail(e, "out of memory: %d files, %d phases, %d tasks", nr_files, nr_phases, nr_tasks);
        return e;
    }
    e->nr_phases = nr_phases;
    e->cap_tasks = nr_tasks;
    e->nr_tasks = nr_tasks;
    for (int32_t k = 0; k < nr_tasks; k++) e->tasks[k].killed_at = -1;
    for (int32_t f = 0; f < nr_files; f++) {
        int32_t o = anon_object_new(e, file_pages[f], 0);
        if (o < 0) return e;
        e->nr_files = f + 1;
        e->file_obj[f] = o;
        e->objs[o].kind = OBJ_FILE;
        e->objs[o].file_id = f;
        if (!(e->objs[o].xa_leaf = calloc((size_t)(file_pages[f] >> XA_CHUNK_SHIFT) + 1, 1))) {
            km_fail(e, "out of memory: file %d of %lld pages", f, (long long)file_pages[f]);
            return e;
        }
        file_ra_state_init(e, o);
    }

    e->total_pages = e->cfg.mem_pages;
    e->memcg_limit = e->cfg.memcg_limit_pages;
    setup_per_zone_wmarks(e);
    zram_init(e);
    if (lru_gen_init(e, nr_tasks) < 0) return e;      /* MGLRU (cfg.lru_gen): lru_gen.c */
    e->failed = 0;
    return e;
}

int32_t km_failed(struct km_emu *e) { return !e || e->failed; }

void km_free(struct km_emu *e)
{
    if (!e) return;
    for (int32_t i = 0; i < e->nr_objs; i++) {
        free(e->objs[i].folio); free(e->objs[i].shadow); free(e->objs[i].xa_leaf); free(e->objs[i].swap); free(e->objs[i].vmas);
    }
    for (int32_t i = 0; i < e->nr_vmas; i++) free(e->vmas[i].pte);   /* NULL once unmapped, or never made */
    free(e->objs); free(e->vmas); free(e->tasks); free(e->folios); free(e->links); free(e->file_obj);
    free(e->task_vm); free(e->phase_vm); free(e->tl); free(e->tl_rss); free(e->zram_size); free(e->zram_free);
    free(e->policy_data); free(e->ioq); free(e->bios); free(e->io_done); free(e->added_at);
    lru_gen_free(e);
    for (int k = 0; k < 64; k++) free(e->th.stack[k]);
    free(e);
}

int32_t km_policy_known(const char *name) { return policy_lookup(name) != NULL; }

/* 0: go on; 1: skip the event (its mapping died with a killed task); -1: a bad trace. */
static inline int vma_ok(struct km_emu *e, int64_t i, int32_t m, int64_t page, int64_t n)
{
    if (m >= 0 && m < e->nr_vmas && !e->vmas[m].alive && e->vmas[m].killed) return 1;
    if (m < 0 || m >= e->nr_vmas || !e->vmas[m].alive)
        return km_fail(e, "event %lld: mapping %d is not mapped", (long long)i, m);
    if (page < 0 || n < 0 || n > e->vmas[m].npages || page > e->vmas[m].npages - n)
        return km_fail(e, "event %lld: pages %lld+%lld outside mapping %d of %lld pages", (long long)i,
                       (long long)page, (long long)n, m, (long long)e->vmas[m].npages);
    return 0;
}

/* Software prefetch for the events ahead. The whole trace is in memory, so the first page each
 * READ/WRITE event will touch is known early; a random reference spends most of its time waiting on
 * a chain of dependent cache misses (page-cache slot -> folio -> its LRU neighbours). Each stage
 * loads what the stage before prefetched a few events earlier and prefetches the next link, so the
 * misses of several events overlap instead of queueing. Prefetches are hints and never change a
 * result; nothing is dereferenced before it is validated here (vma_ok() checks the event itself
 * only when it is replayed), and links read from folios may be stale by then: that costs a useless
 * prefetch, nothing more. */
#define PF_SLOT 16      /* stage 1, this many events ahead: the page-cache slot and the PTE (a power of 2) */
#define PF_FOLIO 8      /* stage 2: the folio in that slot */
#define PF_LRU 4        /* stage 3: the folio's LRU neighbours (unlinked on a hit) */

/* Stage 1 finds the slot of event j once and leaves it in a ring of PF_SLOT entries for the later
 * stages; obj < 0 when event j touches no page. An object and its slots outlive the replay. */
struct pf_slot { int32_t obj; int64_t idx; };

static inline int pf_folio_ok(const struct km_emu *e, folio_id id) { return id >= 0 && id < e->nr_folios; }

/* always_inline: GCC 12 finds a separate function free of side effects (a prefetch does not count)
 * and deletes the call. */
static inline __attribute__((always_inline)) void prefetch_events(const struct km_emu *e, int64_t i,
        int64_t n, const uint8_t *op, const int32_t *map, const int64_t *page, struct pf_slot *ring)
{
    int64_t j = i + PF_SLOT;
    struct pf_slot *r = &ring[j & (PF_SLOT - 1)];              /* event i's entry, no longer needed */
    r->obj = -1;
    if (j < n && (op[j] == OP_READ || op[j] == OP_WRITE) && map[j] >= 0 && map[j] < e->nr_vmas) {
        const struct vma *v = &e->vmas[map[j]];
        int64_t p = page[j];
        if (v->alive && p >= 0 && p < v->npages) {
            const struct object *o = &e->objs[v->obj];
            int64_t idx = o->kind == OBJ_FILE ? v->pgoff + p : p;
            if (idx >= 0 && idx < o->npages) {
                __builtin_prefetch(&o->folio[idx]);
                __builtin_prefetch(&v->pte[p]);
                r->obj = v->obj;
                r->idx = idx;
            }
        }
    }
    r = &ring[(i + PF_FOLIO) & (PF_SLOT - 1)];
    if (r->obj >= 0) {
        folio_id id = e->objs[r->obj].folio[r->idx];
        if (pf_folio_ok(e, id)) __builtin_prefetch(&e->folios[id]);
    }
    r = &ring[(i + PF_LRU) & (PF_SLOT - 1)];
    if (r->obj >= 0 && !e->lists_deferred) {                 /* deferred: the links hold no list */
        folio_id id = e->objs[r->obj].folio[r->idx];
        if (pf_folio_ok(e, id)) {
            const struct lru_link *k = &e->links[id];
            if (pf_folio_ok(e, k->prev)) __builtin_prefetch(&e->links[k->prev]);
            if (pf_folio_ok(e, k->next)) __builtin_prefetch(&e->links[k->next]);
        }
    }
}

/* Events i.. that handle_pages may take together with event i (already checked): single-page
 * events of its kind, task and vma, inside the vma, before the next timeline sample. */
#define RUN_MAX 65536
static int64_t single_page_run(const struct km_emu *e, int64_t i, int64_t n, const int64_t *t,
        const int32_t *task, const uint8_t *op, const int32_t *map, const int64_t *page,
        const int64_t *npages, const uint32_t *flags)
{
    int64_t vpages = e->vmas[map[i]].npages, end = n - i > RUN_MAX ? i + RUN_MAX : n, j = i + 1;
    while (j < end && op[j] == op[i] && task[j] == task[i] && map[j] == map[i] && npages[j] == 1 &&
           flags[j] == flags[i] && page[j] >= 0 && page[j] < vpages && t[j] < e->next_sample) j++;
    return j;
}

int km_replay(struct km_emu *e, int64_t n, const int64_t *t, const int32_t *task, const uint8_t *op,
              const int32_t *map, const int64_t *page, const int64_t *npages, const int64_t *arg,
              const uint32_t *flags)
{
    struct pf_slot ring[PF_SLOT];
    if (e->failed) return -1;                      /* km_error() still says why */
    if (n < 0 || (n && (!t || !task || !op || !map || !page || !npages || !arg || !flags)))
        return km_fail(e, "%lld events without their columns", (long long)n);
    for (int k = 0; k < PF_SLOT; k++) ring[k].obj = -1;
    for (int64_t i = 0; i < n; i++) {
        if (e->nomem) return km_fail(e, "out of memory at event %lld", (long long)i);
        if (t[i] < e->now || t[i] < 0)
            return km_fail(e, "event %lld: time %lld goes backwards", (long long)i, (long long)t[i]);
        prefetch_events(e, i, n, op, map, page, ring);
        if (e->nr_io_wait && t[i] != e->now) io_barrier(e, t[i]);   /* a graph node ended */
        e->now = t[i];
        bio_poll(e);
        memcg_flush_stats_due(e);
        if (t[i] >= e->next_sample) {                     /* INT64_MAX when not sampling */
            if (e->tl_rows == 0) e->next_sample = t[i];
            while (t[i] >= e->next_sample) {
                timeline_sample(e, e->next_sample);
                e->next_sample += e->cfg.sample_ns;
                if (e->nomem) return km_fail(e, "out of memory: a timeline of %lld rows (event %lld)",
                                             (long long)e->tl_rows, (long long)i);
            }
        }
        int32_t tk = task[i];
        if (tk < 0 || tk >= e->nr_tasks) return km_fail(e, "event %lld: task %d unknown", (long long)i, tk);
        e->cur_task = tk;
        e->task_row = e->task_vm + (int64_t)tk * NR_VM_COUNTERS;
        struct task *ts = &e->tasks[tk];
        int ok;
        if (op[i] != OP_PROC_START && !ts->alive) {
            if (ts->pid == -1) {                  /* killed by OOM/lmkd: its later events vanish */
                if (op[i] == OP_MMAP && map[i] == e->nr_vmas) {   /* keep mapping ids dense */
                    if (do_mmap(e, map[i], tk, -1, 0, 0, 0) < 0) return -1;
                    e->vmas[map[i]].alive = 0;
                    e->vmas[map[i]].killed = 1;
                }
                continue;
            }
            ts->alive = 1;                        /* traces may omit PROC_START */
        }
        if (op[i] != OP_READ && op[i] != OP_WRITE && op[i] != OP_PHASE) lists_sync(e);
        switch (op[i]) {
        case OP_PROC_START:
            if (arg[i] < -1000 || arg[i] > 1000)
                return km_fail(e, "event %lld: oom_score_adj %lld outside -1000..1000", (long long)i, (long long)arg[i]);
            ts->alive = 1; ts->oom_score_adj = (int)arg[i]; ts->pid = tk;
            ts->adj_seq = e->lmkd.adj_seq++;
            break;
        case OP_PROC_EXIT:
            exit_task(e, tk);
            break;
        case OP_MMAP:
            if (map[i] != e->nr_vmas)
                return km_fail(e, "event %lld: mapping ids must be dense and new (got %d, next %d)",
                               (long long)i, map[i], e->nr_vmas);
            if (arg[i] >= e->nr_files || arg[i] < -1)
                return km_fail(e, "event %lld: file %lld unknown", (long long)i, (long long)arg[i]);
            if (do_mmap(e, map[i], tk, arg[i], page[i], npages[i], flags[i]) < 0) return -1;
            break;
        case OP_MUNMAP:
            if ((ok = vma_ok(e, i, map[i], page[i], npages[i])) != 0) { if (ok < 0) return -1; break; }
            do_munmap(e, map[i], page[i], npages[i]);
            break;
        case OP_READ:
        case OP_WRITE:
            if ((ok = vma_ok(e, i, map[i], page[i], npages[i])) != 0) { if (ok < 0) return -1; break; }
            int write = op[i] == OP_READ ? FAULT_READ : (flags[i] & WRITE_F_ZERO) ? FAULT_WRITE_ZERO : FAULT_WRITE;
            e->trace_range = 1;
            if (op[i] == OP_READ && arg[i] > 0) {         /* a matmul's weight on cfg.nr_threads threads */
                int64_t j = i + 1;
                while (j < n && t[j] == t[i]) j++;
                handle_range_threads(e, map[i], page[i], npages[i], arg[i], j < n ? t[j] - t[i] : 0);
                e->trace_range = 0;
                break;
            }
            int64_t j = e->policy->handle_pages && npages[i] == 1 ?
                        single_page_run(e, i, n, t, task, op, map, page, npages, flags) : i + 1;
            if (j > i + 1) {
                e->policy->handle_pages(e, map[i], &page[i], j - i, write);
                e->now = t[j - 1];
                i = j - 1;
                for (int k = 0; k < PF_SLOT; k++) ring[k].obj = -1;   /* its events are behind */
            } else {
                handle_range(e, map[i], page[i], npages[i], write);
            }
            e->trace_range = 0;
            break;
        case OP_MADVISE:
            if ((ok = vma_ok(e, i, map[i], page[i], npages[i])) != 0) { if (ok < 0) return -1; break; }
            do_madvise(e, map[i], page[i], npages[i], (int)arg[i]);
            break;
        case OP_FADVISE:
        case OP_FREAD:
        case OP_OPEN:
        case OP_DIO_READ:
        case OP_DIO_WRITE: {
            if (flags[i] >= (uint32_t)e->nr_files)
                return km_fail(e, "event %lld: file %u unknown", (long long)i, flags[i]);
            int32_t o = e->file_obj[flags[i]];
            if (op[i] == OP_OPEN) { file_ra_state_init(e, o); break; }
            if (page[i] < 0 || npages[i] < 0)
                return km_fail(e, "event %lld: pages %lld+%lld of file %u", (long long)i, (long long)page[i],
                               (long long)npages[i], flags[i]);
            int64_t end = npages[i] > e->objs[o].npages - page[i] ? e->objs[o].npages : page[i] + npages[i];
            if (page[i] >= end) break;
            if (op[i] == OP_FADVISE) generic_fadvise(e, o, page[i], end - page[i], (int)arg[i]);
            else if (op[i] == OP_FREAD) filemap_read(e, o, page[i], end - page[i]);
            else if (op[i] == OP_DIO_READ) direct_read(e, o, page[i], end - page[i], arg[i] == 1);   /* direct_io.c */
            else direct_write(e, o, page[i], end - page[i]);
            break;
        }
        case OP_MLOCK:
        case OP_MUNLOCK:
            if ((ok = vma_ok(e, i, map[i], page[i], npages[i])) != 0) { if (ok < 0) return -1; break; }
            mlock_range(e, map[i], page[i], npages[i], op[i] == OP_MLOCK);
            break;
        case OP_SET_OOM_ADJ:
            if (arg[i] < -1000 || arg[i] > 1000)
                return km_fail(e, "event %lld: oom_score_adj %lld outside -1000..1000", (long long)i, (long long)arg[i]);
            ts->oom_score_adj = (int)arg[i];
            ts->adj_seq = e->lmkd.adj_seq++;
            break;
        case OP_KMEM:                             /* kernel objects the trace does not model */
            if (npages[i] < 0 || npages[i] > KM_MAX_PAGES)
                return km_fail(e, "event %lld: kernel memory of %lld pages", (long long)i, (long long)npages[i]);
            memcg_kmem_charge(e, npages[i]);
            break;
        case OP_PHASE:
            if (arg[i] < 0 || arg[i] >= e->nr_phases)
                return km_fail(e, "event %lld: phase %lld unknown", (long long)i, (long long)arg[i]);
            timeline_sample(e, t[i]);             /* close the previous phase */
            e->cur_phase = (int32_t)arg[i];
            e->phase_row = e->phase_vm + (int64_t)e->cur_phase * NR_VM_COUNTERS;
            break;
        default:
            return km_fail(e, "event %lld: unknown op %d", (long long)i, op[i]);
        }
    }
    if (e->nomem) return km_fail(e, "out of memory at the end of the trace");
    if (!e->more_follows) timeline_sample(e, e->now);
    return 0;
}

void km_replay_continues(struct km_emu *e, int32_t more) { e->more_follows = more != 0; }

void km_file_stats(struct km_emu *e, int64_t *out)
{
    for (int32_t f = 0; f < e->nr_files; f++) {
        struct object *o = &e->objs[e->file_obj[f]];
        out[3 * f] = o->pages_added;
        out[3 * f + 1] = o->pages_deleted;
        out[3 * f + 2] = o->nr_resident;
    }
}

void km_file_page_states(struct km_emu *e, int32_t file, uint8_t *out)
{
    if (e->failed || file < 0 || file >= e->nr_files) return;
    struct object *o = &e->objs[e->file_obj[file]];
    for (int64_t p = 0; p < o->npages; p++) {
        /* the slots are read in order, the folios at random: prefetch the folios ahead */
        if (p + 16 < o->npages && o->folio[p + 16] >= 0) __builtin_prefetch(&e->folios[o->folio[p + 16]]);
        folio_id id = o->folio[p];
        uint8_t s = o->shadow[p] ? 16 : 0;
        if (id >= 0) {
            uint16_t fl = e->folios[id].flags;
            s |= 1 | (fl & PG_active ? 2 : 0) | (fl & PG_unevictable ? 4 : 0) | (fl & PG_referenced ? 8 : 0);
        }
        out[p] = s;
    }
}

/* Invariants the tests check after every replay: each resident folio on exactly one list, list
 * sizes equal their counters, page-table and page-cache views agree, nothing negative. */
int32_t km_check_invariants(struct km_emu *e)
{
    lists_sync(e);
    int64_t on_lists = 0, nr_listed = 0;
    for (int l = 0; l < NR_LRU_LISTS; l++) {
        int64_t pages = 0;
        folio_id prev = -1;
        for (folio_id id = e->lru[l].head; id >= 0; id = e->links[id].next) {
            struct folio *f = &e->folios[id];
            if (f->lru != l) return km_fail(e, "folio %d on list %d says it is on %d", id, l, f->lru), 1;
            if (e->links[id].prev != prev) return km_fail(e, "folio %d: broken prev link", id), 2;
            if (folio_lru_list(f) != l && l != LRU_UNEVICTABLE && !e->policy->folio_add_lru)  /* a policy may choose */
                return km_fail(e, "folio %d flags say list %d, it is on %d", id, folio_lru_list(f), l), 3;
            pages += folio_nr_pages(f);
            prev = id;
            if (++nr_listed > e->nr_folios) return km_fail(e, "list %d loops", l), 4;
        }
        if (prev != e->lru[l].tail) return km_fail(e, "list %d: tail mismatch", l), 5;
        if (pages != e->lru[l].nr_pages && !(e->lru_gen_enabled && l != LRU_UNEVICTABLE))   /* MGLRU: below */
            return km_fail(e, "list %d holds %lld pages, counter says %lld", l, (long long)pages,
                           (long long)e->lru[l].nr_pages), 6;
        on_lists += pages;
    }
    int64_t resident = 0;
    for (int32_t o = 0; o < e->nr_objs; o++) {
        struct object *ob = &e->objs[o];
        int64_t r = 0;
        for (int64_t p = 0; p < ob->npages; p++) {
            folio_id id = ob->folio[p];
            if (id < 0) continue;
            struct folio *f = &e->folios[id];
            if (f->obj != o || p < f->index || p >= f->index + folio_nr_pages(f))
                return km_fail(e, "object %d page %lld points at folio %d of another range", o, (long long)p, id), 7;
            if (f->lru == NO_LRU) return km_fail(e, "resident folio %d on no list", id), 8;
            if (ob->swap && ob->swap[p] >= 0) return km_fail(e, "object %d page %lld resident and swapped", o, (long long)p), 9;
            r++;
        }
        if (r != ob->nr_resident) return km_fail(e, "object %d: %lld resident, counter %lld", o, (long long)r, (long long)ob->nr_resident), 10;
        resident += r;
    }
    if (e->lru_gen_enabled) {                     /* the generations (lru_gen.c) */
        int64_t gen_pages = lru_gen_check_invariants(e);
        if (gen_pages < 0) return 21;
        on_lists += gen_pages;
    }
    if (resident != on_lists) return km_fail(e, "%lld pages resident, %lld on lists", (long long)resident, (long long)on_lists), 11;
    if (resident != e->used_pages) return km_fail(e, "%lld pages resident, used counter %lld", (long long)resident, (long long)e->used_pages), 12;
    if (e->memcg_limit && e->memcg_usage != resident + e->kmem_pages)
        return km_fail(e, "memcg usage %lld != resident %lld + kernel %lld", (long long)e->memcg_usage,
                       (long long)resident, (long long)e->kmem_pages), 13;
    if (e->total_pages && free_pages(e) + resident + e->kmem_pages + zram_pool_pages(e) != e->total_pages)
        return km_fail(e, "free + resident + zram != total"), 14;
    if (e->total_pages && free_pages(e) < 0) return km_fail(e, "negative free pages"), 15;
    int64_t tables = 0, nodes = 0;
    for (int32_t v = 0; v < e->nr_vmas; v++)
        if (e->vmas[v].alive) tables += vma_pte_tables(&e->vmas[v]);
    for (int32_t o = 0; o < e->nr_objs; o++) {
        struct object *ob = &e->objs[o];
        if (!ob->xa_leaf || e->kmem_off) continue;
        for (int64_t g = 0; g <= ob->npages >> XA_CHUNK_SHIFT; g++) {
            int64_t used = 0;
            for (int64_t p = g << XA_CHUNK_SHIFT; p < ob->npages && p < (g + 1) << XA_CHUNK_SHIFT; p++)
                used += ob->folio[p] >= 0 || ob->shadow[p];
            uint8_t l = ob->xa_leaf[g];
            if (l <= 64 ? l != used : used != (((g + 1) << XA_CHUNK_SHIFT) < ob->npages ? 64 : used))
                return km_fail(e, "object %d: xarray leaf %lld holds %d, %lld slots used", o, (long long)g, l, (long long)used), 18;
            nodes += l && l <= 64;
        }
    }
    if (tables != e->nr_page_tables) return km_fail(e, "%lld PTE tables, counter %lld", (long long)tables, (long long)e->nr_page_tables), 19;
    if (nodes != e->nr_xa_nodes) return km_fail(e, "%lld xarray leaves, counter %lld", (long long)nodes, (long long)e->nr_xa_nodes), 20;
    for (int32_t v = 0; v < e->nr_vmas; v++) {
        struct vma *vm = &e->vmas[v];
        if (!vm->alive) continue;
        for (int64_t p = 0; p < vm->npages; p++) {
            uint8_t pte = vm->pte[p];
            if (!(pte & PTE_PRESENT) || (pte & PTE_ZERO)) continue;
            struct object *ob = &e->objs[(pte & PTE_ANON) && vm->anon >= 0 ? vm->anon : vm->obj];
            int64_t idx = (ob->kind == OBJ_FILE) ? vm->pgoff + p : p;
            if (ob->folio[idx] < 0) return km_fail(e, "vma %d page %lld mapped but not resident", v, (long long)p), 16;
        }
    }
    if (e->anon_cost < 0 || e->file_cost < 0) return km_fail(e, "negative reclaim cost"), 17;
    return 0;
}
