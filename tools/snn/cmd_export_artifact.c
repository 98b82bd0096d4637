/* snn export-artifact CHECKPOINT_DIR OUT: merge the (pp, tp) shards of a distributed
 * training checkpoint (checkpoint_dir/step_XXXXXXXX) into one topology-independent
 * inference artifact (docs/checkpoint-format.md). One process; no MPI needed. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cmds.h"
#include "snn/vision.h"

int cmd_export_artifact(int argc, char **argv) {
    if (args_wants_help(argc, argv, 2)) {
        printf("usage: snn export-artifact CHECKPOINT_DIR OUT\n\n"
               "Merge the pp_PPPP_tp_TTTT.safetensors shards of a distributed checkpoint step directory into\n"
               "one inference artifact OUT (safetensors, schema 1) that evaluation and prediction load for\n"
               "any tensor/pipeline/data-parallel topology. OUT must not exist.\n");
        return 0;
    }
    if (argc != 4) die_usage("export-artifact takes exactly CHECKPOINT_DIR and OUT (try snn export-artifact --help)");
    if (argv[2][0] == '-' || argv[3][0] == '-') die_usage("export-artifact: unknown option '%s'", argv[2][0] == '-' ? argv[2] : argv[3]);
    snn_status st = snn_vision_export_artifact(argv[2], argv[3]);
    if (st != SNN_OK) die_status(st, "export-artifact");
    snn_vision_model_config mc;
    int pp = 0, tp = 0;
    snn_ckpt *c = NULL;
    st = snn_vision_artifact_open(argv[3], &mc, &pp, &tp, &c);
    if (st != SNN_OK) die_status(st, "export-artifact: re-reading the artifact");
    printf("{\"artifact\": \"%s\", \"model\": \"%s\", \"tensors\": %zu, \"source_pipeline_parallel_size\": %d, "
           "\"source_tensor_parallel_size\": %d}\n",
           argv[3], snn_vision_model_name(mc.kind), snn_ckpt_num_tensors(c), pp, tp);
    snn_ckpt_close(c);
    return 0;
}
