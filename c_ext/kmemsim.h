/* kmemsim's C interface: what cffi sees (c_ext/build.py reads this file as its cdef). */
#ifndef KMEMSIM_H
#define KMEMSIM_H
#include <stdint.h>

struct km_config {
    int64_t mem_pages;            /* device RAM in pages; 0 = no device pressure */
    int64_t memcg_limit_pages;    /* memory cgroup limit; 0 = none */
    int32_t swappiness;           /* 0..200 (vm.swappiness / memory.swappiness) */
    int64_t zram_pages;           /* zram disksize in pages; 0 = no swap */
    int32_t zram_algo;            /* index into zram.c's table: 0 lzo-rle, 1 lzo, 2 lz4, 3 zstd */
    int64_t min_free_kbytes;      /* 0 = computed as init_per_zone_wmark_min() does; -1 = no watermarks */
    int32_t watermark_scale_factor;
    int64_t ra_pages;             /* bdi read_ahead_kb / 4 */
    int64_t io_pages;             /* bdi io_pages (max_sectors_kb / 4) */
    int32_t fault_around_pages;   /* fault_around_bytes / 4096; 1 disables */
    int32_t prefault_young;       /* 1: fault-around maps young PTEs (x86); 0: old (arm64 with HW AF) */
    int32_t max_folio_order;      /* mapping_max_folio_order(); 0 = order-0 page cache only */
    int32_t lmk;                  /* 1: Android's lmkd decides kills (lmkd.c); 0: only the OOM killer */
    int32_t swap_zeromap;         /* 1 (Linux 6.12+): zero pages swap out to a bitmap, never to zram */
    int32_t exec_folio_order;     /* Linux 6.17+: exec faults read forward within the vma in folios of
                                   * this order (x86 0, arm64 4); -1: before, read around like data */
    int64_t io_latency_ns;        /* storage: a read's latency, and its time per page (the inverse */
    int64_t io_ns_per_page;       /* bandwidth); both 0: reads complete as the readahead call returns */
    int32_t nr_threads;           /* threads sharing one graph node (events at one trace time) */
    /* what the task's own work costs on the clock reads complete against (a device profile's,
     * as kmemsim.timing charges them): ns per page swapped in (decompressed; a same-filled or
     * zeromap page: zero_ns), per page swapped out, per file folio dropped and per page of it
     * (file_page_ns: a large folio's PTEs unmapped one by one), per page scanned, and per inactive
     * list shrunk (list_ns: shrink_inactive_list()'s isolation under the LRU lock, lru_add_drain(),
     * the pass of the priority loop around it) by the task's own reclaim */
    int64_t swapin_ns, zero_ns, swapout_ns, file_folio_ns, scan_ns, list_ns, file_page_ns;
    int64_t sample_ns;            /* timeline sampling interval in trace time; 0 = phases only */
    int64_t stats_flush_ns;       /* the memcg statistics reclaim reads (lruvec_page_state()) are
                                   * rstat-flushed copies, brought up to date this often on the clock
                                   * reads complete against; 0 = always up to date */
    int64_t stats_flush_phase_ns; /* the first flush, after which they follow every stats_flush_ns;
                                   * before it they are as at the start (a new memcg: nothing) */
    char policy[32];
    int64_t policy_param;         /* policy-specific strength (e.g. DW rotations) */
    int32_t lru_gen;              /* 1: the multi-generational LRU (CONFIG_LRU_GEN, enabled), 0: classic */
    int64_t lru_gen_min_ttl_ns;   /* /sys/kernel/mm/lru_gen/min_ttl_ms, in ns (0: off) */
    int32_t lru_gen_fairness_safeguards; /* 1 (before Linux 6.3): memcg reclaim runs 6.1's
                                   * lru_gen_shrink_lruvec(), evicting on after an aging and stopping
                                   * when it aged twice or met its goal having swapped; 0: 6.3+'s */
};

struct km_emu;

/* NULL only when the emulator itself cannot be allocated; a config, size or count it cannot hold
 * (or memory it cannot get) leaves it failed: km_failed() is 1 and km_error() says why. Every
 * value is checked here and in km_replay(): the core trusts no caller. */
struct km_emu *km_new(const struct km_config *cfg, int32_t nr_files, const int64_t *file_pages,
                      int32_t nr_phases, int32_t nr_tasks);
int32_t km_failed(struct km_emu *e);
void km_free(struct km_emu *e);
/* Replays n events (columns as in kmemsim/trace.py; map ids and pids remapped densely by the
 * caller). Returns 0, or -1 with km_error() set. */
int km_replay(struct km_emu *e, int64_t n, const int64_t *t, const int32_t *task, const uint8_t *op,
              const int32_t *map, const int64_t *page, const int64_t *npages, const int64_t *arg,
              const uint32_t *flags);
const char *km_error(struct km_emu *e);
/* A trace replayed in batches (one longer than memory): with more = 1, km_replay() leaves out the
 * timeline's closing sample, so batch after batch gives what one call over them all gives. */
void km_replay_continues(struct km_emu *e, int32_t more);
int32_t km_nr_counters(void);
int32_t km_nr_gauges(void);
const char *km_counter_name(int32_t i);
const char *km_gauge_name(int32_t i);
void km_counters(struct km_emu *e, uint64_t *out);           /* totals */
void km_gauges(struct km_emu *e, int64_t *out);               /* current values */
void km_task_counters(struct km_emu *e, uint64_t *out);       /* [nr_tasks][nr_counters] */
void km_task_kills(struct km_emu *e, int64_t *out);
int32_t km_nr_lmkd_reasons(void);
const char *km_lmkd_reason(int32_t i);                        /* lmkd.cpp's kill_reasons, by index */          /* [nr_tasks][2]: killed_at (-1: not), by (1 OOM, 2 + lmkd's reason) */
void km_phase_counters(struct km_emu *e, uint64_t *out);      /* [nr_phases][nr_counters] */
int64_t km_timeline_rows(struct km_emu *e);
/* rows of [t, phase, counters..., gauges...] */
void km_timeline(struct km_emu *e, int64_t *out);
/* [rows][nr_tasks]: each task's mapped pages (rss: file + anon, as the OOM killer counts) at each sample */
void km_timeline_rss(struct km_emu *e, int64_t *out);
void km_file_stats(struct km_emu *e, int64_t *out);           /* [nr_files][3]: added, deleted, resident */
/* Per page of a file: 1 resident, 2 active, 4 unevictable, 8 referenced, 16 shadow entry. */
void km_file_page_states(struct km_emu *e, int32_t file, uint8_t *out);
int32_t km_check_invariants(struct km_emu *e);
/* MGLRU's state after a replay (c_ext/lru_gen.c; all 0 with the classic lists): KM_LRU_GEN_STATE
 * values, the layout km_lru_gen_state() documents */
#define KM_LRU_GEN_STATE 96
void km_lru_gen_state(struct km_emu *e, int64_t *out);                /* 0 or a code; km_error() says which */
int32_t km_policy_known(const char *name);
int32_t km_nr_policies(void);
const char *km_policy_name(int32_t i);   /* the registry's names, in its order */
/* The trace readers' side (c_ext/idmap.c): a libCacheSim trace's object ids made dense in one pass
 * over the requests, with a hash table of the distinct ids (memory grows with objects, not
 * requests). km_idmap_add() reads n 64-bit ids `stride` bytes apart from `base` (a mapped file's
 * records as they lie) and writes each one's index in order of first appearance into `first`;
 * with `sizes` (32-bit, the same stride apart; may be NULL) it keeps each object's largest size.
 * Returns the number of distinct ids so far, or -1 when the table cannot grow. Batches may follow
 * one another (a trace read in slices). km_idmap_values() copies the distinct ids, in that order,
 * km_idmap_sizes() their largest sizes (0 without sizes). km_idmap_find() looks ids already added
 * up again, writing val[index] of each into out (a second pass over a trace read in slices);
 * returns n, or the position of the first id not in the table. */
struct km_idmap;
struct km_idmap *km_idmap_new(void);
int64_t km_idmap_add(struct km_idmap *m, const uint8_t *base, int64_t n, int64_t stride, int32_t *first,
                     const uint8_t *sizes);
int64_t km_idmap_size(struct km_idmap *m);
void km_idmap_values(struct km_idmap *m, uint64_t *out);
void km_idmap_sizes(struct km_idmap *m, uint32_t *out);
int64_t km_idmap_find(const struct km_idmap *m, const uint8_t *base, int64_t n, int64_t stride,
                      const int64_t *val, int64_t *out);
void km_idmap_free(struct km_idmap *m);
/* The recorder's side (not the emulator's): copies the committed records of a BPF ring buffer
 * (kernel/bpf/ringbuf.c) whose records are all `rec` bytes into out, at most cap of them, and
 * releases their space; returns how many, or -1 for a record of another size. */
int64_t km_ringbuf_drain(uint64_t *consumer_pos, const uint64_t *producer_pos, const uint8_t *data,
                         uint64_t mask, uint32_t rec, uint8_t *out, int64_t cap);
#endif
