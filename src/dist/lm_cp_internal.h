/* Internal to the context-parallel files: replacing a dense module of a built model tree
 * by its CP form in place (same name, shapes and parameters; new ops and private state). */
#ifndef SNN_DIST_LM_CP_INTERNAL_H
#define SNN_DIST_LM_CP_INTERNAL_H

#include "nn/module.h"
#include "dist/comm.h"

/* Frees the old state (its destroy, then the block) and installs ops/impl; impl is freed
 * on failure (a module under a precision wrapper is refused). */
snn_status snn_lm_cp_swap(snn_module *m, const snn_module_ops *ops, void *impl);
snn_status snn_lm_cp_install_posemb(snn_module *m, int max_len, int dim, int seq, int cp, int rank);
snn_status snn_lm_cp_install_rope(snn_module *m, int heads, int groups, int hd, float theta, int max_len, int seq,
                                  int cp, int rank);
snn_status snn_lm_cp_install_attention(snn_module *m, int heads, int groups, int hd, int seq, snn_comm *cp);

#endif
