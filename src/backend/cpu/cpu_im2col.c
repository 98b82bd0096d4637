/* im2col / col2im (see cpu_im2col.h). The valid output-column range of each kernel tap is
 * computed once per tap, so the inner loops have no bounds tests: a stride-1 row is a
 * memcpy between two zero-filled edges. */
#include "backend/cpu/cpu_im2col.h"

#include <string.h>

int snn_conv_geom_finish(snn_conv_geom *g) {
    int hn = g->H + 2 * g->ph - g->kh, wn = g->W + 2 * g->pw - g->kw;
    if (hn < 0 || wn < 0 || g->sh <= 0 || g->sw <= 0) {
        g->Ho = g->Wo = 0;
        return 0;
    }
    g->Ho = hn / g->sh + 1;
    g->Wo = wn / g->sw + 1;
    return 1;
}

/* Output columns ow in [*lo, *hi) read input column ow*sw - pw + j inside [0, W). */
static void tap_range(const snn_conv_geom *g, int j, int *lo, int *hi) {
    int off = g->pw - j; /* iw = ow*sw - off */
    int a = off > 0 ? (off + g->sw - 1) / g->sw : 0;
    int last = g->W - 1 + off; /* iw <= W-1  <=>  ow*sw <= W-1+off */
    int b = last >= 0 ? last / g->sw + 1 : 0;
    if (b > g->Wo) b = g->Wo;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

void snn_im2col_f32(const snn_conv_geom *g, const float *x, float *col, size_t ld) {
    const int Wo = g->Wo, sw = g->sw;
    for (int c = 0; c < g->C; c++) {
        const float *xc = x + (size_t)c * g->H * g->W;
        for (int i = 0; i < g->kh; i++) {
            for (int j = 0; j < g->kw; j++) {
                size_t r = ((size_t)c * g->kh + i) * g->kw + j;
                float *row = col + r * ld;
                int lo, hi;
                tap_range(g, j, &lo, &hi);
                for (int oh = 0; oh < g->Ho; oh++) {
                    float *o = row + (size_t)oh * Wo;
                    int ih = oh * g->sh - g->ph + i;
                    if (ih < 0 || ih >= g->H) {
                        memset(o, 0, sizeof(float) * (size_t)Wo);
                        continue;
                    }
                    const float *xr = xc + (size_t)ih * g->W;
                    const int off = g->pw - j; /* input column of ow is ow*sw - off */
                    for (int ow = 0; ow < lo; ow++) o[ow] = 0.0f;
                    if (sw == 1) {
                        if (hi > lo) memcpy(o + lo, xr + (lo - off), sizeof(float) * (size_t)(hi - lo));
                    } else {
                        for (int ow = lo; ow < hi; ow++) o[ow] = xr[ow * sw - off];
                    }
                    for (int ow = hi; ow < Wo; ow++) o[ow] = 0.0f;
                }
            }
        }
    }
}

void snn_col2im_f32(const snn_conv_geom *g, const float *col, size_t ld, float *dx) {
    const int Wo = g->Wo, sw = g->sw;
    memset(dx, 0, sizeof(float) * (size_t)g->C * g->H * g->W);
    for (int c = 0; c < g->C; c++) {
        float *dc = dx + (size_t)c * g->H * g->W;
        for (int i = 0; i < g->kh; i++) {
            for (int j = 0; j < g->kw; j++) {
                size_t r = ((size_t)c * g->kh + i) * g->kw + j;
                const float *row = col + r * ld;
                int lo, hi;
                tap_range(g, j, &lo, &hi);
                for (int oh = 0; oh < g->Ho; oh++) {
                    int ih = oh * g->sh - g->ph + i;
                    if (ih < 0 || ih >= g->H) continue;
                    const float *o = row + (size_t)oh * Wo;
                    float *dr = dc + (size_t)ih * g->W;
                    const int off = g->pw - j;
                    for (int ow = lo; ow < hi; ow++) dr[ow * sw - off] += o[ow];
                }
            }
        }
    }
}
