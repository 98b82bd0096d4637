/* libFuzzer target: the IDX parser, from memory (images alone, and images + labels split
 * by the first two bytes) and through the file loader (zlib, gzip or raw) via a memfd. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "snn/data.h"

static void load_via_file(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_idx", 0);
    if (fd < 0) return;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        snn_dataset *ds = NULL;
        if (snn_dataset_load_idx(path, NULL, &ds) == SNN_OK) snn_dataset_free(ds);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    snn_dataset *ds = NULL;
    if (snn_dataset_from_idx_memory(data, size, "fuzz", NULL, 0, NULL, &ds) == SNN_OK) snn_dataset_free(ds);
    if (size > 2) {
        size_t split = ((size_t)data[0] << 8 | data[1]) % (size - 1);
        ds = NULL;
        if (snn_dataset_from_idx_memory(data + 2, split, "img", data + 2 + split, size - 2 - split, "lab",
                                        &ds) == SNN_OK) {
            /* touch every value so ASan sees any out-of-bounds result */
            volatile float acc = 0;
            const float *x = snn_dataset_data(ds);
            for (size_t i = 0; i < (size_t)snn_dataset_size(ds) * snn_dataset_features(ds); i++) acc += x[i];
            for (int i = 0; i < snn_dataset_size(ds); i++) acc += (float)snn_dataset_labels(ds)[i];
            snn_dataset_free(ds);
        }
    }
    load_via_file(data, size);
    return 0;
}
