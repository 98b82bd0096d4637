/* FP8 quantise-dequantise on the CPU: the recipes' rules of src/precision/fp8_quant.c. */
#include <float.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"
#include "precision/fp8.h"

snn_status snn_cpu_fp8_qdq(const snn_backend *be, const snn_fp8_qdq *q, float *amax) {
    (void)be;
    if (!q || !amax || q->rows < 0 || q->cols < 0 || (q->rows && q->cols && (!q->x || !q->out)))
        return snn_error(SNN_E_INVALID, "fp8_qdq: bad arguments");
    float fmax = snn_fp8_max(q->fp8);
    if (fmax == 0.0f) return snn_error(SNN_E_INVALID, "fp8_qdq: %s is not an FP8 format", snn_dtype_name(q->fp8));
    size_t n = (size_t)q->rows * (size_t)q->cols;
    if (q->recipe == SNN_FP8_RECIPE_DELAYED || q->recipe == SNN_FP8_RECIPE_CURRENT) {
        float a = snn_fp8_amax(q->x, n), s = q->scale, d = q->scale_inv;
        if (q->recipe == SNN_FP8_RECIPE_CURRENT) {
            s = snn_fp8_scale_from_amax(a, fmax, q->pow2, FLT_MAX);
            d = 1.0f / s;
        }
        snn_fp8_quantize(q->fp8, q->x, n, s, d, NULL, q->out);
        *amax = a;
        return SNN_OK;
    }
    if (q->recipe != SNN_FP8_RECIPE_BLOCK && q->recipe != SNN_FP8_RECIPE_MXFP8)
        return snn_error(SNN_E_INVALID, "fp8_qdq: unknown recipe %d", (int)q->recipe);
    if (q->block_rows <= 0 || q->block_cols <= 0) return snn_error(SNN_E_INVALID, "fp8_qdq: block recipes need block sizes");
    snn_fp8_recipe_params p = {.recipe = q->recipe, .fwd_dtype = q->fp8, .bwd_dtype = q->fp8, .pow2_scales = q->pow2,
                               .block_len = q->block_rows > q->block_cols ? q->block_rows : q->block_cols,
                               .hp_dtype = q->hp_dtype};
    snn_fp8_scale_layout L = {q->block_rows, q->block_cols, (q->rows + q->block_rows - 1) / q->block_rows,
                              (q->cols + q->block_cols - 1) / q->block_cols};
    *amax = snn_fp8_quantize_blocks(&p, q->fp8, &L, q->x, q->rows, q->cols, q->out);
    return SNN_OK;
}
