/* Precision configuration: every invalid configuration with its message and field name,
 * the normalisations of the SpikingJelly precision guide, JSON round trips, and the
 * config-related acceptance items of reference spikingjelly-core.md §6.11. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/error.h"
#include "snn/precision.h"

/* The error was SNN_E_INVALID (or want) and its message holds every substring given. */
static int msg_has(snn_status st, snn_status want, const char *a, const char *b, const char *c) {
    const char *m = snn_last_error();
    if (st != want) {
        fprintf(stderr, "  status %d (want %d), message: %s\n", (int)st, (int)want, m);
        return 0;
    }
    const char *subs[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (subs[i] && !strstr(m, subs[i])) {
            fprintf(stderr, "  message lacks \"%s\": %s\n", subs[i], m);
            return 0;
        }
    return 1;
}

static int bytes_all(const void *p, size_t n, unsigned char v) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != v) return 0;
    return 1;
}

/* ---- invalid configurations, through the constructor-like parser ---------------------- */

typedef struct {
    const char *mode, *recipe, *storage, *fwd, *bwd;
    const char *sub1, *sub2, *sub3; /* the field name is always one of them */
} parse_case;

static const parse_case bad_parse[] = {
    /* rule 1: mode (item 4: mode=None; removed fp8-te / fp8-torchao) */
    {NULL, NULL, NULL, NULL, NULL, "mode", "fp32, fp16, bf16, fp8", NULL},
    {"fp8-te", NULL, NULL, NULL, NULL, "mode", "was removed", "fp8_recipe="},
    {"fp8-torchao", NULL, NULL, NULL, NULL, "mode", "was removed", "mode='fp8'"},
    {"FP8-TE", NULL, NULL, NULL, NULL, "mode", "was removed", NULL},
    {"fp64", NULL, NULL, NULL, NULL, "mode", "'fp64'", "fp32, fp16, bf16, fp8"},
    {"bfloat16", NULL, NULL, NULL, NULL, "mode", "did you mean 'bf16'", NULL},
    {"half", NULL, NULL, NULL, NULL, "mode", "did you mean 'fp16'", NULL},
    {"", NULL, NULL, NULL, NULL, "mode", NULL, NULL},
    {"fp8 ", NULL, NULL, NULL, NULL, "mode", NULL, NULL},
    /* rule 2: recipe; it comes before rule 3 */
    {"fp8", "fancy", NULL, NULL, NULL, "Unsupported fp8_recipe", "'fancy'", NULL},
    {"bf16", "fancy", NULL, NULL, NULL, "Unsupported fp8_recipe", NULL, NULL},
    {"fp8", "tensorwise", NULL, NULL, NULL, "fp8_recipe", "'current'", NULL},
    /* rule 3 (item 4: mode=bf16, fp8_recipe=delayed); before rule 4 */
    {"bf16", "delayed", NULL, NULL, NULL, "fp8_recipe is only valid when mode='fp8'", NULL, NULL},
    {"fp32", "mxfp8", NULL, NULL, NULL, "fp8_recipe is only valid when mode='fp8'", NULL, NULL},
    {"fp16", "auto ", NULL, NULL, NULL, "Unsupported fp8_recipe", NULL, NULL},
    {"bf16", "delayed", NULL, "bf16", NULL, "fp8_recipe is only valid", NULL, NULL},
    /* rule 4 (item 4: triton_fwd=bf16 without storage) */
    {"fp32", NULL, NULL, "bf16", NULL, "neuron_fwd='bf16'", "neuron_storage", "triton_storage"},
    {"bf16", NULL, NULL, NULL, "fp16", "neuron_bwd='fp16'", "neuron_storage", "triton_storage"},
    {"fp8", "block", NULL, "fp8", "fp8", "neuron_fwd", "triton_storage", NULL},
    /* an unknown value without storage trips rule 4 first, as in the reference */
    {"fp32", NULL, NULL, "bogus", NULL, "neuron_fwd='bogus'", "triton_storage", NULL},
    /* rule 5 */
    {"fp32", NULL, "fp8", NULL, NULL, "neuron_storage='fp8' is ambiguous", "float8_e4m3fn", "float8_e5m2"},
    {"fp32", NULL, "FLOAT8", NULL, NULL, "neuron_storage", "ambiguous", NULL},
    {"fp32", NULL, "torch.fp8", NULL, NULL, "neuron_storage", "ambiguous", NULL},
    {"fp32", NULL, "torch.float8_e4m3fnuz", NULL, NULL, "unsupported neuron_storage", NULL, NULL},
    {"fp32", NULL, "none", NULL, NULL, "unsupported neuron_storage", NULL, NULL},
    {"fp32", NULL, "int8", NULL, NULL, "unsupported neuron_storage", "'int8'", NULL},
    {"fp32", NULL, "bf16", "fp64", NULL, "unsupported neuron_fwd", "fp8, fp16, bf16, fp32", NULL},
    {"fp32", NULL, "bf16", NULL, "tf32", "unsupported neuron_bwd", NULL, NULL},
    {"fp32", NULL, "float8_e4m3fn", "float8_e4m3fn", NULL, "neuron_fwd", "use 'fp8'", NULL},
    /* rule 6 (item 4: triton_storage=bf16, triton_bwd=fp8) */
    {"fp32", NULL, "bf16", NULL, "fp8", "FP8 Triton compute", "neuron_bwd='fp8'", "FP8 neuron storage"},
    {"bf16", NULL, "fp16", "fp8", NULL, "FP8 Triton compute", "neuron_fwd='fp8'", NULL},
    {"fp8", "current", "fp32", "fp8", "fp8", "FP8 neuron compute", "neuron_fwd", NULL},
};

static void test_bad_parse(void) {
    for (size_t i = 0; i < sizeof bad_parse / sizeof bad_parse[0]; i++) {
        const parse_case *c = &bad_parse[i];
        snn_precision_config out;
        memset(&out, 0xAB, sizeof out);
        snn_clear_error();
        snn_status st = snn_precision_config_parse(c->mode, c->recipe, c->storage, c->fwd, c->bwd, &out);
        CHECK_MSG(msg_has(st, SNN_E_INVALID, c->sub1, c->sub2, c->sub3), "bad_parse[%zu] mode=%s",
                  i, c->mode ? c->mode : "NULL");
        CHECK_MSG(bytes_all(&out, sizeof out, 0xAB), "bad_parse[%zu] wrote its output", i);
    }
}

/* ---- invalid values through the string setter (the CLI) ------------------------------- */

typedef struct {
    const char *field, *value, *sub1, *sub2;
} set_case;

static const set_case bad_set[] = {
    {"precision", "fp8-te", "mode", "was removed"},
    {"mode", "Float8", "mode", "did you mean 'fp8'"},
    {"fp8-recipe", "blockwise", "fp8_recipe", "'block'"},
    {"triton_storage", "fp8", "neuron_storage", "ambiguous"},
    {"neuron_storage", "float64", "neuron_storage", "float8_e5m2"},
    {"triton-fwd", "double", "neuron_fwd", "fp8, fp16, bf16, fp32"},
    {"neuron_bwd", "e5m2", "neuron_bwd", "use 'fp8'"},
    {"fp8_format", "e5m2", "fp8_format", "pure E5M2"},
    {"fp8_format", "mixed", "fp8_format", "hybrid or e4m3"},
    {"amax_history_len", "0", "amax_history_len", "[1, "},
    {"amax_history_len", "16x", "amax_history_len", "integer"},
    {"amax_history_len", "99999999999999", "amax_history_len", "integer"},
    {"amax_compute_algo", "mean", "amax_compute_algo", "max or most_recent"},
    {"margin", "-1", "margin", "[0, 126]"},
    {"margin", "127", "margin", "[0, 126]"},
    {"current_pow2_scales", "maybe", "current_pow2_scales", "true or false"},
    {"block-fp32-scales", "2", "block_fp32_scales", "true or false"},
    {"strictness", "strict", "unexpected keyword", "'strictness'"},
    {"device", "cuda", "unexpected keyword", "'device'"},
    {"fp8_autocast_dtype", "e4m3", "unexpected keyword", NULL},
    {"recipe", "delayed", "unexpected keyword", "'recipe'"},
    {"mode", NULL, "mode", "needs a value"},
};

static void test_bad_set(void) {
    for (size_t i = 0; i < sizeof bad_set / sizeof bad_set[0]; i++) {
        const set_case *c = &bad_set[i];
        snn_precision_config cfg = snn_precision_config_default(), before = cfg;
        snn_clear_error();
        snn_status st = snn_precision_config_set(&cfg, c->field, c->value);
        CHECK_MSG(msg_has(st, SNN_E_INVALID, c->sub1, c->sub2, NULL), "bad_set[%zu] %s=%s", i,
                  c->field, c->value ? c->value : "NULL");
        CHECK_MSG(memcmp(&cfg, &before, sizeof cfg) == 0, "bad_set[%zu] changed the config", i);
    }
}

/* ---- invalid structs through validate ------------------------------------------------- */

static void test_bad_struct(void) {
    struct {
        snn_precision_config c;
        const char *sub1, *sub2;
    } t[24];
    int n = 0;
    snn_precision_config d = snn_precision_config_default(), c;
#define ADD(expr, a, b) (c = d, (expr), t[n].c = c, t[n].sub1 = (a), t[n].sub2 = (b), n++)
    ADD(c.mode = (snn_precision_mode)7, "precision mode 7", "fp32, fp16, bf16, fp8");
    ADD(c.mode = (snn_precision_mode)-1, "precision mode -1", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.fp8_recipe = (snn_fp8_recipe)9), "Unsupported fp8_recipe 9", NULL);
    ADD(c.fp8_recipe = SNN_FP8_RECIPE_BLOCK, "fp8_recipe is only valid when mode='fp8'", "mode='fp32'");
    ADD((c.mode = SNN_PRECISION_FP16, c.fp8_recipe = SNN_FP8_RECIPE_CURRENT), "fp8_recipe is only valid", "'current'");
    ADD(c.neuron_fwd = SNN_NEURON_COMPUTE_BF16, "neuron_fwd='bf16'", "triton_storage");
    ADD(c.neuron_bwd = SNN_NEURON_COMPUTE_FP8, "neuron_bwd='fp8'", "neuron_storage");
    ADD(c.neuron_storage = (snn_neuron_storage)6, "neuron_storage 6", "float8_e4m3fn");
    ADD((c.neuron_storage = SNN_NEURON_STORAGE_FP16, c.neuron_fwd = (snn_neuron_compute)4), "neuron_fwd 4", NULL);
    ADD((c.neuron_storage = SNN_NEURON_STORAGE_FP16, c.neuron_bwd = (snn_neuron_compute)-2), "neuron_bwd -2", NULL);
    ADD((c.neuron_storage = SNN_NEURON_STORAGE_FP32, c.neuron_fwd = SNN_NEURON_COMPUTE_FP8), "FP8 Triton compute", "neuron_fwd='fp8'");
    ADD((c.neuron_storage = SNN_NEURON_STORAGE_BF16, c.neuron_bwd = SNN_NEURON_COMPUTE_FP8), "FP8 neuron storage", "got 'bf16'");
    ADD((c.mode = SNN_PRECISION_FP8, c.fp8_format = (snn_fp8_format)3), "fp8_format 3", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.amax_compute_algo = (snn_amax_compute)2), "amax_compute_algo 2", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.amax_history_len = -5), "amax_history_len must be in", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.margin = 200), "margin must be in [0, 126]", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.current_pow2_scales = 2), "current_pow2_scales must be 0 or 1", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.fp8_recipe = SNN_FP8_RECIPE_CURRENT, c.amax_history_len = 16),
        "amax_history_len only applies to fp8_recipe='delayed'", "'current'");
    ADD((c.mode = SNN_PRECISION_FP8, c.fp8_recipe = SNN_FP8_RECIPE_MXFP8, c.margin = 1), "margin only applies", "'mxfp8'");
    ADD((c.mode = SNN_PRECISION_FP8, c.fp8_recipe = SNN_FP8_RECIPE_BLOCK, c.amax_compute_algo = SNN_AMAX_COMPUTE_MOST_RECENT),
        "amax_compute_algo only applies", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.fp8_recipe = SNN_FP8_RECIPE_DELAYED, c.block_fp32_scales = 1),
        "block_fp32_scales only applies to fp8_recipe='block'", NULL);
    ADD((c.mode = SNN_PRECISION_FP8, c.fp8_recipe = SNN_FP8_RECIPE_BLOCK, c.current_pow2_scales = 1),
        "current_pow2_scales only applies", "'block'");
    ADD((c.mode = SNN_PRECISION_BF16, c.fp8_format = SNN_FP8_FORMAT_HYBRID), "fp8_format is an FP8 recipe setting", "mode='bf16'");
    ADD((c.mode = SNN_PRECISION_FP16, c.amax_history_len = 1), "amax_history_len is an FP8 recipe setting", NULL);
#undef ADD
    for (int i = 0; i < n; i++) {
        snn_clear_error();
        CHECK_MSG(msg_has(snn_precision_config_validate(&t[i].c), SNN_E_INVALID, t[i].sub1, t[i].sub2, NULL),
                  "bad_struct[%d]", i);
        char buf[512];
        CHECK_MSG(snn_precision_config_to_json(&t[i].c, buf, sizeof buf) == SNN_E_INVALID,
                  "bad_struct[%d] serialised", i);
    }
    CHECK(snn_precision_config_validate(NULL) == SNN_E_INVALID);
}

/* ---- invalid JSON --------------------------------------------------------------------- */

static void test_bad_json(void) {
    static const struct {
        const char *json;
        snn_status st;
        const char *sub1, *sub2;
    } t[] = {
        /* item 5: removed fields are unexpected keywords (and so is "precision") */
        {"{\"strictness\":\"warn\"}", SNN_E_INVALID, "unexpected keyword", "'strictness'"},
        {"{\"mode\":\"fp8\",\"device\":\"cuda\"}", SNN_E_INVALID, "unexpected keyword", "'device'"},
        {"{\"fp8_autocast_dtype\":\"e4m3\"}", SNN_E_INVALID, "unexpected keyword", "'fp8_autocast_dtype'"},
        {"{\"precision\":\"bf16\"}", SNN_E_INVALID, "unexpected keyword", "'precision'"},
        {"{\"colour\":1}", SNN_E_INVALID, "unexpected keyword", "'colour'"},
        {"{\"mode\":null}", SNN_E_INVALID, "mode", NULL},
        {"{\"mode\":3}", SNN_E_INVALID, "mode must be a JSON string", NULL},
        {"{\"mode\":\"fp8-torchao\"}", SNN_E_INVALID, "mode", "was removed"},
        {"{\"fp8_recipe\":\"delayed\",\"mode\":\"bf16\"}", SNN_E_INVALID, "fp8_recipe is only valid", NULL},
        {"{\"mode\":\"bf16\",\"fp8_recipe\":\"x\"}", SNN_E_INVALID, "Unsupported fp8_recipe", NULL},
        {"{\"neuron_fwd\":\"bf16\",\"triton_fwd\":\"bf16\"}", SNN_E_INVALID, "neuron_fwd twice", NULL},
        {"{\"triton_fwd\":\"bf16\"}", SNN_E_INVALID, "neuron_fwd='bf16'", "triton_storage"},
        {"{\"triton_storage\":\"bf16\",\"triton_bwd\":\"fp8\"}", SNN_E_INVALID, "FP8 Triton compute", NULL},
        {"{\"neuron_storage\":\"fp8\"}", SNN_E_INVALID, "ambiguous", NULL},
        {"{\"neuron_storage\":1}", SNN_E_INVALID, "neuron_storage must be a JSON string or null", NULL},
        {"{\"mode\":\"fp8\",\"amax_history_len\":\"16\"}", SNN_E_INVALID, "amax_history_len must be a JSON integer", NULL},
        {"{\"mode\":\"fp8\",\"amax_history_len\":2.5}", SNN_E_INVALID, "amax_history_len must be a JSON integer", NULL},
        {"{\"mode\":\"fp8\",\"amax_history_len\":0}", SNN_E_INVALID, "amax_history_len", NULL},
        {"{\"mode\":\"fp8\",\"margin\":true}", SNN_E_INVALID, "margin must be a JSON integer", NULL},
        {"{\"mode\":\"fp8\",\"block_fp32_scales\":1}", SNN_E_INVALID, "block_fp32_scales must be true or false", NULL},
        {"{\"mode\":\"fp8\",\"fp8_format\":\"e5m2\"}", SNN_E_INVALID, "pure E5M2", NULL},
        {"{\"mode\":\"fp8\",\"fp8_recipe\":\"current\",\"margin\":2}", SNN_E_INVALID, "margin only applies", NULL},
        {"{\"mode\":\"fp32\",\"fp8_format\":\"e4m3\"}", SNN_E_INVALID, "fp8_format is an FP8 recipe setting", NULL},
        {"[\"fp8\"]", SNN_E_FORMAT, "not a JSON object", NULL},
        {"{\"mode\":\"fp8\"", SNN_E_FORMAT, "not a JSON object", NULL},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        snn_precision_config out;
        memset(&out, 0xCD, sizeof out);
        snn_clear_error();
        snn_status st = snn_precision_config_from_json(t[i].json, &out);
        CHECK_MSG(msg_has(st, t[i].st, t[i].sub1, t[i].sub2, NULL), "bad_json[%zu] %s", i, t[i].json);
        CHECK_MSG(bytes_all(&out, sizeof out, 0xCD), "bad_json[%zu] wrote its output", i);
    }
}

/* ---- valid configurations and their normal forms ------------------------------------- */

static void test_valid(void) {
    snn_precision_config c;
    /* item 2: from_any(m).mode == m for the four modes; the string is lower-cased */
    static const char *const modes[] = {"fp32", "fp16", "bf16", "fp8"};
    static const char *const upper[] = {"FP32", "Fp16", "BF16", "fP8"};
    for (int i = 0; i < 4; i++) {
        CHECK(snn_precision_config_parse(modes[i], NULL, NULL, NULL, NULL, &c) == SNN_OK);
        CHECK(strcmp(snn_precision_mode_name(c.mode), modes[i]) == 0);
        CHECK(c.fp8_recipe == SNN_FP8_RECIPE_AUTO && c.neuron_storage == SNN_NEURON_STORAGE_UNSET);
        CHECK(c.neuron_fwd == SNN_NEURON_COMPUTE_FP32 && c.neuron_bwd == SNN_NEURON_COMPUTE_FP32);
        CHECK(snn_precision_config_parse(upper[i], NULL, NULL, NULL, NULL, &c) == SNN_OK);
        CHECK(strcmp(snn_precision_mode_name(c.mode), modes[i]) == 0);
    }
    /* item 3: neuron fields normalise ("torch." dropped, lower-cased) */
    static const struct {
        const char *in, *out;
    } st[] = {{"torch.float8_e4m3fn", "float8_e4m3fn"}, {"BF16", "bf16"}, {"FP16", "fp16"},
              {"bfloat16", "bf16"}, {"torch.bfloat16", "bf16"}, {"half", "fp16"},
              {"float16", "fp16"}, {"float32", "fp32"}, {"float", "fp32"}, {"torch.float32", "fp32"},
              {"Torch.Float8_E5M2", "float8_e5m2"}, {"fp8_e4m3fn", "float8_e4m3fn"},
              {"e4m3fn", "float8_e4m3fn"}, {"fp8_e5m2", "float8_e5m2"}, {"E5M2", "float8_e5m2"}};
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        snn_status s = snn_precision_config_parse("fp32", NULL, st[i].in, NULL, NULL, &c);
        CHECK_MSG(s == SNN_OK && strcmp(snn_neuron_storage_name(c.neuron_storage), st[i].out) == 0,
                  "storage %s -> %s (%s)", st[i].in, st[i].out, snn_last_error());
    }
    static const struct {
        const char *in, *out;
    } cp[] = {{"FP16", "fp16"}, {"half", "fp16"}, {"torch.float16", "fp16"}, {"BFloat16", "bf16"},
              {"float", "fp32"}, {"torch.float32", "fp32"}, {"FP8", "fp8"}, {"float8", "fp8"}};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++) {
        snn_status s = snn_precision_config_parse("bf16", NULL, "float8_e5m2", cp[i].in, cp[i].in, &c);
        CHECK_MSG(s == SNN_OK && strcmp(snn_neuron_compute_name(c.neuron_fwd), cp[i].out) == 0 &&
                      c.neuron_fwd == c.neuron_bwd,
                  "compute %s -> %s (%s)", cp[i].in, cp[i].out, snn_last_error());
    }
    /* fp32 aliases need no storage (rule 4 compares values, not spellings) */
    CHECK(snn_precision_config_parse("fp32", NULL, NULL, "float32", "FP32", &c) == SNN_OK);
    /* the guide's example: BF16 layers, BF16 neuron storage/forward, FP32 backward */
    CHECK(snn_precision_config_parse("bf16", NULL, "bf16", "bf16", "fp32", &c) == SNN_OK);
    CHECK(c.mode == SNN_PRECISION_BF16 && c.neuron_storage == SNN_NEURON_STORAGE_BF16 &&
          c.neuron_fwd == SNN_NEURON_COMPUTE_BF16 && c.neuron_bwd == SNN_NEURON_COMPUTE_FP32);
    /* item 25's recipes are all valid with fp8 */
    static const char *const recipes[] = {"auto", "delayed", "current", "block", "mxfp8"};
    static const char *const recipes_up[] = {"AUTO", "Delayed", "CURRENT", "Block", "MXFP8"};
    for (int i = 0; i < 5; i++) {
        CHECK(snn_precision_config_parse("fp8", recipes[i], NULL, NULL, NULL, &c) == SNN_OK);
        CHECK(strcmp(snn_fp8_recipe_name(c.fp8_recipe), recipes[i]) == 0);
        CHECK(snn_precision_config_parse("FP8", recipes_up[i], NULL, NULL, NULL, &c) == SNN_OK &&
              strcmp(snn_fp8_recipe_name(c.fp8_recipe), recipes[i]) == 0);
    }
    /* FP8 neuron arithmetic runs in the storage's FP8 format (§5.3) */
    CHECK(snn_precision_config_parse("fp16", NULL, "float8_e5m2", "fp8", "fp32", &c) == SNN_OK);
    CHECK(snn_neuron_compute_dtype(c.neuron_fwd, c.neuron_storage) == SNN_F8E5M2);
    CHECK(snn_neuron_compute_dtype(c.neuron_bwd, c.neuron_storage) == SNN_F32);
    CHECK(snn_neuron_storage_dtype(c.neuron_storage) == SNN_F8E5M2);
    CHECK(snn_neuron_compute_dtype(SNN_NEURON_COMPUTE_FP8, SNN_NEURON_STORAGE_E4M3) == SNN_F8E4M3);
    CHECK(snn_neuron_storage_dtype(SNN_NEURON_STORAGE_UNSET) == SNN_F32);
    CHECK(snn_neuron_storage_dtype(SNN_NEURON_STORAGE_BF16) == SNN_BF16);

    /* a zero struct is the default config */
    snn_precision_config z;
    memset(&z, 0, sizeof z);
    CHECK(snn_precision_config_validate(&z) == SNN_OK);
    snn_precision_config d = snn_precision_config_default();
    CHECK(d.mode == SNN_PRECISION_FP32 && d.amax_history_len == 1024 && d.margin == 0);
    char a[512], b[512];
    CHECK(snn_precision_config_to_json(&z, a, sizeof a) == SNN_OK);
    CHECK(snn_precision_config_to_json(&d, b, sizeof b) == SNN_OK && strcmp(a, b) == 0);
    /* TE's recipe defaults are the knob defaults: history 1024, "max", margin 0 */
    CHECK(strcmp(b, "{\"mode\":\"fp32\",\"fp8_recipe\":\"auto\",\"neuron_storage\":null,"
                    "\"neuron_fwd\":\"fp32\",\"neuron_bwd\":\"fp32\",\"fp8_format\":\"default\","
                    "\"amax_history_len\":1024,\"amax_compute_algo\":\"max\",\"margin\":0,"
                    "\"current_pow2_scales\":false,\"block_fp32_scales\":false}") == 0);
    /* an explicit default-valued knob is fine with another recipe */
    c = d;
    c.mode = SNN_PRECISION_FP8;
    c.fp8_recipe = SNN_FP8_RECIPE_CURRENT;
    c.amax_history_len = 1024;
    c.current_pow2_scales = 1;
    c.fp8_format = SNN_FP8_FORMAT_E4M3;
    CHECK(snn_precision_config_validate(&c) == SNN_OK);
    c.fp8_recipe = SNN_FP8_RECIPE_AUTO; /* auto may resolve to any recipe: knobs allowed */
    c.amax_history_len = 16;
    c.block_fp32_scales = 1;
    CHECK(snn_precision_config_validate(&c) == SNN_OK);
    /* buffer too small */
    CHECK(snn_precision_config_to_json(&d, a, 40) == SNN_E_INVALID && strstr(snn_last_error(), "too small"));
}

/* ---- the setter (CLI) ----------------------------------------------------------------- */

static void test_setter(void) {
    snn_precision_config c = snn_precision_config_default();
    CHECK(snn_precision_config_set(&c, "precision", "FP8") == SNN_OK && c.mode == SNN_PRECISION_FP8);
    CHECK(snn_precision_config_set(&c, "fp8-recipe", "Delayed") == SNN_OK && c.fp8_recipe == SNN_FP8_RECIPE_DELAYED);
    CHECK(snn_precision_config_set(&c, "triton-storage", "torch.float8_e4m3fn") == SNN_OK &&
          c.neuron_storage == SNN_NEURON_STORAGE_E4M3);
    CHECK(snn_precision_config_set(&c, "TRITON_FWD", "fp8") == SNN_OK && c.neuron_fwd == SNN_NEURON_COMPUTE_FP8);
    CHECK(snn_precision_config_set(&c, "neuron-bwd", "bfloat16") == SNN_OK && c.neuron_bwd == SNN_NEURON_COMPUTE_BF16);
    CHECK(snn_precision_config_set(&c, "amax-history-len", "16") == SNN_OK && c.amax_history_len == 16);
    CHECK(snn_precision_config_set(&c, "amax_compute_algo", "most-recent") == SNN_OK &&
          c.amax_compute_algo == SNN_AMAX_COMPUTE_MOST_RECENT);
    CHECK(snn_precision_config_set(&c, "margin", "3") == SNN_OK && c.margin == 3);
    CHECK(snn_precision_config_set(&c, "fp8_format", "E4M3") == SNN_OK && c.fp8_format == SNN_FP8_FORMAT_E4M3);
    CHECK(snn_precision_config_validate(&c) == SNN_OK);
    /* the setter checks values only; validate catches the combination */
    CHECK(snn_precision_config_set(&c, "mode", "bf16") == SNN_OK);
    CHECK(msg_has(snn_precision_config_validate(&c), SNN_E_INVALID, "fp8_recipe is only valid", NULL, NULL));
    CHECK(snn_precision_config_set(&c, "fp8_recipe", "auto") == SNN_OK);
    CHECK(msg_has(snn_precision_config_validate(&c), SNN_E_INVALID, "is an FP8 recipe setting", NULL, NULL));
    c.fp8_format = SNN_FP8_FORMAT_DEFAULT;
    c.amax_history_len = 0;
    c.amax_compute_algo = SNN_AMAX_COMPUTE_MAX;
    c.margin = 0;
    CHECK(snn_precision_config_validate(&c) == SNN_OK);
    CHECK(snn_precision_config_set(&c, "neuron_storage", "None") == SNN_OK &&
          c.neuron_storage == SNN_NEURON_STORAGE_UNSET);
    CHECK(msg_has(snn_precision_config_validate(&c), SNN_E_INVALID, "neuron_fwd='fp8'", "triton_storage", NULL));
    CHECK(snn_precision_config_set(&c, "current_pow2_scales", "true") == SNN_OK && c.current_pow2_scales == 1);
    CHECK(snn_precision_config_set(&c, "current_pow2_scales", "off") == SNN_OK && c.current_pow2_scales == 0);
    CHECK(snn_precision_config_set(NULL, "mode", "fp8") == SNN_E_INVALID);
}

/* ---- JSON round trips of random valid configs ------------------------------------------ */

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void test_json_roundtrip(uint64_t seed) {
    static const char *const keys[] = {"\"mode\"", "\"fp8_recipe\"", "\"neuron_storage\"",
                                       "\"neuron_fwd\"", "\"neuron_bwd\"", "\"fp8_format\"",
                                       "\"amax_history_len\"", "\"amax_compute_algo\"", "\"margin\"",
                                       "\"current_pow2_scales\"", "\"block_fp32_scales\""};
    uint64_t s = seed | 1;
    int valid = 0;
    for (int it = 0; it < 4000; it++) {
        snn_precision_config c = snn_precision_config_default();
        c.mode = (snn_precision_mode)(rnd(&s) % 4);
        c.fp8_recipe = (snn_fp8_recipe)(rnd(&s) % 5);
        c.neuron_storage = (snn_neuron_storage)(rnd(&s) % 6);
        c.neuron_fwd = (snn_neuron_compute)(rnd(&s) % 4);
        c.neuron_bwd = (snn_neuron_compute)(rnd(&s) % 4);
        if (rnd(&s) % 2) c.fp8_format = (snn_fp8_format)(rnd(&s) % 3);
        if (rnd(&s) % 4 == 0) c.amax_history_len = 1 + (int)(rnd(&s) % 2048);
        if (rnd(&s) % 4 == 0) c.amax_compute_algo = SNN_AMAX_COMPUTE_MOST_RECENT;
        if (rnd(&s) % 4 == 0) c.margin = (int)(rnd(&s) % 8);
        if (rnd(&s) % 4 == 0) c.current_pow2_scales = 1;
        if (rnd(&s) % 4 == 0) c.block_fp32_scales = 1;
        if (snn_precision_config_validate(&c) != SNN_OK) continue;
        valid++;
        char js[512], js2[512];
        snn_precision_config back;
        memset(&back, 0x5A, sizeof back);
        CHECK(snn_precision_config_to_json(&c, js, sizeof js) == SNN_OK);
        CHECK_MSG(snn_precision_config_from_json(js, &back) == SNN_OK, "%s: %s", js, snn_last_error());
        CHECK(snn_precision_config_to_json(&back, js2, sizeof js2) == SNN_OK && strcmp(js, js2) == 0);
        CHECK(back.mode == c.mode && back.fp8_recipe == c.fp8_recipe &&
              back.neuron_storage == c.neuron_storage && back.neuron_fwd == c.neuron_fwd &&
              back.neuron_bwd == c.neuron_bwd && back.fp8_format == c.fp8_format &&
              back.amax_compute_algo == c.amax_compute_algo && back.margin == c.margin &&
              back.current_pow2_scales == c.current_pow2_scales &&
              back.block_fp32_scales == c.block_fp32_scales &&
              back.amax_history_len == (c.amax_history_len ? c.amax_history_len : 1024));
        /* stable key order */
        const char *prev = js;
        for (int k = 0; k < 11; k++) {
            const char *p = strstr(js, keys[k]);
            CHECK_MSG(p && p >= prev, "key %s out of order in %s", keys[k], js);
            if (p) prev = p;
        }
        /* the same config through the string setter, field by field, from the JSON names */
        snn_precision_config viaset = snn_precision_config_default();
        CHECK(snn_precision_config_set(&viaset, "mode", snn_precision_mode_name(c.mode)) == SNN_OK);
        CHECK(snn_precision_config_set(&viaset, "fp8_recipe", snn_fp8_recipe_name(c.fp8_recipe)) == SNN_OK);
        const char *sn = snn_neuron_storage_name(c.neuron_storage);
        CHECK(snn_precision_config_set(&viaset, "triton_storage", sn ? sn : "none") == SNN_OK);
        CHECK(snn_precision_config_set(&viaset, "triton_fwd", snn_neuron_compute_name(c.neuron_fwd)) == SNN_OK);
        CHECK(snn_precision_config_set(&viaset, "triton_bwd", snn_neuron_compute_name(c.neuron_bwd)) == SNN_OK);
        if (c.fp8_format) CHECK(snn_precision_config_set(&viaset, "fp8_format", snn_fp8_format_name(c.fp8_format)) == SNN_OK);
        char num[16];
        snprintf(num, sizeof num, "%d", c.amax_history_len ? c.amax_history_len : 1024);
        CHECK(snn_precision_config_set(&viaset, "amax_history_len", num) == SNN_OK);
        CHECK(snn_precision_config_set(&viaset, "amax_compute_algo", snn_amax_compute_name(c.amax_compute_algo)) == SNN_OK);
        snprintf(num, sizeof num, "%d", c.margin);
        CHECK(snn_precision_config_set(&viaset, "margin", num) == SNN_OK);
        CHECK(snn_precision_config_set(&viaset, "current_pow2_scales", c.current_pow2_scales ? "1" : "0") == SNN_OK);
        CHECK(snn_precision_config_set(&viaset, "block_fp32_scales", c.block_fp32_scales ? "true" : "false") == SNN_OK);
        CHECK(snn_precision_config_to_json(&viaset, js2, sizeof js2) == SNN_OK && strcmp(js, js2) == 0);
    }
    CHECK(valid > 200);
    /* triton_* keys are accepted; omitted keys take defaults; key order does not matter */
    snn_precision_config c;
    CHECK(snn_precision_config_from_json("{\"triton_bwd\":\"fp32\",\"triton_fwd\":\"BF16\","
                                         "\"triton_storage\":\"torch.bfloat16\",\"mode\":\"bf16\"}", &c) == SNN_OK);
    CHECK(c.mode == SNN_PRECISION_BF16 && c.neuron_storage == SNN_NEURON_STORAGE_BF16 &&
          c.neuron_fwd == SNN_NEURON_COMPUTE_BF16 && c.amax_history_len == 1024);
    CHECK(snn_precision_config_from_json("{}", &c) == SNN_OK && c.mode == SNN_PRECISION_FP32);
    CHECK(snn_precision_config_from_json("{\"neuron_storage\":null,\"mode\":\"fp8\",\"fp8_recipe\":\"delayed\","
                                         "\"amax_history_len\":16,\"margin\":1}", &c) == SNN_OK);
    CHECK(c.amax_history_len == 16 && c.margin == 1 && c.fp8_recipe == SNN_FP8_RECIPE_DELAYED);
}

/* ---- acceptance items of spikingjelly-core.md §6.11 that concern the config ----------- */

static void test_acceptance(void) {
    snn_precision_config c;
    /* item 1 (public surface exactly PrecisionArtifacts, PrecisionConfig,
     * prepare_model_for_precision): in C the surface is include/snn/precision.h plus
     * snn_prepare_model_for_precision (integrator); nothing to check at run time.
     * Items 2, 3, 4, 5: test_valid, test_bad_parse, test_bad_json above; item 4 again here
     * in its exact form. */
    CHECK(msg_has(snn_precision_config_parse(NULL, NULL, NULL, NULL, NULL, &c), SNN_E_INVALID, "mode", NULL, NULL));
    CHECK(msg_has(snn_precision_config_parse("fp8-te", NULL, NULL, NULL, NULL, &c), SNN_E_INVALID, "mode", NULL, NULL));
    CHECK(msg_has(snn_precision_config_parse("fp8-torchao", NULL, NULL, NULL, NULL, &c), SNN_E_INVALID, "mode", NULL, NULL));
    CHECK(msg_has(snn_precision_config_parse("bf16", "delayed", NULL, NULL, NULL, &c), SNN_E_INVALID, "fp8_recipe", NULL, NULL));
    CHECK(msg_has(snn_precision_config_parse("fp32", NULL, NULL, "bf16", NULL, &c), SNN_E_INVALID, "triton_storage", NULL, NULL));
    CHECK(msg_has(snn_precision_config_parse("fp32", NULL, "bf16", NULL, "fp8", &c), SNN_E_INVALID, "FP8 Triton compute", NULL, NULL));
    /* item 5 with every removed field */
    CHECK(msg_has(snn_precision_config_from_json("{\"strictness\":\"strict\"}", &c), SNN_E_INVALID, "unexpected keyword", NULL, NULL));
    CHECK(msg_has(snn_precision_config_from_json("{\"device\":\"cpu\"}", &c), SNN_E_INVALID, "unexpected keyword", NULL, NULL));
    CHECK(msg_has(snn_precision_config_from_json("{\"fp8_autocast_dtype\":\"x\"}", &c), SNN_E_INVALID, "unexpected keyword", NULL, NULL));
    /* items 6, 7, 11 (config side): fp32 and bf16 have no loss scaler; fp16 does. */
    CHECK(snn_precision_config_parse("fp32", NULL, NULL, NULL, NULL, &c) == SNN_OK && !snn_precision_config_uses_loss_scaler(&c));
    CHECK(snn_precision_config_parse("bf16", NULL, NULL, NULL, NULL, &c) == SNN_OK && !snn_precision_config_uses_loss_scaler(&c));
    CHECK(snn_precision_config_parse("fp16", NULL, NULL, NULL, NULL, &c) == SNN_OK && snn_precision_config_uses_loss_scaler(&c));
    CHECK(snn_precision_config_parse("fp8", NULL, NULL, NULL, NULL, &c) == SNN_OK && !snn_precision_config_uses_loss_scaler(&c));
    /* item 8 (fp8 on CPU raises): a deliberate difference. Our CPU is the reference and
     * emulates every FP8 recipe, so an fp8 config is valid and "auto" resolves on the CPU
     * as on Hopper. Items 9, 10 (Triton neuron wiring), 11 (backward steps the
     * optimizer), 24, 26, 27 (model runs) belong to prepare/the integrator; 25 and 28
     * (per-recipe FP8 accuracy, convergence) are checked at the operand level in
     * test_fp8_recipe.c. Item 25's recipe list and TE's auto table: */
    CHECK(snn_fp8_recipe_resolve_auto(SNN_FP8_RECIPE_AUTO, 0, 0) == SNN_FP8_RECIPE_DELAYED);
    CHECK(snn_fp8_recipe_resolve_auto(SNN_FP8_RECIPE_AUTO, 8, 9) == SNN_FP8_RECIPE_DELAYED);
    CHECK(snn_fp8_recipe_resolve_auto(SNN_FP8_RECIPE_AUTO, 9, 0) == SNN_FP8_RECIPE_DELAYED);
    CHECK(snn_fp8_recipe_resolve_auto(SNN_FP8_RECIPE_AUTO, 10, 0) == SNN_FP8_RECIPE_MXFP8);
    CHECK(snn_fp8_recipe_resolve_auto(SNN_FP8_RECIPE_AUTO, 10, 3) == SNN_FP8_RECIPE_MXFP8);
    CHECK(snn_fp8_recipe_resolve_auto(SNN_FP8_RECIPE_AUTO, 12, 0) == SNN_FP8_RECIPE_CURRENT);
    CHECK(snn_fp8_recipe_resolve_auto(SNN_FP8_RECIPE_BLOCK, 10, 0) == SNN_FP8_RECIPE_BLOCK);
    /* item 10's final state: a later fp32 config without storage clears neuron precision */
    CHECK(snn_precision_config_parse("fp32", NULL, NULL, NULL, NULL, &c) == SNN_OK &&
          snn_neuron_storage_name(c.neuron_storage) == NULL);
    CHECK(snn_precision_config_parse("bf16", NULL, "bf16", "bf16", "fp32", &c) == SNN_OK &&
          snn_neuron_storage_dtype(c.neuron_storage) == SNN_BF16 &&
          strcmp(snn_neuron_compute_name(c.neuron_fwd), "bf16") == 0 &&
          strcmp(snn_neuron_compute_name(c.neuron_bwd), "fp32") == 0);
}

int main(void) {
    uint64_t seed = snn_test_seed();
    test_bad_parse();
    test_bad_set();
    test_bad_struct();
    test_bad_json();
    test_valid();
    test_setter();
    test_json_roundtrip(seed);
    test_acceptance();
    return snn_test_finish("test_precision_config");
}
