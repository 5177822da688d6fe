/* runtime/fetch's pieces that need no server: SHA-256 against FIPS 180-4's and NIST's vectors
 * (in one call and fed in uneven pieces), and split GGUF names. The downloads themselves are
 * tested against a hub-like server in tests/cli/test-pull.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fetch/fetch.h"
#include "fetch/sha256.h"

static void hex_of(const void *data, size_t n, char hex[65])
{
    struct ebb_sha256 s;
    uint8_t d[32];
    ebb_sha256_init(&s);
    ebb_sha256_update(&s, data, n);
    ebb_sha256_final(&s, d);
    ebb_sha256_hex(d, hex);
}

static void test_vectors(void **state)
{
    (void)state;
    char hex[65];
    hex_of("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m448, strlen(m448), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 =
        "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
        "klmnopqrlmnopqrsmnopqrstnopqrstu";
    hex_of(m896, strlen(m896), hex);
    assert_string_equal(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

/* A million 'a's, fed in pieces of 1, 63, 64, 65 and 4097 bytes: the same digest as in one. */
static void test_pieces(void **state)
{
    (void)state;
    size_t n = 1000000;
    char *a = malloc(n);
    assert_non_null(a);
    memset(a, 'a', n);
    char hex[65];
    hex_of(a, n, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    static const size_t steps[] = {1, 63, 64, 65, 4097};
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        struct ebb_sha256 s;
        uint8_t d[32];
        char h2[65];
        ebb_sha256_init(&s);
        for (size_t off = 0; off < n; off += steps[k])
            ebb_sha256_update(&s, a + off, off + steps[k] <= n ? steps[k] : n - off);
        ebb_sha256_final(&s, d);
        ebb_sha256_hex(d, h2);
        assert_string_equal(h2, hex);
    }
    /* 55, 56 and 64 bytes: the padding's edges (the length fits, does not, a full block). */
    hex_of(a, 55, hex);
    assert_string_equal(hex, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    hex_of(a, 56, hex);
    assert_string_equal(hex, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    hex_of(a, 64, hex);
    assert_string_equal(hex, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    free(a);
}

static void test_split_names(void **state)
{
    (void)state;
    int no, count;
    size_t stem;
    assert_true(ebb_pull_split_name("Qwen3-8B-Q4_K_M-00002-of-00003.gguf", &no, &count, &stem));
    assert_int_equal(no, 2);
    assert_int_equal(count, 3);
    assert_int_equal(stem, strlen("Qwen3-8B-Q4_K_M"));
    assert_true(ebb_pull_split_name("a-00001-of-00001.GGUF", &no, &count, &stem));
    assert_false(ebb_pull_split_name("model.gguf", &no, &count, &stem));
    assert_false(ebb_pull_split_name("m-00004-of-00003.gguf", &no, &count, &stem));
    assert_false(ebb_pull_split_name("m-00000-of-00003.gguf", &no, &count, &stem));
    assert_false(ebb_pull_split_name("m-0001-of-00003.gguf", &no, &count, &stem));
    assert_false(ebb_pull_split_name("m_00001-of-00003.gguf", &no, &count, &stem));
    assert_false(ebb_pull_split_name("m-00001-of-00003.bin", &no, &count, &stem));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_split_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
