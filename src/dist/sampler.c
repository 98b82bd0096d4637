/* The distributed sampler (contract in sampler.h). */
#include "core/error_internal.h"
#include "dist/sampler.h"

size_t snn_dist_sampler_num_samples(size_t n, int replicas) {
    return replicas > 0 ? (n + (size_t)replicas - 1) / (size_t)replicas : 0;
}

size_t snn_dist_loader_batches(size_t num_samples, int batch_size, int drop_ragged) {
    if (batch_size <= 0) return 0;
    size_t b = (size_t)batch_size;
    return drop_ragged ? num_samples / b : (num_samples + b - 1) / b;
}

snn_status snn_dist_sampler_epoch(const snn_dataset *ds, int shuffle, uint64_t seed, uint64_t epoch, int replicas,
                                  int rank, uint32_t *perm, uint32_t *out) {
    if (!ds || !perm || !out) return snn_error(SNN_E_INVALID, "sampler needs a dataset and index buffers");
    if (replicas <= 0 || rank < 0 || rank >= replicas)
        return snn_error(SNN_E_INVALID, "sampler rank %d outside %d replicas", rank, replicas);
    int n = snn_dataset_size(ds);
    if (n <= 0) return snn_error(SNN_E_INVALID, "the dataset must be non-empty");
    if (shuffle) SNN_TRY(snn_dataset_shuffle(ds, seed, epoch, perm));
    else
        for (int i = 0; i < n; i++) perm[i] = (uint32_t)i;
    size_t per = snn_dist_sampler_num_samples((size_t)n, replicas);
    /* position p of the padded order is perm[p mod n] (padding repeats from the start) */
    for (size_t k = 0; k < per; k++) out[k] = perm[((size_t)rank + k * (size_t)replicas) % (size_t)n];
    return SNN_OK;
}
