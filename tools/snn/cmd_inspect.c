/* snn inspect: the precision report (configuration, policy, capability, FP8 conversion,
 * neurons) of a model, without training. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cmds.h"
#include "common.h"

static void print_list(const cJSON *r, const char *key) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, key);
    int n = cJSON_GetArraySize(a);
    printf("  %-24s %d", key, n);
    int shown = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (shown == 8) { printf(", ..."); break; }
        if (cJSON_IsString(it)) printf("%s%s", shown ? ", " : "  ", it->valuestring);
        else if (cJSON_IsObject(it)) {
            const cJSON *mod = cJSON_GetObjectItemCaseSensitive(it, "module");
            const cJSON *pat = cJSON_GetObjectItemCaseSensitive(it, "pattern");
            printf("%s%s (%s)", shown ? ", " : "  ", cJSON_IsString(mod) ? mod->valuestring : "?",
                   cJSON_IsString(pat) ? pat->valuestring : "?");
        }
        shown++;
    }
    printf("\n");
}

int cmd_inspect(int argc, char **argv) {
    model_flags mf;
    model_flags_defaults(&mf);
    precision_flags pf = {0};
    int json = 0, in_features = 784, channels = 0;
    opt t[32];
    int n = model_flags_options(&mf, t);
    n += precision_flags_options(&pf, t + n);
    t[n++] = opt_num("--in-features", OPT_INT, &in_features, "fcsnn: input features (default 784)", NULL, 1.0, 16777216.0);
    t[n++] = opt_num("--in-channels", OPT_INT, &channels, "convsnn/spikformer: image channels (1 / 3)", NULL, 1.0, 65536.0);
    t[n++] = (opt){"--json", OPT_FLAG, &json, "print the full JSON report", NULL, 0};
    if (args_wants_help(argc, argv, 2)) {
        args_help("snn inspect --model M [model options] [precision options] [--json]",
                  "Prepare a model for a precision and print the report: configuration, policy,\n"
                  "capability, FP8 conversion (converted, skipped, high-precision and unsupported\n"
                  "modules by dotted name) and neuron precision. Nothing is trained.", t, n);
        return 0;
    }
    args_parse("inspect", t, n, argc, argv, 2);
    snn_precision_config cfg = precision_flags_config(&pf);
    int spk = !strcmp(mf.model, "spikformer");
    int c = channels ? channels : spk ? 3 : 1;
    int side = spk ? (mf.image_size ? mf.image_size : 224) : 28;
    int classes = mf.num_classes ? mf.num_classes : spk ? 1000 : 10;
    snn_model *m = NULL;
    snn_status st;
    if (!strcmp(mf.model, "fcsnn")) st = model_build(&mf, 1, 1, in_features, classes, 1, &m);
    else st = model_build(&mf, c, side, side, classes, 1, &m);
    if (st != SNN_OK) die_status(st, "building the model");
    snn_precision *p = NULL;
    st = snn_prepare_model_for_precision(m, pf.device ? pf.device : "cpu", &cfg, &p);
    if (st != SNN_OK) die_status(st, "prepare");
    const char *rep = snn_precision_describe(p);
    if (json) {
        printf("%s\n", rep);
    } else {
        cJSON *o = cJSON_Parse(rep);
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(o, "policy");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(pol, "name");
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(pol, "resolved_fp8_recipe");
        printf("model %s, %zu parameters, precision %s%s%s\n", mf.model, snn_model_num_params(m),
               cJSON_IsString(name) ? name->valuestring : "?", cJSON_IsString(res) ? ", recipe " : "",
               cJSON_IsString(res) ? res->valuestring : "");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "conversion_report");
        printf("conversion report (%d modules):\n", cJSON_GetObjectItemCaseSensitive(r, "total_modules")->valueint);
        const char *keys[] = {"convertible_modules", "converted_modules", "converted_patterns", "skipped_modules",
                              "high_precision_modules", "unsupported_modules"};
        for (int i = 0; i < 6; i++) print_list(r, keys[i]);
        printf("neurons:\n");
        print_list(cJSON_GetObjectItemCaseSensitive(o, "neurons"), "converted_modules");
        cJSON_Delete(o);
    }
    snn_precision_free(p);
    snn_model_free(m);
    return 0;
}
