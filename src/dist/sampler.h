/* Distributed sampling (SpikingJelly's DistributedSampler + loader rules, §2.10):
 * every rank draws the same seeded permutation of the dataset for the epoch, pads it by
 * repeating its first indices to a multiple of the replica count, and takes the positions
 * rank, rank + replicas, rank + 2 replicas, ... so every rank has ceil(n / replicas)
 * samples and the ranks' samples of one batch index together are the single-process
 * batch of batch_size * replicas. The training loader drops the ragged last batch only
 * under pipeline parallelism; validation is not shuffled and never drops (its size must
 * divide by the replica count, checked by the caller). */
#ifndef SNN_DIST_SAMPLER_H
#define SNN_DIST_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "snn/data.h"
#include "snn/dist.h" /* the public declarations of the two counts */

size_t snn_dist_sampler_num_samples(size_t n, int replicas);
/* Batches per epoch of num_samples samples. */
size_t snn_dist_loader_batches(size_t num_samples, int batch_size, int drop_ragged);
/* perm: scratch of n = snn_dataset_size(ds) indices; out: num_samples indices.
 * shuffle 0: the identity order. */
snn_status snn_dist_sampler_epoch(const snn_dataset *ds, int shuffle, uint64_t seed, uint64_t epoch, int replicas,
                                  int rank, uint32_t *perm, uint32_t *out);

#endif
