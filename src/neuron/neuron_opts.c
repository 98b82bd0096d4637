/* Neuron options: SpikingJelly's constructor defaults, validation, decay helpers. */
#include <math.h>
#include <strings.h>

#include "core/error_internal.h"
#include "snn/neuron.h"

static const char *kind_names[3] = {"IFNode", "LIFNode", "ParametricLIFNode"};
static const char *kind_short[3] = {"if", "lif", "plif"};

snn_neuron_opts snn_neuron_defaults(snn_neuron_kind kind) {
    snn_neuron_opts o = {
        .kind = kind,
        .tau = 2.0f,
        .decay_input = 1,
        .v_threshold = 1.0f,
        .soft_reset = 0,
        .v_reset = 0.0f,
        .detach_reset = 0,
        .surrogate = SNN_SG_SIGMOID,
        .alpha = 0.0f,
    };
    return o;
}

const char *snn_neuron_kind_name(snn_neuron_kind k) {
    return (int)k >= 0 && (int)k < 3 ? kind_names[k] : "unknown";
}

snn_status snn_neuron_kind_from_name(const char *name, snn_neuron_kind *out) {
    if (name) {
        for (int i = 0; i < 3; i++) {
            if (strcasecmp(name, kind_names[i]) == 0 || strcasecmp(name, kind_short[i]) == 0) {
                *out = (snn_neuron_kind)i;
                return SNN_OK;
            }
        }
    }
    return snn_error(SNN_E_INVALID, "unknown neuron '%s'; supported: IFNode (if), LIFNode (lif), "
                     "ParametricLIFNode (plif)", name ? name : "(null)");
}

float snn_neuron_alpha(const snn_neuron_opts *o) {
    return o->alpha != 0.0f ? o->alpha : snn_surrogate_default_alpha(o->surrogate);
}

float snn_neuron_lif_k(float tau) { return 1.0f / tau; }

float snn_plif_k(float w) { return (float)(1.0 / (1.0 + exp(-(double)w))); }

float snn_plif_w0(float tau) { return (float)(-log((double)tau - 1.0)); }

snn_status snn_neuron_opts_validate(const snn_neuron_opts *o) {
    if (!o) return snn_error(SNN_E_INVALID, "neuron options are missing (NULL)");
    if ((int)o->kind < 0 || (int)o->kind > 2)
        return snn_error(SNN_E_INVALID, "unknown neuron kind %d; supported: 0 (IFNode), 1 (LIFNode), "
                         "2 (ParametricLIFNode)", (int)o->kind);
    const char *kn = kind_names[o->kind];
    /* IF has no leak, so its tau is ignored (IFNode takes no tau in SpikingJelly). */
    if (o->kind != SNN_NEURON_IF && !(isfinite(o->tau) && o->tau > 1.0f))
        return snn_error(SNN_E_INVALID, "%s: %s must be a finite number > 1, got %g", kn,
                         o->kind == SNN_NEURON_PLIF ? "init_tau" : "tau", (double)o->tau);
    if (!isfinite(o->v_threshold))
        return snn_error(SNN_E_INVALID, "%s: v_threshold must be finite, got %g", kn, (double)o->v_threshold);
    if (!o->soft_reset && !isfinite(o->v_reset))
        return snn_error(SNN_E_INVALID, "%s: v_reset must be finite (or use soft reset), got %g", kn,
                         (double)o->v_reset);
    if ((int)o->surrogate < 0 || o->surrogate >= SNN_SG_COUNT)
        return snn_error(SNN_E_INVALID, "%s: unknown surrogate id %d; supported: 0 sigmoid, 1 atan, "
                         "2 piecewise_quadratic, 3 piecewise_exp, 4 softsign, 5 superspike, 6 erf",
                         kn, (int)o->surrogate);
    if (!isfinite(o->alpha))
        return snn_error(SNN_E_INVALID, "%s: surrogate alpha must be finite, got %g", kn, (double)o->alpha);
    if (o->surrogate == SNN_SG_SOFTSIGN && !(snn_neuron_alpha(o) > 0.0f))
        return snn_error(SNN_E_INVALID, "%s: SoftSign surrogate needs alpha > 0, got %g", kn,
                         (double)o->alpha);
    return SNN_OK;
}
