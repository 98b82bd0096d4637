/* The model zoo's entry point from a configuration (checkpoint metadata). */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/mlp.h"
#include "models/zoo.h"
#include "snn/lm.h"

snn_status snn_zoo_add(snn_module *parent, snn_module *child, const char *local_name) {
    if (child && local_name) snprintf(child->name, sizeof child->name, "%s", local_name);
    return snn_module_add_child(parent, child);
}

static int json_int(const cJSON *o, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

static double json_num(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

snn_status snn_model_create_from_config(const char *json, uint64_t seed, snn_model **out) {
    *out = NULL;
    cJSON *o = cJSON_Parse(json ? json : "");
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return snn_error(SNN_E_FORMAT, "model configuration is not a JSON object");
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "model");
    snn_status st;
    if (!cJSON_IsString(kind)) {
        st = snn_error(SNN_E_FORMAT, "model configuration has no \"model\" name");
    } else if (!strcmp(kind->valuestring, "fcsnn")) {
        snn_fcsnn_opts f = {
            .in_features = json_int(o, "in_features", 0),
            .hidden = json_int(o, "hidden", 0),
            .depth = json_int(o, "depth", 0),
            .classes = json_int(o, "classes", 0),
            .tau = (float)json_num(o, "tau", 0),
        };
        st = snn_fcsnn_create(&f, seed, out);
    } else if (!strcmp(kind->valuestring, "convsnn")) {
        snn_convsnn_opts c = {
            .in_channels = json_int(o, "in_channels", 0),
            .height = json_int(o, "height", 0),
            .width = json_int(o, "width", 0),
            .channels = json_int(o, "channels", 0),
            .classes = json_int(o, "classes", 0),
        };
        st = snn_convsnn_create(&c, seed, out);
    } else if (!strcmp(kind->valuestring, "spikformer")) {
        snn_spikformer_opts s = {
            .in_channels = json_int(o, "in_channels", 0),
            .image_size = json_int(o, "image_size", 0),
            .classes = json_int(o, "classes", 0),
            .embed_dim = json_int(o, "embed_dim", 0),
            .heads = json_int(o, "heads", 0),
            .depth = json_int(o, "depth", 0),
            .mlp_ratio = (float)json_num(o, "mlp_ratio", 0),
        };
        st = snn_spikformer_create(&s, seed, out);
    } else if (!strcmp(kind->valuestring, "mlp")) {
        st = snn_mlp_create(json_int(o, "in_features", 0), json_int(o, "width", 0), json_int(o, "depth", 0),
                            json_int(o, "classes", 0), seed, out);
    } else if (!strcmp(kind->valuestring, "gpt") || !strcmp(kind->valuestring, "spikelm")) {
        snn_gpt_opts g;
        st = snn_gpt_opts_from_json(json, &g);
        if (st == SNN_OK) st = snn_gpt_create(&g, seed, out);
    } else {
        st = snn_error(SNN_E_INVALID, "unknown model \"%s\" (known: fcsnn, convsnn, spikformer, mlp, gpt, spikelm)",
                       kind->valuestring);
    }
    cJSON_Delete(o);
    return st;
}
