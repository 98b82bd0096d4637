/* SHA-256 against the FIPS 180-4 example messages (NIST's "SHA-256 examples": one block,
 * two blocks, and one million 'a'), the empty message, and the incremental interface
 * against the one-shot one on fresh random data split at random points. (The oracle test
 * tests/oracle_lm_json.py compares with Python's hashlib.) */
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "harness.h"

static int hex_is(const void *msg, size_t n, const char *want) {
    char hex[65];
    snn_sha256_hex(msg, n, hex);
    if (strcmp(hex, want) != 0) fprintf(stderr, "  sha256 %s, want %s\n", hex, want);
    return strcmp(hex, want) == 0;
}

int main(void) {
    CHECK(hex_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    CHECK(hex_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(hex_is(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    CHECK(hex_is(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    CHECK(hex_is(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    free(a);
    uint64_t s = snn_test_seed() | 1;
    for (int trial = 0; trial < 50; trial++) {
        size_t n = (size_t)(s % 3000);
        unsigned char *buf = malloc(n + 1);
        for (size_t i = 0; i < n; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; buf[i] = (unsigned char)s; }
        uint8_t one[32], inc[32];
        snn_sha256(buf, n, one);
        snn_sha256_ctx c;
        snn_sha256_init(&c);
        for (size_t off = 0; off < n;) {
            size_t step = 1 + (size_t)((s >> 20) % 150);
            s = s * 6364136223846793005ull + 1;
            if (off + step > n) step = n - off;
            snn_sha256_update(&c, buf + off, step);
            off += step;
        }
        snn_sha256_final(&c, inc);
        CHECK(memcmp(one, inc, 32) == 0);
        free(buf);
    }
    return snn_test_finish("test_sha256");
}
