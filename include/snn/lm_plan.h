/* snn — the language-model memory planner: SpikingJelly's plan_training.
 *
 * Given a TrainingConfig, a world size and the memory of one device, it enumerates the
 * tensor / pipeline / context parallel topologies the model and batch allow, estimates
 * the memory of each with a static model (parameters + optimizer state, activations),
 * and returns a copy of the config with the chosen topology and memory policy set. The
 * formulas, candidate rules and choice order are documented in docs/lm.md ("Planning a
 * topology"); the estimate is a model of a Megatron-style GPU run, not of snn's CPU
 * process (that section also measures how far it is from the CPU's peak RSS). */
#ifndef SNN_LM_PLAN_H
#define SNN_LM_PLAN_H

#include <stdint.h>

#include "error.h"
#include "lm_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_lm_plan_objective {
    SNN_LM_PLAN_THROUGHPUT = 0, /* "throughput": fewest pipeline stages, then CP, then TP */
    SNN_LM_PLAN_MEMORY = 1,     /* "memory": smallest estimate; turns use_snn_memopt on */
    SNN_LM_PLAN_OBJECTIVE_COUNT
} snn_lm_plan_objective;

/* What the planner looked at and what it chose. On SNN_OK every field is set; when no
 * topology satisfies the rules the counts are set, when none fits the budget also
 * budget_bytes and smallest_estimate_bytes; the chosen fields are then 0. On other
 * failures the report is zeroed. */
typedef struct snn_lm_plan_report {
    /* the chosen topology and policy */
    int tensor_parallel_size, pipeline_parallel_size, context_parallel_size, data_parallel_size;
    int64_t num_microbatches;
    int selective_recompute; /* 1: chosen in the second pass (selective core_attn) */
    int use_snn_memopt;
    /* the chosen candidate's estimate, in bytes (not rounded) */
    double parameter_bytes;  /* weights, gradients and (sharded) optimizer state */
    double activation_bytes;
    double estimate_bytes;   /* parameter_bytes + activation_bytes */
    double budget_bytes;     /* device_memory_bytes * memory_fraction */
    double smallest_estimate_bytes; /* over every estimate computed (both passes) */
    /* counts */
    int topologies;          /* (TP, PP, CP) triples that satisfy the candidate rules */
    int refused_by_validation; /* triples of the rules whose config snn's validation refuses */
    int estimates;           /* estimates computed, both passes together */
    int feasible;            /* candidates within the budget in the deciding pass */
} snn_lm_plan_report;

/* Plan `in` for `world_size` devices of `device_memory_bytes` each. `out` receives a copy
 * of `in` with tensor/pipeline/context parallel sizes, sequence_parallel (= TP > 1),
 * pipeline_dtype (= params_dtype when PP > 1), the recompute policy (selective with
 * modules exactly {core_attn}, or none; method and layer count cleared) and
 * use_snn_memopt (requested, or objective memory, or the selective pass) set; `in` is
 * never written (out may equal in: it is then overwritten only on success). rep may be
 * NULL. Errors (SNN_E_INVALID): world_size or device_memory_bytes not positive, an
 * unknown objective, memory_fraction outside (0, 1], an invalid config,
 * "No topology satisfies the model and batch constraints." and
 * "No topology fits the memory budget: budget=B bytes, smallest estimate=E bytes.". */
snn_status snn_lm_plan_training(const snn_lm_training_config *in, int world_size, uint64_t device_memory_bytes,
                                snn_lm_plan_objective obj, double memory_fraction, snn_lm_training_config *out,
                                snn_lm_plan_report *rep);

/* The planner's estimate of one topology: tensor_parallel_size tp, pipeline pp, context
 * cp, data parallel dp (the optimizer state is sharded over dp*cp), with or without
 * selective recompute; the other fields of c (model, precision, batch) as given (c must
 * be a valid config; its own topology fields are not used). No candidate rule is checked here except what the
 * arithmetic needs (all sizes >= 1, global divisible by micro*dp); either output may be
 * NULL. */
snn_status snn_lm_plan_estimate(const snn_lm_training_config *c, int tp, int pp, int cp, int dp,
                                int selective_recompute, double *parameter_bytes, double *activation_bytes);

/* "throughput" / "memory" (NULL if out of range) and its parser (-1 if unknown). */
const char *snn_lm_plan_objective_name(snn_lm_plan_objective o);
int snn_lm_plan_objective_parse(const char *s);

#ifdef __cplusplus
}
#endif
#endif
