/* `ebb pull`: fetches a model from a Hugging Face hub into models_dir through runtime/fetch,
 * with a bar (bytes, rate, ETA) on a terminal and plain lines otherwise. */
#include "cmds.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/config.h"
#include "fetch/fetch.h"

int ebb__models_dir(const char *cmd, const char *dir, const char *config, char *out, size_t n)
{
    if (dir) {
        snprintf(out, n, "%s", dir);
        return 0;
    }
    struct ebb_config cfg;
    struct ebb_diag d = {{0}};
    int ret = 0;
    if (ebb_config_init(&cfg) || ebb_config_build(&cfg, config, NULL, 0, &d)) {
        fprintf(stderr, "ebb %s: %s\n", cmd, d.msg[0] ? d.msg : "out of memory");
        ret = 1;
    } else {
        snprintf(out, n, "%s", cfg.models_dir);
    }
    ebb_config_fini(&cfg);
    return ret;
}

/* ---- ebb pull ---------------------------------------------------------------------------------
 */

static void pull_usage(FILE *f)
{
    fprintf(f,
            "usage: ebb pull [--dir DIR] [--config FILE] [--retries N] [--timeout SECS] MODEL\n\n"
            "Downloads a GGUF model from Hugging Face into models_dir. MODEL is\n"
            "  hf://OWNER/REPO/FILE.gguf   that file of the repository\n"
            "  OWNER/REPO:QUANT            the repository's .gguf whose name carries QUANT\n"
            "                              (e.g. unsloth/gemma-3-270m-it-GGUF:Q4_K_M)\n"
            "  OWNER/REPO                  the repository's only .gguf\n"
            "A split model (NAME-00001-of-00003.gguf) brings every part. An interrupted\n"
            "download is kept as FILE.gguf.part and resumed (HTTP Range) by the next pull; the\n"
            "file is checked against the sha256 the hub reports and renamed into place whole.\n"
            "A file already in models_dir is kept as it is.\n\n"
            "  --dir DIR       download into DIR instead of models_dir\n"
            "  --retries N     attempts after a connection lost mid-file, resuming (default 3)\n"
            "  --timeout SECS  connect and read timeout (default 30)\n\n"
            "environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (gated or\n"
            "private repositories; sent only to the endpoint's host), SSL_CERT_FILE (CA file\n"
            "instead of the system store)\n"
            "exit status: 0 success, 1 failure, 2 usage error\n");
}

struct bar {
    bool tty;
    double t0;        /* when the current attempt started */
    uint64_t resumed; /* bytes there when it started */
    int last_decile;  /* plain lines: the last tenth printed */
    bool open_line;   /* a \r line is on the terminal */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fmt_bytes(char *b, size_t n, double v)
{
    if (v >= 1073741824.0)
        snprintf(b, n, "%.2f GiB", v / 1073741824.0);
    else
        snprintf(b, n, "%.1f MiB", v / 1048576.0);
}

static void progress(const struct ebb_pull_progress *p, void *ud)
{
    struct bar *b = ud;
    char part[32] = "", done[32], total[32], rate[32];
    if (p->n_parts > 1)
        snprintf(part, sizeof(part), " (part %d of %d)", p->part, p->n_parts);
    if (b->open_line && p->phase != EBB_PULL_DOWNLOADING && p->phase != EBB_PULL_VERIFYING) {
        fputc('\n', stderr);
        b->open_line = false;
    }
    switch (p->phase) {
    case EBB_PULL_RESOLVING:
        fprintf(stderr, "pull: looking up %s\n", p->file);
        return;
    case EBB_PULL_RETRYING:
        fprintf(stderr, "pull: %s; retrying\n", p->note);
        return;
    case EBB_PULL_DONE:
        fmt_bytes(total, sizeof(total), (double)p->total);
        fprintf(stderr, "pull: %s%s: %s, %s\n", p->file, part, total,
                p->present     ? "already present, kept"
                : p->sha256[0] ? "sha256 verified"
                               : "done "
                                 "(the server reported no sha256: not verified)");
        return;
    case EBB_PULL_VERIFYING:
    case EBB_PULL_DOWNLOADING:
        break;
    }
    double t = now_s();
    if (p->resumed != b->resumed || p->done < b->resumed || !b->t0) {
        b->t0 = t;
        b->resumed = p->resumed;
        b->last_decile = -1;
        if (p->resumed && p->phase == EBB_PULL_DOWNLOADING) {
            fmt_bytes(done, sizeof(done), (double)p->resumed);
            fprintf(stderr, "pull: %s%s: resuming at %s\n", p->file, part, done);
        }
    }
    double dt = t - b->t0, got = (double)(p->done - (p->done > b->resumed ? b->resumed : p->done));
    double r = dt > 0.2 ? got / dt : 0;
    fmt_bytes(done, sizeof(done), (double)p->done);
    fmt_bytes(total, sizeof(total), (double)p->total);
    fmt_bytes(rate, sizeof(rate), r);
    int pct = p->total ? (int)(100.0 * (double)p->done / (double)p->total) : -1;
    const char *what = p->phase == EBB_PULL_VERIFYING ? "checking" : "";
    if (b->tty) {
        char bar[31];
        int fill = pct < 0 ? 0 : pct * 30 / 100;
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        char eta[32] = "";
        if (r > 0 && p->total > p->done && p->phase == EBB_PULL_DOWNLOADING) {
            long s = (long)((double)(p->total - p->done) / r);
            snprintf(eta, sizeof(eta), " ETA %ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
        }
        fprintf(stderr, "\r\033[K%s%s %s [%s] %3d%% %s/%s %s/s%s", p->file, part, what, bar,
                pct < 0 ? 0 : pct, done, p->total ? total : "?", rate, eta);
        b->open_line = true;
        return;
    }
    int decile = pct < 0 ? (int)(p->done >> 30) : pct / 10;
    if (decile == b->last_decile)
        return;
    b->last_decile = decile;
    fprintf(stderr, "pull: %s%s: %s%s%s of %s (%d%%), %s/s\n", p->file, part, what,
            what[0] ? " " : "", done, p->total ? total : "?", pct < 0 ? 0 : pct, rate);
}

int ebb_cmd_pull(int argc, char **argv)
{
    enum { O_DIR = 256, O_CONFIG, O_RETRIES, O_TIMEOUT };
    static const struct option longs[] = {{"dir", required_argument, NULL, O_DIR},
                                          {"config", required_argument, NULL, O_CONFIG},
                                          {"retries", required_argument, NULL, O_RETRIES},
                                          {"timeout", required_argument, NULL, O_TIMEOUT},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *dir = NULL, *config = NULL;
    struct ebb_pull_opts o = {.retries = -1};
    int c;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case O_DIR:
            dir = optarg;
            break;
        case O_CONFIG:
            config = optarg;
            break;
        case O_RETRIES:
        case O_TIMEOUT: {
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end || v < (c == O_RETRIES ? 0 : 1) || v > 3600) {
                fprintf(stderr, "ebb pull: --%s: '%s' is not a number in %d..3600\n",
                        c == O_RETRIES ? "retries" : "timeout", optarg, c == O_RETRIES ? 0 : 1);
                return 2;
            }
            if (c == O_RETRIES)
                o.retries = (int)v;
            else
                o.timeout_s = (int)v;
            break;
        }
        case 'h':
            pull_usage(stdout);
            return 0;
        default:
            pull_usage(stderr);
            return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "ebb pull: %s\n", optind < argc ? "one model at a time" : "which model?");
        pull_usage(stderr);
        return 2;
    }
    char mdir[4096], path[4096];
    if (ebb__models_dir("pull", dir, config, mdir, sizeof(mdir)))
        return 1;
    /* A server that closes while the request is written must give an error, not a SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    struct bar b = {.tty = isatty(STDERR_FILENO) == 1};
    o.progress = progress;
    o.ud = &b;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_pull(argv[optind], mdir, &o, path, sizeof(path), &d);
    if (b.open_line)
        fputc('\n', stderr);
    if (rc) {
        fprintf(stderr, "ebb pull: %s\n", d.msg[0] ? d.msg : ebb_err_str(rc));
        return 1;
    }
    printf("%s\n", path);
    return 0;
}
