/* libFuzzer target: the safetensors reader. Every accessor is exercised on what it
 * accepts, and every byte a tensor claims is read, so ASan catches any pointer that
 * escapes the buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snn/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    snn_ckpt *c = NULL;
    if (snn_ckpt_open_memory(data, size, "fuzz", &c) != SNN_OK) return 0;
    volatile uint8_t acc = 0;
    for (size_t i = 0; i < snn_ckpt_num_tensors(c); i++) {
        snn_ckpt_tensor t;
        if (snn_ckpt_tensor_at(c, i, &t) != SNN_OK) abort();
        const uint8_t *p = t.data;
        for (size_t k = 0; k < t.nbytes; k++) acc ^= p[k];
        if (t.nbytes != t.numel * snn_ckpt_dtype_size(t.dtype)) abort();
        snn_ckpt_tensor u;
        if (snn_ckpt_find(c, t.name, &u) != SNN_OK || u.data != t.data) abort();
        void *buf = malloc(t.nbytes + 1);
        if (snn_ckpt_read(c, t.name, t.dtype, buf, t.nbytes) != SNN_OK) abort();
        if (t.nbytes && memcmp(buf, t.data, t.nbytes)) abort();
        free(buf);
    }
    for (size_t i = 0; i < snn_ckpt_num_metadata(c); i++) {
        const char *k, *v;
        if (snn_ckpt_metadata_at(c, i, &k, &v) != SNN_OK) abort();
        if (snn_ckpt_metadata(c, k) == NULL) abort();
        acc ^= (uint8_t)strlen(v);
    }
    snn_ckpt_close(c);
    return 0;
}
