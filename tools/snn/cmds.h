#ifndef SNN_TOOL_CMDS_H
#define SNN_TOOL_CMDS_H

int cmd_train(int argc, char **argv);
/* tools/snn/cmd_train_dist.c: snn train with --data-parallel & co., or under mpirun */
int train_dist_wanted(int argc, char **argv);
int cmd_train_dist(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* tools/snn/cmd_export_artifact.c */
int cmd_export_artifact(int argc, char **argv);
int cmd_lm(int argc, char **argv);

#endif
