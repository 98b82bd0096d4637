/* A run directory after a crash: temporaries of killed checkpoint writers, and a
 * metrics.jsonl that went on after the last checkpoint. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/error_internal.h"
#include "snn/train.h"

/* A writer is gone when signalling its pid says there is no such process; EPERM means a
 * process of another user has that pid, which we leave alone. */
static int pid_alive(long pid) {
    if (pid <= 0 || pid > 0x7fffffffL) return 0;
    if (kill((pid_t)pid, 0) == 0) return 1;
    return errno == EPERM;
}

snn_status snn_run_dir_clean(const char *dir, const char *base, int *removed) {
    if (removed) *removed = 0;
    if (!dir || !base) return snn_error(SNN_E_INVALID, "snn_run_dir_clean: NULL argument");
    DIR *d = opendir(dir);
    if (!d) return snn_error(SNN_E_IO, "cannot read the directory '%s': %s", dir, strerror(errno));
    size_t bl = strlen(base);
    struct dirent *e;
    snn_status st = SNN_OK;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (strncmp(nm, base, bl) != 0 || strncmp(nm + bl, ".tmp.", 5) != 0) continue;
        const char *p = nm + bl + 5;
        char *end = NULL;
        errno = 0;
        long pid = strtol(p, &end, 10);
        if (!*p || *p < '0' || *p > '9' || errno || *end) continue; /* not ours */
        if (pid == (long)getpid() || pid_alive(pid)) continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, nm) >= (int)sizeof path) continue;
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (unlink(path) != 0) {
            st = snn_error(SNN_E_IO, "cannot remove the stale temporary '%s': %s", path, strerror(errno));
            break;
        }
        if (removed) (*removed)++;
    }
    closedir(d);
    return st;
}

/* 1: keep the line (it describes training the checkpoint contains). */
static int keep_line(const char *line, long step) {
    cJSON *j = cJSON_Parse(line);
    int keep = 0;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
    if (cJSON_IsObject(j) && cJSON_IsNumber(s)) {
        double v = s->valuedouble;
        int partial = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "partial"));
        keep = v < (double)step || (v == (double)step && !partial);
    }
    cJSON_Delete(j);
    return keep;
}

snn_status snn_metrics_trim(const char *path, long step) {
    if (!path) return snn_error(SNN_E_INVALID, "snn_metrics_trim: path is NULL");
    FILE *in = fopen(path, "r");
    if (!in) {
        if (errno == ENOENT) return SNN_OK;
        return snn_error(SNN_E_IO, "cannot read '%s': %s", path, strerror(errno));
    }
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        fclose(in);
        return snn_error(SNN_E_INVALID, "path too long: '%s'", path);
    }
    FILE *out = fopen(tmp, "w");
    if (!out) {
        snn_status st = snn_error(SNN_E_IO, "cannot write '%s': %s", tmp, strerror(errno));
        fclose(in);
        return st;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int dropped = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        /* a last line without its newline was cut by a crash: never kept */
        if (line[n - 1] == '\n' && keep_line(line, step)) fputs(line, out);
        else dropped++;
    }
    int rerr = ferror(in);
    free(line);
    fclose(in);
    int werr = fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0;
    int e = errno;
    werr |= fclose(out) != 0;
    if (rerr || werr) {
        unlink(tmp);
        return snn_error(SNN_E_IO, "cannot %s '%s': %s", rerr ? "read" : "write", rerr ? path : tmp, strerror(e));
    }
    if (!dropped) {
        unlink(tmp);
        return SNN_OK;
    }
    if (rename(tmp, path) != 0) {
        snn_status st = snn_error(SNN_E_IO, "cannot replace '%s': %s", path, strerror(errno));
        unlink(tmp);
        return st;
    }
    return SNN_OK;
}
