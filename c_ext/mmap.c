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
    if (flags & MAP_F_POPULATE) {
        /* populate_vma_page_range(): fault every page in, then FOLL_TOUCH marks them accessed.
         * Simplification (docs/validation.md): the kernel's __get_user_pages() marks each page as
         * it follows it (follow_page_pte() -> folio_mark_accessed()), and a PMD-mapped folio not
         * at all (follow_huge_pmd() -> touch_pmd() only); here every page still cached after the
         * whole range was faulted is marked once. Both the kernel's order and its PMD exception
         * were tried against the live runs and moved the errors elsewhere (see the doc). */
        handle_range(e, id, 0, npages, vma_populate_write(&e->vmas[id]) ? FAULT_WRITE_ZERO : FAULT_READ);
        struct vma *vv = &e->vmas[id];
        struct object *o = &e->objs[vv->obj];
        if (o->kind == OBJ_FILE && vv->alive)
            for (int64_t p = 0; p < npages; p++) {
                folio_id f = o->folio[vv->pgoff + p];
                if (f >= 0) folio_mark_accessed(e, f);
            }
    }
    return 0;
}

void do_munmap(struct km_emu *e, int32_t vma, int64_t page, int64_t n)
{
    if (e->vmas[vma].flags & MAP_F_LOCKED) mlock_range(e, vma, page, n, 0);   /* munlock on unmap */
    struct vma *v = &e->vmas[vma];
    zap_page_range(e, vma, page, n, 1);
    if (n > 0 && !(page == 0 && n == v->npages))       /* the vma no longer covers these 2 MiB whole */
        for (int64_t r = page >> PMD_ORDER; r <= (page + n - 1) >> PMD_ORDER; r++) v->pmdtab[r] = 1;
    if (page == 0 && n == v->npages) {
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
