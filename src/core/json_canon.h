/* Canonical JSON: sorted keys, compact separators, Python's number and string spelling,
 * so that a digest of it equals one computed by Python's
 * json.dumps(obj, sort_keys=True, separators=(",", ":")). */
#ifndef SNN_CORE_JSON_CANON_H
#define SNN_CORE_JSON_CANON_H

#include <cjson/cJSON.h>

#include "snn/error.h"

/* Python's repr() of a finite double ("0.0003", "3e-05", "1.0", "1e+16"); buf >= 32. */
const char *snn_json_float_repr(double v, char buf[32]);
/* A number node spelled as an integer / as a Python float (cJSON raw nodes; NULL on OOM). */
cJSON *snn_json_int(long long v);
cJSON *snn_json_float(double v);
/* Print a tree canonically (numbers must be raw nodes made by the two functions above, or
 * plain cJSON numbers with integral values). malloc'd into *out. */
snn_status snn_json_print_canonical(const cJSON *root, char **out);

#endif
