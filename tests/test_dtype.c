/* Numeric formats: every code of every narrow format widened, narrowing checked against
 * an independent reference built here from the format definitions (sign / exponent /
 * mantissa fields decoded with ldexp, nearest value found by binary search over the
 * sorted value list with midpoints compared in double), the compiler's _Float16 cast,
 * array conversion, the E8M0 scale rules and the name parser. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype_internal.h"
#include "harness.h"
#include "snn/dtype.h"

/* ---------------------------------------------------------------------------------- */
/* Independent description of the formats (reference fp8.md §1.1)                     */

enum { K_IEEE, K_FN, K_E8M0 };
typedef struct {
    snn_dtype t;
    int bits, ebits, mbits, bias, kind;
    /* filled by build_grid: positive finite values in code order */
    double *vals;
    uint32_t *codes;
    int count;
    double next;        /* the grid value one step above max (not representable) */
} tfmt;

static tfmt F[] = {
    {SNN_F16, 16, 5, 10, 15, K_IEEE, 0, 0, 0, 0},
    {SNN_BF16, 16, 8, 7, 127, K_IEEE, 0, 0, 0, 0},
    {SNN_F8E4M3, 8, 4, 3, 7, K_FN, 0, 0, 0, 0},
    {SNN_F8E5M2, 8, 5, 2, 15, K_IEEE, 0, 0, 0, 0},
    {SNN_E8M0, 8, 8, 0, 127, K_E8M0, 0, 0, 0, 0},
};
enum { NF = sizeof F / sizeof F[0] };

static tfmt *fmt_of(snn_dtype t) {
    for (int i = 0; i < NF; i++)
        if (F[i].t == t) return &F[i];
    return NULL;
}

/* Value of a code from the field definitions; NaN for NaN codes. */
static double ref_decode(const tfmt *f, uint32_t code) {
    if (f->kind == K_E8M0) return code == 255 ? NAN : ldexp(1.0, (int)code - 127);
    uint32_t emax = (1u << f->ebits) - 1u, mmax = (1u << f->mbits) - 1u;
    int neg = (code >> (f->bits - 1)) & 1;
    uint32_t e = (code >> f->mbits) & emax, m = code & mmax;
    double v;
    if (f->kind == K_IEEE && e == emax) v = m == 0 ? INFINITY : NAN;
    else if (f->kind == K_FN && e == emax && m == mmax) v = NAN;
    else if (e == 0) v = ldexp((double)m, 1 - f->bias - f->mbits);
    else v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
    return neg ? -v : v;
}

static void build_grid(tfmt *f) {
    uint32_t ncodes = f->kind == K_E8M0 ? 256u : 1u << (f->bits - 1); /* non-negative half */
    f->vals = malloc(ncodes * sizeof(double));
    f->codes = malloc(ncodes * sizeof(uint32_t));
    f->count = 0;
    for (uint32_t c = 0; c < ncodes; c++) {
        double v = ref_decode(f, c);
        if (isnan(v) || isinf(v)) continue;
        f->vals[f->count] = v;
        f->codes[f->count] = c;
        f->count++;
    }
    /* The grid must be increasing with consecutive codes (what "ties to the even code"
     * relies on). */
    for (int i = 1; i < f->count; i++)
        CHECK(f->vals[i] > f->vals[i - 1] && f->codes[i] == f->codes[i - 1] + 1);
    double max = f->vals[f->count - 1];
    f->next = f->kind == K_E8M0 ? 2.0 * max : 2.0 * max - f->vals[f->count - 2];
}

static uint32_t sign_bit(const tfmt *f) { return f->kind == K_E8M0 ? 0 : 1u << (f->bits - 1); }
static uint32_t max_code(const tfmt *f) { return f->codes[f->count - 1]; }
static uint32_t ovf_code(const tfmt *f) {
    if (f->kind == K_IEEE) return ((1u << f->ebits) - 1u) << f->mbits; /* inf */
    return f->kind == K_FN ? (1u << (f->bits - 1)) - 1u : 0xFFu;         /* NaN */
}

#define REF_NAN 0xFFFFFFFFu /* "a NaN of the format" (checked per format below) */

/* Reference narrowing: nearest grid value by binary search, midpoint compared in double
 * (exact: neighbours differ in at most 25 significant bits), ties to the even code. */
static uint32_t ref_narrow(const tfmt *f, float x, int sat) {
    if (isnan(x)) return REF_NAN;
    int neg = signbit(x) != 0;
    double ax = fabs((double)x);
    if (f->kind == K_E8M0 && neg && ax != 0) return 0xFFu;
    uint32_t s = neg ? sign_bit(f) : 0;
    uint32_t code;
    if (isinf(ax) || ax >= f->next) goto overflow;
    if (ax < f->vals[0]) return f->codes[0]; /* E8M0: no zero, 2^-127 is nearest */
    int lo = 0, hi = f->count - 1;           /* largest i with vals[i] <= ax */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (f->vals[mid] <= ax) lo = mid;
        else hi = mid - 1;
    }
    double v0 = f->vals[lo];
    double v1 = lo + 1 < f->count ? f->vals[lo + 1] : f->next;
    uint32_t c0 = f->codes[lo], c1 = c0 + 1; /* c1 may be the virtual code above max */
    double midp = 0.5 * (v0 + v1);
    if (ax < midp) code = c0;
    else if (ax > midp) code = c1;
    else code = (c0 & 1u) ? c1 : c0;
    if (code == max_code(f) + 1) goto overflow;
    return s | code;
overflow:
    return s | (sat ? max_code(f) : ovf_code(f));
}

/* ---------------------------------------------------------------------------------- */
/* The library under test, dispatched by format                                       */

static float lib_widen(snn_dtype t, uint32_t c) {
    switch (t) {
    case SNN_F16: return snn_f16_to_f32((uint16_t)c);
    case SNN_BF16: return snn_bf16_to_f32((uint16_t)c);
    case SNN_F8E4M3: return snn_e4m3_to_f32((uint8_t)c);
    case SNN_F8E5M2: return snn_e5m2_to_f32((uint8_t)c);
    case SNN_E8M0: return snn_e8m0_to_f32((uint8_t)c);
    default: return NAN;
    }
}

static uint32_t lib_narrow(snn_dtype t, float x, int sat) {
    switch (t) {
    case SNN_F16: return sat ? snn_f32_to_f16_sat(x, 1) : snn_f32_to_f16(x);
    case SNN_BF16: return sat ? snn_f32_to_bf16_sat(x, 1) : snn_f32_to_bf16(x);
    case SNN_F8E4M3: return snn_f32_to_e4m3(x, sat);
    case SNN_F8E5M2: return snn_f32_to_e5m2(x, sat);
    case SNN_E8M0: return snn_f32_to_e8m0(x, sat);
    default: return 0;
    }
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Is `got` an acceptable result when the reference says "NaN" for input x? FP8 formats
 * give exactly 0x7F for any NaN (reference fp8.md §1.2), E8M0 0xFF; F16/BF16 keep the
 * sign and return a quiet NaN. */
static int nan_ok(const tfmt *f, float x, uint32_t got) {
    switch (f->t) {
    case SNN_F8E4M3:
    case SNN_F8E5M2: return got == 0x7Fu;
    case SNN_E8M0: return got == 0xFFu;
    default: {
        uint32_t sign = (uint32_t)(signbit(x) != 0) << 15;
        uint32_t quiet = f->t == SNN_F16 ? 0x7E00u : 0x7FC0u;
        return (got & 0x8000u) == sign && (got & quiet) == quiet;
    }
    }
}

static long narrow_fail_prints = 0;
static void check_narrow(const tfmt *f, float x) {
    for (int sat = 0; sat <= 1; sat++) {
        uint32_t want = ref_narrow(f, x, sat);
        uint32_t got = lib_narrow(f->t, x, sat);
        int ok = want == REF_NAN ? nan_ok(f, x, got) : got == want;
        snn_test_checks++;
        if (!ok) {
            snn_test_failures++;
            if (narrow_fail_prints++ < 20)
                fprintf(stderr, "narrow %s sat=%d x=%a (0x%08x): got 0x%x want 0x%x\n",
                        snn_dtype_name(f->t), sat, (double)x, fbits(x), got, want);
        }
        /* snn_round_to must be the widened result. */
        float rt = snn_round_to(f->t, x, sat);
        float wv = want == REF_NAN ? NAN : (float)ref_decode(f, want);
        int ok2 = isnan(wv) ? isnan(rt) : fbits(rt) == fbits(wv);
        snn_test_checks++;
        if (!ok2) {
            snn_test_failures++;
            if (narrow_fail_prints++ < 20)
                fprintf(stderr, "round_to %s sat=%d x=%a: got %a want %a\n",
                        snn_dtype_name(f->t), sat, (double)x, (double)rt, (double)wv);
        }
    }
}

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---------------------------------------------------------------------------------- */

static void test_widen_all_codes(void) {
    for (int i = 0; i < NF; i++) {
        const tfmt *f = &F[i];
        uint32_t n = 1u << f->bits;
        long bad = 0;
        for (uint32_t c = 0; c < n; c++) {
            double want = ref_decode(f, c);
            float got = lib_widen(f->t, c);
            int ok = isnan(want) ? isnan(got) : fbits(got) == fbits((float)want);
            if (!ok && bad++ < 5)
                fprintf(stderr, "widen %s 0x%x: got %a want %a\n", snn_dtype_name(f->t), c,
                        (double)got, want);
        }
        CHECK_MSG(bad == 0, "%s: %ld codes widened wrongly", snn_dtype_name(f->t), bad);
        CHECK(snn_dtype_max(f->t) == f->vals[f->count - 1]);
        CHECK(snn_dtype_size(f->t) == (size_t)f->bits / 8);
    }
    /* Counts from the spec (fp8.md §1.1). */
    CHECK(fmt_of(SNN_F8E4M3)->count == 127 && fmt_of(SNN_F8E5M2)->count == 124);
    CHECK(fmt_of(SNN_E8M0)->count == 255);
}

static void test_narrow_midpoints(void) {
    for (int i = 0; i < NF; i++) {
        const tfmt *f = &F[i];
        for (int k = 0; k < f->count; k++) {
            double v0 = f->vals[k], v1 = k + 1 < f->count ? f->vals[k + 1] : f->next;
            double mid = 0.5 * (v0 + v1);
            float m = (float)mid;
            CHECK(m == mid); /* every midpoint is an FP32 value */
            float xs[5] = {(float)v0, m, nextafterf(m, 0.0f), nextafterf(m, INFINITY),
                           nextafterf((float)v0, INFINITY)};
            for (int j = 0; j < 5; j++) {
                check_narrow(f, xs[j]);
                check_narrow(f, -xs[j]);
            }
        }
        /* Below the grid (E8M0) and the far ends. */
        float extra[] = {0.0f, FLT_TRUE_MIN, FLT_MIN, 0x1p-127f, 0x1.8p-127f, FLT_MAX,
                         (float)f->next, INFINITY, NAN, -NAN, bitsf(0x7F800001u),
                         bitsf(0xFFBFFFFFu), bitsf(0x7FFFFFFFu)};
        for (size_t j = 0; j < sizeof extra / sizeof extra[0]; j++) {
            check_narrow(f, extra[j]);
            check_narrow(f, -extra[j]);
        }
    }
    /* Worked edge cases stated in the spec (fp8.md §1.2), independent of our grids. */
    CHECK(snn_f32_to_e4m3(464.0f, 0) == 0x7E && snn_f32_to_e4m3(464.1f, 0) == 0x7F);
    CHECK(snn_f32_to_e4m3(460.0f, 1) == 0x7E && snn_f32_to_e4m3(-1e9f, 1) == 0xFE);
    CHECK(snn_f32_to_e4m3(0x1p-10f, 0) == 0x00 && snn_f32_to_e4m3(0x1.8p-10f, 0) == 0x01);
    CHECK(snn_f32_to_e4m3(-INFINITY, 0) == 0xFF && snn_f32_to_e4m3(INFINITY, 1) == 0x7E);
    CHECK(snn_f32_to_e5m2(61440.0f, 0) == 0x7C && snn_f32_to_e5m2(61440.0f, 1) == 0x7B);
    CHECK(snn_f32_to_e5m2(-INFINITY, 1) == 0xFB && snn_f32_to_e5m2(-NAN, 1) == 0x7F);
    CHECK(snn_f32_to_f16(65519.0f) == 0x7BFF && snn_f32_to_f16(65520.0f) == 0x7C00);
    CHECK(snn_f32_to_bf16(3.39e38f) == 0x7F7F && snn_f32_to_bf16(3.4e38f) == 0x7F80);
    CHECK(snn_e4m3_to_f32(0x38) == 1.0f && snn_e4m3_to_f32(0x7E) == 448.0f);
}

static void test_narrow_patterns(uint64_t seed) {
    /* (b) every 4099th FP32 bit pattern from a random start (4099 is odd, so the walk
     * visits all residues across runs), plus 2^20 random patterns. */
    uint32_t start = (uint32_t)(seed % 4099u);
    size_t n = 0;
    for (uint64_t p = start; p < (1ull << 32); p += 4099) {
        float x = bitsf((uint32_t)p);
        for (int i = 0; i < NF; i++) check_narrow(&F[i], x);
        n++;
    }
    for (int r = 0; r < (1 << 20); r++) {
        float x = bitsf((uint32_t)rnd());
        for (int i = 0; i < NF; i++) check_narrow(&F[i], x);
    }
    fprintf(stderr, "narrow: %zu strided + %d random patterns per format\n", n, 1 << 20);
}

#if defined(__FLT16_MAX__)
static long f16_cmp(float x) {
    _Float16 h = (_Float16)x;
    uint16_t hb;
    memcpy(&hb, &h, 2);
    uint16_t lib = snn_f32_to_f16(x);
    if (isnan(x)) return !(((lib & 0x7C00u) == 0x7C00u) && (lib & 0x3FFu));
    return lib != hb;
}
#endif

static void test_compiler_f16(uint64_t seed) {
#if defined(__FLT16_MAX__)
    /* (c) GCC's _Float16 conversion (F16C/AVX512-FP16 hardware or libgcc) is an
     * implementation we did not write. */
    long bad = 0, n = 0;
    for (uint64_t p = seed % 4099u; p < (1ull << 32); p += 4099, n++) bad += f16_cmp(bitsf((uint32_t)p));
    const tfmt *f = fmt_of(SNN_F16);
    for (int k = 0; k < f->count; k++) {
        float m = (float)(0.5 * (f->vals[k] + (k + 1 < f->count ? f->vals[k + 1] : f->next)));
        float xs[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int j = 0; j < 3; j++, n += 2) bad += f16_cmp(xs[j]) + f16_cmp(-xs[j]);
    }
    for (int r = 0; r < (1 << 20); r++, n++) bad += f16_cmp(bitsf((uint32_t)rnd()));
    CHECK_MSG(bad == 0, "%ld of %ld values differ from the _Float16 cast", bad, n);
    fprintf(stderr, "_Float16 cast compared on %ld values\n", n);
#else
    (void)seed;
    fprintf(stderr, "_Float16 not available: compiler comparison skipped\n");
#endif
#if defined(__BFLT16_MAX__)
    long bbad = 0;
    for (int r = 0; r < (1 << 20); r++) {
        float x = bitsf((uint32_t)rnd());
        __bf16 b = (__bf16)x;
        uint16_t bb;
        memcpy(&bb, &b, 2);
        uint16_t lib = snn_f32_to_bf16(x);
        bbad += isnan(x) ? !isnan(snn_bf16_to_f32(lib)) : lib != bb;
    }
    CHECK_MSG(bbad == 0, "%ld values differ from the __bf16 cast", bbad);
#endif
}

/* ---------------------------------------------------------------------------------- */
/* snn_convert                                                                        */

static const snn_dtype ALL[] = {SNN_F32, SNN_F16, SNN_BF16, SNN_F8E4M3, SNN_F8E5M2, SNN_E8M0};
enum { NALL = 6 };

static size_t tsize(snn_dtype t) { return t == SNN_F32 ? 4 : (size_t)fmt_of(t)->bits / 8; }

static uint32_t get_code(snn_dtype t, const void *p, size_t i) {
    switch (tsize(t)) {
    case 4: return ((const uint32_t *)p)[i];
    case 2: return ((const uint16_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* Random source data: F32 values spread over [2^-30, 2^30] with specials sprinkled in;
 * narrow formats get uniformly random codes. */
static void fill_src(snn_dtype t, void *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        if (t == SNN_F32) {
            float x = ldexpf(1.0f + (float)(r & 0xFFFFFF) * 0x1p-24f, (int)((r >> 24) % 61) - 30);
            if (r >> 63) x = -x;
            if (((r >> 32) & 63) == 0) x = bitsf((uint32_t)(r >> 30)); /* any pattern */
            ((float *)p)[i] = x;
        } else if (tsize(t) == 2) {
            ((uint16_t *)p)[i] = (uint16_t)r;
        } else {
            ((uint8_t *)p)[i] = (uint8_t)r;
        }
    }
}

static float src_value(snn_dtype t, const void *p, size_t i) {
    uint32_t c = get_code(t, p, i);
    return t == SNN_F32 ? bitsf(c) : (float)ref_decode(fmt_of(t), c);
}

/* Compare dst[i] with the reference conversion of src value x. */
static int convert_ok(snn_dtype dt, const void *dst, size_t i, float x, int sat) {
    uint32_t got = get_code(dt, dst, i);
    if (dt == SNN_F32) return isnan(x) ? isnan(bitsf(got)) : got == fbits(x);
    const tfmt *f = fmt_of(dt);
    uint32_t want = ref_narrow(f, x, sat);
    if (want == REF_NAN) return isnan(ref_decode(f, got));
    return got == want;
}

static void test_convert_arrays(void) {
    const size_t sizes[] = {1, 7, 1023, 1025, 3001, 70001}; /* the last one runs in parallel */
    const size_t nmax = 70001;
    void *src = malloc(nmax * 4), *dst = malloc(nmax * 4), *work = malloc(nmax * 4);
    for (int a = 0; a < NALL; a++)
        for (int b = 0; b < NALL; b++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
                for (int sat = 0; sat <= 1; sat++) {
                    snn_dtype st = ALL[a], dt = ALL[b];
                    size_t n = sizes[si];
                    fill_src(st, src, n);
                    if (dt == SNN_F32) snn_test_poison((float *)dst, n);
                    else memset(dst, sat ? 0xA5 : 0x5A, n * tsize(dt));
                    snn_status s = snn_convert(dt, dst, st, src, n, sat ? SNN_CONVERT_SATURATE : 0);
                    CHECK(s == SNN_OK);
                    long bad = 0;
                    for (size_t i = 0; i < n; i++) bad += !convert_ok(dt, dst, i, src_value(st, src, i), sat);
                    CHECK_MSG(bad == 0, "convert %s -> %s n=%zu sat=%d: %ld wrong",
                              snn_dtype_name(st), snn_dtype_name(dt), n, sat, bad);
                    /* In place, for formats of one size. */
                    if (tsize(st) == tsize(dt)) {
                        memcpy(work, src, n * tsize(st));
                        s = snn_convert(dt, work, st, work, n, sat ? SNN_CONVERT_SATURATE : 0);
                        CHECK(s == SNN_OK);
                        bad = 0;
                        for (size_t i = 0; i < n; i++) bad += !convert_ok(dt, work, i, src_value(st, src, i), sat);
                        CHECK_MSG(bad == 0, "in-place %s -> %s n=%zu sat=%d: %ld wrong",
                                  snn_dtype_name(st), snn_dtype_name(dt), n, sat, bad);
                    }
                }
    /* Error cases. */
    float x[4] = {1, 2, 3, 4};
    uint16_t h[8] = {0};
    snn_clear_error();
    CHECK(snn_convert(SNN_DTYPE_COUNT, h, SNN_F32, x, 4, 0) == SNN_E_INVALID);
    CHECK(snn_last_error()[0] != '\0');
    CHECK(snn_convert(SNN_F16, h, (snn_dtype)-1, x, 4, 0) == SNN_E_INVALID);
    CHECK(snn_convert(SNN_F16, h, (snn_dtype)99, x, 0, 0) == SNN_E_INVALID);
    CHECK(snn_convert(SNN_F16, NULL, SNN_F32, x, 4, 0) == SNN_E_INVALID);
    CHECK(snn_convert(SNN_F16, h, SNN_F32, NULL, 4, 0) == SNN_E_INVALID);
    CHECK(snn_convert(SNN_F16, NULL, SNN_F32, NULL, 0, 0) == SNN_OK);
    CHECK(snn_convert(SNN_F16, h, SNN_F32, x, 4, 2u) == SNN_E_INVALID);
    CHECK(snn_convert(SNN_F16, x, SNN_F32, x, 4, 0) == SNN_E_INVALID);     /* in place, sizes differ */
    CHECK(snn_convert(SNN_F16, h + 1, SNN_BF16, h, 4, 0) == SNN_E_INVALID); /* partial overlap */
    CHECK(snn_convert(SNN_F16, h + 4, SNN_BF16, h, 4, 0) == SNN_OK);        /* adjacent is fine */
    CHECK(snn_convert(SNN_F32, x, SNN_F32, x, 4, 0) == SNN_OK && x[3] == 4.0f);
    free(src);
    free(dst);
    free(work);
}

/* ---------------------------------------------------------------------------------- */
/* E8M0 scale rules (dtype_internal.h; fp8.md §1.4)                                   */

static double pow2tab[255]; /* 2^(e-127) */
static uint8_t ref_e8m0_ceil(double x) { /* smallest 2^(e-127) >= x, clamped */
    if (isnan(x) || x < 0) return 0xFF;
    for (int e = 0; e <= 254; e++)
        if (pow2tab[e] >= x) return (uint8_t)e;
    return 0xFE;
}
static uint8_t ref_e8m0_floor(double x) { /* largest 2^(e-127) <= x, clamped */
    if (isnan(x) || x < 0) return 0xFF;
    for (int e = 254; e >= 0; e--)
        if (pow2tab[e] <= x) return (uint8_t)e;
    return 0x00;
}

static void test_e8m0_scales(void) {
    for (int e = 0; e < 255; e++) pow2tab[e] = ldexp(1.0, e - 127);
    long bad = 0, n = 0;
    for (int r = 0; r < 200000; r++, n++) {
        /* non-negative patterns, half of them near the E8M0 grid */
        uint32_t u = (uint32_t)rnd() & 0x7FFFFFFFu;
        if (r & 1) u = ((uint32_t)(rnd() % 256) << 23) + (uint32_t)(rnd() % 5) - 2u;
        u &= 0x7FFFFFFFu;
        float x = bitsf(u);
        bad += snn_f32_to_e8m0_ceil(x) != (isinf(x) ? 0xFE : ref_e8m0_ceil(x));
        bad += snn_f32_to_e8m0_floor(x) != (isinf(x) ? 0xFE : ref_e8m0_floor(x));
    }
    CHECK_MSG(bad == 0, "e8m0 ceil/floor: %ld of %ld wrong", bad, n);
    CHECK(snn_f32_to_e8m0_ceil(-1.0f) == 0xFF && snn_f32_to_e8m0_ceil(-0.0f) == 0x00);
    CHECK(snn_f32_to_e8m0_floor(NAN) == 0xFF && snn_f32_to_e8m0_ceil(NAN) == 0xFF);

    /* NVIDIA rule: smallest X = 2^k with amax / X <= fmt_max (exact in double), for every
     * normal amax; and no element of the block is clipped. */
    const float fmaxv[2] = {448.0f, 57344.0f};
    bad = 0;
    for (int r = 0; r < 400000; r++) {
        float amax = bitsf(((uint32_t)(rnd() % 254 + 1) << 23) | ((uint32_t)rnd() & 0x7FFFFFu));
        if (r % 4 == 0) amax = ldexpf(fmaxv[r & 1], (int)(rnd() % 250) - 125); /* exact ratio */
        for (int k = 0; k < 2; k++) {
            uint8_t e = snn_e8m0_from_amax(amax, fmaxv[k]);
            uint8_t want = ref_e8m0_ceil((double)amax / fmaxv[k]);
            bad += e != want;
            if (e < 254) bad += (double)amax / ldexp(1.0, e - 127) > fmaxv[k];
        }
    }
    CHECK_MSG(bad == 0, "e8m0_from_amax: %ld wrong", bad);
    CHECK(snn_e8m0_from_amax(0.0f, 448.0f) == 0x00 && snn_e8m0_from_amax(NAN, 448.0f) == 0xFF);
    CHECK(snn_e8m0_from_amax(448.0f, 448.0f) == 127 && snn_e8m0_from_amax(449.0f, 448.0f) == 128);

    /* OCP rule: 2^(floor(log2 amax) - emax_elem), clamped. */
    bad = 0;
    for (int r = 0; r < 200000; r++) {
        float amax = bitsf((uint32_t)rnd() & 0x7F7FFFFFu);
        if (amax == 0) continue;
        int ex;
        frexp((double)amax, &ex); /* amax = f * 2^ex, f in [0.5, 1) */
        for (int emax = 8; emax <= 15; emax += 7) {
            int e = ex - 1 - emax + 127;
            e = e < 0 ? 0 : e > 254 ? 254 : e;
            bad += snn_e8m0_from_amax_ocp(amax, emax) != e;
        }
    }
    CHECK_MSG(bad == 0, "e8m0_from_amax_ocp: %ld wrong", bad);
    CHECK(snn_e8m0_from_amax_ocp(1.9f * 256.0f, 8) == 127); /* 486 > 448: clipped later */

    for (int e = 0; e < 255; e++) CHECK(ldexp((double)snn_e8m0_inv_scale((uint8_t)e), e - 127) == 1.0);
    CHECK(isnan(snn_e8m0_inv_scale(0xFF)));
}

/* ---------------------------------------------------------------------------------- */

static void test_names(void) {
    static const struct {
        const char *n;
        snn_dtype t;
    } ok[] = {
        {"f32", SNN_F32},           {"fp32", SNN_F32},         {"float32", SNN_F32},
        {"torch.float32", SNN_F32}, {"f16", SNN_F16},          {"fp16", SNN_F16},
        {"float16", SNN_F16},       {"half", SNN_F16},         {"bf16", SNN_BF16},
        {"bfloat16", SNN_BF16},     {"torch.bfloat16", SNN_BF16}, {"BF16", SNN_BF16},
        {"f8e4m3", SNN_F8E4M3},     {"float8_e4m3fn", SNN_F8E4M3}, {"e4m3", SNN_F8E4M3},
        {"Torch.Float8_E4M3FN", SNN_F8E4M3}, {"f8e5m2", SNN_F8E5M2}, {"float8_e5m2", SNN_F8E5M2},
        {"e5m2", SNN_F8E5M2},       {"torch.float8_e5m2", SNN_F8E5M2}, {"e8m0", SNN_E8M0},
        {"float8_e8m0fnu", SNN_E8M0}, {"torch.float8_e8m0fnu", SNN_E8M0}, {"HALF", SNN_F16},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snn_dtype t = SNN_DTYPE_COUNT;
        CHECK_MSG(snn_dtype_from_name(ok[i].n, &t) == SNN_OK && t == ok[i].t, "%s", ok[i].n);
    }
    const char *bad[] = {"fp8", "FP8", "torch.fp8", "f64", "", "float8", "bf", "torch."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snn_dtype t = SNN_F32;
        snn_clear_error();
        CHECK_MSG(snn_dtype_from_name(bad[i], &t) == SNN_E_INVALID, "%s", bad[i]);
        CHECK(snn_last_error()[0] != '\0');
    }
    snn_dtype t;
    snn_dtype_from_name("fp8", &t);
    CHECK(strstr(snn_last_error(), "float8_e4m3fn") && strstr(snn_last_error(), "float8_e5m2"));
    CHECK(snn_dtype_from_name(NULL, &t) == SNN_E_INVALID);
    CHECK(snn_dtype_from_name("f16", NULL) == SNN_E_INVALID);
    for (int i = 0; i < NALL; i++) {
        snn_dtype u = SNN_DTYPE_COUNT;
        CHECK(snn_dtype_from_name(snn_dtype_name(ALL[i]), &u) == SNN_OK && u == ALL[i]);
    }
    CHECK(snn_dtype_size(SNN_F32) == 4 && snn_dtype_max(SNN_F32) == FLT_MAX);
    CHECK(snn_dtype_size(SNN_DTYPE_COUNT) == 0 && snn_dtype_max((snn_dtype)-1) == 0.0);
    CHECK(strcmp(snn_dtype_name(SNN_DTYPE_COUNT), "unknown") == 0);
    CHECK(snn_round_to(SNN_F32, 0.1f, 0) == 0.1f);
}

int main(void) {
    uint64_t seed = snn_test_seed();
    rng_state = seed;
    for (int i = 0; i < NF; i++) build_grid(&F[i]);
    test_widen_all_codes();
    test_narrow_midpoints();
    test_narrow_patterns(seed);
    test_compiler_f16(seed);
    test_convert_arrays();
    test_e8m0_scales();
    test_names();
    for (int i = 0; i < NF; i++) {
        free(F[i].vals);
        free(F[i].codes);
    }
    return snn_test_finish("test_dtype");
}
