/* Faults and the page table (mm/memory.c, mm/filemap.c: filemap_fault, filemap_map_pages).
 * The trace says which pages a task touches; this file decides what the kernel does about it.
 * Pages already mapped are hits: the hardware sets the young bit and the kernel never hears of it. */
#undef _FORTIFY_SOURCE      /* its __longjmp_chk() refuses the jumps between the threads' stacks */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mm.h"

enum { PTE_WRITE = PTE_DIRTY };   /* writable and written: a write hits without a fault */

/* pagetable_alloc(GFP_PGTABLE_USER) / pagetable_free(): a PTE table page, charged to the memcg
 * (nr_page_table_pages). Upper levels (one PMD table per GiB) are left out. */
void pte_alloc_charge(struct km_emu *e, int nr)
{
    e->nr_page_tables += nr;
    memcg_kmem_charge(e, nr);
}

static void set_pte(struct km_emu *e, struct vma *v, int64_t p, uint8_t bits, folio_id f)
{
    if (!(v->pte[p] & PTE_PRESENT) && f >= 0) {
        e->folios[f].mapcount++;
        e->tasks[v->task].rss++;
    }
    v->pte[p] = bits | PTE_PRESENT;
    if (v->pmdtab[p >> PMD_ORDER] != PMD_TABLE) {        /* __pte_alloc(): the first PTE here */
        v->pmdtab[p >> PMD_ORDER] = PMD_TABLE;
        pte_alloc_charge(e, 1);
    }
    if (f >= 0 && (v->flags & MAP_F_LOCKED) && !(e->folios[f].flags & PG_unevictable)) {
        lruvec_del_folio(e, f);                          /* mlock_new_folio(): straight to unevictable */
        e->folios[f].flags |= PG_unevictable;
        lruvec_add_folio(e, f, LRU_UNEVICTABLE);
    }
}

/* Allocate a folio with the charge and reclaim that entails; -1 when the task died (OOM). */
static folio_id alloc_charged(struct km_emu *e, int order)
{
    int32_t task = e->cur_task;
    if (alloc_pages_may_reclaim(e, 1 << order) < 0) return -1;
    if (task >= 0 && !e->tasks[task].alive) { mem_cgroup_uncharge(e, 1 << order); return -1; }
    return folio_alloc(e, order);
}

/* do_set_pmd(), from filemap_map_pmd() (fault-around) or finish_fault(): a PMD-sized file folio
 * is mapped by one PMD when vma page `base` (2 MiB aligned) is its first page, that 2 MiB has no
 * PTE table yet (pmd_none) and lies wholly in the vma (thp_vma_suitable_order()). All 512 PTEs are
 * set here, young as x86's huge PMD is made (mk_huge_pmd with the vma's accessed prot); the range
 * keeps no PTE table, so after reclaim unmaps the folio (a file PMD is zapped whole) it can be
 * PMD-mapped again. Shared file mappings only (private COW ones stay PTE-mapped here).
 * Returns 1 if the range is PMD-mapped (now or already). */
static int map_pmd(struct km_emu *e, int32_t vi, int64_t base, folio_id f)
{
    struct vma *v = &e->vmas[vi];
    int64_t nr = 1LL << PMD_ORDER;
    if (f < 0 || e->folios[f].order != PMD_ORDER || v->anon >= 0 || (base & (nr - 1)) ||
        base + nr > v->npages || v->pmdtab[base >> PMD_ORDER] || vma_pte_index(v, e->folios[f].index) != base)
        return 0;
    for (int64_t q = base; q < base + nr; q += 8) {      /* eight PTEs at a time (nr is 512) */
        uint64_t w;
        memcpy(&w, v->pte + q, 8);
        if (w & (0x0101010101010101ULL * PTE_PRESENT)) return 0;
    }
    /* set_pte() on each of the nr PTEs, none present: the first one (which may mlock the folio),
     * then the rest at once */
    set_pte(e, v, base, PTE_YOUNG, f);
    e->folios[f].mapcount += (int32_t)(nr - 1);
    e->tasks[v->task].rss += nr - 1;
    memset(v->pte + base + 1, PTE_YOUNG | PTE_PRESENT, nr - 1);
    v->pmdtab[base >> PMD_ORDER] = 0;                    /* a huge PMD, not a PTE table: */
    pte_alloc_charge(e, -1);                             /* the preallocated one is freed */
    return 1;
}

/* do_fault_around() -> filemap_map_pages(): map the cached, uptodate pages around the fault that
 * are not marked for readahead, without I/O. Returns 1 if the faulting page got mapped. */
static int do_fault_around(struct km_emu *e, int32_t vi, int64_t p)
{
    struct vma *v = &e->vmas[vi];
    struct object *o = &e->objs[v->obj];
    int64_t nr = e->cfg.fault_around_pages;
    int64_t from = p & ~(nr - 1), to = from + nr;        /* vmas start PMD-aligned (thp_get_unmapped_area) */
    bio_poll(e);
    if (to > v->npages) to = v->npages;
    /* filemap_map_pmd(): the first uptodate folio of the window, if PMD-sized and starting at the
     * window start, goes in as one PMD (next_uptodate_folio() skips PG_readahead folios) */
    if (v->anon < 0 && !(from & ((1LL << PMD_ORDER) - 1))) {
        folio_id f0 = o->folio[v->pgoff + from];
        if (f0 >= 0 && folio_added(e, f0) && !(e->folios[f0].flags & (PG_readahead | PG_locked)) &&
            map_pmd(e, vi, from, f0)) {
            count(e, VM_fault_around_pages, (1LL << PMD_ORDER) - 1);
            return 1;                                    /* (the PMD path leaves mmap_miss as it was) */
        }
    }
    int mapped_fault = 0;
    int64_t mapped = 0;
    uint8_t young = e->cfg.prefault_young ? PTE_YOUNG : 0;
    for (int64_t q = from; q < to; q++) {
        if (v->pte[q] & PTE_PRESENT) continue;
        if (v->anon >= 0 && e->objs[v->anon].swap && e->objs[v->anon].swap[q] >= 0) continue;
        folio_id f = o->folio[v->pgoff + q];
        if (f < 0 || !folio_added(e, f) || (e->folios[f].flags & (PG_readahead | PG_locked)))
            continue;                                    /* not there yet, or !uptodate */
        set_pte(e, v, q, q == p ? PTE_YOUNG : young, f);
        if (q == p) mapped_fault = 1;
        else count(e, VM_fault_around_pages, 1);
        /* don't count recently evicted folios as hits: lets mmap_miss stop read-around */
        if (!(e->folios[f].flags & PG_workingset)) mapped++;
    }
    struct file_ra_state *ra = &o->ra;
    ra->mmap_miss = mapped >= ra->mmap_miss ? 0 : ra->mmap_miss - (int32_t)mapped;
    return mapped_fault;
}

/* filemap_fault(): find the folio, reading it (with read-around) if it is not cached. */
static folio_id filemap_fault(struct km_emu *e, int32_t vi, int64_t p)
{
    struct vma *v = &e->vmas[vi];
    int32_t obj = v->obj;
    int64_t idx = v->pgoff + p;
    folio_id f = e->objs[obj].folio[idx];
    count(e, VM_filemap_fault, 1);                      /* trace_mm_filemap_fault */
    if (f >= 0 && folio_added(e, f)) {
        /* filemap_get_folio() returned the folio with a reference, held across
         * do_async_mmap_readahead(): the readahead's allocations may reclaim, but not this folio
         * (__remove_mapping() -> folio_ref_freeze() fails; shrink_folio_list() keeps it). */
        e->folios[f].flags |= PG_pinned;
        do_async_mmap_readahead(e, vi, f, idx);
        e->folios[f].flags &= ~PG_pinned;
        folio_wait_locked(e, f);                         /* lock_folio_maybe_drop_mmap() */
        return f;
    }
    count(e, VM_pgmajfault, 1);
    count(e, VM_misses, 1);
    uint64_t before = e->vm[VM_pgpgin];
    do_sync_mmap_readahead(e, vi, idx);
    f = e->objs[obj].folio[idx];
    if (f < 0 && filemap_add_folio(e, obj, idx, 0, 0, 0) == 0) {   /* no readahead: just this page */
        f = e->objs[obj].folio[idx];
        if (e->io_on) submit_read(e);                    /* filemap_read_folio() */
    }
    if (f >= 0 && !folio_added(e, f)) thread_wait_until(e, e->added_at[f]);   /* another thread's window */
    if (f >= 0) folio_wait_locked(e, f);
    count(e, VM_stall_read_ios, 1);                     /* the task waits for this read */
    count(e, VM_stall_read_pages, (int64_t)(e->vm[VM_pgpgin] - before));
    return f;
}

/* do_swap_page() for zram (SWP_SYNCHRONOUS_IO): read straight into a new folio, skipping the swap
 * cache, and free the slot. */
static int do_swap_page(struct km_emu *e, int32_t vi, int32_t anon, int64_t p, int64_t idx, int write)
{
    struct object *o = &e->objs[anon];
    count(e, VM_pgmajfault, 1);
    count(e, VM_misses, 1);
    folio_id f = alloc_charged(e, 0);
    if (f < 0) return -1;
    o = &e->objs[anon];
    int32_t slot = o->swap[idx];
    if (slot < 0) { folio_free(e, f); return 0; }          /* freed meanwhile (task exit) */
    struct folio *fo = &e->folios[f];
    fo->obj = anon; fo->index = idx; fo->flags = PG_swapbacked;
    int zeromap = e->zram_size[slot] == ZEROMAP_SLOT;
    fo->cls = e->zram_size[slot] == 0 || zeromap ? CLASS_ZERO : o->cls;   /* a zero page stays zero */
    o->folio[idx] = f;
    o->nr_resident++;
    uint64_t shadow = o->shadow[idx];
    o->shadow[idx] = 0;
    if (e->zram_size[slot] == 0) count(e, VM_zram_same_reads, 1);
    task_time(e, e->zram_size[slot] == 0 || zeromap ? e->cfg.zero_ns : e->cfg.swapin_ns);
    zram_free_slot(e, slot);
    o->swap[idx] = -1;
    if (zeromap) {
        count(e, VM_swpin_zero, 1);                      /* swap_read_folio_zeromap(): no I/O */
    } else {
        count(e, VM_pswpin, 1);
        count(e, VM_stall_swapin_pages, 1);
    }
    if (class_is_kv(o->cls)) count(e, VM_kv_swapin_pages, 1);
    if (shadow) workingset_refault(e, f, shadow);
    folio_add_lru(e, f);
    set_pte(e, &e->vmas[vi], p, PTE_YOUNG | PTE_WRITE | PTE_ANON, f);
    (void)write;
    return 0;
}

/* do_anonymous_page() and the COW half of do_wp_page()/do_cow_fault(): a new anonymous folio. */
static int do_anonymous_page(struct km_emu *e, int32_t vi, int32_t anon, int64_t p, int64_t idx)
{
    folio_id f = alloc_charged(e, 0);
    if (f < 0) return -1;
    struct vma *v = &e->vmas[vi];
    struct object *o = &e->objs[anon];
    struct folio *fo = &e->folios[f];
    fo->obj = anon; fo->index = idx; fo->flags = PG_swapbacked; fo->cls = o->cls;
    o->folio[idx] = f;
    o->nr_resident++;
    if (v->pte[p] & PTE_PRESENT) {                       /* replacing the zero page or a file page */
        if (!(v->pte[p] & PTE_ZERO)) {
            folio_id old = e->objs[v->obj].folio[v->pgoff + p];
            if (old >= 0) e->folios[old].mapcount--;
            e->tasks[v->task].rss--;
        }
        v->pte[p] = 0;
    }
    folio_add_lru(e, f);
    set_pte(e, v, p, PTE_YOUNG | PTE_WRITE | PTE_ANON, f);
    return 0;
}

/* __handle_mm_fault() for one page. Returns -1 if the faulting task died. */
static int __handle_mm_fault(struct km_emu *e, int32_t vi, int64_t p, int write)
{
    struct vma *v = &e->vmas[vi];
    uint8_t pte = v->pte[p];
    count(e, VM_pgfault, 1);
    if (v->anon >= 0) {
        struct object *a = &e->objs[v->anon];
        int64_t idx = p;                                  /* anon objects are indexed by vma page */
        if (a->swap[idx] >= 0) return do_swap_page(e, vi, v->anon, p, idx, write);
        if (a->folio[idx] >= 0) {                         /* resident but unmapped (after munmap range) */
            set_pte(e, v, p, PTE_YOUNG | PTE_WRITE | PTE_ANON, a->folio[idx]);
            count(e, VM_minor_fault_pages, 1);
            return 0;
        }
        if (v->anon == v->obj) {                          /* anonymous vma */
            if (!write) {                                 /* do_anonymous_page(): the zero page */
                set_pte(e, v, p, PTE_ZERO | PTE_YOUNG, -1);    /* not counted in RSS */
                count(e, VM_zero_page_maps, 1);
                return 0;
            }
            return do_anonymous_page(e, vi, v->anon, p, idx);
        }
        if (write) {                                      /* private file: COW needs the file page */
            if (!(pte & PTE_PRESENT)) {
                folio_id f = filemap_fault(e, vi, p);
                if (f < 0) return -1;
                v = &e->vmas[vi];
                if (!v->alive) return -1;
            }
            return do_anonymous_page(e, vi, v->anon, p, idx);
        }
    }
    /* do_read_fault(): fault-around first, then filemap_fault() */
    if (e->cfg.fault_around_pages > 1 && do_fault_around(e, vi, p)) {
        count(e, VM_minor_fault_pages, 1);
        return 0;
    }
    int64_t idx = v->pgoff + p;
    folio_id c = e->objs[v->obj].folio[idx];
    int was_cached = c >= 0 && folio_added(e, c);
    folio_id f = filemap_fault(e, vi, p);
    if (f < 0) return -1;
    v = &e->vmas[vi];
    if (!v->alive) return -1;
    if (was_cached) count(e, VM_minor_fault_pages, 1);
    /* finish_fault(): pmd_none and a PMD-sized folio whose first page faulted -> do_set_pmd() */
    if (!write && map_pmd(e, vi, p, f)) return 0;
    set_pte(e, v, p, PTE_YOUNG | ((v->flags & MAP_F_SHARED) && (v->flags & MAP_F_WRITE) ? PTE_WRITE : 0), f);
    return 0;
}

/* handle_mm_fault(): lru_gen_enter_fault() and lru_gen_exit_fault() around the fault. With MGLRU a
 * folio added in a fault on a vma with recency is hot (folio_add_lru()) and a refault there a stall
 * (lru_gen_refault()); the classic lists never look. */
static int handle_mm_fault(struct km_emu *e, int32_t vi, int64_t p, int write)
{
    e->in_lru_fault = !(e->vmas[vi].flags & (VM_SEQ_READ | VM_RAND_READ));   /* vma_has_recency() */
    int r = __handle_mm_fault(e, vi, p, write);
    e->in_lru_fault = 0;
    return r;
}

/* The fault path of handle_range() (noinline: see there). */
/* A range that swaps in reads its pages' zram slots in page order, but the slots' sizes
 * (e->zram_size) at random: fetch the size of the slot this many pages ahead while faulting. Only a
 * hint (the slot may be freed before it is read): it changes nothing but speed. */
#define SWAPIN_PF 4
static __attribute__((noinline)) int64_t handle_range_faults(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int write)
{
    int64_t end = page + n;
    uint8_t need = PTE_PRESENT | (write ? PTE_WRITE : 0);
    void (*accessed)(struct km_emu *, folio_id) = e->policy->folio_accessed;
    count(e, VM_accesses, n);
    int mode = write;
    write = write != FAULT_READ;
    for (int64_t p = page; p < end;) {
        struct vma *v = &e->vmas[vi];
        if (!v->alive) break;
        uint8_t *pte = v->pte;
        if (!accessed) {
            /* mapped pages only get the young bit: eight PTEs at a time while all eight qualify */
            const uint64_t need8 = 0x0101010101010101ULL * need, young8 = 0x0101010101010101ULL * PTE_YOUNG;
            for (uint64_t w; p + 8 <= end; p += 8) {
                memcpy(&w, pte + p, 8);
                if ((w & need8) != need8) break;
                w |= young8;
                memcpy(pte + p, &w, 8);
            }
            while (p < end && (pte[p] & need) == need) pte[p++] |= PTE_YOUNG;
        } else {
            while (p < end && (pte[p] & need) == need) {
                pte[p] |= PTE_YOUNG;
                struct object *o = &e->objs[(pte[p] & PTE_ANON) ? v->anon : v->obj];
                folio_id f = o->folio[(pte[p] & PTE_ANON) ? p : v->pgoff + p];
                if (f >= 0) accessed(e, f);
                p++;
            }
        }
        if (p >= end) break;
        if (pte[p] & PTE_PRESENT && write && (v->flags & MAP_F_SHARED)) {
            pte[p] |= PTE_YOUNG | PTE_WRITE;                 /* shared file write: we model no writeback */
            p++;
            continue;
        }
        if (v->anon >= 0 && e->objs[v->anon].swap && p + SWAPIN_PF < end) {    /* a hint: SWAPIN_PF */
            int32_t slot = e->objs[v->anon].swap[p + SWAPIN_PF];
            if (slot >= 0) __builtin_prefetch(&e->zram_size[slot]);
        }
        if (handle_mm_fault(e, vi, p, write) < 0) {
            if (!e->vmas[vi].alive) break;            /* the task was killed: the rest goes with it */
            count(e, VM_fault_failed, 1);             /* nothing could be freed: this page is skipped */
            p++;
            continue;
        }
        if (e->vmas[vi].alive && accessed) {              /* the faulting access itself */
            v = &e->vmas[vi];
            struct object *o = &e->objs[(v->pte[p] & PTE_ANON) ? v->anon : v->obj];
            folio_id f = (v->pte[p] & PTE_ZERO) ? -1 : o->folio[(v->pte[p] & PTE_ANON) ? p : v->pgoff + p];
            if (f >= 0) accessed(e, f);
        }
        p++;
    }
    struct vma *v = &e->vmas[vi];
    if (write && v->alive && v->anon >= 0) {              /* what the pages now hold, for zram */
        struct object *a = &e->objs[v->anon];
        uint8_t cls = mode == FAULT_WRITE_ZERO ? CLASS_ZERO : a->cls;
        for (int64_t p = page; p < end; p++)
            if (a->folio[p] >= 0) e->folios[a->folio[p]].cls = cls;
    }
    if (v->alive && e->policy->range_touched) e->policy->range_touched(e, vi, page, n, mode);
    return n;
}

/* The trace touched pages [page, page + n) of a vma. (A policy's own path is dispatched before the
 * fault path's frame is set up: the plain LRU takes it once per reference.) */
int64_t handle_range(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int write)
{
    if (e->policy->handle_range) return e->policy->handle_range(e, vi, page, n, write);
    return handle_range_faults(e, vi, page, n, write);
}

/* ggml_compute_forward_mul_mat() on nth threads reading one weight: its rows go in chunks of
 * `chunk` pages (64 rows in decode), thread i starts on chunk i and each then takes the next
 * untaken one as it finishes (threadpool->current_chunk), so the threads read neighbouring chunks
 * at once. Each thread runs on its own clock (the node's start, its share of the node's compute,
 * its waits and its own reclaim) and its own stack, and the one furthest behind runs:
 * a thread gives way after each folio it adds to the page cache (filemap_add_folio() ->
 * thread_yield()), before a fault (once the compute of the mapped pages before it has brought
 * its clock to the fault's time) and after it, whenever another is behind its clock. So two
 * threads that fault into one window add it in turn, folio by folio, each skipping what the other
 * has added (page_cache_ra_unbounded()) and ending its large folios at the first one there
 * (page_cache_ra_order()); a folio is visible from its charge on (added_at), so a thread reaching a
 * page the other has not added yet finds no folio and takes a major fault of its own
 * (filemap_fault()). The node ends with its last thread (ggml_barrier()): its clock's lead over
 * the node's compute is the wait the next node sees, and that thread's read waits are the read
 * stall counted. */
#define THREAD_STACK (256 << 10)

/* Thread j is to run before thread k: it is behind k's clock, or at it and idle longer. */
static int thread_before(const struct mm_threads *th, int j, int k)
{
    return th->clock[j] < th->clock[k] || (th->clock[j] == th->clock[k] && th->ran[j] < th->ran[k]);
}

/* Another thread is to run before this one: back to the scheduler. _setjmp/_longjmp switch stacks
 * without swapcontext()'s sigprocmask() system call (a thread's stack is entered once through
 * setcontext()). */
void thread_yield(struct km_emu *e)
{
    struct mm_threads *th = &e->th;
    if (!th->on) return;
    th->clock[th->cur] = io_clock(e);
    for (int j = 0; j < th->nth; j++)
        if (j != th->cur && !th->done[j] && thread_before(th, j, th->cur)) {
            int in_lru_fault = e->in_lru_fault;          /* current->in_lru_fault is per task */
            if (!_setjmp(th->env[th->cur])) _longjmp(th->sched, 1);
            e->in_lru_fault = in_lru_fault;
            return;
        }
}

/* Thread k takes chunk c of the range. */
static void thread_take(struct mm_threads *th, int k, int64_t c)
{
    th->p[k] = th->page + c * th->chunk;
    th->end[k] = th->p[k] + th->chunk < th->page + th->n ? th->p[k] + th->chunk : th->page + th->n;
}

/* A thread's body: the mapped pages of its chunk up to its next fault, that fault, and on. */
static void thread_main(unsigned lo, unsigned hi)
{
    struct km_emu *e = (struct km_emu *)(((uintptr_t)hi << 32) | lo);
    struct mm_threads *th = &e->th;
    int k = th->cur;
    while (th->p[k] < th->end[k] && e->vmas[th->vi].alive) {
        const uint8_t *pte = e->vmas[th->vi].pte;
        int64_t p = th->p[k], q = p;
        while (q < th->end[k] && (pte[q] & PTE_PRESENT)) q++;
        int fault = q < th->end[k];
        th->p[k] = q + fault;                            /* taken, before any other thread runs */
        if (q > p) {                                     /* the mapped pages and their compute */
            handle_range_faults(e, th->vi, p, q - p, FAULT_READ);
            e->io_delay += (q - p) * th->per_page;
            if (fault) thread_yield(e);                  /* the fault comes after them */
        }
        if (fault) {
            handle_range_faults(e, th->vi, q, 1, FAULT_READ);
            e->io_delay += th->per_page;
        }
        if (th->p[k] == th->end[k] && th->next < th->nchunks)
            thread_take(th, k, th->next++);              /* the next untaken chunk */
        thread_yield(e);
    }
    th->clock[k] = io_clock(e);
    th->done[k] = 1;
    _longjmp(th->sched, 1);
}

int64_t handle_range_threads(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int64_t chunk, int64_t node_ns)
{
    struct mm_threads *th = &e->th;
    int nth = e->cfg.nr_threads < 64 ? e->cfg.nr_threads : 64;
    int64_t nchunks = (n + chunk - 1) / chunk;
    if (nth > nchunks) nth = (int)nchunks;
    if (nth < 2 || e->policy->handle_range || !e->vmas[vi].alive)
        return handle_range(e, vi, page, n, FAULT_READ);
    int64_t start = io_clock(e), delay0 = e->io_delay, steps = 0;
    th->nth = nth; th->vi = vi; th->page = page; th->n = n; th->chunk = chunk; th->nchunks = nchunks;
    th->next = nth; th->per_page = node_ns * nth / n;
    uintptr_t self = (uintptr_t)e;
    for (int k = 0; k < nth; k++) {
        thread_take(th, k, k);
        th->clock[k] = start;
        th->wait[k] = 0;
        th->done[k] = 0;
        th->ran[k] = 0;
        th->started[k] = 0;
        if (!th->stack[k] && !(th->stack[k] = malloc(THREAD_STACK))) abort();
    }
    th->on = 1;
    for (;;) {                        /* the thread furthest behind; of equals, the one idle longest */
        int k = -1;
        for (int j = 0; j < nth; j++)
            if (!th->done[j] && (k < 0 || thread_before(th, j, k))) k = j;
        if (k < 0) break;
        th->ran[k] = ++steps;
        th->cur = k;
        e->io_delay = th->clock[k] - e->now;
        if (!_setjmp(th->sched)) {
            if (th->started[k]) _longjmp(th->env[k], 1);
            th->started[k] = 1;                          /* its first run: onto its own stack */
            getcontext(&th->start);
            th->start.uc_stack.ss_sp = th->stack[k];
            th->start.uc_stack.ss_size = THREAD_STACK;
            th->start.uc_link = NULL;
            makecontext(&th->start, (void (*)(void))thread_main, 2, (unsigned)(self & 0xffffffffu),
                        (unsigned)(self >> 32));
            setcontext(&th->start);
        }
    }
    th->on = 0;
    int last = 0;
    for (int k = 1; k < nth; k++) if (th->clock[k] > th->clock[last]) last = k;
    int64_t delay = th->clock[last] - (e->now + node_ns);
    e->io_delay = delay > delay0 ? delay : delay0;
    count(e, VM_io_wait_ns, th->wait[last]);
    return n;
}

/* zap_pte_range(): unmap pages. Anonymous pages and their swap slots are freed when free_anon (1);
 * ZAP_KEEP_COWS leaves the anonymous (COW) PTEs mapped and unmaps the file pages only;
 * file pages stay cached, and a young mapping marks the folio accessed on the way out, once per
 * batch: zap_present_ptes() clears a run of present PTEs of one folio within one page table at once
 * (folio_pte_batch(), their young bits merged) and zap_present_folio_ptes() calls
 * folio_mark_accessed() once for the run; a PMD-mapped folio is one entry (zap_huge_pmd()). Marking
 * every page instead would activate every large folio a process unmaps. */
void zap_page_range(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int free_anon)
{
    struct vma *v = &e->vmas[vi];
    int recency = !(v->flags & (VM_SEQ_READ | VM_RAND_READ));      /* vma_has_recency() */
    folio_id batch = -1;                                             /* the file folio of this run */
    int batch_young = 0;
    for (int64_t p = page; p < page + n; p++) {
        uint8_t pte = v->pte[p];
        folio_id f = -1;
        if ((pte & PTE_PRESENT) && !(pte & (PTE_ZERO | PTE_ANON)))
            f = e->objs[v->obj].folio[v->pgoff + p];
        if (batch >= 0 && (f != batch || !(p & ((1 << PMD_ORDER) - 1)))) {    /* the run ends */
            if (batch_young && recency) folio_mark_accessed(e, batch);
            batch = -1;
        }
        if (f >= 0 && batch < 0) { batch = f; batch_young = 0; }
        if (free_anon == ZAP_KEEP_COWS && (pte & PTE_ANON)) continue;   /* should_zap_folio() */
        if (pte & PTE_PRESENT) {
            v->pte[p] = 0;
            if (pte & PTE_ZERO) continue;
            e->tasks[v->task].rss--;
            folio_id fo = (pte & PTE_ANON) ? e->objs[v->anon].folio[p] : f;     /* f: the file folio */
            if (fo < 0) continue;
            e->folios[fo].mapcount--;
            if (fo == batch) batch_young |= pte & PTE_YOUNG;
        }
        if (free_anon > 0 && v->anon >= 0) {
            struct object *a = &e->objs[v->anon];
            if (a->folio[p] >= 0) {
                folio_id f = a->folio[p];
                struct folio *fo = &e->folios[f];
                if (fo->mapcount > 0) fo->mapcount = 0;
                lruvec_del_folio(e, f);
                a->folio[p] = -1;
                a->nr_resident--;
                folio_free(e, f);
            }
            if (a->swap[p] >= 0) { zram_free_slot(e, a->swap[p]); a->swap[p] = -1; }
            a->shadow[p] = 0;
        }
    }
    if (batch >= 0 && batch_young && recency) folio_mark_accessed(e, batch);
}

/* unmap_mapping_pages(mapping, start, nr, even_cows = false): the file's pages [start, start + nr)
 * are zapped in every vma that maps them (the i_mmap tree: the object's reverse map), as
 * zap_page_range() unmaps them (a young run marks its folio accessed); a private mapping's COW
 * copies stay (should_zap_folio(): not even_cows, an anonymous folio is skipped). */
void unmap_mapping_pages(struct km_emu *e, int32_t obj, int64_t start, int64_t nr)
{
    struct object *o = &e->objs[obj];
    for (int i = 0; i < o->nvmas; i++) {
        int32_t vi = o->vmas[i];
        struct vma *v = &e->vmas[vi];
        if (!v->alive || v->obj != obj) continue;
        int64_t lo = start > v->pgoff ? start : v->pgoff;
        int64_t hi = start + nr < v->pgoff + v->npages ? start + nr : v->pgoff + v->npages;
        if (lo < hi) zap_page_range(e, vi, lo - v->pgoff, hi - lo, ZAP_KEEP_COWS);
    }
}
