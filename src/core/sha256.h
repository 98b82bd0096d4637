/* SHA-256 (FIPS 180-4), incremental. Used to fingerprint canonical JSON recipes. */
#ifndef SNN_CORE_SHA256_H
#define SNN_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct snn_sha256_ctx {
    uint32_t h[8];
    uint64_t total;       /* bytes absorbed so far */
    uint8_t buf[64];
    size_t fill;          /* bytes waiting in buf */
} snn_sha256_ctx;

void snn_sha256_init(snn_sha256_ctx *s);
void snn_sha256_update(snn_sha256_ctx *s, const void *data, size_t len);
void snn_sha256_final(snn_sha256_ctx *s, uint8_t digest[32]);
/* One call: digest of len bytes, and its lower-case hex form (65 bytes with the NUL). */
void snn_sha256(const void *data, size_t len, uint8_t digest[32]);
void snn_sha256_hex(const void *data, size_t len, char hex[65]);

#endif
