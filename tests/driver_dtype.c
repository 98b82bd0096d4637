/* Driver for tests/oracle_dtype.py: converts a file of values with snn_convert.
 *
 *   driver_dtype narrow <dtype> <saturate 0|1> <in.f32> <out.bin>
 *       reads little-endian float32 values, writes one code per value in <dtype>
 *   driver_dtype widen <dtype> <in.bin> <out.f32>
 *       reads codes of <dtype>, writes float32 values
 * Exit status 0 on success, 1 with a message on stderr otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snn/dtype.h"

static void *read_all(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *bytes = (size_t)len;
    return p;
}

int main(int argc, char **argv) {
    int narrow = argc == 6 && strcmp(argv[1], "narrow") == 0;
    int widen = argc == 5 && strcmp(argv[1], "widen") == 0;
    if (!narrow && !widen) {
        fprintf(stderr, "usage: driver_dtype narrow <dtype> <sat> <in> <out> | widen <dtype> <in> <out>\n");
        return 1;
    }
    snn_dtype t;
    if (snn_dtype_from_name(argv[2], &t) != SNN_OK) {
        fprintf(stderr, "driver_dtype: %s\n", snn_last_error());
        return 1;
    }
    const char *in = argv[narrow ? 4 : 3], *out = argv[narrow ? 5 : 4];
    size_t bytes;
    void *src = read_all(in, &bytes);
    if (!src) {
        fprintf(stderr, "driver_dtype: cannot read %s\n", in);
        return 1;
    }
    size_t ss = narrow ? sizeof(float) : snn_dtype_size(t);
    size_t ds = narrow ? snn_dtype_size(t) : sizeof(float);
    size_t n = bytes / ss;
    void *dst = malloc(n * ds + 1);
    snn_status s = narrow ? snn_convert(t, dst, SNN_F32, src, n, atoi(argv[3]) ? SNN_CONVERT_SATURATE : 0)
                          : snn_convert(SNN_F32, dst, t, src, n, 0);
    if (s != SNN_OK) {
        fprintf(stderr, "driver_dtype: %s\n", snn_last_error());
        return 1;
    }
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(dst, ds, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "driver_dtype: cannot write %s\n", out);
        return 1;
    }
    free(src);
    free(dst);
    return 0;
}
