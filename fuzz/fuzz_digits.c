/* libFuzzer target: the digits CSV loader (read through zlib from a memfd). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "snn/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_digits", 0);
    if (fd < 0) return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        snn_dataset *ds = NULL;
        if (snn_dataset_load_digits_csv(path, &ds) == SNN_OK) {
            volatile float acc = 0;
            for (size_t i = 0; i < (size_t)snn_dataset_size(ds) * 64; i++) acc += snn_dataset_data(ds)[i];
            snn_dataset_free(ds);
        }
    }
    close(fd);
    return 0;
}
