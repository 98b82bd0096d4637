/* Failure handling of the CLI's multi-process commands (mpirun snn ...): during set-up every
 * rank meets the others at agreement points, so a rank that fails (bad input, a missing
 * file) brings its message there and rank 0 prints it once ("snn: error: rank R: ...")
 * while every rank exits with its code (2 for bad input); after set-up a failing rank prints
 * its message and ends the job through the launcher, so no rank waits in a collective. */
#ifndef SNN_TOOL_DIST_CLI_H
#define SNN_TOOL_DIST_CLI_H

#include "snn/lm_train.h" /* the communicator's public declarations */

/* Start: world is the job's communicator (owned from here: freed on exit). Installs the
 * die_usage / die_status hook. */
void dist_cli_begin(snn_comm *world);
/* snn_comm_init_world + dist_cli_begin: the world of a command (exits on failure). */
snn_comm *dist_cli_start(void);
/* Every rank calls this at the same places of the set-up. */
void dist_cli_setup_point(void);
/* Set-up is over: a failure from here on aborts the job. */
void dist_cli_running(void);
/* Back to agreeing (a final phase whose failures every rank can still meet, e.g. rank 0's
 * last write before the closing agreement). */
void dist_cli_agreeing(void);
/* Leave with code; rank 0 prints msg (naming rank `first` when >= 0). */
_Noreturn void dist_cli_exit(int code, int first, const char *msg);

#endif
