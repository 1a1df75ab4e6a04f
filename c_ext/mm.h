/*
 * kmemsim core: the Linux reclaim path (classic two-list LRU, CONFIG_LRU_GEN off) for one node and
 * one memory cgroup. Names follow the kernel (6.x, folio API) so a reader of mm/ finds their way;
 * each .c file is named after its mm/ counterpart. Where we simplify, the comment says so.
 */
#ifndef KMEMSIM_MM_H
#define KMEMSIM_MM_H

#include <stdint.h>
#include <setjmp.h>
#include <ucontext.h>
#include <stddef.h>
#include "kmemsim.h"

#define DEF_PRIORITY 12
#define SWAP_CLUSTER_MAX 32
#define MAX_SWAPPINESS 200
#define MMAP_LOTSAMISS 100
#define MAX_RECLAIM_RETRIES 16

/* Trace ops: values fixed by kmemsim/core/trace.py (Op), in its order. */
enum { OP_PROC_START, OP_PROC_EXIT, OP_MMAP, OP_MUNMAP, OP_READ, OP_WRITE, OP_MADVISE, OP_FADVISE,
       OP_MLOCK, OP_MUNLOCK, OP_PHASE, OP_FREAD, OP_SET_OOM_ADJ, OP_OPEN, OP_KMEM, OP_DIO_READ,
       OP_DIO_WRITE, NR_OPS };
/* MapFlag bits (trace.py) and kernel vm_flags we derive from advice. */
enum { MAP_F_SHARED = 1, MAP_F_READ = 2, MAP_F_WRITE = 4, MAP_F_EXEC = 8, MAP_F_POPULATE = 16,
       MAP_F_LOCKED = 32, MAP_F_WEIGHTS = 64, VM_SEQ_READ = 1 << 16, VM_RAND_READ = 1 << 17 };
#define CLASS_SHIFT 8
#define CLASS_ZERO 1                /* PageClass.ZERO */
#define CLASS_KV_F16 2              /* PageClass.KV_F16, KV_Q8: the KV cache */
#define CLASS_KV_Q8 3
#define CLASS_WEIGHTS_Q 4           /* PageClass.WEIGHTS_Q, WEIGHTS_F16: weights copied to anon */
#define CLASS_WEIGHTS_F16 5
#define WRITE_F_ZERO 1              /* WriteFlag.ZERO */
/* Advice (include/uapi/asm-generic/mman-common.h, fadvise.h). */
enum { ADV_NORMAL = 0, ADV_RANDOM = 1, ADV_SEQUENTIAL = 2, ADV_WILLNEED = 3, ADV_DONTNEED = 4,
       ADV_COLD = 20, ADV_PAGEOUT = 21 };

enum lru_list { LRU_INACTIVE_ANON, LRU_ACTIVE_ANON, LRU_INACTIVE_FILE, LRU_ACTIVE_FILE,
                LRU_UNEVICTABLE, NR_LRU_LISTS, NO_LRU = 255 };
/* The multi-generational LRU's lists (CONFIG_LRU_GEN, lru_gen.c): folio->lru of a folio on the list
 * of generation gen (seq % MAX_NR_GENS) of its type (0 anon, 1 file); e->lru[] holds them after the
 * classic lists, whose nr_pages then count the generations as the kernel's compatibility sizes do
 * (the two youngest active, lru_gen_is_active()) and whose lists stay empty. */
#define MIN_NR_GENS 2
#define MAX_NR_GENS 4
#define LRU_GEN_BASE 8
#define LRU_GEN_LIST(gen, type) (LRU_GEN_BASE + 2 * (gen) + (type))
#define NR_LRU_HEADS (LRU_GEN_BASE + 2 * MAX_NR_GENS)
/* the memcg statistics reclaim decides by (lruvec_page_state()): the LRU sizes, then the refault
 * activations, anon and file (WORKINGSET_ACTIVATE_BASE + file) */
enum { WORKINGSET_ACTIVATE_BASE = NR_LRU_LISTS, NR_MEMCG_STATS = NR_LRU_LISTS + 2 };
#define LRU_ACTIVE 1
#define LRU_FILE 2

/* folio->flags: the page flags reclaim looks at (include/linux/page-flags.h). */
enum { PG_active = 1, PG_referenced = 2, PG_workingset = 4, PG_unevictable = 8, PG_swapbacked = 16,
       PG_readahead = 32, PG_dirty = 64, PG_weights = 128 /* DW's flag, set by policies */,
       /* not a kernel flag: a reference held by the task being served (filemap_get_folio() in
        * filemap_fault(), the read batch in filemap_read()) while it allocates for readahead;
        * __remove_mapping()'s folio_ref_freeze() fails on such a folio, so reclaim keeps it */
       PG_pinned = 256,
       /* a folio being read: from its allocation until its read completes (bio.c; without a
        * storage time, until the readahead call returns); shrink_folio_list()'s folio_trylock()
        * fails (keep), filemap_map_pages() skips it, and a task that needs it waits */
       PG_locked = 512 };
/* MGLRU's bits of folio->flags (include/linux/page-flags-layout.h): the generation + 1 (0: on no
 * generation list; LRU_GEN_WIDTH) and the accesses through file descriptors beyond PG_referenced and
 * PG_workingset (LRU_REFS_WIDTH 2). Only lru_gen.c sets them; with the classic lists they stay 0. */
#define LRU_GEN_PGOFF 10
#define LRU_GEN_MASK (7 << LRU_GEN_PGOFF)
#define LRU_REFS_PGOFF 13
#define LRU_REFS_MASK (3 << LRU_REFS_PGOFF)

/* PTE bits: one byte per virtual page of a vma. */
enum { PTE_PRESENT = 1, PTE_YOUNG = 2, PTE_DIRTY = 4, PTE_ANON = 8 /* maps the vma's anon/COW page */,
       PTE_ZERO = 16 /* the shared zero page */ };

typedef int32_t folio_id;

/* The LRU links, apart from the folios (e->links[id]): reclaim's walk from a list's tail follows
 * them one by one, and an array of 8-byte links (a quarter of the folios' bytes) mostly stays in the
 * cache, while the folios the walk finds are fetched together (isolate_lru_folios()). -1 ends. */
struct lru_link { folio_id prev, next; };

/* 32 bytes (fields ordered to avoid padding): two folios per cache line. */
struct folio {
    int32_t obj;              /* owning address_space (file) or anon object */
    int32_t mapcount;         /* number of PTEs mapping pages of this folio */
    int64_t index;            /* first page index in obj */
    uint16_t flags;
    uint8_t order;
    uint8_t lru;              /* list it is on, NO_LRU when isolated or free */
    uint8_t cls;              /* page class for zram compressibility */
    uint8_t policy_count;     /* free for policies (DW: rotations so far) */
    uint32_t stamp;           /* free for policies (the plain LRU: its reference FIFO's stamp) */
};
_Static_assert(sizeof(struct folio) == 32, "struct folio should stay 32 bytes");

struct lru_head { folio_id head, tail; int64_t nr_pages; };

/* struct file_ra_state (include/linux/fs.h): one per file (we model one struct file per file). */
struct file_ra_state {
    int64_t start, size, async_size;
    int64_t ra_pages;
    int32_t mmap_miss;
    int32_t order;
    int64_t prev_pos;          /* last page read via read(2), for ondemand_readahead */
};

enum { OBJ_FILE, OBJ_ANON };

/* A file's page cache (struct address_space) or an anonymous region's pages. */
struct object {
    int kind;
    int64_t npages;
    int32_t file_id;
    uint8_t cls;
    folio_id *folio;           /* page index -> folio, -1 if not resident */
    uint64_t *shadow;          /* workingset shadow entries; 0 = none */
    uint8_t *xa_leaf;          /* file: per 64 pages, the i_pages xarray's leaf node there: 0 none,
                                * 1..64 its occupied slots (folios and shadows), XA_MULTI + order: no
                                * leaf, a multi-index entry one level up covers these pages */
    int32_t *swap;             /* anon: zram slot of a swapped-out page, -1 none */
    int32_t *vmas; int nvmas, cap_vmas;   /* reverse map: vmas mapping this object */
    struct file_ra_state ra;
    int fmode_random;          /* POSIX_FADV_RANDOM */
    int weights;               /* mapped by some vma flagged MAP_F_WEIGHTS */
    int64_t nr_resident;
    int64_t pages_added, pages_deleted;   /* mm_filemap_add/delete_from_page_cache, in pages */
};

struct vma {
    int32_t task;
    int32_t obj;               /* file object, or the anon object for anonymous vmas */
    int32_t anon;              /* anon object holding COW pages of a private file vma, -1 none */
    int64_t pgoff, npages;
    uint32_t flags;            /* MAP_F_* | VM_SEQ_READ | VM_RAND_READ */
    int alive;
    int killed;                /* its task was killed (OOM/lmkd): later events on it are dropped */
    uint8_t *pte;
    uint8_t *pmdtab;           /* per 512 pages (2 MiB, vmas start PMD-aligned): PMD_TABLE once a PTE
                                * table exists there (pmd not none, the table charged), PMD_SPLIT when
                                * a partial munmap left no whole 2 MiB to map; either way no PMD
                                * mapping from then on. It shares pte's allocation */
};

#define PAGE_SIZE 4096
#define PMD_ORDER 9            /* HPAGE_PMD_ORDER with 4 KiB pages (x86-64, arm64) */
enum { PMD_TABLE = 1, PMD_SPLIT = 2 };
#define XA_CHUNK_SHIFT 6       /* 64 slots per xarray node */
/* The most pages an object (a file, a mapping) or a memory size may have: 4 PiB, as
 * kmemsim/core/trace.py's MAX_PAGES; checked where sizes enter the core (km_new, do_mmap, events),
 * so no size computed from one overflows. */
#define KM_MAX_PAGES ((int64_t)1 << 40)
#define KM_MAX_SWAP_SLOTS INT32_MAX   /* swap slots are int32_t (object->swap, zram_size[]) */
#define XA_MULTI 128           /* xa_leaf: + the order of a multi-index entry (>= XA_CHUNK_SHIFT) */
#define XA_NODE_BYTES 576      /* sizeof(struct xa_node) on 64-bit (radix_tree_node_cachep) */

/* Who killed a task (struct task.killed_by): the OOM killer, or lmkd with its kill reason
 * (lmkd.cpp enum kill_reasons, in its order). */
enum { KILLED_BY_OOM = 1, KILLED_BY_LMKD = 2 };
#define LMKD_REASONS(X) X(PRESSURE_AFTER_KILL) X(NOT_RESPONDING) X(LOW_SWAP_AND_THRASHING) \
    X(LOW_MEM_AND_SWAP) X(LOW_MEM_AND_THRASHING) X(DIRECT_RECL_AND_THRASHING)
#define LMKD_ITEM(n) LMKD_##n,
enum { LMKD_REASONS(LMKD_ITEM) NR_LMKD_REASONS };
#undef LMKD_ITEM

struct task {
    int32_t pid;
    int alive;
    int oom_score_adj;
    int64_t rss;               /* pages mapped (file + anon), for the OOM killer's badness */
    int64_t killed_at;         /* trace time the OOM killer or lmkd killed it; -1: it was not */
    int killed_by;             /* KILLED_BY_OOM, or KILLED_BY_LMKD + lmkd's kill reason */
    int64_t adj_seq;           /* when oom_score_adj was last set (an order): lmkd's adj slot list */
};

/* Counters, named as in include/linux/vm_event_item.h / mmzone.h / zram mm_stat; stall_*, io_*,
 * kv_* (the KV cache's share of pswpout + swpout_zero and of pswpin + swpin_zero) and file_scan_busy
 * (file pages of pgscan_file that shrink_folio_list() put back busy: locked, i.e. under read, or
 * held by another reference), bio_reads and bio_read_ns (the read bios ended, and their time from
 * submit_bio() to the end, summed), stall_reclaim_lists (shrink_inactive_list() calls a task's own
 * reclaim made), stall_reclaim_ns (the time that reclaim charged the task) and stall_reclaim_file_pages (the
 * pages of stall_reclaim_file_folios) are kmemsim's own. */
#define KM_COUNTERS(X) \
    X(pgfault) X(pgmajfault) X(pgpgin) X(pgpgout) X(pswpin) X(pswpout) X(swpin_zero) X(swpout_zero) \
    X(pgactivate) X(pgdeactivate) X(pgrefill) X(pgrotated) \
    X(pgscan_kswapd) X(pgscan_direct) X(pgscan_memcg) X(pgsteal_kswapd) X(pgsteal_direct) X(pgsteal_memcg) \
    X(pgscan_anon) X(pgscan_file) X(pgsteal_anon) X(pgsteal_file) \
    X(workingset_refault_anon) X(workingset_refault_file) \
    X(workingset_activate_anon) X(workingset_activate_file) \
    X(workingset_restore_anon) X(workingset_restore_file) X(workingset_nodereclaim) \
    X(kswapd_wake) X(allocstall) X(oom_kill) X(lmk_kill) \
    X(pgalloc) X(pgfree) X(filemap_fault) X(file_folios_added) X(file_pages_added) X(file_pages_added_order0) X(file_pages_deleted) X(readahead_pages) \
    X(fault_around_pages) X(fault_failed) X(minor_fault_pages) X(zero_page_maps) X(zram_same_reads) \
    X(accesses) X(misses) X(reclaim_runs) \
    X(stall_read_ios) X(stall_read_pages) X(stall_swapin_pages) X(stall_reclaim_scanned) \
    X(stall_reclaim_swapout) X(stall_reclaim_file_folios) X(io_waits) X(io_wait_ns) \
    X(kv_swapout_pages) X(kv_swapin_pages) X(file_scan_busy) X(bio_reads) X(bio_read_ns) \
    X(stall_reclaim_lists) X(stall_reclaim_ns) X(stall_reclaim_file_pages)

#define KM_GAUGES(X) \
    X(nr_free_pages) X(nr_inactive_anon) X(nr_active_anon) X(nr_inactive_file) X(nr_active_file) \
    X(nr_unevictable) X(nr_file_pages) X(nr_anon_pages) X(nr_weight_file_pages) \
    X(nr_kv_anon_pages) X(nr_weight_anon_pages) X(memcg_usage) \
    X(zram_orig_data_size) X(zram_compr_data_size) X(zram_mem_used_total) X(zram_same_pages) \
    X(zram_huge_pages) X(nr_swapped) X(peak_resident) X(peak_memory) X(wmark_min) X(wmark_low) X(wmark_high) \
    X(nr_page_table_pages) X(nr_xa_nodes) X(nr_kernel_pages)

#define ENUM_ITEM(n) VM_##n,
enum { KM_COUNTERS(ENUM_ITEM) NR_VM_COUNTERS };
enum { KM_GAUGES(ENUM_ITEM) NR_VM_GAUGES };
#undef ENUM_ITEM

struct scan_control {
    int64_t nr_to_reclaim;
    int64_t nr_scanned, nr_reclaimed;
    int priority;
    int may_swap, may_unmap;
    int may_deactivate;        /* DEACTIVATE_ANON = 1, DEACTIVATE_FILE = 2 */
    int skipped_deactivate;    /* an active list was not scanned because may_deactivate said no */
    int force_deactivate;      /* do_try_to_free_pages()'s retry: deactivate whatever the ratios say */
    int cache_trim_mode, file_is_tiny;
    int ignore_references;     /* reclaim_pages(): MADV_PAGEOUT */
    int who;                   /* RECLAIM_KSWAPD / DIRECT / MEMCG */
    int64_t deferred;          /* candidates a policy's reclaim_candidate() put back this pass */
    int last_resort;           /* the pass after one that deferred: the policy should yield */
    int64_t anon_cost, file_cost;
    int lru_gen_keep;          /* MGLRU's evict_folios(): shrink_folio_list() leaves the folios it does
                                * not free isolated, first nr_kept entries of its list, in order */
    int64_t nr_kept;
};
enum { RECLAIM_KSWAPD, RECLAIM_DIRECT, RECLAIM_MEMCG };
enum { DEACTIVATE_ANON = 1, DEACTIVATE_FILE = 2 };

/* folio_check_references() verdicts (mm/vmscan.c). */
enum folio_references { FOLIOREF_RECLAIM, FOLIOREF_RECLAIM_CLEAN, FOLIOREF_KEEP, FOLIOREF_ACTIVATE };

struct km_emu;

/* Policy hooks (mm/ has no such table: these mark the points where research policies plug in).
 * A NULL hook means stock behaviour. One policy per file: policy_*.c. */
struct policy_ops {
    const char *name;
    void (*init)(struct km_emu *e);
    /* lru_add: which list a new folio joins; return -1 for the stock choice. */
    int (*folio_add_lru)(struct km_emu *e, struct folio *f);
    /* page referenced by the trace while resident (a fault path's young bit, read(2)'s
     * folio_mark_accessed()). */
    void (*folio_accessed)(struct km_emu *e, folio_id id);
    /* folio_check_references: may override the stock verdict. */
    enum folio_references (*check_references)(struct km_emu *e, folio_id id, enum folio_references stock);
    /* shrink_active_list: return 1 to keep the folio active (rotate). */
    int (*keep_active)(struct km_emu *e, folio_id id);
    /* a reclaim candidate isolated from an inactive list: return 0 to put it back (rotate). */
    int (*reclaim_candidate)(struct km_emu *e, folio_id id, struct scan_control *sc);
    /* workingset_refault: return -1 for stock, 0/1 to force no-activate/activate. */
    int (*refault)(struct km_emu *e, folio_id id, int stock_activate);
    /* an anonymous region was mapped (e.g. the KV cache). */
    void (*anon_region_mapped)(struct km_emu *e, int32_t vma);
    /* the trace touched a range (after the faults): write is FAULT_READ/WRITE/WRITE_ZERO. */
    void (*range_touched)(struct km_emu *e, int32_t vma, int64_t page, int64_t npages, int write);
    /* take over a touched range entirely (the plain LRU's fast path); NULL: the fault path. */
    int64_t (*handle_range)(struct km_emu *e, int32_t vma, int64_t page, int64_t npages, int write);
    /* a run of single-page READ/WRITE events of one task on one vma, all of one kind and before
     * the next timeline sample (a libCacheSim trace is one long run): each page exactly as
     * handle_range would take its event, in one call. NULL: one event at a time. */
    void (*handle_pages)(struct km_emu *e, int32_t vma, const int64_t *pages, int64_t n, int write);
    /* instead of the mechanism's reclaim: return pages freed, or -1 for stock. */
    int64_t (*reclaim)(struct km_emu *e, int64_t nr_pages, int who);
    /* the policy kept the LRU order elsewhere (e->lists_deferred): relink the lists from it. */
    void (*sync_lists)(struct km_emu *e);
};

struct zram_class { const char *algo; double ratio[16]; };

struct km_emu {
    struct km_config cfg;
    const struct policy_ops *policy;
    void *policy_data;

    struct folio *folios; int64_t nr_folios, cap_folios; folio_id free_folio;
    struct lru_link *links;                    /* per folio: its LRU links (free folios: next free) */
    int more_follows;                          /* km_replay_continues(): a batch, not the trace's end */
    struct lru_head lru[NR_LRU_HEADS];         /* the classic lists, then MGLRU's (LRU_GEN_BASE) */
    int lists_deferred;                        /* list order held by the policy: lists_sync() first */
    int lru_gen_enabled;                       /* MGLRU (cfg.lru_gen): lru_gen.c keeps the lists */
    int in_lru_fault;                          /* current->in_lru_fault: handle_mm_fault() of a vma
                                                * with recency (MGLRU only) */
    struct lru_gen_folio *lrugen;              /* lru_gen.h; NULL with the classic lists */
    int trace_range;                           /* handle_range() serves a READ/WRITE event itself
                                                * (not populate or mlock): the order may be deferred */
    struct object *objs; int32_t nr_objs, cap_objs;
    struct vma *vmas; int32_t nr_vmas, cap_vmas;
    struct task *tasks; int32_t nr_tasks, cap_tasks;
    int32_t *file_obj; int32_t nr_files;       /* file id -> object */

    /* lruvec state */
    int64_t anon_cost, file_cost;
    uint64_t nonresident_age;
    uint64_t refaults_snap[2];                 /* lruvec->refaults[WORKINGSET_ANON/FILE] */
    int64_t stat[NR_MEMCG_STATS];              /* the memcg's flushed statistics (memcontrol.c) */
    int64_t stat_next_flush;

    /* memory */
    int64_t total_pages;                       /* device RAM (0 = unlimited) */
    int64_t used_pages;                        /* folios resident */
    int64_t wmark_min, wmark_low, wmark_high;
    int64_t memcg_limit, memcg_usage;
    int kswapd_running;
    int in_sync_reclaim;                       /* direct or memcg reclaim: the allocating task waits */
    int64_t peak_used, peak_memory;           /* memory.max_usage_in_bytes; + the zram pool */
    /* kernel memory charged to the memcg (__GFP_ACCOUNT): in RAM and in the charge, on no LRU */
    int64_t kmem_pages;                        /* all of it, in pages */
    int64_t kmem_obj_bytes;                    /* slab objects (xarray nodes), charged in whole pages */
    int64_t nr_page_tables, nr_xa_nodes;
    int kmem_off;                              /* no kernel memory (the plain-LRU cache) */

    /* zram */
    /* slots are handed out lowest first and reused last-freed first (a stack); both arrays grow
     * with the slots used, not with the device's size */
    int32_t *zram_size;                        /* slot -> bytes in zsmalloc (0 same-filled) */
    int32_t *zram_free; int64_t zram_nr_free, zram_cap, zram_used_slots;
    int64_t zram_nr_stack, zram_next;          /* freed slots on zram_free[]; slots never used from */
    int64_t zram_disk_pages;
    int64_t zram_compr_bytes, zram_alloc_bytes, zram_same, zram_huge;
    int64_t zram_pages_used;                   /* mem_used_total in pages, kept by zram.c */

    uint64_t vm[NR_VM_COUNTERS];
    uint64_t *task_vm;                         /* [task][counter] */
    uint64_t *phase_vm;                        /* [phase][counter] */
    uint64_t *task_row, *phase_row;            /* the current task's and phase's rows (or scratch) */
    uint64_t scratch[2][NR_VM_COUNTERS];       /* rows for "no task" / "no phase yet" */
    int32_t cur_task, cur_phase, nr_phases;
    int64_t now;                               /* trace time of the event being replayed */
    struct lmkd {                              /* lmkd.c: mp_event_psi()'s static state */
        int polled, killing, thrashing_limit;
        int64_t last_poll, reset_t, init_ws_refault, prev_refault, base_file_lru, prev_thrash_growth;
        int64_t init_pgscan_kswapd, init_pgscan_direct;
        int64_t adj_seq;                       /* oom_score_adj updates so far (struct task.adj_seq) */
    } lmkd;

    /* reads in flight (bio.c) */
    int io_on;                                 /* the config gives storage a time */
    struct bio_entry { folio_id f; int64_t done; } *ioq;
    int64_t ioq_head, ioq_tail, ioq_cap, ioq_unsubmitted;   /* [unsubmitted, tail): no time yet */
    int64_t *io_done;                          /* per folio: when its read completes (while locked) */
    int64_t io_delay;                          /* the tasks' clock less trace time: their read waits */
    struct bio_inflight {                      /* a submitted bio not yet ended */
        int64_t first, last;                   /* its folios: ioq[first, last) */
        int64_t rem;                           /* transfer left, ns at the full bandwidth */
        int64_t done;                          /* its completion, if no other bio comes */
        int64_t submitted;                     /* the device's time at submit_bio() */
        int64_t dio;                           /* a direct read's number (direct_io.c; no folio:
                                                * first == last), 0: a page-cache read */
    } *bios;
    int nr_bios, cap_bios;
    int64_t dev_t;                             /* the device's service is accounted up to here */
    int64_t io_next_done;                      /* the first bios[].done (INT64_MAX: none) */
    struct io_waiter { folio_id f; int64_t until; int64_t dio; } io_wait[64];   /* threads of this graph node
                                                * waiting: for folio f, or (dio > 0) for that direct read */
    int64_t nr_dio;                            /* direct reads submitted so far: their numbers */
    int64_t dio_batch;                         /* the first direct read of a batch not waited for yet, 0 none */
    int nr_io_wait;
    int64_t *added_at;                         /* per file folio: when it entered the page cache (2+ threads) */
    struct mm_threads {                        /* a matmul's threads (memory.c handle_range_threads()) */
        int on, nth, cur;                      /* on: the current thread cur runs on its own clock */
        int32_t vi;
        int64_t page, n, chunk, nchunks, next, per_page;
        int64_t p[64], end[64], clock[64], wait[64];   /* each thread's next page, chunk end, clock, waits */
        int64_t ran[64];                               /* when each last ran (the scheduler's turn) */
        int done[64], started[64];
        jmp_buf sched, env[64];                        /* where the scheduler and each thread left off */
        ucontext_t start;                              /* a thread's first entry onto its stack */
        char *stack[64];
    } th;

    /* timeline */
    int64_t next_sample;
    int64_t *tl; int64_t tl_rows, tl_cap;
    int64_t *tl_rss;           /* [tl_cap][nr_tasks]: each task's rss at each sample */
    /* error */
    char err[256];
    int oom;
    int failed;                                /* km_new() could not build it: km_error() says why */
    int nomem;                                 /* an allocation failed mid-replay: km_replay() fails */
};

/* mm_init.c / helpers */
/* One event counted for the machine, the current task and the current phase: on every hot path. */
static inline void count(struct km_emu *e, int item, int64_t n)
{
    e->vm[item] += n;
    e->task_row[item] += n;
    e->phase_row[item] += n;
}
void gauges(struct km_emu *e, int64_t *out);
int km_fail(struct km_emu *e, const char *fmt, ...);

/* mem_used_total: pages the zsmalloc pool holds (zspage fragmentation not modelled). */
static inline int64_t zram_pool_pages(const struct km_emu *e) { return e->zram_pages_used; }

/* Free pages of the device: RAM less folios, kernel memory and the zram pool (which lives in RAM). */
static inline int64_t free_pages(const struct km_emu *e)
{
    return e->total_pages ? e->total_pages - e->used_pages - e->kmem_pages - e->zram_pages_used : INT64_MAX / 4;
}

/* memory.max_usage_in_bytes, and the same with the zram pool (what a phone runs out of). */
static inline void note_peak(struct km_emu *e)
{
    int64_t u = e->used_pages + e->kmem_pages;
    if (u > e->peak_used) e->peak_used = u;
    int64_t m = u + e->zram_pages_used;
    if (m > e->peak_memory) e->peak_memory = m;
}

/* folio allocation (page_alloc.c) */
folio_id folio_alloc(struct km_emu *e, int order);
void folio_free(struct km_emu *e, folio_id id);
int alloc_pages_may_reclaim(struct km_emu *e, int64_t nr);   /* 0 ok, -1 OOM (task killed) */
int alloc_pages_gfp(struct km_emu *e, int64_t nr, int noretry);   /* also -2: a noretry charge failed */
void wakeup_kswapd(struct km_emu *e);
void setup_per_zone_wmarks(struct km_emu *e);
void km_hugepage_hint(void *p, size_t bytes);                /* THP for a large array */

/* memcontrol.c */
int mem_cgroup_charge(struct km_emu *e, int64_t nr);
int64_t lruvec_page_state(struct km_emu *e, int item);
void memcg_flush_stats_due(struct km_emu *e);
int mem_cgroup_charge_noretry(struct km_emu *e, int64_t nr);
void mem_cgroup_uncharge(struct km_emu *e, int64_t nr);
int64_t mem_cgroup_get_nr_swap_pages(const struct km_emu *e);
void memcg_kmem_charge(struct km_emu *e, int64_t nr);      /* nr < 0 uncharges */
void pte_alloc_charge(struct km_emu *e, int nr);            /* memory.c; nr < 0 frees */
int64_t vma_pte_tables(const struct vma *v);                /* mmap.c */
void obj_cgroup_charge(struct km_emu *e, int64_t bytes);    /* bytes < 0 uncharges */

/* swap.c: LRU list manipulation */
void folio_add_lru(struct km_emu *e, folio_id id);
void folio_mark_accessed(struct km_emu *e, folio_id id);
void folio_deactivate(struct km_emu *e, folio_id id);
void lru_note_cost(struct km_emu *e, int file, int64_t nr_io, int64_t nr_rotated);
void lru_note_cost_refault(struct km_emu *e, folio_id id);
static inline int folio_lru_list(const struct folio *f)
{
    if (f->flags & PG_unevictable) return LRU_UNEVICTABLE;
    return ((f->flags & PG_swapbacked) ? 0 : LRU_FILE) + ((f->flags & PG_active) ? LRU_ACTIVE : 0);
}
static inline int folio_nr_pages(const struct folio *f) { return 1 << f->order; }
static inline int folio_is_file_lru(const struct folio *f) { return !(f->flags & PG_swapbacked); }
/* The KV cache's pages, by their mapping's class (a cleared page's folio is CLASS_ZERO until written) */
static inline int class_is_kv(int cls) { return cls == CLASS_KV_F16 || cls == CLASS_KV_Q8; }
static inline int class_is_weights(int cls) { return cls == CLASS_WEIGHTS_Q || cls == CLASS_WEIGHTS_F16; }
/* lru_gen.c: MGLRU's side of the list functions below (include/linux/mm_inline.h) */
void lru_gen_add_folio(struct km_emu *e, folio_id id, int reclaiming);
void lru_gen_del_folio(struct km_emu *e, folio_id id, int reclaiming);
/* List insertion and removal: static inline, as in include/linux/mm_inline.h (every reference of
 * the plain LRU policy does both). lruvec_add_folio() puts a folio at the head. With MGLRU an
 * evictable folio goes to a generation instead (lru_gen_add_folio(), which picks it; `lru` unused). */
static inline void lruvec_add_folio(struct km_emu *e, folio_id id, int lru)
{
    struct folio *f = &e->folios[id];
    if (__builtin_expect(e->lru_gen_enabled, 0) && !(f->flags & PG_unevictable)) {
        lru_gen_add_folio(e, id, 0);
        return;
    }
    struct lru_head *h = &e->lru[lru];
    struct lru_link *k = &e->links[id];
    f->lru = (uint8_t)lru;
    k->prev = -1;
    k->next = h->head;
    if (h->head >= 0) e->links[h->head].prev = id; else h->tail = id;
    h->head = id;
    h->nr_pages += folio_nr_pages(f);
}

static inline void lruvec_add_folio_tail(struct km_emu *e, folio_id id, int lru)
{
    struct folio *f = &e->folios[id];
    if (__builtin_expect(e->lru_gen_enabled, 0) && !(f->flags & PG_unevictable)) {
        lru_gen_add_folio(e, id, 1);
        return;
    }
    struct lru_head *h = &e->lru[lru];
    struct lru_link *k = &e->links[id];
    f->lru = (uint8_t)lru;
    k->next = -1;
    k->prev = h->tail;
    if (h->tail >= 0) e->links[h->tail].next = id; else h->head = id;
    h->tail = id;
    h->nr_pages += folio_nr_pages(f);
}

static inline void lruvec_del_folio(struct km_emu *e, folio_id id)
{
    struct folio *f = &e->folios[id];
    if (f->lru == NO_LRU) return;
    if (__builtin_expect(f->lru >= LRU_GEN_BASE, 0)) { lru_gen_del_folio(e, id, 0); return; }
    struct lru_head *h = &e->lru[f->lru];
    struct lru_link *k = &e->links[id];
    if (k->prev >= 0) e->links[k->prev].next = k->next; else h->head = k->next;
    if (k->next >= 0) e->links[k->next].prev = k->prev; else h->tail = k->prev;
    h->nr_pages -= folio_nr_pages(f);
    f->lru = NO_LRU;
    k->prev = k->next = -1;
}

/* Before anything follows the LRU links: a policy may hold the order elsewhere between range
 * events (the plain LRU's reference FIFO); the list sizes stay exact either way. */
static inline void lists_sync(struct km_emu *e)
{
    if (e->lists_deferred) e->policy->sync_lists(e);
}

/* vmscan.c */
int64_t try_to_free_pages(struct km_emu *e, int64_t nr, int who);
int64_t balance_pgdat(struct km_emu *e);
int folio_referenced(struct km_emu *e, folio_id id, uint32_t *vm_flags);
int inactive_is_low(struct km_emu *e, int inactive_lru);
int64_t reclaim_pages(struct km_emu *e, folio_id *ids, int64_t n);
int folio_evict(struct km_emu *e, folio_id id);     /* unmap + free; 1 if freed */

/* lru_gen.c: the multi-generational LRU (mm/vmscan.c's lru_gen half, mm/swap.c's folio_inc_refs())
 * and workingset_lru_gen.c (mm/workingset.c's) */
int lru_gen_init(struct km_emu *e, int32_t nr_tasks);        /* km_new(): 0, or -1 with km_error() */
void lru_gen_shrink_node(struct km_emu *e, struct scan_control *sc);  /* shrink_node() with MGLRU */
void lru_gen_age_node(struct km_emu *e, struct scan_control *sc);     /* kswapd_age_node() */
int lru_gen_referenced_ptes(struct km_emu *e, folio_id id, int32_t vi, int64_t first, int64_t n, int anon,
                            int *mapped);          /* folio_referenced_one()'s PTEs, lru_gen_look_around() */
void lru_gen_inc_refs(struct km_emu *e, folio_id id);                  /* folio_inc_refs() */
int64_t lru_gen_check_invariants(struct km_emu *e);  /* pages on the generation lists, or -1 */
void lru_gen_free(struct km_emu *e);
uint64_t lru_gen_eviction(struct km_emu *e, folio_id id);
void lru_gen_refault(struct km_emu *e, folio_id id, uint64_t shadow);
int64_t lru_gen_shrink_folio_list(struct km_emu *e, folio_id *list, int64_t n, struct scan_control *sc,
                                  int64_t *nr_pageout, int64_t *nr_activate);   /* vmscan.c's shrink_folio_list() */

/* workingset.c */
uint64_t workingset_eviction(struct km_emu *e, folio_id id);
void workingset_refault(struct km_emu *e, folio_id id, uint64_t shadow);
void workingset_age_nonresident(struct km_emu *e, int64_t nr);

/* filemap.c */
/* Is no page of slot[0 .. nr) cached (every slot -1)? Their AND stays negative only if every one
 * is: a loop without exits, which the compiler vectorizes for a large folio's 512 slots. */
static inline int page_cache_range_empty(const folio_id *slot, int64_t nr)
{
    folio_id all = -1;
    for (int64_t i = 0; i < nr; i++) all &= slot[i];
    return all < 0;
}
int filemap_add_folio(struct km_emu *e, int32_t obj, int64_t index, int order, int readahead_mark,
                      int noretry);   /* 0 ok, -1 task killed, -2 a noretry (readahead) charge failed */
void filemap_remove_folio(struct km_emu *e, folio_id id, uint64_t shadow);
int64_t filemap_read(struct km_emu *e, int32_t obj, int64_t index, int64_t n);
void clear_shadow_entries(struct km_emu *e, int32_t obj, int64_t start, int64_t end);

/* direct_io.c: pread(2)/pwrite(2) of an O_DIRECT file descriptor, pages [index, index + n) */
void direct_read(struct km_emu *e, int32_t obj, int64_t index, int64_t n, int batched);
void direct_write(struct km_emu *e, int32_t obj, int64_t index, int64_t n);

/* readahead.c */
void file_ra_state_init(struct km_emu *e, int32_t obj);
int64_t page_cache_ra_order(struct km_emu *e, int32_t obj, int64_t start, int64_t size,
                            int64_t async_size, int new_order);
int64_t do_page_cache_ra(struct km_emu *e, int32_t obj, int64_t index, int64_t nr, int64_t lookahead);
void force_page_cache_ra(struct km_emu *e, int32_t obj, int64_t index, int64_t nr);
void do_sync_mmap_readahead(struct km_emu *e, int32_t vma, int64_t pgoff);
void do_async_mmap_readahead(struct km_emu *e, int32_t vma, folio_id f, int64_t pgoff);
void page_cache_sync_ra(struct km_emu *e, int32_t obj, int64_t index, int64_t req);
void page_cache_async_ra(struct km_emu *e, int32_t obj, folio_id f, int64_t index, int64_t req);

/* memory.c: faults and the page table. A write either stores data or zeros (memset/clear: the
 * page stays same-filled for zram). */
enum { FAULT_READ, FAULT_WRITE, FAULT_WRITE_ZERO };
int64_t handle_range(struct km_emu *e, int32_t vma, int64_t page, int64_t n, int write);
int64_t handle_range_threads(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int64_t chunk, int64_t node_ns);
void thread_yield(struct km_emu *e);
void zap_page_range(struct km_emu *e, int32_t vma, int64_t page, int64_t n, int free_anon);
#define ZAP_KEEP_COWS (-1)     /* zap_page_range()'s free_anon: file PTEs only, private COW copies stay
                                * mapped (unmap_mapping_pages()' even_cows = false) */
void unmap_mapping_pages(struct km_emu *e, int32_t obj, int64_t start, int64_t nr);
int32_t anon_object_new(struct km_emu *e, int64_t npages, int cls);
int rmap_add(struct km_emu *e, int32_t obj, int32_t vma);
void rmap_remove(struct km_emu *e, int32_t obj, int32_t vma);
int64_t vma_pte_index(const struct vma *v, int64_t obj_index);  /* -1 if not covered */

/* populate_vma_page_range(): private writable mappings are populated with write faults */
static inline int vma_populate_write(const struct vma *v)
{
    return v->anon >= 0 && (v->anon == v->obj || (v->flags & MAP_F_WRITE));
}

/* bio.c */
static inline int64_t io_clock(const struct km_emu *e) { return e->now + e->io_delay; }
/* the task spends ns of its own time (reclaim, decompression): the clock moves on */
static inline void task_time(struct km_emu *e, int64_t ns) { e->io_delay += ns; }
void bio_add_folio(struct km_emu *e, folio_id f);
void submit_read(struct km_emu *e);
void bio_endio(struct km_emu *e);
/* before looking at PG_locked: the reads done by now are complete (the clock moves within an event) */
static inline void bio_poll(struct km_emu *e)
{
    if (e->io_on && e->io_next_done <= io_clock(e)) bio_endio(e);
}
void folio_wait_locked(struct km_emu *e, folio_id f);
void submit_direct_read(struct km_emu *e, int64_t dio, int64_t n);
void direct_read_wait(struct km_emu *e, int64_t dio);
void io_barrier(struct km_emu *e, int64_t next);
/* A folio another thread's readahead has not added yet on this thread's clock is not in the page
 * cache for this thread (handle_range_threads()). */
static inline int folio_added(const struct km_emu *e, folio_id f)
{
    return !e->th.on || e->added_at[f] <= io_clock(e);
}
void thread_wait_until(struct km_emu *e, int64_t until);

/* madvise.c / mlock.c / fadvise */
void do_madvise(struct km_emu *e, int32_t vma, int64_t page, int64_t n, int advice);
void generic_fadvise(struct km_emu *e, int32_t obj, int64_t page, int64_t n, int advice);
void mlock_range(struct km_emu *e, int32_t vma, int64_t page, int64_t n, int lock);

/* zram.c */
int zram_write(struct km_emu *e, int cls, int32_t *slot);   /* 0 written, 1 zeromap, -1 full */
#define ZEROMAP_SLOT (-1)              /* zram_size[] of a slot whose page is in the swap zeromap */
void zram_free_slot(struct km_emu *e, int32_t slot);
int zram_full(const struct km_emu *e);

/* oom_kill.c */
int out_of_memory(struct km_emu *e, int memcg);
void oom_kill_process(struct km_emu *e, int32_t victim, int by);
/* lmkd.c */
int lmkd_watermark(const struct km_emu *e, int64_t free);
int lmkd_poll(struct km_emu *e, int wmark);
int lmkd_not_responding(struct km_emu *e);
void exit_task(struct km_emu *e, int32_t task);

/* policies */
const struct policy_ops *policy_lookup(const char *name);

#endif
