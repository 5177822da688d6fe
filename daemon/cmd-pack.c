/* `ebb pack`: writes a model's weights regrouped per layer for streaming (runtime/stream/pack.h),
 * and with --verify reads every group of an existing pack back through its checksums. */
#include "cmds.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "stream/pack.h"

static void pack_usage(FILE *f)
{
    fprintf(f, "usage: ebb pack MODEL -o FILE [--zstd] [--level N] [--layout NAME]\n"
               "                [--device-kind KIND]\n"
               "       ebb pack --verify FILE [-m MODEL]\n"
               "\n"
               "Write the weights of the GGUF file MODEL as a pack: one 4 KiB-aligned record per\n"
               "decoder layer (plus one for the always-resident tensors), each with a checksum,\n"
               "so that the layer streamer reads a layer with one contiguous read.\n"
               "\n"
               "options:\n"
               "  -o, --output FILE    pack file to write (written to FILE.tmp, then renamed)\n"
               "  --zstd               store a layer as a zstd frame where that saves >= 10%%\n"
               "  --level N            zstd level (1..19, default 3)\n"
               "  --layout NAME        weight layout (default and only one so far: gguf-raw)\n"
               "  --device-kind KIND   device kind the pack is for (default: any)\n"
               "  --verify FILE        read every record of FILE back and check its checksum;\n"
               "                       with -m MODEL also check that FILE was made from MODEL\n"
               "  -h, --help           show this help\n"
               "\n"
               "exit status: 0 success, 1 unreadable model or write/verify failure, 2 usage\n");
}

static double secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int verify(const char *path, const char *model)
{
    struct ebb_diag diag = {{0}};
    struct ebb_gguf *g = NULL;
    struct ebb_pack *p = NULL;
    struct ebb_pack_expect want, *w = NULL;
    void *buf = NULL;
    int ret = 1;
    ebb_err rc;
    if (model) {
        if ((rc = ebb_gguf_open(model, &g, &diag))) {
            fprintf(stderr, "ebb pack: cannot open model '%s': %s\n", model,
                    diag.msg[0] ? diag.msg : ebb_err_str(rc));
            goto out;
        }
        ebb_pack_expect_from_gguf(g, &want);
        w = &want;
    }
    if ((rc = ebb_pack_open(path, w, &p, &diag))) {
        fprintf(stderr, "ebb pack: %s\n", diag.msg[0] ? diag.msg : ebb_err_str(rc));
        goto out;
    }
    const struct ebb_pack_info *i = ebb_pack_info(p);
    uint64_t max = 0, raw = 0;
    for (uint32_t k = 0; k < i->n_groups; k++) {
        struct ebb_stream_layer L;
        ebb_pack_group(p, k, &L);
        max = L.raw_size > max ? L.raw_size : max;
    }
    buf = malloc(max ? max : 1);
    if (!buf)
        goto out;
    double t0 = secs();
    for (uint32_t k = 0; k < i->n_groups; k++) {
        if ((rc = ebb_pack_read_group(p, k, buf, max, &diag))) {
            fprintf(stderr, "ebb pack: %s\n", diag.msg);
            goto out;
        }
        struct ebb_stream_layer L;
        ebb_pack_group(p, k, &L);
        raw += L.raw_size;
    }
    printf("%s: model '%s', layout %s, device kind %s, %u layers, %.1f MiB checked in %.2f s\n",
           path, i->model_name, i->layout, i->device_kind, i->n_layer, raw / 1048576.0,
           secs() - t0);
    ret = 0;
out:
    free(buf);
    ebb_pack_close(p);
    ebb_gguf_close(g);
    return ret;
}

int ebb_cmd_pack(int argc, char **argv)
{
    const char *model = NULL, *outp = NULL, *check = NULL, *ref = NULL;
    struct ebb_pack_write_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            pack_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && more) {
            outp = argv[++i];
        } else if (!strcmp(a, "--zstd")) {
            o.zstd = true;
        } else if (!strcmp(a, "--level") && more) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 19) {
                fprintf(stderr, "ebb pack: --level must be 1..19\n");
                return 2;
            }
            o.level = (int)v;
        } else if (!strcmp(a, "--layout") && more) {
            o.layout = argv[++i];
        } else if (!strcmp(a, "--device-kind") && more) {
            o.device_kind = argv[++i];
        } else if (!strcmp(a, "--verify") && more) {
            check = argv[++i];
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) {
            ref = argv[++i];
        } else if (a[0] != '-' && !model) {
            model = a;
        } else {
            fprintf(stderr, "ebb pack: unexpected argument '%s'\n\n", a);
            pack_usage(stderr);
            return 2;
        }
    }
    if (check)
        return verify(check, ref ? ref : model);
    if (!model || !outp) {
        pack_usage(stderr);
        return 2;
    }
    struct ebb_diag diag = {{0}};
    struct ebb_gguf *g = NULL;
    ebb_err rc = ebb_gguf_open(model, &g, &diag);
    if (rc) {
        fprintf(stderr, "ebb pack: cannot open model '%s': %s\n", model,
                diag.msg[0] ? diag.msg : ebb_err_str(rc));
        return 1;
    }
    struct ebb_pack_write_stats st;
    double t0 = secs();
    rc = ebb_pack_write(g, outp, &o, &st, &diag);
    ebb_gguf_close(g);
    if (rc) {
        fprintf(stderr, "ebb pack: %s\n", diag.msg[0] ? diag.msg : ebb_err_str(rc));
        return 1;
    }
    printf("%s: %u records (%u zstd), %.1f MiB of weights stored in %.1f MiB, file %.1f MiB, "
           "%.2f s\n",
           outp, st.n_groups, st.n_compressed, st.raw_bytes / 1048576.0,
           st.stored_bytes / 1048576.0, st.file_bytes / 1048576.0, secs() - t0);
    return 0;
}
