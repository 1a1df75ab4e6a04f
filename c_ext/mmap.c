/* Mappings (mm/mmap.c, mm/rmap.c): vmas, their page tables, and the reverse map from an object
 * to the vmas that map it. */
#include <stdlib.h>
#include <string.h>
#include "mm.h"

/* A new object of npages (0 <= npages <= KM_MAX_PAGES, checked by the callers), or -1 with
 * km_error() set when its arrays cannot be allocated (the object then holds none: km_free() is safe). */
int32_t anon_object_new(struct km_emu *e, int64_t npages, int cls)
{
    if (npages < 0 || npages > KM_MAX_PAGES)
        return km_fail(e, "an object of %lld pages (at most %lld)", (long long)npages, (long long)KM_MAX_PAGES);
    if (e->nr_objs == e->cap_objs) {
        int32_t cap = e->cap_objs ? e->cap_objs * 2 : 16;
        struct object *objs = cap > e->cap_objs ? realloc(e->objs, sizeof(struct object) * (size_t)cap) : NULL;
        if (!objs) return km_fail(e, "out of memory: %d objects", e->nr_objs);
        e->objs = objs;
        e->cap_objs = cap;
    }
    int32_t id = e->nr_objs++;
    struct object *o = &e->objs[id];
    memset(o, 0, sizeof *o);
    o->kind = OBJ_ANON;
    o->cls = (uint8_t)cls;
    o->file_id = -1;
    size_t n = (size_t)(npages ? npages : 1);
    o->folio = malloc(sizeof(folio_id) * n);
    o->shadow = o->folio ? calloc(n, sizeof(uint64_t)) : NULL;
    if (!o->shadow) {
        free(o->folio);
        o->folio = NULL;
        return km_fail(e, "out of memory: an object of %lld pages needs %lld MiB", (long long)npages,
                       (long long)((int64_t)n * 12 >> 20));
    }
    o->npages = npages;
    km_hugepage_hint(o->folio, sizeof(folio_id) * (size_t)npages);   /* before the first touch */
    memset(o->folio, 0xff, sizeof(folio_id) * (size_t)npages);
    km_hugepage_hint(o->shadow, sizeof(uint64_t) * (size_t)npages);
    return id;
}

static int anon_object_swap_init(struct km_emu *e, struct object *o)
{
    if (o->swap) return 0;
    o->swap = malloc(sizeof(int32_t) * (size_t)(o->npages ? o->npages : 1));
    if (!o->swap) return km_fail(e, "out of memory: swap entries of %lld pages", (long long)o->npages);
    km_hugepage_hint(o->swap, sizeof(int32_t) * (size_t)o->npages);
    memset(o->swap, 0xff, sizeof(int32_t) * (size_t)o->npages);
    return 0;
}

int rmap_add(struct km_emu *e, int32_t obj, int32_t vma)
{
    struct object *o = &e->objs[obj];
    if (o->nvmas == o->cap_vmas) {
        int cap = o->cap_vmas ? o->cap_vmas * 2 : 4;
        int32_t *v = cap > o->cap_vmas ? realloc(o->vmas, sizeof(int32_t) * (size_t)cap) : NULL;
        if (!v) return km_fail(e, "out of memory: %d mappings of one object", o->nvmas);
        o->vmas = v;
        o->cap_vmas = cap;
    }
    o->vmas[o->nvmas++] = vma;
    return 0;
}

void rmap_remove(struct km_emu *e, int32_t obj, int32_t vma)
{
    struct object *o = &e->objs[obj];
    for (int i = 0; i < o->nvmas; i++)
        if (o->vmas[i] == vma) { o->vmas[i] = o->vmas[--o->nvmas]; return; }
}

/* The vma's page for an index of the object it maps, or -1. */
int64_t vma_pte_index(const struct vma *v, int64_t obj_index)
{
    int64_t p = obj_index - v->pgoff;
    return (p >= 0 && p < v->npages) ? p : -1;
}

/* populate_vma_page_range() -> __get_user_pages(FOLL_TOUCH), page by page in address order:
 * faultin_page() (handle_mm_fault) where nothing is mapped, then follow_page_mask() marks what it
 * finds. A PTE-mapped page: follow_page_pte() -> folio_mark_accessed(), once per page, so a large
 * folio is activated by its second page. A PMD-mapped folio: follow_huge_pmd() -> touch_pmd() only
 * (a young PMD, no folio_mark_accessed()), and the walk steps over the whole 2 MiB. Marking as the
 * walk goes matters under pressure: a marked page that reaches the inactive tail during the
 * populate is activated by folio_check_references() (young PTE and PG_referenced). */
static void populate_vma_page_range(struct km_emu *e, int32_t id, int64_t start, int64_t n)
{
    int mode = vma_populate_write(&e->vmas[id]) ? FAULT_WRITE_ZERO : FAULT_READ;
    for (int64_t p = start; p < start + n;) {
        struct vma *v = &e->vmas[id];
        if (!v->alive) return;
        if (!(v->pte[p] & PTE_PRESENT) || (mode != FAULT_READ && !(v->pte[p] & PTE_DIRTY))) {
            handle_range(e, id, p, 1, mode);
            v = &e->vmas[id];
            if (!v->alive) return;
            if (!(v->pte[p] & PTE_PRESENT)) { p++; continue; }     /* the fault failed: next page */
        }
        if (!v->pmdtab[p >> PMD_ORDER]) {                    /* PMD-mapped: touch_pmd(), no mark */
            p = ((p >> PMD_ORDER) + 1) << PMD_ORDER;
            continue;
        }
        int anon = (v->pte[p] & PTE_ANON) != 0;
        folio_id f = e->objs[anon ? v->anon : v->obj].folio[anon ? p : v->pgoff + p];
        if (f >= 0 && !(v->pte[p] & PTE_ZERO)) {
            if (e->policy->folio_accessed) e->policy->folio_accessed(e, f);   /* a policy's own order */
            else folio_mark_accessed(e, f);
        }
        p++;
    }
}

/* Returns 0, or -1 with km_error() set: a size out of range or memory the emulator cannot get (the
 * vma is then dead, its arrays freed or never made). The caller checked id == nr_vmas. */
int do_mmap(struct km_emu *e, int32_t id, int32_t task, int64_t file, int64_t pgoff, int64_t npages,
            uint32_t flags)
{
    if (npages < 0 || npages > KM_MAX_PAGES || pgoff < 0 || pgoff > KM_MAX_PAGES)
        return km_fail(e, "mapping %d: %lld pages at page %lld (each at most %lld)", id, (long long)npages,
                       (long long)pgoff, (long long)KM_MAX_PAGES);
    if (e->nr_vmas == e->cap_vmas) {
        int32_t cap = e->cap_vmas ? e->cap_vmas * 2 : 16;
        struct vma *vmas = cap > e->cap_vmas ? realloc(e->vmas, sizeof(struct vma) * (size_t)cap) : NULL;
        if (!vmas) return km_fail(e, "out of memory: %d mappings", e->nr_vmas);
        e->vmas = vmas;
        e->cap_vmas = cap;
    }
    e->nr_vmas++;
    struct vma *v = &e->vmas[id];
    memset(v, 0, sizeof *v);
    v->task = task;
    v->anon = -1;
    v->obj = -1;
    size_t ptes = (size_t)(npages ? npages : 1);
    v->pte = calloc(ptes + (size_t)((npages + (1 << PMD_ORDER) - 1) >> PMD_ORDER), 1);
    if (!v->pte)
        return km_fail(e, "out of memory: mapping %d of %lld pages", id, (long long)npages);
    v->npages = npages;
    v->flags = flags & ~(0xffu << CLASS_SHIFT);
    v->alive = 1;
    km_hugepage_hint(v->pte, (size_t)npages);
    v->pmdtab = v->pte + ptes;
    int cls = (flags >> CLASS_SHIFT) & 0xff;
    int32_t o;
    if (file >= 0) {
        v->obj = e->file_obj[file];
        v->pgoff = pgoff;
        if (pgoff + npages > e->objs[v->obj].npages)
            return km_fail(e, "mapping %d runs past the end of file %lld", id, (long long)file);
        if (flags & MAP_F_WEIGHTS) e->objs[v->obj].weights = 1;
        if (!(flags & MAP_F_SHARED)) {                 /* private: COW pages are anonymous */
            if ((o = anon_object_new(e, npages, cls)) < 0) return -1;
            v = &e->vmas[id];
            v->anon = o;
            if (anon_object_swap_init(e, &e->objs[o]) < 0 || rmap_add(e, o, id) < 0) return -1;
        }
    } else {
        if ((o = anon_object_new(e, npages, cls)) < 0) return -1;
        v = &e->vmas[id];
        v->obj = v->anon = o;
        if (anon_object_swap_init(e, &e->objs[o]) < 0) return -1;
    }
    if (rmap_add(e, v->obj, id) < 0) return -1;
    if (file < 0 && e->policy->anon_region_mapped) e->policy->anon_region_mapped(e, id);
    if (flags & MAP_F_LOCKED) mlock_range(e, id, 0, npages, 1);
    if (flags & MAP_F_POPULATE) populate_vma_page_range(e, id, 0, npages);
    return 0;
}

/* The PTE tables a vma holds (pmdtab entries PMD_TABLE). */
int64_t vma_pte_tables(const struct vma *v)
{
    int64_t tables = 0;
    for (int64_t r = 0; r < (v->npages + (1 << PMD_ORDER) - 1) >> PMD_ORDER; r++)
        tables += v->pmdtab[r] == PMD_TABLE;
    return tables;
}

void do_munmap(struct km_emu *e, int32_t vma, int64_t page, int64_t n)
{
    if (e->vmas[vma].flags & MAP_F_LOCKED) mlock_range(e, vma, page, n, 0);   /* munlock on unmap */
    struct vma *v = &e->vmas[vma];
    zap_page_range(e, vma, page, n, 1);
    if (n > 0 && !(page == 0 && n == v->npages))       /* the vma no longer covers these 2 MiB whole */
        for (int64_t r = page >> PMD_ORDER; r <= (page + n - 1) >> PMD_ORDER; r++)
            if (!v->pmdtab[r]) v->pmdtab[r] = PMD_SPLIT;
    if (page == 0 && n == v->npages) {
        pte_alloc_charge(e, (int)-vma_pte_tables(v));   /* free_pgtables(): the vma's PTE tables */
        v->alive = 0;
        rmap_remove(e, v->obj, vma);
        if (v->anon >= 0 && v->anon != v->obj) rmap_remove(e, v->anon, vma);
        free(v->pte);
        v->pte = NULL;
        v->pmdtab = NULL;
    }
}

void exit_mmap(struct km_emu *e, int32_t task)
{
    for (int32_t i = 0; i < e->nr_vmas; i++)
        if (e->vmas[i].alive && e->vmas[i].task == task) do_munmap(e, i, 0, e->vmas[i].npages);
}
