/* The dataset object shared by the loaders in src/data/. */
#ifndef SNN_DATA_INTERNAL_H
#define SNN_DATA_INTERNAL_H

#include "core/error_internal.h"
#include "snn/data.h"

struct snn_dataset {
    int n, c, h, w, classes;
    size_t features;  /* c*h*w */
    float *x;         /* [n][features], in [0, 1] */
    int32_t *y;       /* [n], -1 when unlabelled */
};

/* An empty dataset with room for n samples of c x h x w (x and y allocated, contents
 * undefined). Refuses n*features beyond what size_t and memory sensibly hold. */
snn_status snn_dataset_alloc(int n, int c, int h, int w, snn_dataset **out);

/* A file read either raw or, when it starts with the gzip magic, decompressed with every
 * member's CRC-32 and length trailer verified (src/data/zsrc.c). A stream that ends
 * before its trailer, a wrong trailer and bytes after the last member are errors, where
 * zlib's gzread would ignore the last two. */
typedef struct snn_zsrc snn_zsrc;
snn_status snn_zsrc_open(const char *path, const char *what, snn_zsrc **out);
/* Up to n bytes; *got < n only at the end of the (decompressed) data. */
snn_status snn_zsrc_read(snn_zsrc *s, void *dst, size_t n, size_t *got);
int snn_zsrc_is_gzip(const snn_zsrc *s);
void snn_zsrc_close(snn_zsrc *s);

#endif
