/* `ebb tokenize` and `ebb detokenize`: the model's tokenizer on the command line, opened
 * straight from the GGUF file (no weights are touched). */
#include "cmds.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void tok_usage(FILE *f)
{
    fprintf(f,
            "usage: ebb tokenize -m MODEL [--json] [--bos] [--add-special] [--special] [TEXT | -]\n"
            "\n"
            "Print the token ids of TEXT (or of standard input with '-', or when TEXT is\n"
            "absent) as the model's tokenizer encodes it; ids are separated by spaces on one\n"
            "line. The text is taken byte for byte (no trailing newline is added or removed);\n"
            "put -- before a TEXT that starts with '-'.\n"
            "\n"
            "options:\n"
            "  -m, --model MODEL  GGUF file whose tokenizer is used (required)\n"
            "  --json             print a JSON array of ids instead\n"
            "  --bos              prepend the model's BOS token (if it has one)\n"
            "  --add-special      add BOS/EOS exactly as the model's metadata asks\n"
            "                     (tokenizer.ggml.add_bos_token / add_eos_token)\n"
            "  --special          text of special tokens (e.g. <|im_start|>) becomes those\n"
            "                     tokens; without it such text is tokenized as plain text\n"
            "  -h, --help         show this help\n"
            "\n"
            "exit status: 0 success, 1 unreadable model or input, 2 usage error\n");
}

static void detok_usage(FILE *f)
{
    fprintf(f, "usage: ebb detokenize -m MODEL [--special] [--no-newline] IDS...\n"
               "\n"
               "Print the text of the token ids (decimal; separate arguments, or separated by\n"
               "commas or spaces within one argument), followed by a newline.\n"
               "\n"
               "options:\n"
               "  -m, --model MODEL  GGUF file whose tokenizer is used (required)\n"
               "  --special          render control tokens (e.g. <|im_end|>) as their text;\n"
               "                     without it they produce no text\n"
               "  --no-newline       do not print the final newline\n"
               "  -h, --help         show this help\n"
               "\n"
               "exit status: 0 success, 1 unreadable model or bad id, 2 usage error\n");
}

static int open_tokenizer(const char *cmd, const char *path, struct ebb_gguf **g,
                          struct ebb_tokenizer **t)
{
    struct ebb_diag diag = {{0}};
    ebb_err rc = ebb_gguf_open(path, g, &diag);
    if (rc) {
        fprintf(stderr, "ebb %s: cannot open model '%s': %s\n", cmd, path,
                diag.msg[0] ? diag.msg : ebb_err_str(rc));
        return 1;
    }
    rc = ebb_tokenizer_new(*g, t, &diag);
    if (rc) {
        fprintf(stderr, "ebb %s: model '%s' has no usable tokenizer: %s\n", cmd, path,
                diag.msg[0] ? diag.msg : ebb_err_str(rc));
        ebb_gguf_close(*g);
        *g = NULL;
        return 1;
    }
    return 0;
}

static char *read_all(FILE *f, size_t *n)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) {
            if (ferror(f)) {
                free(buf);
                return NULL;
            }
            break;
        }
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    *n = len;
    return buf;
}

int ebb_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    bool json = false, bos = false, add_special = false, special = false, have_text = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tok_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ebb tokenize: %s needs a value\n", a);
                tok_usage(stderr);
                return 2;
            }
            model = argv[++i];
        } else if (!strncmp(a, "--model=", 8)) {
            model = a + 8;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--bos")) {
            bos = true;
        } else if (!strcmp(a, "--add-special")) {
            add_special = true;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (a[0] == '-' && a[1] != '\0' && strcmp(a, "--")) {
            fprintf(stderr, "ebb tokenize: unknown option '%s'\n", a);
            tok_usage(stderr);
            return 2;
        } else {
            if (!strcmp(a, "--")) {
                if (++i >= argc)
                    break;
                a = argv[i];
            }
            if (have_text) {
                fprintf(stderr, "ebb tokenize: more than one TEXT (quote the text)\n");
                tok_usage(stderr);
                return 2;
            }
            text = a;
            have_text = true;
        }
    }
    if (!model) {
        fprintf(stderr, "ebb tokenize: -m MODEL is required\n");
        tok_usage(stderr);
        return 2;
    }

    int ret = 1;
    struct ebb_gguf *g = NULL;
    struct ebb_tokenizer *t = NULL;
    char *input = NULL;
    int32_t *ids = NULL;
    size_t len = 0;
    if (open_tokenizer("tokenize", model, &g, &t))
        return 1;
    if (!have_text || !strcmp(text, "-")) {
        input = read_all(stdin, &len);
        if (!input) {
            fprintf(stderr, "ebb tokenize: cannot read standard input: %s\n", strerror(errno));
            goto out;
        }
        text = input;
    } else {
        len = strlen(text);
    }
    unsigned flags =
        (add_special ? EBB_TOK_ADD_SPECIAL : 0) | (special ? EBB_TOK_PARSE_SPECIAL : 0);
    size_t cap = len + 8, n = 0;
    ids = malloc(sizeof(int32_t) * cap);
    if (!ids) {
        fprintf(stderr, "ebb tokenize: out of memory\n");
        goto out;
    }
    ebb_err rc = ebb_tokenizer_encode(t, text, len, flags, ids, cap, &n);
    if (rc == EBB_ERANGE) {
        int32_t *nids = realloc(ids, sizeof(int32_t) * n);
        if (!nids) {
            fprintf(stderr, "ebb tokenize: out of memory\n");
            goto out;
        }
        ids = nids;
        cap = n;
        rc = ebb_tokenizer_encode(t, text, len, flags, ids, cap, &n);
    }
    if (rc) {
        fprintf(stderr, "ebb tokenize: %s\n", ebb_err_str(rc));
        goto out;
    }
    bool first = true;
    int32_t bos_id = ebb_tokenizer_bos(t);
    bool put_bos = bos && bos_id >= 0 && !(n > 0 && add_special && ids[0] == bos_id);
    fputs(json ? "[" : "", stdout);
    if (put_bos) {
        printf("%d", bos_id);
        first = false;
    }
    for (size_t i = 0; i < n; i++) {
        printf("%s%d", first ? "" : (json ? "," : " "), ids[i]);
        first = false;
    }
    printf("%s\n", json ? "]" : "");
    ret = fflush(stdout) ? 1 : 0;
out:
    free(ids);
    free(input);
    ebb_tokenizer_free(t);
    ebb_gguf_close(g);
    return ret;
}

/* Parses the ids in one argument ("12", "12,13", "12 13"); returns false with a message. */
static bool parse_ids(const char *arg, const struct ebb_tokenizer *t, int32_t **ids, size_t *n,
                      size_t *cap)
{
    const char *p = arg;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '[' || *p == ']')
            p++;
        if (!*p)
            return true;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno ||
            (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n' && *end != ']')) {
            fprintf(stderr, "ebb detokenize: '%s' is not a token id\n", arg);
            return false;
        }
        if (v < 0 || v >= (long long)ebb_tokenizer_n_vocab(t)) {
            fprintf(stderr,
                    "ebb detokenize: token id %lld is out of range (the vocabulary has %u "
                    "tokens)\n",
                    v, ebb_tokenizer_n_vocab(t));
            return false;
        }
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            int32_t *ni = realloc(*ids, nc * sizeof *ni);
            if (!ni) {
                fprintf(stderr, "ebb detokenize: out of memory\n");
                return false;
            }
            *ids = ni;
            *cap = nc;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
}

int ebb_cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    bool special = false, newline = true;
    int first_id = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            detok_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ebb detokenize: %s needs a value\n", a);
                detok_usage(stderr);
                return 2;
            }
            model = argv[++i];
        } else if (!strncmp(a, "--model=", 8)) {
            model = a + 8;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "--no-newline")) {
            newline = false;
        } else if (!strcmp(a, "--")) {
            first_id = i + 1;
            break;
        } else if (a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
            fprintf(stderr, "ebb detokenize: unknown option '%s'\n", a);
            detok_usage(stderr);
            return 2;
        } else {
            first_id = i;
            break;
        }
    }
    if (!model) {
        fprintf(stderr, "ebb detokenize: -m MODEL is required\n");
        detok_usage(stderr);
        return 2;
    }
    if (first_id < 0 || first_id >= argc) {
        fprintf(stderr, "ebb detokenize: no token ids given\n");
        detok_usage(stderr);
        return 2;
    }
    int ret = 1;
    struct ebb_gguf *g = NULL;
    struct ebb_tokenizer *t = NULL;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    if (open_tokenizer("detokenize", model, &g, &t))
        return 1;
    for (int i = first_id; i < argc; i++) {
        if (!strcmp(argv[i], "--special")) {
            special = true;
            continue;
        }
        if (!strcmp(argv[i], "--no-newline")) {
            newline = false;
            continue;
        }
        if (!parse_ids(argv[i], t, &ids, &n, &cap))
            goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct ebb_str piece;
        if (ebb_tokenizer_piece(t, ids[i], special, &piece) == EBB_OK)
            fwrite(piece.p, 1, piece.n, stdout);
    }
    if (newline)
        fputc('\n', stdout);
    ret = fflush(stdout) ? 1 : 0;
out:
    free(ids);
    ebb_tokenizer_free(t);
    ebb_gguf_close(g);
    return ret;
}
