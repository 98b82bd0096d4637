/* libFuzzer target: the .npy parser from memory and through the file reader (via a memfd),
 * and the token dataset over a directory holding the input as train.npy. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snn/tokens.h"

static void touch(const snn_npy_array *a) {
    /* read every value so ASan sees any out-of-bounds result */
    volatile uint8_t acc = 0;
    size_t n = (size_t)a->rows * (size_t)a->cols * snn_npy_dtype_size(a->dtype);
    for (size_t i = 0; i < n; i++) acc ^= ((const uint8_t *)a->data)[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    snn_npy_array a;
    int parsed = snn_npy_parse(data, size, &a) == SNN_OK;
    if (parsed) {
        touch(&a);
        snn_npy_free(&a);
    }
    int fd = memfd_create("fuzz_npy", 0);
    if (fd < 0) return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (snn_npy_read(path, &a) == SNN_OK) {
            touch(&a);
            snn_npy_free(&a);
        }
        /* the dataset wants DIR/train.npy: /proc/self/fd is not a directory of names, so
         * this goes through a private temporary directory */
        static char dir[64];
        if (!dir[0]) {
            snprintf(dir, sizeof dir, "/tmp/fuzz_npy_%d", (int)getpid());
            mkdir(dir, 0700);
        }
        char file[96];
        snprintf(file, sizeof file, "%s/train.npy", dir);
        FILE *f = parsed ? fopen(file, "wb") : NULL; /* the dataset only for parseable files */
        if (f) {
            fwrite(data, 1, size, f);
            fclose(f);
            snn_token_dataset *ds = NULL;
            if (snn_token_dataset_open(dir, "train", (int64_t)(size % 70000), &ds) == SNN_OK) {
                int64_t s = snn_token_dataset_seq_len(ds);
                int32_t *in = malloc((size_t)s * sizeof *in), *tg = malloc((size_t)s * sizeof *tg);
                if (in && tg) {
                    snn_token_dataset_sample(ds, 0, in, tg);
                    snn_token_dataset_sample(ds, (int64_t)size * 7 + 3, in, tg);
                }
                free(in);
                free(tg);
                snn_token_dataset_free(ds);
            }
        }
    }
    close(fd);
    return 0;
}
