/* DW, Deferred Weight Reclamation (the thesis in seeds/001): folios of model weights (PG_weights:
 * file pages of a MAP_F_WEIGHTS mapping, anonymous copies of class WEIGHTS_*) are put back when
 * reclaim picks them, so they go last: only in the last-resort pass of a priority that found too
 * little else (shrink_node_policy() in vmscan.c). On the active list they stay active.
 * policy_param = strength: 0 defers for ever (until last resort); N > 0 lets a folio be put back at
 * most N times before it is treated like any other. */
#include "mm.h"

static int is_weights(const struct folio *f)
{
    return (f->flags & PG_weights) ||
           ((f->flags & PG_swapbacked) && class_is_weights(f->cls));
}

int dw_reclaim_candidate(struct km_emu *e, folio_id id, struct scan_control *sc)
{
    struct folio *f = &e->folios[id];
    if (!is_weights(f) || sc->last_resort) return 1;
    int64_t strength = e->cfg.policy_param;
    if (strength > 0) {
        if (f->policy_count >= strength) return 1;
        if (f->policy_count < 255) f->policy_count++;
    }
    return 0;
}

int dw_keep_active(struct km_emu *e, folio_id id)
{
    return is_weights(&e->folios[id]) && e->cfg.policy_param == 0;
}

const struct policy_ops dw_ops = {
    .name = "dw",
    .reclaim_candidate = dw_reclaim_candidate,
    .keep_active = dw_keep_active,
};
