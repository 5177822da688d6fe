/* `ebb run`: generate text from a prompt on the command line. Streams the text to stdout as it
 * is produced and speed figures to stderr; with --json prints one JSON object at the end
 * instead. Everything is allocated before the decode loop. */
#include "cmds.h"
#include "cmd-run-int.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/chat/chat-template.h"
#include "api/defaults/defaults.h"
#include "daemon/config.h"
#include "daemon/serve-int.h"
#include "daemon/warm.h"
#include "model/model.h"
#include "sched/sampler.h"
#include "sched/spec.h"
#include "stream-opts.h"
#include "tokenizer/tokenizer.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The sampling settings used and where each came from ("flag", or the defaults' source), as
 * JSON for --json; also printed on stderr. NULL when out of memory. */
static json_t *sampling_summary(const struct ebb_sampling *s, unsigned sent,
                                const struct ebb_gen_defaults *gd)
{
    json_t *j = json_object();
    char line[512];
    size_t w = 0;
    for (int i = 0; j && i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        const char *src = sent & EBB_DEF_BIT(f) ? "flag" : ebb_defaults_source_name(gd->src[f]);
        char v[32];
        ebb_defaults_format(s, f, v, sizeof(v));
        json_t *val = f == EBB_DEF_TOP_K || f == EBB_DEF_REPEAT_LAST_N
                          ? json_integer((json_int_t)ebb_defaults_get(s, f))
                          : json_real(strtod(v, NULL));
        if (json_object_set_new(j, ebb_defaults_field_name(f),
                                json_pack("{s:o, s:s}", "value", val, "source", src))) {
            json_decref(j);
            return NULL;
        }
        if (w < sizeof(line)) {
            int k = snprintf(line + w, sizeof(line) - w, "%s%s %s (%s)", i ? ", " : "",
                             ebb_defaults_field_name(f), v, src);
            w += k > 0 ? (size_t)k : 0;
        }
    }
    if (j)
        fprintf(stderr, "ebb run: sampling: %s\n", line);
    return j;
}

/* --chat: the prompt (after an optional system message) as a user turn in the model's chat
 * template, or the named family's, with the assistant's turn opened. Returns a malloc'd string,
 * or NULL with the reason printed. */
static char *chat_prompt(struct ebb_model *m, const char *family, const char *system,
                         const char *prompt)
{
    struct ebb_chat_template t;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_chat_template_for_model(m, family, &t, &d);
    struct ebb_chat_msg msgs[2];
    size_t n = 0;
    if (system)
        msgs[n++] = (struct ebb_chat_msg){"system", system, strlen(system), NULL};
    msgs[n++] = (struct ebb_chat_msg){"user", prompt, strlen(prompt), NULL};
    char *out = NULL;
    size_t len = 0;
    if (!rc)
        rc = ebb_chat_template_render(&t, msgs, n, true, &out, &len, &d);
    ebb_chat_template_fini(&t);
    if (rc) {
        fprintf(stderr, "ebb run: --chat: %s\n", d.msg[0] ? d.msg : ebb_err_str(rc));
        return NULL;
    }
    return out;
}

/* One `ebb run`: everything the generation needs, allocated before its loop. */
struct run {
    struct ebb_config cfg;
    struct ebb_model *m;
    const struct ebb_tokenizer *tok;
    uint32_t n_vocab, n_ctx;
    struct ebb_sampler *smp;
    struct ebb_spec *spec; /* --spec */
    struct ebb_model *dm;  /* --draft MODEL */
    json_t *jsampling;     /* the sampling settings and their sources (--json) */
    char *wrapped;         /* --chat: the rendered prompt */
    int32_t *prompt_ids;
    size_t n_prompt;
    int32_t *gen; /* (n_gen_max + 1) generated ids */
    size_t n_gen, n_gen_max;
    uint32_t n_cand;    /* device top-k candidates per step, 0 = whole logits */
    float *logits;      /* (n_vocab) */
    int32_t *cand_ids;  /* (n_cand) */
    float *cand_logits; /* (n_cand) */
    char *text;         /* (text_cap) the generated text */
    size_t text_cap, text_len;
    struct ebb_model_out out;
    const char *stop;
    double t_prefill, t_decode;
};

static int oom(void)
{
    fprintf(stderr, "ebb run: out of memory\n");
    return 1;
}

/* The configuration as ebb serve would read it (file and EBB_* variables; ebb run's own flags
 * are the request's fields), the model, and the sampling fields no flag set resolved as the
 * server does (api/defaults/defaults.h). */
static int load(struct run *r, struct ebb__run_opts *o)
{
    struct ebb_diag d = {{0}};
    ebb_err rc;
    if ((rc = ebb_config_build(&r->cfg, o->config, NULL, 0, &d))) {
        fprintf(stderr, "ebb run: %s\n", d.msg[0] ? d.msg : ebb_err_str(rc));
        return 1;
    }
    /* A name that is no file picks a model of the catalogue, as a request's "model" does on a
     * several-model ebb serve: an id, or a unique prefix ("gemma"). */
    struct stat st;
    static char found[PATH_MAX]; /* o->model points here for the rest of the run */
    if (stat(o->model, &st) != 0 && !strchr(o->model, '/')) {
        if ((rc = ebb__serve_catalogue_find(&r->cfg, o->model, found, sizeof(found), &d))) {
            fprintf(stderr, "ebb run: %s\n", d.msg);
            return 1;
        }
        o->model = found;
    }
    struct ebb_model_params mp = o->stream;
    mp.path = o->model;
    mp.device = o->device;
    mp.n_ctx = (uint32_t)o->ctx;
    mp.n_seq = 1;
    mp.ctx_cap_trained = !o->ctx_over_trained && !r->cfg.ctx_over_trained;
    if (!o->kv_type_set)
        mp.kv_type = r->cfg.kv_type;
    if (mp.split == EBB_SPLIT_AUTO) /* --split not given: the config's (and EBB_SPLIT's) */
        mp.split = r->cfg.split;
    if (!mp.tensor_split)
        mp.tensor_split = r->cfg.tensor_split;
    if (isatty(STDERR_FILENO)) { /* a live "loading NAME: 40% (..., MB/s)" line */
        char what[128];
        ebb_warm_what(o->model, what, sizeof(what));
        ebb_warm_file(o->model, what);
    }
    if ((rc = ebb_model_open(&mp, &r->m, &d))) {
        fprintf(stderr, "ebb run: cannot load '%s': %s\n", o->model,
                d.msg[0] ? d.msg : ebb_err_str(rc));
        return 1;
    }
    r->tok = ebb_model_tokenizer(r->m);
    r->n_vocab = ebb_model_n_vocab(r->m);
    r->n_ctx = ebb_model_n_ctx(r->m);
    struct ebb_gen_defaults gd;
    ebb_defaults_resolve(r->cfg.model_sampling ? ebb_model_gguf(r->m) : NULL, &r->cfg.generation,
                         &gd);
    ebb_defaults_apply(&gd, o->sent, &o->sp);
    for (size_t i = 0; i < gd.n_notes; i++)
        fprintf(stderr, "ebb run: note: %s\n", gd.notes[i]);
    return (r->jsampling = sampling_summary(&o->sp, o->sent, &gd)) ? 0 : oom();
}

/* --draft MODEL: the draft model on the same device with the same context, one slot, attached
 * to the drafter (which checks that the vocabularies agree). */
static int load_draft(struct run *r, const struct ebb__run_opts *o)
{
    struct ebb_diag d = {{0}};
    struct ebb_model_params mp = {
        .path = o->draft, .device = o->device, .n_ctx = r->n_ctx, .n_seq = 1};
    ebb_err rc = ebb_model_open(&mp, &r->dm, &d);
    if (!rc)
        rc = ebb_spec_attach_model(r->spec, r->dm, 0, &d);
    if (rc) {
        fprintf(stderr, "ebb run: --draft '%s': %s\n", o->draft,
                d.msg[0] ? d.msg : ebb_err_str(rc));
        return 1;
    }
    return 0;
}

/* Prompt tokens: raw text with BOS per the metadata; --chat also parses the template's special
 * tokens. The prompt must leave room for one generated token. */
static int tokenize_prompt(struct run *r, const struct ebb__run_opts *o)
{
    const char *text_in = o->prompt;
    unsigned flags = EBB_TOK_ADD_SPECIAL;
    if (o->chat) {
        if (!(r->wrapped = chat_prompt(r->m, o->chat_template, o->system, o->prompt)))
            return 1;
        text_in = r->wrapped;
        flags |= EBB_TOK_PARSE_SPECIAL;
    }
    size_t cap = strlen(text_in) + 8;
    if (!(r->prompt_ids = malloc(cap * sizeof(int32_t))))
        return oom();
    ebb_err rc = ebb_tokenizer_encode(r->tok, text_in, strlen(text_in), flags, r->prompt_ids, cap,
                                      &r->n_prompt);
    if (rc == EBB_ERANGE) {
        cap = r->n_prompt;
        free(r->prompt_ids);
        if (!(r->prompt_ids = malloc(cap * sizeof(int32_t))))
            return oom();
        rc = ebb_tokenizer_encode(r->tok, text_in, strlen(text_in), flags, r->prompt_ids, cap,
                                  &r->n_prompt);
    }
    if (rc) {
        fprintf(stderr, "ebb run: cannot tokenize the prompt: %s\n", ebb_err_str(rc));
        return 1;
    }
    if (r->n_prompt == 0) {
        fprintf(stderr, "ebb run: the prompt is empty and the model adds no BOS token\n");
        return 1;
    }
    if (r->n_prompt >= r->n_ctx) {
        fprintf(stderr,
                "ebb run: the prompt is %zu tokens but the context holds %u (it must leave room "
                "for at least one generated token); use --ctx or a shorter prompt\n",
                r->n_prompt, r->n_ctx);
        return 1;
    }
    return 0;
}

/* The sampler (having seen the prompt) and everything the loop needs: logits (or device top-k
 * candidates), generated ids, and the text (bounded by the longest piece in the vocabulary). */
static int prepare(struct run *r, const struct ebb__run_opts *o)
{
    struct ebb_diag d = {{0}};
    if (ebb_sampler_new(&o->sp, r->n_vocab, &r->smp, &d)) {
        fprintf(stderr, "ebb run: %s\n", d.msg);
        return 1;
    }
    for (size_t i = 0; i < r->n_prompt; i++)
        ebb_sampler_accept(r->smp, r->prompt_ids[i]);
    size_t max_piece = 0;
    for (uint32_t i = 0; i < r->n_vocab; i++) {
        struct ebb_str piece;
        if (ebb_tokenizer_piece(r->tok, (int32_t)i, false, &piece) == EBB_OK && piece.n > max_piece)
            max_piece = piece.n;
    }
    r->n_gen_max = (size_t)o->n_predict;
    if (r->n_gen_max > r->n_ctx - r->n_prompt)
        r->n_gen_max = r->n_ctx - r->n_prompt;
    if (o->spec) {
        if (ebb_spec_new(&o->specp, r->n_vocab, r->n_ctx, &r->spec, &d)) {
            fprintf(stderr, "ebb run: %s\n", d.msg);
            return 1;
        }
        ebb_spec_push(r->spec, r->prompt_ids, (uint32_t)r->n_prompt);
        if (o->draft && load_draft(r, o))
            return 1;
    }
    r->n_cand = ebb_sampler_n_candidates(r->smp);
    uint32_t nc = r->n_cand ? r->n_cand : 1;
    r->text_cap = (r->n_gen_max + 1) * (max_piece + 4) + 8;
    r->logits = malloc(sizeof(float) * r->n_vocab);
    r->gen = malloc(sizeof(int32_t) * (r->n_gen_max + 1));
    r->text = malloc(r->text_cap);
    r->cand_ids = malloc(sizeof(int32_t) * nc);
    r->cand_logits = malloc(sizeof(float) * nc);
    if (!r->logits || !r->gen || !r->text || !r->cand_ids || !r->cand_logits)
        return oom();
    if (r->n_cand) {
        r->out.top_k = r->n_cand;
        r->out.top_ids = r->cand_ids;
        r->out.top_logits = r->cand_logits;
    } else {
        r->out.logits = r->logits;
    }
    return 0;
}

/* Appends token t's text (streamed to stdout unless --json). */
static void emit(struct run *r, const struct ebb__run_opts *o, struct ebb_detok *dt, int32_t t)
{
    struct ebb_str piece = {0};
    ebb_tokenizer_piece(r->tok, t, false, &piece);
    size_t w =
        ebb_detok_push(dt, piece.p, piece.n, r->text + r->text_len, r->text_cap - r->text_len);
    if (!o->json && w) {
        fwrite(r->text + r->text_len, 1, w, stdout);
        fflush(stdout);
    }
    r->text_len += w;
}

/* Takes the sampled token t: false at an end-of-generation token, else t is kept and shown. */
static bool take(struct run *r, const struct ebb__run_opts *o, struct ebb_detok *dt, int32_t t)
{
    if (ebb_tokenizer_is_eog(r->tok, t)) {
        r->stop = "eog";
        return false;
    }
    r->gen[r->n_gen++] = t;
    emit(r, o, dt, t);
    return true;
}

/* --spec: each step evaluates the last token and the drafts in one pass and keeps the tokens
 * the sampler agrees with (runtime/sched/spec.h); t is the first token, sampled and taken. */
static int decode_spec(struct run *r, const struct ebb__run_opts *o, struct ebb_detok *dt,
                       int32_t t, uint32_t pos)
{
    struct ebb_diag d = {{0}};
    int32_t toks[EBB_SPEC_DRAFT_CAP + 1];
    ebb_spec_push(r->spec, &t, 1);
    while (r->n_gen < r->n_gen_max) {
        uint32_t n = 0;
        if (ebb_spec_decode(r->spec, r->m, 0, r->smp, t, pos, (uint32_t)(r->n_gen_max - r->n_gen),
                            toks, &n, &d)) {
            fprintf(stderr, "\nebb run: decode failed: %s\n", d.msg);
            return 1;
        }
        pos += n;
        for (uint32_t i = 0; i < n; i++)
            if (!take(r, o, dt, toks[i]))
                return 0;
        t = toks[n - 1];
    }
    return 0;
}

/* The prompt's forward pass, then sample, accept and decode until n_gen_max tokens, an
 * end-of-generation token or the context's end. Allocates nothing. */
static int generate(struct run *r, const struct ebb__run_opts *o)
{
    struct ebb_diag d = {{0}};
    double t0 = now_ms();
    if (ebb_model_eval(r->m, 0, r->prompt_ids, (uint32_t)r->n_prompt, 0, &r->out, &d)) {
        fprintf(stderr, "ebb run: evaluating the prompt failed: %s\n", d.msg);
        return 1;
    }
    r->t_prefill = now_ms() - t0;
    double t1 = now_ms();
    struct ebb_detok dt;
    ebb_detok_init(&dt);
    r->stop = "length";
    uint32_t pos = (uint32_t)r->n_prompt;
    int status = 0;
    while (r->n_gen < r->n_gen_max) {
        int32_t t;
        ebb_err rc = r->n_cand ? ebb_sampler_sample_candidates(r->smp, r->cand_ids, r->cand_logits,
                                                               r->n_cand, &t, NULL)
                               : ebb_sampler_sample(r->smp, r->logits, &t, NULL);
        if (rc) {
            fprintf(stderr, "ebb run: no token can be sampled (all banned)\n");
            return 1;
        }
        ebb_sampler_accept(r->smp, t);
        if (!take(r, o, &dt, t) || r->n_gen == r->n_gen_max)
            break; /* no forward pass for a token nobody will read */
        if (r->spec) {
            status = decode_spec(r, o, &dt, t, pos);
            break;
        }
        if (ebb_model_eval(r->m, 0, &t, 1, pos++, &r->out, &d)) {
            fprintf(stderr, "\nebb run: decode failed: %s\n", d.msg);
            return 1;
        }
    }
    if (status)
        return status;
    if (strcmp(r->stop, "eog") && r->n_gen < (size_t)o->n_predict)
        r->stop = "context";
    size_t w = ebb_detok_finish(&dt, r->text + r->text_len, r->text_cap - r->text_len);
    if (!o->json && w)
        fwrite(r->text + r->text_len, 1, w, stdout);
    r->text_len += w;
    r->t_decode = now_ms() - t1;
    return 0;
}

/* --spec: the drafts' figures as JSON (for --json), also printed on stderr. */
static json_t *spec_summary(const struct run *r)
{
    struct ebb_spec_stats st;
    ebb_spec_stats(r->spec, &st);
    double rate = st.drafted ? (double)st.accepted / (double)st.drafted : 0;
    double per_pass = st.passes + st.plain ? (double)(st.accepted + st.passes + st.plain) /
                                                 (double)(st.passes + st.plain)
                                           : 0;
    fprintf(stderr,
            "ebb run: spec %s: %llu drafted, %llu accepted (%.1f%%), %llu verification passes "
            "+ %llu plain, %.2f tokens per pass; k now %u (acceptance %.2f, row cost %.2f)\n",
            r->dm ? "draft" : "ngram", (unsigned long long)st.drafted,
            (unsigned long long)st.accepted, 100 * rate, (unsigned long long)st.passes,
            (unsigned long long)st.plain, per_pass, st.k, st.accept_ema, st.row_cost);
    return json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:f, s:i, s:f}", "type",
                     r->dm ? "draft" : "ngram", "drafted", (json_int_t)st.drafted, "accepted",
                     (json_int_t)st.accepted, "acceptance", rate, "passes", (json_int_t)st.passes,
                     "plain_passes", (json_int_t)st.plain, "tokens_per_pass", per_pass, "k",
                     (int)st.k, "row_cost", st.row_cost);
}

/* --json: tokens, text, prompt, stop reason, seed, device, timings, peak RSS, the streamer's
 * report and the sampling settings as one object on stdout. */
static int print_json(struct run *r, double pf_tps, double dec_tps, uint64_t peak, const char *sj,
                      json_t *jspec)
{
    json_t *ids = json_array(), *pids = json_array();
    for (size_t i = 0; i < r->n_gen; i++)
        json_array_append_new(ids, json_integer(r->gen[i]));
    for (size_t i = 0; i < r->n_prompt; i++)
        json_array_append_new(pids, json_integer(r->prompt_ids[i]));
    uint64_t seed = ebb_sampler_seed(r->smp);
    json_t *jseed = seed <= INT64_MAX ? json_integer((json_int_t)seed)
                                      : json_sprintf("%llu", (unsigned long long)seed);
    json_t *j = json_pack(
        "{s:o, s:s%, s:I, s:o, s:s, s:o, s:s, s:{s:f, s:f, s:f, s:f}}", "tokens", ids, "text",
        r->text, r->text_len, "prompt_tokens", (json_int_t)r->n_prompt, "prompt_ids", pids, "stop",
        r->stop, "seed", jseed, "device", ebb_model_device_name(r->m), "timings", "prefill_ms",
        r->t_prefill, "prefill_tok_s", pf_tps, "decode_ms", r->t_decode, "decode_tok_s", dec_tps);
    if (!j) {
        json_decref(jspec);
        return oom();
    }
    json_object_set_new(j, "peak_rss_bytes", json_integer((json_int_t)peak));
    if (sj)
        json_object_set_new(j, "stream", json_loads(sj, 0, NULL));
    char xj[2048];
    if (ebb_model_expert_cache_json(r->m, xj, sizeof(xj)))
        json_object_set_new(j, "expert_cache", json_loads(xj, 0, NULL));
    json_object_set_new(j, "sampling", r->jsampling);
    r->jsampling = NULL;
    if (jspec)
        json_object_set_new(j, "spec", jspec);
    json_dumpf(j, stdout, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15));
    printf("\n");
    json_decref(j);
    return 0;
}

/* Speed, the streamer's report and the peak RSS on stderr; --json's object on stdout. */
static int report(struct run *r, const struct ebb__run_opts *o)
{
    /* Decode speed counts the forward passes after the prefill: one per token but the last. */
    size_t n_dec = r->n_gen > 1 ? r->n_gen - 1 : 0;
    double pf_tps = r->t_prefill > 0 ? 1e3 * (double)r->n_prompt / r->t_prefill : 0;
    double dec_tps = r->t_decode > 0 ? 1e3 * (double)n_dec / r->t_decode : 0;
    /* The text ends on a line of its own, flushed before the figures, so that they start a
     * line even where stdout and stderr share a pipe (2>&1). */
    if (!o->json) {
        printf("\n");
        fflush(stdout);
    }
    fprintf(stderr,
            "ebb run: %s on %s; prompt %zu tokens in %.1f ms (%.1f tok/s); generated %zu "
            "tokens, %.1f ms decode (%.2f tok/s); stop: %s\n",
            ebb_model_arch(r->m), ebb_model_device_name(r->m), r->n_prompt, r->t_prefill, pf_tps,
            r->n_gen, r->t_decode, dec_tps, r->stop);
    uint64_t peak = ebb_peak_rss();
    char sj[8192];
    bool streaming = ebb_model_stream_json(r->m, sj, sizeof(sj)) > 0;
    if (streaming)
        fprintf(stderr, "ebb run: stream %s\n", sj);
    char xj[2048];
    if (ebb_model_expert_cache_json(r->m, xj, sizeof(xj)))
        fprintf(stderr, "ebb run: expert cache %s\n", xj);
    fprintf(stderr, "ebb run: peak RSS %.1f MiB\n", (double)peak / (1 << 20));
    json_t *jspec = r->spec ? spec_summary(r) : NULL;
    if (!o->json) {
        json_decref(jspec);
        return 0;
    }
    return print_json(r, pf_tps, dec_tps, peak, streaming ? sj : NULL, jspec);
}

static void run_fini(struct run *r)
{
    free(r->prompt_ids);
    free(r->gen);
    free(r->cand_ids);
    free(r->cand_logits);
    free(r->logits);
    free(r->text);
    free(r->wrapped);
    ebb_sampler_free(r->smp);
    ebb_spec_free(r->spec);
    ebb_model_close(r->dm);
    ebb_model_close(r->m);
    json_decref(r->jsampling);
    ebb_config_fini(&r->cfg);
}

int ebb_cmd_run(int argc, char **argv)
{
    struct ebb__run_opts o;
    int status = ebb__run_parse(argc, argv, &o);
    if (status >= 0)
        return status;
    struct run r = {0};
    ebb_err rc = ebb_config_init(&r.cfg);
    if (rc) {
        fprintf(stderr, "ebb run: %s\n", ebb_err_str(rc));
        status = 1;
    } else {
        status = load(&r, &o) || tokenize_prompt(&r, &o) || prepare(&r, &o) || generate(&r, &o) ||
                 report(&r, &o);
    }
    run_fini(&r);
    return status;
}
