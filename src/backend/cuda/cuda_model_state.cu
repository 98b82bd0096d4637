/* Training state of the GPU runner besides parameters and buffers (include/snn/cuda.h:
 * snn_cuda_model_save_state / load_state): the optimizer's state tensors and completed-step
 * count, the FP16 loss scaler. The host side is an snn_optimizer over the same host model,
 * whose state tensors are flat over the model's parameter array (the CPU optimizer's own
 * layout), so a checkpoint written from either device resumes on the other. */
#include "backend/cuda/cuda_model_internal.h"

/* Each state tensor j of the optimizer: device g->state + j*n_dev in the padded layout, host
 * os.data in the flat one; to_device selects the direction. */
static snn_status copy_opt_state(snn_cuda_model *g, snn_optimizer *opt, int to_device, int zero) {
    snn_model *m = g->host;
    const float *flat0 = snn_model_params(m);
    for (size_t j = 0; j < snn_optimizer_num_states(opt); j++) {
        snn_optim_state os;
        SNN_TRY(snn_optimizer_state(opt, j, &os));
        float *dev = g->state + j * g->n_dev;
        if (zero) {
            SNN_CU_TRY(cudaMemsetAsync(dev, 0, g->n_dev * sizeof(float), snn_cuda_stream_of(g->c)));
            continue;
        }
        for (size_t i = 0; i < m->n_tensors; i++) {
            const snn_param *p = m->tensors[i].param;
            if (p->kind != SNN_PARAM_WEIGHT) continue;
            const size_t off = (size_t)(p->data - flat0), bytes = p->numel * sizeof(float);
            if (to_device) SNN_TRY(snn_cuda_upload(g->c, dev + g->doff[i], os.data + off, bytes));
            else SNN_TRY(snn_cuda_download(g->c, os.data + off, dev + g->doff[i], bytes));
        }
    }
    return SNN_OK;
}

static snn_status check_opt(snn_cuda_model *g, snn_optimizer *opt) {
    const snn_optim_opts *o = snn_optimizer_opts(opt);
    if (o->kind != g->opt.kind)
        return snn_error(SNN_E_INVALID, "GPU model state: the host optimizer is %s but the GPU runs %s",
                         snn_optim_kind_name(o->kind), snn_optim_kind_name(g->opt.kind));
    if (snn_optimizer_numel(opt) != snn_model_num_params(g->host))
        return snn_error(SNN_E_INVALID, "GPU model state: the host optimizer covers %zu values, the model "
                         "has %zu parameters (create it with snn_optimizer_create_for_model)",
                         snn_optimizer_numel(opt), snn_model_num_params(g->host));
    if (o->kind == SNN_OPTIM_SGD && o->momentum != 0.0f && snn_optimizer_num_states(opt) != 1)
        return snn_error(SNN_E_STATE, "GPU model state: SGD with momentum but no momentum buffer");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_model_save_state(snn_cuda_model *g, snn_optimizer *opt,
                                                float *loss_scale, int *growth_tracker) {
    if (!g) return snn_error(SNN_E_INVALID, "snn_cuda_model_save_state: NULL model");
    SNN_TRY(snn_cuda_synchronize(g->c));
    if (opt) {
        SNN_TRY(check_opt(g, opt));
        long long steps = 0;
        SNN_TRY(snn_cuda_download(g->c, &steps, g->opt_steps, sizeof steps));
        SNN_TRY(copy_opt_state(g, opt, 0, 0));
        SNN_TRY(snn_optimizer_set_steps(opt, (long)steps));
    }
    snn_gm_scaler sc;
    SNN_TRY(snn_cuda_download(g->c, &sc, g->scaler, sizeof sc));
    if (loss_scale) *loss_scale = sc.scale;
    if (growth_tracker) *growth_tracker = sc.tracker;
    return SNN_OK;
}

extern "C" snn_status snn_cuda_model_load_state(snn_cuda_model *g, snn_optimizer *opt, float loss_scale,
                                                int growth_tracker) {
    if (!g) return snn_error(SNN_E_INVALID, "snn_cuda_model_load_state: NULL model");
    if (!(loss_scale > 0.0f) || !isfinite(loss_scale) || growth_tracker < 0)
        return snn_error(SNN_E_INVALID, "GPU model state: loss scale %g / growth tracker %d (need a finite "
                         "scale > 0 and a tracker >= 0)", (double)loss_scale, growth_tracker);
    SNN_TRY(snn_cuda_synchronize(g->c));
    if (opt) {
        SNN_TRY(check_opt(g, opt));
        long long steps = snn_optimizer_steps(opt);
        /* SGD's momentum buffer means something only after a step (the CPU sets it to the
         * first gradient); the device's starts at zero, which is the same thing */
        const int zero = g->opt.kind == SNN_OPTIM_SGD && steps == 0;
        SNN_TRY(copy_opt_state(g, opt, 1, zero));
        SNN_TRY(snn_cuda_upload(g->c, g->opt_steps, &steps, sizeof steps));
    }
    snn_gm_scaler sc = {loss_scale, growth_tracker};
    SNN_TRY(snn_cuda_upload(g->c, g->scaler, &sc, sizeof sc));
    unsigned long long fc = (unsigned long long)snn_model_step_count(g->host);
    SNN_TRY(snn_cuda_upload(g->c, g->fwd_count, &fc, sizeof fc));
    return snn_cuda_synchronize(g->c);
}
