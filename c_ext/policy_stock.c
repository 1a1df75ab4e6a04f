/* The stock kernel: every hook left NULL, the mechanism decides. */
#include <string.h>
#include "mm.h"

static const struct policy_ops stock_ops = { .name = "stock" };

extern const struct policy_ops lru_ops, is_ops, is_tail_ops, dw_ops;
void is_range_touched(struct km_emu *e, int32_t vi, int64_t page, int64_t n, int mode);
int dw_reclaim_candidate(struct km_emu *e, folio_id id, struct scan_control *sc);
int dw_keep_active(struct km_emu *e, folio_id id);

/* IS and DW together: their hooks do not overlap. */
static const struct policy_ops is_dw_ops = {
    .name = "is+dw",
    .range_touched = is_range_touched,
    .reclaim_candidate = dw_reclaim_candidate,
    .keep_active = dw_keep_active,
};

static const struct policy_ops *const policies[] = { &stock_ops, &lru_ops, &is_ops, &is_tail_ops, &dw_ops,
                                                      &is_dw_ops };

#define NR_POLICIES ((int32_t)(sizeof policies / sizeof policies[0]))

const struct policy_ops *policy_lookup(const char *name)
{
    for (int32_t i = 0; i < NR_POLICIES; i++)
        if (!strcmp(policies[i]->name, name)) return policies[i];
    return NULL;
}

int32_t km_nr_policies(void) { return NR_POLICIES; }

const char *km_policy_name(int32_t i) { return i >= 0 && i < NR_POLICIES ? policies[i]->name : ""; }
