/* Distributed image-classification training (contract in vision_train.h). The order of a
 * step follows SpikingJelly's train_classification for the non-PP path: broadcast buffers
 * (multi-step DDP), forward, loss, backward with DP gradient averaging inside the
 * precision step, optimizer step, reset neuron state (done by the next forward). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/error_internal.h"
#include "dist/ddp.h"
#include "dist/sampler.h"
#include "dist/vision_train.h"
#include "snn/loss.h"
#include "train/step.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double snn_dist_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss * 1024.0; /* Linux reports KiB */
}

static int neuron_mixed(const snn_precision_config *c) { return c->neuron_storage != SNN_NEURON_STORAGE_UNSET; }

snn_status snn_dist_check_rules(const char *data_parallel, int tp_size, int pp_size, int microbatches, int batch_size,
                                const snn_precision_config *cfg) {
    if (!data_parallel || (strcmp(data_parallel, "ddp") && strcmp(data_parallel, "fsdp2")))
        return snn_error(SNN_E_INVALID, "data_parallel must be 'ddp' or 'fsdp2', got '%s'",
                         data_parallel ? data_parallel : "(none)");
    if (tp_size <= 0) return snn_error(SNN_E_INVALID, "tensor_parallel_size must be > 0, got %d", tp_size);
    if (pp_size <= 0) return snn_error(SNN_E_INVALID, "pipeline_parallel_size must be > 0, got %d", pp_size);
    if (microbatches <= 0) return snn_error(SNN_E_INVALID, "pipeline_microbatches must be > 0, got %d", microbatches);
    if (batch_size <= 0) return snn_error(SNN_E_INVALID, "batch_size must be > 0, got %d", batch_size);
    if (batch_size % microbatches)
        return snn_error(SNN_E_INVALID, "batch_size=%d must be divisible by pipeline_microbatches=%d", batch_size,
                         microbatches);
    if (cfg && (cfg->mode == SNN_PRECISION_FP8 || neuron_mixed(cfg)) &&
        (strcmp(data_parallel, "ddp") || tp_size != 1 || pp_size != 1))
        return snn_error(SNN_E_INVALID, "%s requires DDP with tensor_parallel_size = pipeline_parallel_size = 1 "
                         "(got data_parallel='%s', tensor_parallel_size=%d, pipeline_parallel_size=%d)",
                         cfg->mode == SNN_PRECISION_FP8 ? "FP8 model precision" : "neuron mixed precision",
                         data_parallel, tp_size, pp_size);
    if (cfg && pp_size > 1 && cfg->mode != SNN_PRECISION_FP32 && cfg->mode != SNN_PRECISION_BF16)
        return snn_error(SNN_E_INVALID, "Vision PP currently supports fp32 and bf16 (got precision '%s' with "
                         "pipeline_parallel_size=%d)", snn_precision_mode_name(cfg->mode), pp_size);
    return SNN_OK;
}

/* fixed-shape steps (a pipeline's buffers) take full batches only */
static int drop_ragged(const snn_mesh *mesh, const snn_dist_train_opts *o) {
    (void)o;
    return mesh->pp_size > 1;
}

long snn_dist_total_steps(const snn_mesh *mesh, const snn_dist_train_opts *o) {
    if (!mesh || !o || !o->train) return 0;
    size_t per = snn_dist_sampler_num_samples((size_t)snn_dataset_size(o->train), mesh->dp_size);
    long nb = (long)snn_dist_loader_batches(per, o->batch_size, drop_ragged(mesh, o));
    long total = nb * (long)o->epochs;
    if (o->max_steps > 0 && o->max_steps < total) total = o->max_steps;
    return total;
}

/* Per-sample validation loss and correctness of [T, N, C] outputs, for the first `valid`
 * samples (the rest is padding): cross-entropy of the mean-over-T logits, or the MSE of
 * the firing rate against the one-hot label, as the training losses define them. */
static void score(const float *y, int T, int N, int C, const int32_t *lab, int valid, int use_mse, double *mean,
                  double *loss_sum, double *correct) {
    for (int i = 0; i < valid; i++) {
        int best = 0;
        double mx = -INFINITY;
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += y[((size_t)t * N + i) * C + c];
            mean[c] = s / T;
            if (mean[c] > mx) mx = mean[c], best = c;
        }
        if (use_mse) {
            double e = 0;
            for (int c = 0; c < C; c++) {
                double d = mean[c] - (c == lab[i] ? 1.0 : 0.0);
                e += d * d;
            }
            *loss_sum += e / C;
        } else {
            double z = 0;
            for (int c = 0; c < C; c++) z += exp(mean[c] - mx);
            *loss_sum += -(mean[lab[i]] - mx - log(z));
        }
        *correct += best == lab[i];
    }
}

typedef struct loop_bufs {
    float *xb, *xt, *dy;
    int32_t *yb;
    uint32_t *perm, *idx, *vidx;
    double *mean;
} loop_bufs;

static void bufs_free(loop_bufs *b) {
    free(b->xb); free(b->xt); free(b->dy); free(b->yb); free(b->perm); free(b->idx); free(b->vidx); free(b->mean);
}

/* Validation over this rank's shard val[dp::DP] (not shuffled), batches of N padded with
 * the shard's first sample; totals summed over DP. Leaves the model planned for (T, N). */
static int out_classes(const snn_dist_train_opts *o) {
    return o->stage ? o->stage->cfg.num_classes : (int)snn_model_output_numel(o->model);
}

static snn_status validate(const snn_mesh *mesh, const snn_dist_train_opts *o, loop_bufs *b, int N, double *loss,
                           double *acc) {
    snn_model *m = o->model;
    const snn_vision_stage *sg = o->stage;
    int T = o->time_steps, nval = snn_dataset_size(o->val), C = out_classes(o);
    size_t F = snn_dataset_features(o->val);
    /* the last pipeline stage's TP rank 0 scores (every TP rank holds the full output) */
    int scorer = !sg || (sg->last && sg->tp_rank == 0);
    int per = nval / mesh->dp_size;
    double tot[3] = {0, 0, 0}; /* loss sum, correct, count */
    for (int start = 0; start < per; start += N) {
        int valid = per - start < N ? per - start : N;
        for (int i = 0; i < N; i++)
            b->vidx[i] = (uint32_t)((size_t)mesh->dp + (size_t)(start + (i < valid ? i : 0)) * (size_t)mesh->dp_size);
        SNN_TRY(snn_dataset_batch(o->val, b->vidx, N, b->xb, b->yb));
        SNN_TRY(snn_encode(o->enc, b->xb, N, F, T, o->seed, 0xE7A1000000000000ull + (uint64_t)start * mesh->dp_size +
                                                                 (uint64_t)mesh->dp, b->xt));
        const float *y = NULL;
        if (sg && sg->pp_size > 1) {
            SNN_TRY(snn_vision_pipeline_forward(o->stage, b->xt, sg->last ? b->dy : NULL));
            y = b->dy;
        } else {
            SNN_TRY(snn_model_forward(m, b->xt, 0, &y));
        }
        if (scorer) {
            score(y, T, N, C, b->yb, valid, o->use_mse, b->mean, &tot[0], &tot[1]);
            tot[2] += valid;
        }
    }
    /* over the world: only the scoring rank of each DP replica contributes */
    SNN_TRY(snn_comm_allreduce(sg ? mesh->world : mesh->dp_comm, tot, 3, SNN_COMM_F64, SNN_COMM_SUM));
    *loss = tot[2] > 0 ? tot[0] / tot[2] : NAN;
    *acc = tot[2] > 0 ? tot[1] / tot[2] : NAN;
    return SNN_OK;
}

static snn_status check_inputs(const snn_mesh *mesh, const snn_dist_train_opts *o) {
    if (!mesh || !o || !o->model || !o->prec || !o->opt || !o->train || !o->val)
        return snn_error(SNN_E_INVALID, "distributed training needs a mesh, a model, its precision, an optimizer "
                         "and both datasets");
    int parallel = mesh->tp_size != 1 || mesh->pp_size != 1;
    const char *dev = snn_model_device(o->model);
    if (strcmp(dev, "cpu") && (parallel || o->stage))
        return snn_error(SNN_E_UNSUPPORTED, "a model on %s trains data parallel only here (tensor_parallel_size=%d, "
                         "pipeline_parallel_size=%d)", dev, mesh->tp_size, mesh->pp_size);
    if (o->device_dp && !strcmp(dev, "cpu"))
        return snn_error(SNN_E_INVALID, "device_dp is for a model placed on a device; this model is on the CPU");
    if (parallel && (!o->stage || o->stage->model != o->model || o->stage->tp_size != mesh->tp_size ||
                     o->stage->pp_size != mesh->pp_size))
        return snn_error(SNN_E_INVALID, "tensor_parallel_size=%d, pipeline_parallel_size=%d: the model must be "
                         "this mesh's vision stage", mesh->tp_size, mesh->pp_size);
    if (parallel && o->clip > 0)
        return snn_error(SNN_E_UNSUPPORTED, "gradient clipping with tensor_parallel_size=%d or "
                         "pipeline_parallel_size=%d is not built (the norm would be one shard's)", mesh->tp_size,
                         mesh->pp_size);
    if (mesh->pp_size > 1 && (o->microbatches <= 0 || o->batch_size % o->microbatches))
        return snn_error(SNN_E_INVALID, "batch_size=%d must be divisible by pipeline_microbatches=%d",
                         o->batch_size, o->microbatches);
    if (o->time_steps <= 0 || o->batch_size <= 0 || o->epochs <= 0 || o->timing_warmup_steps < 0)
        return snn_error(SNN_E_INVALID, "time_steps, batch_size and epochs must be > 0 and timing_warmup_steps >= 0");
    if (o->max_steps > 0 && o->timing_warmup_steps >= o->max_steps)
        return snn_error(SNN_E_INVALID, "timing_warmup_steps=%d must be < max_steps=%ld", o->timing_warmup_steps,
                         o->max_steps);
    if (snn_dataset_size(o->train) <= 0 || snn_dataset_size(o->val) <= 0)
        return snn_error(SNN_E_INVALID, "the training and validation datasets must be non-empty");
    if (snn_dataset_size(o->val) % mesh->dp_size)
        return snn_error(SNN_E_INVALID, "validation dataset size %d must be divisible by data_parallel_size %d",
                         snn_dataset_size(o->val), mesh->dp_size);
    if (o->stage && !o->stage->first) return SNN_OK; /* later stages take the previous stage's output */
    if (snn_dataset_features(o->train) != snn_model_input_numel(o->model) ||
        snn_dataset_features(o->val) != snn_model_input_numel(o->model))
        return snn_error(SNN_E_SHAPE, "the datasets' %zu features do not fit the model's %zu inputs",
                         snn_dataset_features(o->train), snn_model_input_numel(o->model));
    return SNN_OK;
}

snn_status snn_dist_train_classification(const snn_mesh *mesh, const snn_dist_train_opts *o, snn_dist_metrics *out) {
    SNN_TRY(check_inputs(mesh, o));
    snn_model *m = o->model;
    const int T = o->time_steps, DP = mesh->dp_size;
    const int ntrain = snn_dataset_size(o->train), C = out_classes(o);
    const int piped = mesh->pp_size > 1;
    const size_t F = snn_dataset_features(o->train);
    const size_t per = snn_dist_sampler_num_samples((size_t)ntrain, DP);
    const int N = (size_t)o->batch_size < per ? o->batch_size : (int)per;
    const long nb = (long)snn_dist_loader_batches(per, N, drop_ragged(mesh, o));
    const long total = snn_dist_total_steps(mesh, o);

    if (piped && (N % o->microbatches || per < (size_t)o->batch_size))
        return snn_error(SNN_E_INVALID, "pipeline parallelism needs full batches: %zu samples per data-parallel "
                         "rank, batch_size=%d, pipeline_microbatches=%d", per, o->batch_size, o->microbatches);
    snn_ddp *ddp = NULL;
    if (!piped) SNN_TRY(snn_ddp_create(mesh->dp_comm, o->device_dp, m, o->prec, o->bucket_bytes, &ddp));
    loop_bufs b = {0};
    b.xb = malloc(sizeof(float) * F * (size_t)N);
    b.xt = malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    b.dy = malloc(sizeof(float) * (size_t)C * (size_t)N * (size_t)T);
    b.yb = malloc(sizeof(int32_t) * (size_t)N);
    b.perm = malloc(sizeof(uint32_t) * (size_t)ntrain);
    b.idx = malloc(sizeof(uint32_t) * per);
    b.vidx = malloc(sizeof(uint32_t) * (size_t)N);
    b.mean = malloc(sizeof(double) * (size_t)C);
    snn_status st = (b.xb && b.xt && b.dy && b.yb && b.perm && b.idx && b.vidx && b.mean)
                        ? SNN_OK : snn_error(SNN_E_NOMEM, "out of memory for training batches");
    if (st == SNN_OK)
        st = piped ? snn_vision_pipeline_plan(o->stage, T, N, o->microbatches) : snn_model_plan(m, T, N);
    /* the library's training step (src/train/step.c: one graph on a device), DDP's hooks inside */
    snn_train_step *ts = NULL;
    if (st == SNN_OK && !piped && snn_train_step_supported(m, o->prec, o->opt))
        st = snn_train_step_create(m, o->prec, o->opt, o->use_mse ? 1 : 0, o->clip, 0, b.dy, &ts);

    if (o->start_step < 0 || o->start_step > total)
        st = snn_error(SNN_E_INVALID, "resume step %ld is outside this run's %ld steps", o->start_step, total);
    long step = o->start_step, timed = 0, skipped_steps = 0;
    const int first_epoch = nb > 0 ? (int)(o->start_step / nb) + 1 : 1;
    double measured_s = 0, processed = 0, train_loss = NAN, vloss = NAN, vacc = NAN;
    int planned_n = N;
    for (int epoch = first_epoch; st == SNN_OK && epoch <= o->epochs && step < total; epoch++) {
        st = snn_dist_sampler_epoch(o->train, 1, o->seed, (uint64_t)epoch, DP, mesh->dp, b.perm, b.idx);
        double lsum[2] = {0, 0}; /* sum(loss * batch), sum(batch) */
        for (long k = epoch == first_epoch && nb > 0 ? o->start_step % nb : 0; st == SNN_OK && k < nb && step < total;
             k++) {
            size_t start = (size_t)k * (size_t)N;
            int n = per - start < (size_t)N ? (int)(per - start) : N;
            if (n != planned_n) { /* the ragged last batch (validation restores N) */
                st = snn_model_plan(m, T, n);
                planned_n = n;
                if (st != SNN_OK) break;
            }
            /* the clock runs over the step, not over reading the batch (as the reference) */
            st = snn_dataset_batch(o->train, b.idx + start, n, b.xb, b.yb);
            /* the model's input buffer (planned for n; page-locked on a device) unless piped */
            float *xt = !piped && snn_model_input_buffer(m) ? snn_model_input_buffer(m) : b.xt;
            if (st == SNN_OK)
                st = snn_encode(o->enc, b.xb, n, F, T, o->seed,
                                ((uint64_t)epoch << 32) | ((uint64_t)k * (uint64_t)DP + (uint64_t)mesh->dp), xt);
            int measured = step >= o->timing_warmup_steps;
            double t0 = measured ? now_s() : 0;
            float loss = 0;
            int skipped = 0;
            if (piped) {
                int correct = 0;
                snn_model_zero_grad(m);
                if (st == SNN_OK)
                    st = snn_vision_pipeline_train_step(o->stage, b.xt, b.yb,
                                                        o->use_mse ? SNN_VISION_LOSS_MSE : SNN_VISION_LOSS_CE, &loss,
                                                        &correct);
                if (st == SNN_OK) st = snn_vision_stage_dp_average(o->stage, mesh->dp_comm);
                if (st == SNN_OK) st = snn_optimizer_step(o->opt, snn_lr_schedule(&o->sched, step), 0);
            } else if (ts) {
                if (st == SNN_OK) st = snn_ddp_broadcast_buffers(ddp);
                snn_tensor_view xv = {.dtype = SNN_F32, .device = "cpu", .data = xt, .numel = F * (size_t)n * (size_t)T};
                snn_train_step_result r;
                if (st == SNN_OK) st = snn_train_step_run(ts, &xv, b.yb, snn_lr_schedule(&o->sched, step), &r);
                if (st == SNN_OK) loss = r.loss, skipped = r.skipped;
            } else {
                if (st == SNN_OK) st = snn_ddp_broadcast_buffers(ddp);
                const float *y = NULL;
                if (st == SNN_OK) st = snn_model_forward(m, xt, 1, &y);
                if (st == SNN_OK)
                    st = o->use_mse ? snn_loss_mse_rate(y, b.yb, T, n, C, &loss, b.dy, NULL)
                                    : snn_loss_cross_entropy_mean_t(y, b.yb, T, n, C, &loss, b.dy, NULL);
                if (st == SNN_OK)
                    st = snn_precision_backward(o->prec, b.dy, o->opt, snn_lr_schedule(&o->sched, step), o->clip,
                                                NULL, &skipped);
            }
            if (st == SNN_OK && !isfinite(loss))
                st = snn_error(SNN_E_NUMERIC, "the loss became %g at step %ld on data-parallel rank %d; lower the "
                               "learning rate", (double)loss, step, mesh->dp);
            if (st != SNN_OK) break;
            if (measured) {
                measured_s += now_s() - t0;
                timed++;
                processed += (double)n * DP;
            }
            skipped_steps += skipped;
            step++;
            lsum[0] += (double)loss * n;
            lsum[1] += n;
            if (o->on_step) st = o->on_step(o->ctx, step);
        }
        if (st == SNN_OK) st = snn_comm_allreduce(mesh->dp_comm, lsum, 2, SNN_COMM_F64, SNN_COMM_SUM);
        if (st != SNN_OK) break;
        train_loss = lsum[1] > 0 ? lsum[0] / lsum[1] : NAN;
        if (planned_n != N) {
            st = snn_model_plan(m, T, N);
            planned_n = N;
        }
        /* evaluation uses running statistics: DP rank 0's, as every DDP forward does */
        if (st == SNN_OK && ddp) st = snn_ddp_broadcast_buffers(ddp);
        if (st == SNN_OK) st = validate(mesh, o, &b, N, &vloss, &vacc);
        if (st != SNN_OK) break;
        if (snn_comm_rank(mesh->world) == 0 && o->on_epoch) {
            snn_dist_epoch_report r = {.epoch = epoch, .optimizer_step = step, .train_loss = train_loss,
                                       .validation_loss = vloss, .validation_accuracy = vacc};
            o->on_epoch(o->ctx, &r);
        }
    }
    if (st == SNN_OK && isnan(vacc)) {
        if (ddp) st = snn_ddp_broadcast_buffers(ddp);
        if (st == SNN_OK) st = validate(mesh, o, &b, N, &vloss, &vacc);
    }
    snn_train_step_free(ts);
    bufs_free(&b);
    snn_ddp_free(ddp);
    if (st != SNN_OK) return st;

    /* max over ranks of time and peak memory, sums of memory (whole world: TP/PP ranks
     * hold memory too) */
    double rss = snn_dist_peak_rss_bytes();
    double mx[2] = {measured_s, rss}, sm[1] = {rss};
    SNN_TRY(snn_comm_allreduce(mesh->world, mx, 2, SNN_COMM_F64, SNN_COMM_MAX));
    SNN_TRY(snn_comm_allreduce(mesh->world, sm, 1, SNN_COMM_F64, SNN_COMM_SUM));
    if (out) {
        memset(out, 0, sizeof *out);
        out->train_loss = train_loss;
        out->validation_loss = vloss;
        out->validation_accuracy = vacc;
        out->optimizer_step = (double)step;
        out->timed_steps = (double)timed;
        out->training_seconds = mx[0];
        out->images_per_second = mx[0] > 0 ? processed / mx[0] : NAN;
        out->peak_memory_bytes = out->peak_reserved_memory_bytes = mx[1];
        out->total_peak_memory_bytes = out->total_peak_reserved_memory_bytes = sm[0];
        out->data_parallel_size = DP;
        out->pipeline_parallel_size = mesh->pp_size;
        out->tensor_parallel_size = mesh->tp_size;
        out->global_batch_size = (double)o->batch_size * DP;
        out->skipped_steps = (double)skipped_steps;
    }
    return SNN_OK;
}
