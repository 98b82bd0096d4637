/* Language-model evaluation over a (dp, pp, tp) mesh (snn/lm_dist.h): the checkpoint's dense
 * weights are sharded onto each rank's stage and every DP replica runs forward-only pipelines
 * over its slice of the samples. */
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "dist/comm.h"
#include "dist/lm_stage.h"
#include "snn/lm_dist.h"

static snn_status dense_tensor(const char *name, void *ctx, int *rank, int64_t *shape, const float **data) {
    snn_model *d = ctx;
    for (size_t i = 0; i < snn_model_num_tensors(d); i++) {
        snn_tensor_info ti;
        SNN_TRY(snn_model_tensor(d, i, &ti));
        if (strcmp(ti.name, name)) continue;
        *rank = ti.rank;
        for (int k = 0; k < ti.rank; k++) shape[k] = ti.shape[k];
        *data = ti.data;
        return SNN_OK;
    }
    return snn_error(SNN_E_FORMAT, "the checkpoint's model has no tensor %s", name);
}

snn_status snn_lm_evaluate_parallel(snn_comm *world, snn_model *dense, const snn_gpt_opts *o, int tp_size,
                                    int pp_size, int sp, int K, const snn_token_dataset *ds, int micro,
                                    int64_t first, int64_t count, double *loss_sum, double *tokens) {
    if (!world || !dense || !o || !ds || !loss_sum || !tokens)
        return snn_error(SNN_E_INVALID, "snn_lm_evaluate_parallel: NULL argument");
    if (micro <= 0 || K <= 0 || first < 0 || count <= 0)
        return snn_error(SNN_E_INVALID, "snn_lm_evaluate_parallel: micro_batch_size %d and pipeline_microbatches "
                         "%d must be > 0, first >= 0 and count > 0", micro, K);
    SNN_TRY(snn_lm_stage_check(o, pp_size, tp_size, sp));
    snn_mesh mesh;
    SNN_TRY(snn_mesh_create(world, pp_size, tp_size, &mesh));
    const int64_t per_batch = (int64_t)micro * K, DP = mesh.dp_size;
    snn_status st = SNN_OK;
    if (count % (DP * per_batch))
        st = snn_error(SNN_E_INVALID, "%lld samples are not a multiple of data_parallel_size %lld x "
                       "micro_batch_size %d x pipeline_microbatches %d (tensor/pipeline-parallel evaluation "
                       "pads nothing: choose the sample count)", (long long)count, (long long)DP, micro, K);
    if (st != SNN_OK) {
        snn_mesh_free(&mesh);
        return st;
    }
    /* the stage with the seeded initial weights, then the checkpoint's */
    snn_lm_stage *sg = NULL;
    st = snn_lm_stage_create(o, &mesh, sp, 1, &sg);
    if (st == SNN_OK) st = snn_lm_stage_load_canonical(sg, dense_tensor, dense);
    if (st == SNN_OK) st = snn_lm_pipeline_plan(sg, micro, K, 0);
    const int S = o->seq;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)per_batch * S), *lab = malloc(sizeof(int32_t) * (size_t)per_batch * S);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)per_batch);
    if (st == SNN_OK && (!ids || !lab || !idx)) st = snn_error(SNN_E_NOMEM, "out of memory for evaluation batches");
    const int64_t mine = count / DP, lo = first + mesh.dp * mine;
    double tot[2] = {0, 0};
    for (int64_t b = 0; st == SNN_OK && b < mine; b += per_batch) {
        for (int64_t i = 0; i < per_batch; i++) idx[i] = lo + b + i;
        st = snn_token_dataset_batch(ds, idx, (int)per_batch, ids, lab);
        double ls = 0, cn = 0;
        if (st == SNN_OK) st = snn_lm_pipeline_eval(sg, sg->first ? ids : NULL, sg->last ? lab : NULL, &ls, &cn);
        tot[0] += ls;
        tot[1] += cn;
    }
    /* every (pp, tp) rank of a replica holds its totals: (pp 0, tp 0) of each replica adds them */
    if (st == SNN_OK && (mesh.pp != 0 || mesh.tp != 0)) tot[0] = tot[1] = 0;
    snn_status agreed = snn_comm_agree(world, st);
    if (agreed == SNN_OK) agreed = snn_comm_allreduce(world, tot, 2, SNN_COMM_F64, SNN_COMM_SUM);
    free(ids);
    free(lab);
    free(idx);
    snn_lm_stage_free(sg);
    snn_mesh_free(&mesh);
    if (agreed != SNN_OK) return agreed;
    *loss_sum = tot[0];
    *tokens = tot[1];
    return SNN_OK;
}
