/* IS, Initial KV cache Swap (the thesis in seeds/001): the KV buffer's pages go to zram as soon as
 * llama.cpp's ggml_backend_buffer_clear() has written them, before anything uses them. They are
 * zero (same-filled in zram, almost free); only pages a token writes come back.
 * Variant "is-tail": also keep the unused tail swapped: pages that attention reads fault
 * back in (n_kv is padded past n_past), and still-zero ones are paged out again after the read.
 * On a kernel: process_madvise(MADV_PAGEOUT) over the buffer -> reclaim_pages(). */
#include <stdlib.h>
#include "mm.h"

static int is_kv(struct km_emu *e, struct vma *v)
{
    return v->anon == v->obj && class_is_kv(e->objs[v->obj].cls);
}

/* Page out the still-zero resident KV folios in [page, page + n). */
static void pageout_zero(struct km_emu *e, int32_t vi, int64_t page, int64_t n)
{
    struct object *o = &e->objs[e->vmas[vi].obj];
    folio_id *ids = malloc(sizeof(folio_id) * (size_t)(n ? n : 1));
    if (!ids) { e->nomem = 1; return; }               /* km_replay() fails with "out of memory" */
    int64_t k = 0;
    for (int64_t p = page; p < page + n; p++) {
        folio_id f = o->folio[p];
        if (f >= 0 && e->folios[f].cls == CLASS_ZERO && e->folios[f].lru != NO_LRU &&
            !(e->folios[f].flags & PG_unevictable))
            ids[k++] = f;
    }
    if (k) reclaim_pages(e, ids, k);
    free(ids);
}

void is_range_touched(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int mode)
{
    if (mode == FAULT_WRITE_ZERO && is_kv(e, &e->vmas[vi])) pageout_zero(e, vi, page, n);
}

static void is_tail_range_touched(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int mode)
{
    if (mode != FAULT_WRITE && is_kv(e, &e->vmas[vi])) pageout_zero(e, vi, page, n);
}

const struct policy_ops is_ops = { .name = "is", .range_touched = is_range_touched };
const struct policy_ops is_tail_ops = { .name = "is-tail", .range_touched = is_tail_range_touched };
