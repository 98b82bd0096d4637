/* snn — canonical JSON: sorted keys, compact separators, Python's spelling of numbers and
 * strings, so that a digest of the text equals one computed in Python over
 *   json.dumps(obj, sort_keys=True, separators=(",", ":")).
 * Metadata files whose digests are compared across the C and Python implementations (the
 * language-model data sets' meta.json) are written with it.
 *
 * The trees are cJSON's (<cjson/cJSON.h>, a dependency of the library); this header only
 * names the type, so including it does not need cJSON's headers. */
#ifndef SNN_JSON_H
#define SNN_JSON_H

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* Python's repr() of a finite double ("0.0003", "3e-05", "1.0", "1e+16") into buf (at least
 * 32 bytes); returns buf. */
const char *snn_json_float_repr(double v, char buf[32]);
/* A number node spelled as an integer / as a Python float: cJSON remembers only the double,
 * and Python tells 1 from 1.0, so the spelling is kept in a raw node. NULL when out of
 * memory (cJSON_AddItemToObject ignores a NULL item, and the print then lacks the key). */
struct cJSON *snn_json_int(long long v);
struct cJSON *snn_json_float(double v);
/* Print a tree canonically into *out (malloc'd; free() it). Numbers must be raw nodes made
 * by the two functions above or plain cJSON numbers with integral values. */
snn_status snn_json_print_canonical(const struct cJSON *root, char **out);

#ifdef __cplusplus
}
#endif
#endif
