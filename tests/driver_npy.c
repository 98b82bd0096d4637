/* Driver for tests/oracle_npy.py:
 *   driver_npy read FILE                      "dtype rows cols" then the values, one line
 *   driver_npy write FILE i4|i8|u2 ROWS COLS  values from stdin (whitespace separated)
 *   driver_npy sample DIR SPLIT VOCAB I...    per I: "N S", input row, target row
 * Failures print the library message on stderr and exit 1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snn/tokens.h"

static int fail(void) {
    fprintf(stderr, "%s\n", snn_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "read") == 0) {
        snn_npy_array a;
        if (snn_npy_read(argv[2], &a) != SNN_OK) return fail();
        static const char *nm[] = {"i4", "i8", "u2"};
        printf("%s %" PRId64 " %" PRId64 "\n", nm[a.dtype], a.rows, a.cols);
        size_t n = (size_t)(a.rows * a.cols);
        for (size_t i = 0; i < n; i++) {
            long long v = a.dtype == SNN_NPY_INT32 ? ((int32_t *)a.data)[i]
                        : a.dtype == SNN_NPY_INT64 ? (long long)((int64_t *)a.data)[i]
                                                   : ((uint16_t *)a.data)[i];
            printf("%s%lld", i ? " " : "", v);
        }
        printf("\n");
        snn_npy_free(&a);
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "write") == 0) {
        snn_npy_dtype dt = strcmp(argv[3], "i4") == 0 ? SNN_NPY_INT32 : strcmp(argv[3], "i8") == 0 ? SNN_NPY_INT64 : SNN_NPY_UINT16;
        int64_t rows = atoll(argv[4]), cols = atoll(argv[5]);
        size_t n = (size_t)(rows * cols), es = snn_npy_dtype_size(dt);
        unsigned char *buf = malloc(n * es + 1);
        for (size_t i = 0; i < n; i++) {
            long long v;
            if (scanf("%lld", &v) != 1) { fprintf(stderr, "short input\n"); return 1; }
            if (dt == SNN_NPY_INT32) ((int32_t *)buf)[i] = (int32_t)v;
            else if (dt == SNN_NPY_INT64) ((int64_t *)buf)[i] = v;
            else ((uint16_t *)buf)[i] = (uint16_t)v;
        }
        int rc = snn_npy_write(argv[2], dt, rows, cols, buf) == SNN_OK ? 0 : fail();
        free(buf);
        return rc;
    }
    if (argc >= 5 && strcmp(argv[1], "sample") == 0) {
        snn_token_dataset *ds;
        if (snn_token_dataset_open(argv[2], argv[3], atoll(argv[4]), &ds) != SNN_OK) return fail();
        int64_t s = snn_token_dataset_seq_len(ds);
        int32_t *in = malloc((size_t)s * 4), *tg = malloc((size_t)s * 4);
        for (int k = 5; k < argc; k++) {
            for (int64_t j = 0; j < s; j++) in[j] = tg[j] = -777; /* poisoned */
            if (snn_token_dataset_sample(ds, atoll(argv[k]), in, tg) != SNN_OK) return fail();
            printf("%" PRId64 " %" PRId64 "\n", snn_token_dataset_rows(ds), s);
            for (int64_t j = 0; j < s; j++) printf("%s%d", j ? " " : "", in[j]);
            printf("\n");
            for (int64_t j = 0; j < s; j++) printf("%s%d", j ? " " : "", tg[j]);
            printf("\n");
        }
        /* the batch form agrees with the per-sample one */
        int nb = argc - 5;
        int64_t *idx = malloc(sizeof *idx * (size_t)(nb ? nb : 1));
        for (int k = 0; k < nb; k++) idx[k] = atoll(argv[5 + k]);
        int32_t *bi = malloc((size_t)(s * (nb ? nb : 1)) * 4), *bt = malloc((size_t)(s * (nb ? nb : 1)) * 4);
        if (snn_token_dataset_batch(ds, idx, nb, bi, bt) != SNN_OK) return fail();
        for (int k = 0; k < nb; k++) {
            snn_token_dataset_sample(ds, idx[k], in, tg);
            if (memcmp(in, bi + (size_t)k * (size_t)s, (size_t)s * 4) || memcmp(tg, bt + (size_t)k * (size_t)s, (size_t)s * 4)) {
                fprintf(stderr, "batch differs from sample %d\n", k);
                return 1;
            }
        }
        free(idx); free(bi); free(bt); free(in); free(tg);
        snn_token_dataset_free(ds);
        return 0;
    }
    fprintf(stderr, "usage: driver_npy read FILE | write FILE DT R C | sample DIR SPLIT VOCAB I...\n");
    return 2;
}
