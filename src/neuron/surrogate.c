/* Surrogate gradients: names, default alphas, derivative g'(x) and primitive g(x).
 * Spiking forward is always the Heaviside step; g' only shapes the backward. */
#include <math.h>
#include <strings.h>

#include "core/error_internal.h"
#include "neuron/surrogate_impl.h"
#include "snn/neuron.h"

typedef struct {
    const char *name;       /* snake_case name used in configs and the CLI */
    const char *class_name; /* SpikingJelly class name, accepted too */
    float alpha;            /* default alpha */
} sg_info;

/* Indexed by snn_surrogate_kind (SpikingJelly's Triton ids 0..6). */
static const sg_info sg_table[SNN_SG_COUNT] = {
    {"sigmoid", "Sigmoid", 4.0f},
    {"atan", "ATan", 2.0f},
    {"piecewise_quadratic", "PiecewiseQuadratic", 1.0f},
    {"piecewise_exp", "PiecewiseExp", 1.0f},
    {"softsign", "SoftSign", 2.0f},
    {"superspike", "SuperSpike", 1.0f},
    {"erf", "Erf", 2.0f},
};

static int sg_valid(snn_surrogate_kind k) { return (int)k >= 0 && k < SNN_SG_COUNT; }

const char *snn_surrogate_name(snn_surrogate_kind k) {
    return sg_valid(k) ? sg_table[k].name : "unknown";
}

snn_status snn_surrogate_from_name(const char *name, snn_surrogate_kind *out) {
    if (name) {
        for (int i = 0; i < SNN_SG_COUNT; i++) {
            if (strcasecmp(name, sg_table[i].name) == 0 || strcasecmp(name, sg_table[i].class_name) == 0) {
                *out = (snn_surrogate_kind)i;
                return SNN_OK;
            }
        }
    }
    return snn_error(SNN_E_INVALID,
                     "unknown surrogate function '%s'; supported: sigmoid, atan, piecewise_quadratic, "
                     "piecewise_exp, softsign, superspike, erf",
                     name ? name : "(null)");
}

float snn_surrogate_default_alpha(snn_surrogate_kind k) {
    return sg_valid(k) ? sg_table[k].alpha : NAN;
}

float snn_surrogate_grad(snn_surrogate_kind k, float a, float x) {
    switch (k) {
    case SNN_SG_SIGMOID: return snn_sg_sigmoid(a, x);
    case SNN_SG_ATAN: return snn_sg_atan(a, x);
    case SNN_SG_PIECEWISE_QUADRATIC: return snn_sg_pw_quadratic(a, x);
    case SNN_SG_PIECEWISE_EXP: return snn_sg_pw_exp(a, x);
    case SNN_SG_SOFTSIGN: return snn_sg_softsign(a, x);
    case SNN_SG_SUPERSPIKE: return snn_sg_superspike(a, x);
    case SNN_SG_ERF: return snn_sg_erf(a, x);
    default: return NAN;
    }
}

/* The primitive is not on any hot path (only the non-spiking mode and tests use it),
 * so the float version just rounds the double one. */
float snn_surrogate_primitive(snn_surrogate_kind k, float a, float x) {
    return (float)snn_surrogate_primitive_f64(k, (double)a, (double)x);
}

double snn_surrogate_grad_f64(snn_surrogate_kind k, double a, double x) {
    const double pi = 3.14159265358979323846;
    switch (k) {
    case SNN_SG_SIGMOID: {
        double sg = 1.0 / (1.0 + exp(-a * x));
        return a * sg * (1.0 - sg);
    }
    case SNN_SG_ATAN: {
        double z = 0.5 * pi * a * x;
        return 0.5 * a / (1.0 + z * z);
    }
    case SNN_SG_PIECEWISE_QUADRATIC: return fmax(0.0, a - a * a * fabs(x));
    case SNN_SG_PIECEWISE_EXP: return 0.5 * a * exp(-a * fabs(x));
    case SNN_SG_SOFTSIGN: {
        double d = 1.0 / a + fabs(x);
        return 1.0 / (2.0 * a * d * d);
    }
    case SNN_SG_SUPERSPIKE: {
        double d = fabs(x) + 1.0;
        return a / (d * d);
    }
    case SNN_SG_ERF: return a / sqrt(pi) * exp(-(a * x) * (a * x));
    default: return NAN;
    }
}

double snn_surrogate_primitive_f64(snn_surrogate_kind k, double a, double x) {
    const double pi = 3.14159265358979323846;
    switch (k) {
    case SNN_SG_SIGMOID: return 1.0 / (1.0 + exp(-a * x));
    case SNN_SG_ATAN: return atan(0.5 * pi * a * x) / pi + 0.5;
    case SNN_SG_PIECEWISE_QUADRATIC: {
        if (x < -1.0 / a) return 0.0;
        if (x > 1.0 / a) return 1.0;
        double sgn = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
        return -0.5 * a * a * x * x * sgn + a * x + 0.5;
    }
    case SNN_SG_PIECEWISE_EXP:
        return x >= 0 ? 1.0 - 0.5 * exp(-a * x) : 0.5 * exp(a * x);
    case SNN_SG_SOFTSIGN: {
        double y = a * x;
        return 0.5 * (y / (1.0 + fabs(y)) + 1.0);
    }
    case SNN_SG_SUPERSPIKE: return NAN; /* SpikingJelly defines no primitive */
    case SNN_SG_ERF: return 0.5 * erfc(-a * x);
    default: return NAN;
    }
}
