/* Opening files the library reads: only regular files, and never a blocking open. */
#ifndef SNN_FILE_INTERNAL_H
#define SNN_FILE_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include "snn/error.h"

/* Open `path` for reading if it is a regular file; `what` names it in messages
 * ("checkpoint", "IDX file"). Directories, FIFOs, sockets and devices are refused before
 * any blocking open (a FIFO without a writer would hang). On success *fd is open
 * (blocking, close-on-exec) and *size holds the file's size. */
snn_status snn_open_regular(const char *path, const char *what, int *fd, uint64_t *size);

/* The same as a stdio stream ("rb"); *f NULL on error. */
snn_status snn_fopen_regular(const char *path, const char *what, FILE **f);

#endif
