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

#endif
