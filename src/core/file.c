/* snn_open_regular: stat first so that a FIFO, device or directory is refused without
 * being opened at all, then open with O_NONBLOCK and check again on the descriptor
 * (the path may have been swapped in between), then clear O_NONBLOCK for plain reads. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error_internal.h"
#include "core/file_internal.h"

static const char *kind_name(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

static snn_status refuse(const char *path, const char *what, mode_t m) {
    return snn_error(SNN_E_IO, "%s is %s, not a %s (only regular files are read)", path, kind_name(m), what);
}

snn_status snn_open_regular(const char *path, const char *what, int *fd, uint64_t *size) {
    *fd = -1;
    if (size) *size = 0;
    if (!path || !*path) return snn_error(SNN_E_INVALID, "empty %s path", what);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return snn_error(SNN_E_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return refuse(path, what, sb.st_mode);
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) return snn_error(SNN_E_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return snn_error(SNN_E_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return refuse(path, what, sb.st_mode);
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(f);
        return snn_error(SNN_E_IO, "cannot set up %s for reading: %s", path, strerror(e));
    }
    *fd = f;
    if (size) *size = (uint64_t)sb.st_size;
    return SNN_OK;
}

snn_status snn_fopen_regular(const char *path, const char *what, FILE **f) {
    *f = NULL;
    int fd;
    SNN_TRY(snn_open_regular(path, what, &fd, NULL));
    *f = fdopen(fd, "rb");
    if (!*f) {
        close(fd);
        return snn_error(SNN_E_NOMEM, "cannot set up a stream to read %s", path);
    }
    return SNN_OK;
}
