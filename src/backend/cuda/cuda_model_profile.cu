/* Per-module profile of a training step of the GPU runner (snn_cuda_model_profile in
 * include/snn/cuda.h): leaves are timed one by one in cuda_model_exec.cu while g->prof is set;
 * this file runs the steps and writes the table. */
#include <stdarg.h>
#include <stdio.h>

#include "backend/cuda/cuda_model_internal.h"

/* ---- profiling ---- */
typedef struct {
    char *buf;
    size_t cap, len;
    int steps;
    double fwd, bwd;
} prof_out;

static void prof_line(prof_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void prof_line(prof_out *o, const char *fmt, ...) {
    if (o->len + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (k > 0) o->len += (size_t)k < o->cap - o->len ? (size_t)k : o->cap - o->len - 1;
}

static void prof_walk(gnode *n, prof_out *o, int reset) {
    if (reset) {
        n->fwd_ms = n->bwd_ms = 0;
    } else if (n->fwd_ms > 0 || n->bwd_ms > 0) {
        double f = n->fwd_ms / o->steps, b = n->bwd_ms / o->steps;
        o->fwd += f;
        o->bwd += b;
        prof_line(o, "%-44s %-26s %9.3f %9.3f\n", n->m->name[0] ? n->m->name : "(root)",
                  snn_module_own_ops(n->m)->kind, f, b);
    }
    for (int i = 0; i < n->n_kids; i++) prof_walk(n->kids[i], o, reset);
}

extern "C" snn_status snn_cuda_model_profile(snn_cuda_model *g, const float *x, int x_has_time,
                                             const int32_t *labels, int steps, char *report,
                                             size_t cap) {
    if (!g || !x || !labels || !report || cap == 0 || steps <= 0)
        return snn_error(SNN_E_INVALID, "snn_cuda_model_profile: bad argument");
    SNN_CU_TRY(cudaEventCreate(&g->ev[0]));
    SNN_CU_TRY(cudaEventCreate(&g->ev[1]));
    prof_out o = {report, cap, 0, steps, 0, 0};
    report[0] = 0;
    /* one untimed step first (cuBLASLt plans, caches), then `steps` timed ones */
    snn_status st = SNN_OK;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float whole = 0;
    /* no optimizer or loss-scaler update (the FP16 scaler would clear a skip flag), and the
     * forward counter (dropout masks) is put back afterwards */
    unsigned long long fc = 0;
    st = snn_cuda_download(g->c, &fc, g->fwd_count, sizeof fc);
    g->no_update = 1;
    for (int i = 0; i <= steps && st == SNN_OK; i++) {
        g->prof = i > 0;
        if (i == 1) prof_walk(g->root, &o, 1);
        snn_cuda_step_scalars sc;
        memset(&sc, 0, sizeof sc);
        sc.lr = 0.0f; /* profile without changing the model */
        sc.bc1 = sc.bc2 = 1.0f;
        sc.grad_scale = 1.0f;
        sc.skip = 1;
        st = snn_gm_stage_step(g, x, x_has_time, labels, &sc);
        if (st == SNN_OK && i == steps) {
            /* the last step once more without per-module synchronisation, for the total */
            g->prof = 0;
            cudaEventRecord(a, snn_cuda_stream_of(g->c));
            st = snn_gm_enqueue_step(g, x_has_time);
            cudaEventRecord(b, snn_cuda_stream_of(g->c));
            cudaEventSynchronize(b);
            cudaEventElapsedTime(&whole, a, b);
            g->prof = 1;
        }
        if (st == SNN_OK) st = snn_gm_enqueue_step(g, x_has_time);
        if (st == SNN_OK) st = snn_cuda_synchronize(g->c);
    }
    g->prof = 0;
    g->no_update = 0;
    if (st == SNN_OK) st = snn_cuda_upload(g->c, g->fwd_count, &fc, sizeof fc);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaEventDestroy(g->ev[0]);
    cudaEventDestroy(g->ev[1]);
    if (st != SNN_OK) return st;
    prof_line(&o, "%-44s %-26s %9s %9s\n", "module", "kind", "fwd ms", "bwd ms");
    prof_walk(g->root, &o, 0);
    prof_line(&o, "modules: forward %.3f ms + backward %.3f ms; one eager step %.3f ms (the rest: input, "
                  "loss, optimizer, weight copies, launch gaps)\n", o.fwd, o.bwd, (double)whole);
    return SNN_OK;
}
