/* The public handles of distributed training (include/snn/dist.h, include/snn/vision_dist.h):
 * the mesh on the heap around the internal value type (dist/comm.h), and the getters of a
 * vision stage, so that programs need neither struct's layout. */
#include <stdlib.h>

#include "core/error_internal.h"
#include "dist/comm.h"
#include "dist/vision_stage.h"
#include "snn/dist.h"
#include "snn/vision_dist.h"

snn_status snn_mesh_open(snn_comm *world, int pp_size, int tp_size, snn_mesh **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_mesh_open: out is NULL");
    *out = NULL;
    if (!world) return snn_error(SNN_E_INVALID, "snn_mesh_open: world communicator is NULL");
    snn_mesh *m = calloc(1, sizeof *m);
    if (!m) return snn_error(SNN_E_NOMEM, "out of memory for a mesh");
    snn_status st = snn_mesh_create(world, pp_size, tp_size, m);
    if (st != SNN_OK) {
        free(m); /* snn_mesh_create has freed what it split before failing */
        return st;
    }
    *out = m;
    return SNN_OK;
}

void snn_mesh_close(snn_mesh *m) {
    if (!m) return;
    snn_mesh_free(m);
    free(m);
}

int snn_mesh_size(const snn_mesh *m, snn_mesh_axis axis) {
    if (!m) return 0;
    switch (axis) {
    case SNN_MESH_DP: return m->dp_size;
    case SNN_MESH_PP: return m->pp_size;
    case SNN_MESH_TP: return m->tp_size;
    }
    return 0;
}

int snn_mesh_coord(const snn_mesh *m, snn_mesh_axis axis) {
    if (!m) return -1;
    switch (axis) {
    case SNN_MESH_DP: return m->dp;
    case SNN_MESH_PP: return m->pp;
    case SNN_MESH_TP: return m->tp;
    }
    return -1;
}

snn_comm *snn_mesh_comm(const snn_mesh *m, snn_mesh_axis axis) {
    if (!m) return NULL;
    switch (axis) {
    case SNN_MESH_DP: return m->dp_comm;
    case SNN_MESH_PP: return m->pp_comm;
    case SNN_MESH_TP: return m->tp_comm;
    }
    return NULL;
}

snn_model *snn_vision_stage_model(const snn_vision_stage *s) { return s ? s->model : NULL; }
const snn_vision_model_config *snn_vision_stage_model_config(const snn_vision_stage *s) { return s ? &s->cfg : NULL; }
int snn_vision_stage_is_first(const snn_vision_stage *s) { return s ? s->first : 0; }
int snn_vision_stage_is_last(const snn_vision_stage *s) { return s ? s->last : 0; }
int snn_vision_stage_tp_rank(const snn_vision_stage *s) { return s ? s->tp_rank : -1; }
size_t snn_vision_stage_input_numel(const snn_vision_stage *s) { return s ? s->in_numel : 0; }
