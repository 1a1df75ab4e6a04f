/* Mappings (mm/mmap.c, mm/rmap.c): vmas, their page tables, and the reverse map from an object
 * to the vmas that map it. */
#include <stdlib.h>
#include <string.h>
#include "mm.h"

int32_t anon_object_new(struct km_emu *e, int64_t npages, int cls)
{
    if (e->nr_objs == e->cap_objs) {
        e->cap_objs = e->cap_objs ? e->cap_objs * 2 : 16;
        e->objs = realloc(e->objs, sizeof(struct object) * e->cap_objs);
    }
    int32_t id = e->nr_objs++;
    struct object *o = &e->objs[id];
    memset(o, 0, sizeof *o);
    o->kind = OBJ_ANON;
    o->npages = npages;
    o->cls = (uint8_t)cls;
    o->file_id = -1;
    o->folio = malloc(sizeof(folio_id) * (npages ? npages : 1));
    km_hugepage_hint(o->folio, sizeof(folio_id) * npages);   /* before the first touch */
    memset(o->folio, 0xff, sizeof(folio_id) * npages);
    o->shadow = calloc(npages ? npages : 1, sizeof(uint64_t));
    km_hugepage_hint(o->shadow, sizeof(uint64_t) * npages);
    return id;
}

static void anon_object_swap_init(struct object *o)
{
    if (o->swap) return;
    o->swap = malloc(sizeof(int32_t) * (o->npages ? o->npages : 1));
    km_hugepage_hint(o->swap, sizeof(int32_t) * o->npages);
    memset(o->swap, 0xff, sizeof(int32_t) * o->npages);
}

void rmap_add(struct km_emu *e, int32_t obj, int32_t vma)
{
    struct object *o = &e->objs[obj];
    if (o->nvmas == o->cap_vmas) {
        o->cap_vmas = o->cap_vmas ? o->cap_vmas * 2 : 4;
        o->vmas = realloc(o->vmas, sizeof(int32_t) * o->cap_vmas);
    }
    o->vmas[o->nvmas++] = vma;
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
        if (f >= 0 && !(v->pte[p] & PTE_ZERO)) folio_mark_accessed(e, f);
        p++;
    }
}

int do_mmap(struct km_emu *e, int32_t id, int32_t task, int64_t file, int64_t pgoff, int64_t npages,
            uint32_t flags)
{
    if (e->nr_vmas == e->cap_vmas) {
        e->cap_vmas = e->cap_vmas ? e->cap_vmas * 2 : 16;
        e->vmas = realloc(e->vmas, sizeof(struct vma) * e->cap_vmas);
    }
    e->nr_vmas++;
    struct vma *v = &e->vmas[id];
    memset(v, 0, sizeof *v);
    v->task = task;
    v->npages = npages;
    v->flags = flags & ~(0xffu << CLASS_SHIFT);
    v->alive = 1;
    v->anon = -1;
    v->pte = calloc((npages ? npages : 1) + ((npages + (1 << PMD_ORDER) - 1) >> PMD_ORDER), 1);
    km_hugepage_hint(v->pte, npages);
    v->pmdtab = v->pte + (npages ? npages : 1);
    int cls = (flags >> CLASS_SHIFT) & 0xff;
    if (file >= 0) {
        v->obj = e->file_obj[file];
        v->pgoff = pgoff;
        if (pgoff + npages > e->objs[v->obj].npages)
            return km_fail(e, "mapping %d runs past the end of file %lld", id, (long long)file);
        if (flags & MAP_F_WEIGHTS) e->objs[v->obj].weights = 1;
        if (!(flags & MAP_F_SHARED)) {                 /* private: COW pages are anonymous */
            v->anon = anon_object_new(e, npages, cls);
            anon_object_swap_init(&e->objs[v->anon]);
            rmap_add(e, v->anon, id);
            v = &e->vmas[id];
        }
    } else {
        v->obj = anon_object_new(e, npages, cls);
        v = &e->vmas[id];
        anon_object_swap_init(&e->objs[v->obj]);
        v->anon = v->obj;
    }
    rmap_add(e, v->obj, id);
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
