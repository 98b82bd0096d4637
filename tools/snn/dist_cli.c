/* Failure handling of multi-process commands (dist_cli.h). */
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "dist_cli.h"

static snn_comm *g_world;
static int g_setup = 1;

_Noreturn void dist_cli_exit(int code, int first, const char *msg) {
    if (snn_comm_rank(g_world) == 0 && msg) {
        if (first > 0) fprintf(stderr, "snn: error: rank %d: %s\n", first, msg);
        else fprintf(stderr, "snn: error: %s\n", msg);
    }
    fflush(stdout);
    fflush(stderr);
    snn_comm_free(g_world);
    exit(code);
}

static void fail_hook(int code, const char *msg) {
    args_die_hook = NULL;
    if (g_setup) {
        int first = -1;
        char got[1024];
        int c = snn_comm_agree_code(g_world, code, msg, &first, got, sizeof got);
        dist_cli_exit(c ? c : code, first, c ? got : msg);
    }
    fprintf(stderr, "snn: error: rank %d: %s\n", snn_comm_rank(g_world), msg);
    fflush(stderr);
    snn_comm_abort(g_world, code);
    exit(code);
}

void dist_cli_begin(snn_comm *world) {
    g_world = world;
    g_setup = 1;
    args_die_hook = fail_hook;
}

snn_comm *dist_cli_start(void) {
    snn_comm *w = NULL;
    snn_status st = snn_comm_init_world(&w);
    if (st != SNN_OK) die_status(st, "starting the communicator");
    dist_cli_begin(w);
    return w;
}

void dist_cli_setup_point(void) {
    int first = -1;
    char got[1024];
    int c = snn_comm_agree_code(g_world, 0, NULL, &first, got, sizeof got);
    if (c) dist_cli_exit(c, first, got);
}

void dist_cli_running(void) { g_setup = 0; }

void dist_cli_agreeing(void) { g_setup = 1; }
