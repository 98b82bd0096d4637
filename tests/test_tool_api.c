/* The public entry points the snn tool is built from (tools/snn/ includes no src/ header),
 * through public headers only:
 *  - the mesh handle and its getters on the one-process communicator; the stage getters;
 *  - the precision's scratch size, its FP8 state exported and loaded back as flat arrays, and
 *    a state-only preparation of a model that already has its optimizer;
 *  - canonical JSON and snn_error;
 *  - every NULL handle is an error with a message or a documented 0 / -1 / NULL. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/dist.h"
#include "snn/json.h"
#include "snn/snn.h"
#include "snn/vision_dist.h"

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s", snn_last_error())

static void test_mesh(void) {
    snn_comm *self = NULL;
    OK(snn_comm_self(&self));
    snn_mesh *m = NULL;
    OK(snn_mesh_open(self, 1, 1, &m));
    CHECK(m != NULL);
    for (int a = SNN_MESH_DP; a <= SNN_MESH_TP; a++) {
        CHECK(snn_mesh_size(m, (snn_mesh_axis)a) == 1);
        CHECK(snn_mesh_coord(m, (snn_mesh_axis)a) == 0);
        CHECK(snn_mesh_comm(m, (snn_mesh_axis)a) != NULL);
        CHECK(snn_comm_size(snn_mesh_comm(m, (snn_mesh_axis)a)) == 1);
    }
    CHECK(snn_mesh_rank_of(m, 0, 0, 0) == 0);
    CHECK(snn_mesh_size(m, (snn_mesh_axis)7) == 0);
    CHECK(snn_mesh_coord(m, (snn_mesh_axis)7) == -1);
    CHECK(snn_mesh_comm(m, (snn_mesh_axis)7) == NULL);
    snn_mesh_close(m);
    /* one rank cannot hold PP 2 */
    m = (snn_mesh *)1;
    CHECK(snn_mesh_open(self, 2, 1, &m) != SNN_OK && m == NULL);
    CHECK(snn_mesh_open(NULL, 1, 1, &m) == SNN_E_INVALID && m == NULL && *snn_last_error());
    CHECK(snn_mesh_open(self, 1, 1, NULL) == SNN_E_INVALID);
    CHECK(snn_mesh_size(NULL, SNN_MESH_DP) == 0 && snn_mesh_coord(NULL, SNN_MESH_DP) == -1);
    CHECK(snn_mesh_comm(NULL, SNN_MESH_DP) == NULL && snn_mesh_rank_of(NULL, 0, 0, 0) == -1);
    snn_mesh_close(NULL);
    CHECK(snn_dist_sampler_num_samples(10, 3) == 4 && snn_dist_sampler_num_samples(10, 0) == 0);
    CHECK(snn_dist_loader_batches(10, 4, 0) == 3 && snn_dist_loader_batches(10, 4, 1) == 2);

    /* a stage on the one-process mesh is the whole model */
    OK(snn_mesh_open(self, 1, 1, &m));
    snn_vision_model_config vc = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN);
    vc.fcsnn.in_features = 16;
    vc.fcsnn.hidden = 8;
    vc.fcsnn.depth = 1;
    vc.num_classes = 4;
    vc.time_steps = 2;
    snn_vision_stage *s = NULL;
    OK(snn_vision_stage_create(&vc, m, 7, &s));
    CHECK(snn_vision_stage_model(s) != NULL);
    CHECK(snn_vision_stage_model_config(s) && snn_vision_stage_model_config(s)->num_classes == 4);
    CHECK(snn_vision_stage_is_first(s) == 1 && snn_vision_stage_is_last(s) == 1);
    CHECK(snn_vision_stage_tp_rank(s) == 0 && snn_vision_stage_input_numel(s) == 16);
    OK(snn_vision_pipeline_plan(s, 2, 4, 1));
    float x[2 * 4 * 16], y[2 * 4 * 4];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)(i % 5) * 0.25f;
    OK(snn_vision_pipeline_forward(s, x, y));
    snn_vision_stage_free(s);
    s = (snn_vision_stage *)1;
    CHECK(snn_vision_stage_create(&vc, NULL, 7, &s) == SNN_E_INVALID && s == NULL);
    CHECK(snn_vision_stage_from_artifact(NULL, m, &s) == SNN_E_INVALID && s == NULL);
    CHECK(snn_vision_stage_model(NULL) == NULL && snn_vision_stage_model_config(NULL) == NULL);
    CHECK(snn_vision_stage_is_first(NULL) == 0 && snn_vision_stage_is_last(NULL) == 0);
    CHECK(snn_vision_stage_tp_rank(NULL) == -1 && snn_vision_stage_input_numel(NULL) == 0);
    CHECK(snn_vision_pipeline_plan(NULL, 2, 4, 1) == SNN_E_INVALID);
    CHECK(snn_vision_pipeline_forward(NULL, x, y) == SNN_E_INVALID);
    CHECK(snn_dist_total_steps(NULL, NULL) == 0);
    snn_mesh_close(m);
    snn_comm_free(self);
}

static void test_precision_state(void) {
    const int T = 1, N = 4, in = 32, classes = 16;
    snn_model *m = NULL;
    OK(snn_mlp_create(in, 32, 2, classes, 11, &m));
    CHECK(snn_precision_scratch_bytes(NULL) == 0);
    snn_precision_config cfg;
    OK(snn_precision_config_parse("fp8", "delayed", NULL, NULL, NULL, &cfg));
    cfg.amax_history_len = 4;
    snn_precision *p = NULL;
    OK(snn_prepare_model_for_precision(m, "cpu", &cfg, &p));
    OK(snn_model_plan(m, T, N));
    CHECK(snn_precision_scratch_bytes(p) > 0);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    snn_optimizer *opt = NULL;
    OK(snn_optimizer_create_for_model(&oo, m, &opt));
    /* a step gives the states non-trivial histories */
    float x[1 * 4 * 32], dy[1 * 4 * 16];
    for (int i = 0; i < T * N * in; i++) x[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < T * N * classes; i++) dy[i] = (float)((i * 3) % 5) / 5.0f - 0.4f;
    const float *yo = NULL;
    OK(snn_model_forward(m, x, 1, &yo));
    OK(snn_precision_backward(p, dy, opt, -1.0f, 0.0f, NULL, NULL));
    int n = -1, hl = -1;
    OK(snn_precision_fp8_export_state(p, &n, &hl, NULL, NULL));
    CHECK(n == 2 && hl == 4);
    float sc[2 * 3], hs[2 * 3 * 4];
    OK(snn_precision_fp8_export_state(p, NULL, NULL, sc, hs));
    int seen = 0; /* the input's amax of the step is in its history */
    for (int i = 0; i < hl; i++) seen |= hs[i] != 0.0f;
    CHECK(seen);

    /* the model has its optimizer: only the state-only preparation accepts it */
    snn_model *m2 = NULL;
    OK(snn_mlp_create(in, 32, 2, classes, 11, &m2));
    snn_optimizer *opt2 = NULL;
    OK(snn_optimizer_create_for_model(&oo, m2, &opt2));
    snn_precision *q = NULL;
    CHECK(snn_prepare_model_for_precision(m2, "cpu", &cfg, &q) == SNN_E_STATE && q == NULL);
    OK(snn_prepare_model_for_state(m2, &cfg, &q));
    OK(snn_precision_fp8_load_state(q, n, hl, sc, hs));
    float sc2[2 * 3], hs2[2 * 3 * 4];
    OK(snn_precision_fp8_export_state(q, NULL, NULL, sc2, hs2));
    CHECK(memcmp(sc, sc2, sizeof sc) == 0 && memcmp(hs, hs2, sizeof hs) == 0);
    /* too few modules, a different history: refused with a message */
    snn_clear_error();
    CHECK(snn_precision_fp8_load_state(q, 1, hl, sc, hs) == SNN_E_STATE && *snn_last_error());
    CHECK(snn_precision_fp8_load_state(q, n, 3, sc, hs) == SNN_E_STATE);
    OK(snn_precision_fp8_load_state(q, n, 0, NULL, NULL)); /* a stateless recipe: nothing */
    CHECK(snn_precision_fp8_export_state(NULL, &n, &hl, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_precision_fp8_load_state(NULL, n, hl, sc, hs) == SNN_E_INVALID);
    snn_precision *none = (snn_precision *)&none; /* poisoned: the refusal must clear it */
    CHECK(snn_prepare_model_for_state(NULL, &cfg, &none) == SNN_E_INVALID && none == NULL);
    CHECK(snn_prepare_model_for_state(m2, &cfg, NULL) == SNN_E_INVALID);
    snn_precision_free(q);
    snn_optimizer_free(opt2);
    snn_model_free(m2);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_model_free(m);
}

static void test_json_error(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "b", snn_json_float(1.0));
    cJSON_AddItemToObject(o, "a", snn_json_int(3));
    cJSON_AddItemToObject(o, "c", snn_json_float(3e-05));
    char *s = NULL;
    OK(snn_json_print_canonical(o, &s));
    CHECK_MSG(s && !strcmp(s, "{\"a\":3,\"b\":1.0,\"c\":3e-05}"), "%s", s ? s : "(null)");
    free(s);
    CHECK(snn_json_print_canonical(NULL, &s) == SNN_E_INVALID);
    CHECK(snn_json_print_canonical(o, NULL) == SNN_E_INVALID);
    cJSON_Delete(o);
    char b[32];
    CHECK(!strcmp(snn_json_float_repr(0.0003, b), "0.0003"));
    CHECK(snn_error(SNN_E_IO, "cannot read %s", "x.bin") == SNN_E_IO);
    CHECK(!strcmp(snn_last_error(), "cannot read x.bin"));
}

int main(void) {
    test_mesh();
    test_precision_state();
    test_json_error();
    return snn_test_finish("test_tool_api");
}
