/* The argument rules of backend.h's snn_optim_copy lists, for every table's optim_update and
 * optim_step: one check, one message. */
#include "backend/backend.h"
#include "core/error_internal.h"

snn_status snn_optim_copies_check(const char *what, const snn_optim_copy *c, int k, size_t n) {
    if (k < 0 || (k && !c))
        return snn_error(SNN_E_INVALID, "%s: %d weight copies with copies %s", what, k, c ? "set" : "NULL");
    for (int i = 0; i < k; i++)
        if (c[i].off > n || c[i].n > n - c[i].off || (c[i].t != SNN_F16 && c[i].t != SNN_BF16) ||
            (i && c[i].off < c[i - 1].off + c[i - 1].n))
            return snn_error(SNN_E_INVALID, "%s: weight copy %d is outside the %zu weights, overlaps the one "
                             "before, or has a type other than f16 / bf16", what, i, n);
    return SNN_OK;
}
