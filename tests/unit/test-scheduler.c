/* The scheduler against a fake model (defined here, so no model file or device is needed):
 * generation limits, end-of-generation, stop strings through the engine, fair interleaving of
 * slots, batched steps and the prefill budget, cancellation within one prefill chunk, the queue
 * limit, prefix reuse and the choice of slot, shutdown, model swap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

/* ---- fake model: token t >= 1 reads as the letter 'a' + (t - 1) % 26; token 0 ends
 * generation. The most likely next token after t is t % 5 + 1 (a b c d e a b ...), unless
 * eog_at says to end at that position. ------------------------------------------------------- */

#define N_VOCAB 32
#define N_CTX 256

struct ebb_model {
    uint32_t n_seq;
    uint32_t base; /* its slot 0's entry in kv[] (MAX_SEQ / 2 for "fake2", a second model) */
};
static struct ebb_model fake = {0}, fake2 = {0, 4};
static atomic_uint evals, eval_tokens;
static atomic_uint eog_at; /* position whose logits favour token 0; 0: never */
static atomic_int eval_delay_us;
static atomic_bool hold;      /* evaluation waits while set (queue tests) */
static atomic_uint topk_rows; /* candidates handed out instead of logits */

ebb_err ebb_model_open(const struct ebb_model_params *p, struct ebb_model **out,
                       struct ebb_diag *diag)
{
    (void)diag;
    struct ebb_model *f = p->path && !strcmp(p->path, "fake2") ? &fake2 : &fake;
    f->n_seq = p->n_seq;
    *out = f;
    return EBB_OK;
}
void ebb_model_close(struct ebb_model *m)
{
    (void)m;
}
const struct ebb_tokenizer *ebb_model_tokenizer(const struct ebb_model *m)
{
    return (const struct ebb_tokenizer *)m;
}
uint32_t ebb_model_n_ctx(const struct ebb_model *m)
{
    (void)m;
    return N_CTX;
}
uint32_t ebb_model_n_seq(const struct ebb_model *m)
{
    return m->n_seq;
}
uint32_t ebb_model_n_vocab(const struct ebb_model *m)
{
    (void)m;
    return N_VOCAB;
}
#define N_EMBD 3
uint32_t ebb_model_n_embd(const struct ebb_model *m)
{
    (void)m;
    return N_EMBD;
}

/* Each slot's KV entries as tokens: kv_len[seq] valid positions. Evaluating at a position past
 * them (a hole: KV entries the slot never got) fails and is counted; ebb_model_kv_copy copies
 * them. Written only by the engine thread; read by the tests once jobs are done. */
#define MAX_SEQ 8
static int32_t kv[MAX_SEQ][N_CTX];
static uint32_t kv_len[MAX_SEQ];
static atomic_uint kv_holes, kv_copies;

ebb_err ebb_model_kv_copy(struct ebb_model *m, uint32_t src, uint32_t dst, uint32_t n,
                          struct ebb_diag *diag)
{
    (void)diag;
    if (src >= m->n_seq || dst >= m->n_seq || n > N_CTX || n > kv_len[src + m->base])
        return EBB_EINVAL;
    src += m->base, dst += m->base;
    memcpy(kv[dst], kv[src], sizeof(int32_t) * n);
    kv_len[dst] = n;
    atomic_fetch_add(&kv_copies, 1);
    return EBB_OK;
}

/* The prompt-cache store: store_len positions (0: none; set before start), each holding the
 * token whose KV entry it is. */
#define STORE_MAX 512
static uint32_t store_len;
static int32_t store[STORE_MAX];

uint32_t ebb_model_kv_store_len(const struct ebb_model *m)
{
    (void)m;
    return store_len;
}
uint64_t ebb_model_kv_store_bytes(const struct ebb_model *m)
{
    (void)m;
    return (uint64_t)store_len * 100;
}
ebb_err ebb_model_kv_save(struct ebb_model *m, uint32_t seq, uint32_t n, uint32_t at,
                          struct ebb_diag *diag)
{
    (void)diag;
    if (seq >= m->n_seq || n > kv_len[seq + m->base] || at + n > store_len)
        return EBB_EINVAL;
    memcpy(store + at, kv[seq + m->base], sizeof(int32_t) * n);
    return EBB_OK;
}
ebb_err ebb_model_kv_load(struct ebb_model *m, uint32_t at, uint32_t n, uint32_t seq,
                          struct ebb_diag *diag)
{
    (void)diag;
    if (seq >= m->n_seq || at + n > store_len)
        return EBB_EINVAL;
    seq += m->base;
    memcpy(kv[seq], store + at, sizeof(int32_t) * n);
    kv_len[seq] = n;
    return EBB_OK;
}

static ebb_err eval_one(uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                        struct ebb_model_out *out)
{
    atomic_fetch_add(&eval_tokens, n);
    if (pos + n > N_CTX)
        return EBB_ECTX;
    if (seq >= MAX_SEQ || pos > kv_len[seq]) {
        atomic_fetch_add(&kv_holes, 1);
        return EBB_EINVAL;
    }
    memcpy(kv[seq] + pos, tokens, sizeof(int32_t) * n);
    kv_len[seq] = pos + n;
    /* The hidden state of the token at position p is (token, p, 1). */
    for (uint32_t i = 0; out->hidden_sum && i < n; i++) {
        out->hidden_sum[0] += (float)tokens[i];
        out->hidden_sum[1] += (float)(pos + i);
        out->hidden_sum[2] += 1;
    }
    float lg[N_VOCAB] = {0};
    int32_t last = tokens[n - 1];
    int32_t next = last % 5 + 1;
    if (atomic_load(&eog_at) && pos + n >= atomic_load(&eog_at))
        next = 0;
    lg[next] = 10;
    if (out->logits)
        memcpy(out->logits, lg, sizeof(lg));
    /* top_k: the largest first, ties to the smaller id, as the engines give them */
    for (uint32_t k = 0; k < out->top_k; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < N_VOCAB; i++) {
            bool taken = false;
            for (uint32_t q = 0; q < k; q++)
                taken = taken || out->top_ids[q] == i;
            if (!taken && (best < 0 || lg[i] > lg[best]))
                best = i;
        }
        out->top_ids[k] = best;
        out->top_logits[k] = lg[best];
        atomic_fetch_add(&topk_rows, 1);
    }
    /* Speculative passes: a row per token, each as the single-token logits above would be. */
    for (uint32_t i = 0; out->logits_all && i < n; i++) {
        float *row = out->logits_all + (size_t)i * N_VOCAB;
        for (uint32_t v = 0; v < N_VOCAB; v++)
            row[v] = 0;
        int32_t nx = tokens[i] % 5 + 1;
        if (atomic_load(&eog_at) && pos + i + 1 >= atomic_load(&eog_at))
            nx = 0;
        row[nx] = 10;
    }
    return EBB_OK;
}

/* Every pass (evals counts them) waits while hold is set and for eval_delay_us. */
static void pass_begins(void)
{
    while (atomic_load(&hold))
        usleep(1000);
    if (atomic_load(&eval_delay_us))
        usleep((useconds_t)atomic_load(&eval_delay_us));
    atomic_fetch_add(&evals, 1);
}

ebb_err ebb_model_eval(struct ebb_model *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                       uint32_t pos, struct ebb_model_out *out, struct ebb_diag *diag)
{
    (void)m;
    (void)diag;
    pass_begins();
    struct ebb_model_out none = {0};
    return eval_one(seq + m->base, tokens, n, pos, out ? out : &none);
}

/* What ebb_model_long_rows says (a streaming model's layer-major pass). */
static atomic_uint long_rows;

uint32_t ebb_model_long_rows(const struct ebb_model *m)
{
    (void)m;
    return atomic_load(&long_rows);
}

/* What ebb_model_batch_rows says (the backend's rows of one pass). */
static atomic_uint batch_rows;

uint32_t ebb_model_batch_rows(const struct ebb_model *m)
{
    (void)m;
    return atomic_load(&batch_rows);
}

/* The fake model streams only where a test says so (streams); a settle then takes
 * settle_delay_us and is counted. */
static atomic_bool streams;
static atomic_uint settle_delay_us, n_settles;

bool ebb_model_stream_budget(struct ebb_model *m, uint64_t budget)
{
    (void)m;
    (void)budget;
    return atomic_load(&streams);
}

bool ebb_model_streaming(const struct ebb_model *m)
{
    (void)m;
    return atomic_load(&streams);
}

/* The wake hook the scheduler hands the model (a streamer's pressure notification calls it). */
static void (*wake_fn)(void *u);
static void *wake_u;

void ebb_model_stream_set_wake(struct ebb_model *m, void (*fn)(void *u), void *u)
{
    (void)m;
    wake_fn = fn;
    wake_u = u;
}

ebb_err ebb_model_stream_settle(struct ebb_model *m, struct ebb_diag *diag)
{
    (void)m;
    (void)diag;
    usleep(atomic_load(&settle_delay_us));
    atomic_fetch_add(&n_settles, 1);
    return EBB_OK;
}

/* The widest batches seen: slots and tokens in one pass. */
static atomic_uint max_seqs, max_rows;

ebb_err ebb_model_eval_batch(struct ebb_model *m, const struct ebb_model_seq *seqs, uint32_t n_seqs,
                             struct ebb_diag *diag)
{
    (void)m;
    (void)diag;
    pass_begins();
    uint32_t rows = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        for (uint32_t j = 0; j < i; j++)
            assert_true(seqs[j].seq != seqs[i].seq);
        rows += seqs[i].n;
    }
    if (n_seqs > atomic_load(&max_seqs))
        atomic_store(&max_seqs, n_seqs);
    if (rows > atomic_load(&max_rows))
        atomic_store(&max_rows, rows);
    for (uint32_t i = 0; i < n_seqs; i++) {
        struct ebb_model_out none = {0};
        const struct ebb_model_seq *q = &seqs[i];
        ebb_err rc = eval_one(q->seq + m->base, q->tokens, q->n, q->pos, q->out ? q->out : &none);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

/* Two fewer tokens than the model has logits, as a model with padded output rows: the grammar
 * mask must keep the rows without a token banned. */
uint32_t ebb_tokenizer_n_vocab(const struct ebb_tokenizer *t)
{
    (void)t;
    return N_VOCAB - 2;
}

bool ebb_tokenizer_is_eog(const struct ebb_tokenizer *t, int32_t id)
{
    (void)t;
    return id == 0;
}

static const char letters[] = "abcdefghijklmnopqrstuvwxyz";

ebb_err ebb_tokenizer_piece(const struct ebb_tokenizer *t, int32_t id, bool render_special,
                            struct ebb_str *out)
{
    (void)t;
    (void)render_special;
    if (id <= 0) {
        out->p = "";
        out->n = 0;
    } else {
        out->p = &letters[(id - 1) % 26];
        out->n = 1;
    }
    return EBB_OK;
}

void ebb_detok_init(struct ebb_detok *d)
{
    memset(d, 0, sizeof(*d));
}
size_t ebb_detok_push(struct ebb_detok *d, const char *piece, size_t n, char *out, size_t cap)
{
    (void)d;
    if (n > cap)
        n = cap;
    memcpy(out, piece, n);
    return n;
}
size_t ebb_detok_finish(struct ebb_detok *d, char *out, size_t cap)
{
    (void)d;
    (void)out;
    (void)cap;
    return 0;
}

/* ---- a sink that records everything --------------------------------------------------------- */

static atomic_uint seq_counter;

struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char text[1024];
    size_t n_text;
    unsigned order[512]; /* global sequence number of each token */
    unsigned n_tok;
    unsigned n_prefill_calls;
    bool done;
    struct ebb_sched_result res;
    struct ebb_sched *s;
    uint64_t id;
    bool cancel_on_prefill;
};

static void on_prefill(void *ud, uint32_t done, uint32_t total)
{
    struct rec *r = ud;
    (void)done;
    (void)total;
    r->n_prefill_calls++;
    if (r->cancel_on_prefill && r->n_prefill_calls == 1)
        ebb_sched_cancel(r->s, r->id);
}

static void on_token(void *ud, const struct ebb_sched_token *t)
{
    struct rec *r = ud;
    pthread_mutex_lock(&r->mu);
    memcpy(r->text + r->n_text, t->text, t->len);
    r->n_text += t->len;
    r->text[r->n_text] = 0;
    if (r->n_tok < 512)
        r->order[r->n_tok++] = atomic_fetch_add(&seq_counter, 1);
    pthread_mutex_unlock(&r->mu);
}

static void on_done(void *ud, const struct ebb_sched_result *res)
{
    struct rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->res = *res;
    r->done = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void rec_init(struct rec *r, struct ebb_sched *s)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->s = s;
}

static void rec_wait(struct rec *r)
{
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static atomic_bool loaded;
static void on_loaded(void *ud, ebb_err rc, const char *msg)
{
    (void)ud;
    (void)msg;
    assert_int_equal(rc, EBB_OK);
    atomic_store(&loaded, true);
}

static uint32_t start_spec_max; /* the scheduler's default drafts per pass */

static struct ebb_sched *start_gated(uint32_t slots, uint32_t queue, uint32_t chunk,
                                     struct ebb_sched_gate *gate, bool priority, const char *path)
{
    struct ebb_sched_params p = {.model = {.path = path, .n_seq = slots},
                                 .queue_cap = queue,
                                 .prefill_chunk = chunk,
                                 .spec_max = start_spec_max,
                                 .on_loaded = on_loaded,
                                 .gate = gate,
                                 .priority = priority};
    struct ebb_sched *s = NULL;
    assert_true(slots <= MAX_SEQ / 2);
    atomic_store(&loaded, false);
    assert_int_equal(ebb_sched_new(&p, &s, NULL), EBB_OK);
    while (!atomic_load(&loaded))
        usleep(1000);
    assert_non_null(ebb_sched_model(s));
    atomic_store(&eog_at, 0);
    atomic_store(&eval_delay_us, 0);
    atomic_store(&hold, false);
    return s;
}

static struct ebb_sched *start(uint32_t slots, uint32_t queue, uint32_t chunk)
{
    return start_gated(slots, queue, chunk, NULL, false, "fake");
}

static ebb_err submit(struct ebb_sched *s, struct rec *r, const int32_t *prompt, uint32_t n,
                      const struct ebb_gen_params *gp)
{
    struct ebb_sched_sink sink = {
        .on_prefill = on_prefill, .on_token = on_token, .on_done = on_done, .ud = r};
    return ebb_sched_submit(s, prompt, n, gp, &sink, &r->id, NULL);
}

static struct ebb_gen_params greedy(uint32_t max_tokens)
{
    struct ebb_gen_params gp;
    ebb_gen_params_defaults(&gp);
    gp.sampling.temperature = 0;
    gp.max_tokens = max_tokens;
    return gp;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_length_and_eog(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    struct rec r;
    rec_init(&r, s);
    int32_t prompt[3] = {7, 8, 5}; /* last token 5 -> next 1 ('a') */
    struct ebb_gen_params gp = greedy(7);
    assert_int_equal(submit(s, &r, prompt, 3, &gp), EBB_OK);
    rec_wait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_LENGTH);
    assert_int_equal(r.res.n_gen, 7);
    assert_int_equal(r.res.n_prompt, 3);
    assert_string_equal(r.text, "abcdeab");

    atomic_store(&eog_at, 6); /* positions 3, 4 give tokens, then end of generation */
    struct rec r2;
    rec_init(&r2, s);
    int32_t p2[3] = {9, 9, 5};
    gp = greedy(0);
    assert_int_equal(submit(s, &r2, p2, 3, &gp), EBB_OK);
    rec_wait(&r2);
    assert_int_equal(r2.res.finish, EBB_FINISH_STOP);
    assert_string_equal(r2.text, "abc");
    assert_int_equal(r2.res.n_gen, 4); /* three letters and the end-of-generation token */
    ebb_sched_free(s);
}

/* A grammar overrides the model where they disagree and ends the job once it is complete. */
static void test_grammar(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    struct rec r;
    rec_init(&r, s);
    int32_t prompt[2] = {1, 5}; /* the model wants a b c d e ... */
    struct ebb_gen_params gp = greedy(20);
    gp.grammar = "root ::= \"ab\" [x-z] \"d\"";
    assert_int_equal(submit(s, &r, prompt, 2, &gp), EBB_OK);
    rec_wait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_STOP);
    assert_string_equal(r.text, "abxd");
    assert_int_equal(r.res.n_gen, 4); /* complete after 'd': no end-of-generation token needed */

    /* where the grammar may end or go on, the model's end-of-generation token is allowed */
    atomic_store(&eog_at, 5);
    struct rec r2;
    rec_init(&r2, s);
    gp.grammar = "root ::= [a-e]+";
    assert_int_equal(submit(s, &r2, prompt, 2, &gp), EBB_OK);
    rec_wait(&r2);
    assert_int_equal(r2.res.finish, EBB_FINISH_STOP);
    assert_string_equal(r2.text, "abc");

    struct rec r3;
    rec_init(&r3, s);
    struct ebb_diag d = {{0}};
    struct ebb_sched_sink sink = {.on_token = on_token, .on_done = on_done, .ud = &r3};
    gp.grammar = "root ::= [a-";
    assert_int_equal(ebb_sched_submit(s, prompt, 2, &gp, &sink, &r3.id, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "line 1"));
    ebb_sched_free(s);
}

static void test_stop_string(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    struct rec r;
    rec_init(&r, s);
    int32_t prompt[2] = {1, 5};
    struct ebb_gen_params gp = greedy(20);
    gp.n_stop = 2;
    gp.stop[0] = "zz";
    gp.stop[1] = "dea";
    assert_int_equal(submit(s, &r, prompt, 2, &gp), EBB_OK);
    rec_wait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_STOP);
    assert_string_equal(r.text, "abc");
    assert_int_equal(r.res.n_gen, 6); /* a b c d e a: the stop completes at the sixth token */
    assert_int_equal(r.res.stop_index, 1);
    ebb_sched_free(s);
}

/* Embedding jobs: each input evaluated from position 0 in prefill chunks, its mean hidden state
 * written to its row, nothing generated; bad lengths rejected; cancellation between chunks;
 * a generation job in the other slot unaffected. */
static void test_embed(void **state)
{
    (void)state;
    struct ebb_sched *s = start(2, 4, 4);
    struct rec r, g;
    rec_init(&r, s);
    rec_init(&g, s);
    int32_t prompt[13];
    for (int i = 0; i < 13; i++)
        prompt[i] = i + 1;
    uint32_t lens[3] = {3, 9, 1};
    float out[3 * N_EMBD];
    for (int i = 0; i < 3 * N_EMBD; i++)
        out[i] = 99;
    struct ebb_gen_params gp = greedy(5);
    gp.n_embed = 3;
    gp.embed_len = lens;
    gp.embed_out = out;
    struct ebb_gen_params gg = greedy(5);
    int32_t p2[2] = {1, 5};
    assert_int_equal(submit(s, &g, p2, 2, &gg), EBB_OK);
    assert_int_equal(submit(s, &r, prompt, 13, &gp), EBB_OK);
    rec_wait(&r);
    rec_wait(&g);
    assert_int_equal(r.res.finish, EBB_FINISH_STOP);
    assert_int_equal(r.res.n_prompt, 13);
    assert_int_equal(r.res.n_gen, 0);
    assert_int_equal(r.n_tok, 0);
    /* Input 0 = tokens 1..3 at positions 0..2; input 1 = tokens 4..12 at 0..8; input 2 = 13. */
    const float want[3 * N_EMBD] = {2, 1, 1, 8, 4, 1, 13, 0, 1};
    for (int i = 0; i < 3 * N_EMBD; i++)
        assert_true(out[i] == want[i]);
    assert_int_equal(r.n_prefill_calls, 1 + 3 + 1); /* chunks of 4: 3 | 4 4 1 | 1 */
    assert_string_equal(g.text, "abcde");

    /* An input longer than the context, lengths that do not add up, no output buffer. */
    uint32_t big[1] = {N_CTX + 1};
    static int32_t longp[N_CTX + 1];
    for (int i = 0; i < N_CTX + 1; i++)
        longp[i] = 1;
    gp.n_embed = 1;
    gp.embed_len = big;
    assert_int_equal(submit(s, &r, longp, N_CTX + 1, &gp), EBB_ECTX);
    gp.embed_len = lens;
    assert_int_equal(submit(s, &r, prompt, 13, &gp), EBB_EINVAL);
    gp.n_embed = 3;
    gp.embed_out = NULL;
    assert_int_equal(submit(s, &r, prompt, 13, &gp), EBB_EINVAL);

    /* Cancelled after its first chunk. */
    struct rec c;
    rec_init(&c, s);
    c.cancel_on_prefill = true;
    gp.embed_out = out;
    assert_int_equal(submit(s, &c, prompt, 13, &gp), EBB_OK);
    rec_wait(&c);
    assert_int_equal(c.res.finish, EBB_FINISH_CANCEL);
    assert_int_equal(c.n_prefill_calls, 1);
    ebb_sched_free(s);
}

static void test_fair_interleaving(void **state)
{
    (void)state;
    struct ebb_sched *s = start(2, 4, 8);
    atomic_store(&hold, true); /* both jobs start in the same engine turn */
    struct rec a, b;
    rec_init(&a, s);
    rec_init(&b, s);
    int32_t pa[2] = {3, 5}, pb[2] = {4, 5};
    struct ebb_gen_params gp = greedy(10);
    assert_int_equal(submit(s, &a, pa, 2, &gp), EBB_OK);
    assert_int_equal(submit(s, &b, pb, 2, &gp), EBB_OK);
    usleep(20000);
    atomic_store(&hold, false);
    rec_wait(&a);
    rec_wait(&b);
    assert_int_equal(a.n_tok, 10);
    assert_int_equal(b.n_tok, 10);
    /* Each turn gives every active slot one step: from the moment both produce tokens until
     * one of them is done, their tokens alternate strictly. */
    char seq[20];
    unsigned ia = 0, ib = 0;
    for (unsigned k = 0; k < 20; k++)
        seq[k] = ib >= 10 || (ia < 10 && a.order[ia] < b.order[ib]) ? (ia++, 'a') : (ib++, 'b');
    unsigned first = 0, last = 19;
    while (seq[first] == seq[0])
        first++;
    while (seq[last] == seq[19])
        last--;
    assert_true(first <= 2 && last >= 17); /* at most a step's lag at either end */
    for (unsigned k = first; k < last; k++)
        assert_true(seq[k] != seq[k + 1]);
    ebb_sched_free(s);
}

/* Two schedulers sharing a gate (two models of one daemon): while the priority one has a job,
 * the other's steps wait (EBB_SCHED_GATE_HOLD_S at most each), so its tokens come after the
 * priority job's; without priority they interleave. */
static unsigned gate_run(bool priority, uint64_t *holds)
{
    struct ebb_sched_gate *g = ebb_sched_gate_new();
    assert_non_null(g);
    struct ebb_sched *hi = start_gated(1, 4, 8, g, priority, "fake");
    struct ebb_sched *lo = start_gated(1, 4, 8, g, false, "fake2"); /* its own slots' entries */
    atomic_store(&eval_delay_us, 2000); /* 20 tokens: about 40 ms, well under the hold */
    struct rec a, b;
    rec_init(&a, hi);
    rec_init(&b, lo);
    int32_t pa[2] = {3, 5}, pb[2] = {4, 5};
    struct ebb_gen_params ga = greedy(20), gb = greedy(5);
    assert_int_equal(submit(hi, &a, pa, 2, &ga), EBB_OK);
    for (;;) { /* the priority job runs before the other is submitted */
        pthread_mutex_lock(&a.mu);
        unsigned n = a.n_tok;
        pthread_mutex_unlock(&a.mu);
        if (n >= 2)
            break;
        usleep(500);
    }
    assert_int_equal(submit(lo, &b, pb, 2, &gb), EBB_OK);
    rec_wait(&a);
    rec_wait(&b);
    assert_int_equal(a.n_tok, 20);
    assert_int_equal(b.n_tok, 5);
    unsigned before = 0; /* the other job's tokens that came before the priority job's last */
    for (unsigned k = 0; k < b.n_tok; k++)
        before += b.order[k] < a.order[a.n_tok - 1];
    double held_s;
    ebb_sched_gate_stats(g, holds, &held_s);
    ebb_sched_free(lo);
    ebb_sched_free(hi);
    ebb_sched_gate_free(g);
    return before;
}

static void test_gate(void **state)
{
    (void)state;
    uint64_t holds = 0;
    /* (one step may pass the gate where the priority job outlasts a hold: slow machines) */
    assert_true(gate_run(true, &holds) <= 1);
    assert_true(holds >= 1);
    assert_true(gate_run(false, &holds) >= 1); /* interleaved without priority */
    assert_int_equal(holds, 0);
}

static void test_cancel_during_prefill(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 10);
    int32_t prompt[200];
    for (int i = 0; i < 200; i++)
        prompt[i] = 1 + i % 20;
    struct rec r;
    rec_init(&r, s);
    r.cancel_on_prefill = true; /* cancel right after the first 10-token chunk */
    atomic_store(&evals, 0);
    struct ebb_gen_params gp = greedy(5);
    assert_int_equal(submit(s, &r, prompt, 200, &gp), EBB_OK);
    rec_wait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_CANCEL);
    assert_int_equal(r.n_prefill_calls, 1);
    assert_int_equal(atomic_load(&evals), 1);
    assert_int_equal(r.n_tok, 0);
    ebb_sched_free(s);
}

static void test_queue_limit_and_cancel_queued(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 1, 8);
    atomic_store(&hold, true);
    int32_t prompt[2] = {2, 3};
    struct ebb_gen_params gp = greedy(3);
    struct rec r[3];
    for (int i = 0; i < 3; i++)
        rec_init(&r[i], s);
    assert_int_equal(submit(s, &r[0], prompt, 2, &gp), EBB_OK);
    usleep(20000); /* r[0] takes the slot */
    assert_int_equal(submit(s, &r[1], prompt, 2, &gp), EBB_OK);
    struct ebb_sched_stats st;
    ebb_sched_stats(s, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.active, 1);
    assert_int_equal(submit(s, &r[2], prompt, 2, &gp), EBB_EBUSY);
    ebb_sched_cancel(s, r[1].id); /* a queued job ends without running */
    atomic_store(&hold, false);
    rec_wait(&r[1]);
    assert_int_equal(r[1].res.finish, EBB_FINISH_CANCEL);
    assert_int_equal(r[1].n_tok, 0);
    rec_wait(&r[0]);
    assert_int_equal(r[0].res.finish, EBB_FINISH_LENGTH);
    ebb_sched_free(s);
}

static void test_prefix_reuse_and_limits(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    int32_t prompt[20];
    for (int i = 0; i < 20; i++)
        prompt[i] = 1 + i % 7;
    struct ebb_gen_params gp = greedy(4);
    struct rec a, b;
    rec_init(&a, s);
    rec_init(&b, s);
    assert_int_equal(submit(s, &a, prompt, 20, &gp), EBB_OK);
    rec_wait(&a);
    assert_int_equal(a.res.n_cached, 0);
    atomic_store(&eval_tokens, 0);
    assert_int_equal(submit(s, &b, prompt, 20, &gp), EBB_OK);
    rec_wait(&b);
    assert_int_equal(b.res.n_cached, 19);
    assert_string_equal(a.text, b.text);
    /* One prompt token and three decode steps: the cache saved the rest. */
    assert_int_equal(atomic_load(&eval_tokens), 4);

    int32_t big[N_CTX];
    for (int i = 0; i < N_CTX; i++)
        big[i] = 1;
    struct rec c;
    rec_init(&c, s);
    assert_int_equal(submit(s, &c, big, N_CTX, &gp), EBB_ECTX);
    big[0] = N_VOCAB;
    assert_int_equal(submit(s, &c, big, 4, &gp), EBB_EINVAL);
    ebb_sched_free(s);
}

/* 40 prompt tokens, k picks a different first token for each conversation; tail > 0 appends
 * tail tokens no decode step produces (ids above 5). */
static uint32_t conv(int32_t *p, int k, uint32_t tail)
{
    for (uint32_t i = 0; i < 40; i++)
        p[i] = 1 + (int32_t)((i * 3 + (uint32_t)k * 7) % 29);
    for (uint32_t i = 0; i < tail; i++)
        p[40 + i] = 20 + (int32_t)(i % 9);
    return 40 + tail;
}

/* Runs one greedy job of 4 tokens to the end. */
static void store_job(struct ebb_sched *s, struct rec *r, const int32_t *p, uint32_t n)
{
    struct ebb_gen_params gp = greedy(4);
    rec_init(r, s);
    assert_int_equal(submit(s, r, p, n, &gp), EBB_OK);
    rec_wait(r);
    assert_int_equal(r->res.finish, EBB_FINISH_LENGTH);
}

/* One slot, A then B (A's sequence goes into the store) then A with a new tail: A's prefix
 * comes from the store, only the tail is evaluated, and the text is the cold run's. */
static void test_store_reuse(void **state)
{
    (void)state;
    int32_t a[48], b[48];
    uint32_t na = conv(a, 0, 5), nb = conv(b, 1, 0);
    store_len = 0;
    struct ebb_sched *s = start(1, 4, 16);
    struct rec cold, r1, r2, r3;
    store_job(s, &cold, a, na);
    ebb_sched_free(s);

    store_len = 200;
    s = start(1, 4, 16);
    store_job(s, &r1, a, 40);
    store_job(s, &r2, b, nb);
    struct ebb_sched_stats st;
    ebb_sched_stats(s, &st);
    assert_int_equal(st.store_saves, 1);
    assert_int_equal(st.store_entries, 1);
    assert_int_equal(st.store_bytes_used, 43 * 100); /* 40 + 3 evaluated generated tokens */
    assert_int_equal(st.store_bytes, 200 * 100);
    assert_int_equal(st.store_hits, 0);
    atomic_store(&eval_tokens, 0);
    store_job(s, &r3, a, na);
    assert_int_equal(r3.res.n_cached, 40);
    assert_string_equal(r3.text, cold.text);
    assert_int_equal(atomic_load(&eval_tokens), 5 + 3); /* the tail, then three decode steps */
    assert_int_equal(atomic_load(&kv_holes), 0);
    ebb_sched_stats(s, &st);
    assert_int_equal(st.store_hits, 1);
    assert_int_equal(st.store_tokens, 40);
    assert_int_equal(st.cache_tokens, 40);
    assert_int_equal(st.store_saves, 2); /* B's sequence went in when A came back */
    ebb_sched_free(s);
    store_len = 0;
}

/* With room for two sequences, the least recently used one is evicted; a hit makes an entry
 * recent. */
static void test_store_lru(void **state)
{
    (void)state;
    int32_t p[5][48];
    for (int k = 0; k < 5; k++)
        conv(p[k], k, 0);
    store_len = 100; /* two sequences of 43 positions */
    struct ebb_sched *s = start(1, 4, 16);
    struct rec r[8];
    store_job(s, &r[0], p[0], 40);
    store_job(s, &r[1], p[1], 40); /* store: A */
    store_job(s, &r[2], p[2], 40); /* store: A B */
    store_job(s, &r[3], p[3], 40); /* store: B C (A evicted) */
    struct ebb_sched_stats st;
    ebb_sched_stats(s, &st);
    assert_int_equal(st.store_evictions, 1);
    assert_int_equal(st.store_entries, 2);
    int32_t bt[48];
    uint32_t nbt = conv(bt, 1, 3);
    store_job(s, &r[4], bt, nbt); /* B hit; D saved, evicting C (B is protected) */
    assert_int_equal(r[4].res.n_cached, 40);
    store_job(s, &r[5], p[0], 40); /* A was evicted: nothing reused */
    assert_int_equal(r[5].res.n_cached, 0);
    store_job(s, &r[6], p[2], 40); /* C was evicted too */
    assert_int_equal(r[6].res.n_cached, 0);
    ebb_sched_stats(s, &st);
    assert_int_equal(st.store_hits, 1);
    assert_int_equal(st.store_evictions, 4);
    assert_int_equal(atomic_load(&kv_holes), 0);
    ebb_sched_free(s);
    store_len = 0;
}

/* No store (length 0) keeps nothing; a sequence larger than the store is not kept. */
static void test_store_budget(void **state)
{
    (void)state;
    int32_t a[48], b[48];
    uint32_t na = conv(a, 0, 2), nb = conv(b, 1, 0);
    uint32_t lens[2] = {0, 30};
    for (int i = 0; i < 2; i++) {
        store_len = lens[i];
        struct ebb_sched *s = start(1, 4, 16);
        struct rec r[3];
        store_job(s, &r[0], a, 40);
        store_job(s, &r[1], b, nb);
        store_job(s, &r[2], a, na);
        assert_int_equal(r[2].res.n_cached, 0);
        struct ebb_sched_stats st;
        ebb_sched_stats(s, &st);
        assert_int_equal(st.store_saves, 0);
        assert_int_equal(st.store_hits, 0);
        assert_int_equal(st.store_entries, 0);
        assert_int_equal(st.store_bytes, (uint64_t)lens[i] * 100);
        ebb_sched_free(s);
    }
    store_len = 0;
}

static void test_shutdown_cancels(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    atomic_store(&eval_delay_us, 2000);
    int32_t prompt[2] = {2, 3};
    struct ebb_gen_params gp = greedy(0);
    gp.ignore_eos = true;
    struct rec r[3];
    for (int i = 0; i < 3; i++) {
        rec_init(&r[i], s);
        assert_int_equal(submit(s, &r[i], prompt, 2, &gp), EBB_OK);
    }
    usleep(20000);
    ebb_sched_free(s); /* running and queued jobs all get on_done */
    for (int i = 0; i < 3; i++) {
        assert_true(r[i].done);
        assert_int_equal(r[i].res.finish, EBB_FINISH_CANCEL);
    }
}

/* A streamer budget posted to an idle engine is applied at once (not at the next job); a free
 * that arrives while the engine applies it (mu released) still stops the engine, and a job
 * submitted then still runs. */
static void test_stream_budget_while_idle(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    assert_false(ebb_sched_stream_budget(s, 1 << 20)); /* the model does not stream */
    atomic_store(&streams, true);
    atomic_store(&n_settles, 0);
    assert_true(ebb_sched_stream_budget(s, 1 << 20));
    for (int i = 0; i < 2000 && !atomic_load(&n_settles); i++)
        usleep(1000);
    assert_int_equal(atomic_load(&n_settles), 1);
    atomic_store(&settle_delay_us, 100000);
    assert_true(ebb_sched_stream_budget(s, 2 << 20));
    usleep(20000); /* inside the settle */
    struct rec r;
    rec_init(&r, s);
    int32_t prompt[2] = {2, 3};
    struct ebb_gen_params gp = greedy(2);
    gp.ignore_eos = true;
    assert_int_equal(submit(s, &r, prompt, 2, &gp), EBB_OK);
    rec_wait(&r);
    assert_true(ebb_sched_stream_budget(s, 3 << 20));
    usleep(20000);
    ebb_sched_free(s); /* hung before: the quit's signal fell into the settle */
    assert_true(atomic_load(&n_settles) >= 2); /* the third only if it began before the free */
    atomic_store(&streams, false);
    atomic_store(&settle_delay_us, 0);
}

/* The scheduler hands its model a wake hook; a pressure notification calling it makes an idle
 * engine settle (re-plan) at once instead of at the next job; so does ebb_sched_stream_poke
 * (the daemon's probe period) where the model streams. */
static void test_stream_wake_while_idle(void **state)
{
    (void)state;
    wake_fn = NULL;
    struct ebb_sched *s = start(1, 4, 8);
    for (int i = 0; i < 2000 && !wake_fn; i++) /* set once the engine has opened the model */
        usleep(1000);
    assert_non_null(wake_fn);
    assert_ptr_equal(wake_u, s);
    atomic_store(&n_settles, 0);
    wake_fn(wake_u);
    for (int i = 0; i < 2000 && !atomic_load(&n_settles); i++)
        usleep(1000);
    assert_int_equal(atomic_load(&n_settles), 1);
    /* The daemon's probe period pokes too: only a streaming model settles. */
    ebb_sched_stream_poke(s);
    usleep(20000);
    assert_int_equal(atomic_load(&n_settles), 1);
    atomic_store(&streams, true);
    ebb_sched_stream_poke(s);
    for (int i = 0; i < 2000 && atomic_load(&n_settles) < 2; i++)
        usleep(1000);
    assert_int_equal(atomic_load(&n_settles), 2);
    atomic_store(&streams, false);
    ebb_sched_free(s);
}

/* A model swap waits for an idle engine, resizes the slots and forgets cached prefixes. */
static void test_swap_model(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    static struct ebb_model other = {.n_seq = 3};
    int32_t prompt[6] = {1, 2, 3, 4, 5, 6};
    struct ebb_gen_params gp = greedy(3);
    struct rec a, b, c;
    rec_init(&a, s);
    atomic_store(&hold, true);
    assert_int_equal(submit(s, &a, prompt, 6, &gp), EBB_OK);
    struct ebb_model *old = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_sched_swap_model(s, &other, &old, &d), EBB_EBUSY); /* a job runs */
    assert_null(old);
    atomic_store(&hold, false);
    rec_wait(&a);
    assert_int_equal(a.res.finish, EBB_FINISH_LENGTH);
    struct ebb_sched_stats st;
    do {
        usleep(1000);
        ebb_sched_stats(s, &st);
    } while (st.active || st.queued);
    assert_int_equal(ebb_sched_swap_model(s, &other, &old, &d), EBB_OK);
    assert_ptr_equal(old, &fake);
    assert_ptr_equal(ebb_sched_model(s), &other);
    ebb_sched_stats(s, &st);
    assert_int_equal(st.n_slots, 3);
    rec_init(&b, s);
    assert_int_equal(submit(s, &b, prompt, 6, &gp), EBB_OK);
    rec_wait(&b);
    assert_int_equal(b.res.n_cached, 0); /* the old model's KV entries are gone */
    assert_string_equal(a.text, b.text);
    rec_init(&c, s);
    assert_int_equal(submit(s, &c, prompt, 6, &gp), EBB_OK);
    rec_wait(&c);
    assert_int_equal(c.res.n_cached, 5);
    ebb_sched_free(s);
}

/* Four streams decode in the same passes: one pass carries a token of each. */
static void test_batched_decode(void **state)
{
    (void)state;
    struct ebb_sched *s = start(4, 4, 8);
    atomic_store(&hold, true); /* all four start in the same step */
    atomic_store(&max_seqs, 0);
    struct rec r[4];
    struct ebb_gen_params gp = greedy(12);
    int32_t prompt[4][3] = {{1, 2, 3}, {2, 3, 4}, {3, 4, 5}, {4, 5, 1}};
    for (int i = 0; i < 4; i++) {
        rec_init(&r[i], s);
        assert_int_equal(submit(s, &r[i], prompt[i], 3, &gp), EBB_OK);
    }
    usleep(20000);
    atomic_store(&evals, 0);
    atomic_store(&topk_rows, 0);
    atomic_store(&hold, false);
    for (int i = 0; i < 4; i++) {
        rec_wait(&r[i]);
        assert_int_equal(r[i].res.finish, EBB_FINISH_LENGTH);
        assert_int_equal(r[i].n_tok, 12);
    }
    assert_int_equal(atomic_load(&max_seqs), 4);
    /* greedy needs one candidate per row, not the logits: 12 tokens sampled per stream */
    assert_int_equal(atomic_load(&topk_rows), 4 * 12);
    /* Prefill of the first two tokens, the last prompt token, 11 decode steps: 13 passes for
     * all four together (sequential evaluation would need 52); a job submitted just after the
     * engine woke for the first one starts a step later. */
    assert_true(atomic_load(&evals) <= 17);
    assert_string_equal(r[0].text, "deabcdeabcde");
    assert_string_equal(r[3].text, "bcdeabcdeabc");
    struct ebb_sched_stats st;
    ebb_sched_stats(s, &st);
    assert_true(st.steps >= 13);
    assert_true(st.batch_seqs >= 4 * 13);
    assert_true(st.jobs_started >= 4);
    ebb_sched_free(s);
}

/* A long prefill is chunked within the step's budget while another stream keeps decoding: the
 * short job finishes long before the long prompt is evaluated, and no pass exceeds one decode
 * row plus the budget. */
static void test_prefill_budget_interleaves(void **state)
{
    (void)state;
    struct ebb_sched *s = start(2, 4, 8);
    atomic_store(&max_rows, 0);
    atomic_store(&eval_delay_us, 500);
    struct rec a, b;
    rec_init(&a, s);
    rec_init(&b, s);
    int32_t pa[2] = {1, 2};
    struct ebb_gen_params gp = greedy(20);
    assert_int_equal(submit(s, &a, pa, 2, &gp), EBB_OK);
    while (atomic_load(&seq_counter) == 0 || a.n_tok == 0)
        usleep(1000);
    int32_t pb[200];
    for (int i = 0; i < 200; i++)
        pb[i] = 1 + i % 9;
    assert_int_equal(submit(s, &b, pb, 200, &gp), EBB_OK);
    rec_wait(&a);
    unsigned prefill_calls = b.n_prefill_calls;
    assert_int_equal(a.n_tok, 20);
    assert_true(prefill_calls < 25); /* 200 tokens take 25 chunks of 8 */
    rec_wait(&b);
    assert_int_equal(b.n_tok, 20);
    assert_true(atomic_load(&max_rows) <= 9);
    ebb_sched_free(s);
}

/* With the default budget, a step with no decoding rows takes up to ebb_model_long_rows
 * prompt tokens (a streaming model's layer-major pass), else up to ebb_model_batch_rows (the
 * backend's pass: 512 on GPUs); with decoding rows, or with an explicit prefill_chunk, the
 * budget stays. */
static void test_long_prefill_pass(void **state)
{
    (void)state;
    int32_t pb[230];
    for (int i = 0; i < 230; i++)
        pb[i] = 1 + i % 9;
    struct ebb_gen_params gp = greedy(3);
    for (int round = 0; round < 4; round++) {
        /* 0: default budget, 1: explicit 128, 2: default budget with a slot decoding, 3:
         * default budget, a backend pass of 192 rows and no layer-major pass */
        struct ebb_sched *s = start(2, 4, round == 1 ? 128 : 0);
        atomic_store(&long_rows, round == 3 ? 0 : 200);
        atomic_store(&batch_rows, round == 0 ? 0 : 192);
        struct rec a, b;
        rec_init(&b, s);
        if (round == 2) {
            int32_t pa[2] = {1, 2};
            struct ebb_gen_params ga = greedy(40);
            rec_init(&a, s);
            atomic_store(&eval_delay_us, 300);
            assert_int_equal(submit(s, &a, pa, 2, &ga), EBB_OK);
            while (a.n_tok == 0)
                usleep(1000);
        }
        atomic_store(&max_rows, 0);
        assert_int_equal(submit(s, &b, pb, 230, &gp), EBB_OK);
        rec_wait(&b);
        assert_int_equal(b.n_tok, 3);
        if (round == 0)
            assert_int_equal(atomic_load(&max_rows), 200);
        else if (round == 3)
            assert_int_equal(atomic_load(&max_rows), 192);
        else
            assert_true(atomic_load(&max_rows) <= 129);
        if (round == 2)
            rec_wait(&a);
        atomic_store(&long_rows, 0);
        atomic_store(&batch_rows, 0);
        ebb_sched_free(s);
    }
}

/* A job goes to the idle slot holding the longest prefix of its prompt, not the first free
 * one; the metrics count the hit. */
static void test_best_prefix_slot(void **state)
{
    (void)state;
    struct ebb_sched *s = start(3, 4, 64);
    int32_t p1[30], p2[30], p3[34];
    for (int i = 0; i < 30; i++) {
        p1[i] = 1 + i % 7;
        p2[i] = 2 + i % 11;
    }
    memcpy(p3, p2, sizeof(p2));
    for (int i = 30; i < 34; i++)
        p3[i] = 3;
    struct ebb_gen_params gp = greedy(3);
    struct rec a, b, c;
    rec_init(&a, s);
    rec_init(&b, s);
    rec_init(&c, s);
    atomic_store(&hold, true); /* a and b start together, in slots 0 and 1 */
    assert_int_equal(submit(s, &a, p1, 30, &gp), EBB_OK);
    assert_int_equal(submit(s, &b, p2, 30, &gp), EBB_OK);
    usleep(20000);
    atomic_store(&hold, false);
    rec_wait(&a);
    rec_wait(&b);
    struct ebb_sched_stats st0, st;
    ebb_sched_stats(s, &st0);
    assert_int_equal(submit(s, &c, p3, 34, &gp), EBB_OK);
    rec_wait(&c);
    /* b's slot holds p2 and the 2 tokens it decoded before its last one: 30 reused */
    assert_int_equal(c.res.n_cached, 30);
    ebb_sched_stats(s, &st);
    assert_int_equal(st.cache_hits - st0.cache_hits, 1);
    assert_int_equal(st.cache_tokens - st0.cache_tokens, 30);
    ebb_sched_free(s);
}

/* Data parallel placement over two replicas (one scheduler each): a prompt goes to the
 * replica whose free slot holds its prefix, though the other is as idle; to the free one when
 * that replica is busy; to the least busy when both are full. */
static void test_offer_and_place(void **state)
{
    (void)state;
    struct ebb_sched *s[2] = {start(1, 4, 64), start(1, 4, 64)};
    int32_t p1[30], p2[34];
    for (int i = 0; i < 30; i++)
        p1[i] = 2 + i % 11;
    memcpy(p2, p1, sizeof(p1));
    for (int i = 30; i < 34; i++)
        p2[i] = 3;
    struct ebb_gen_params gp = greedy(3);
    struct rec a, b, c;
    rec_init(&a, s[1]);
    assert_int_equal(submit(s[1], &a, p1, 30, &gp), EBB_OK);
    rec_wait(&a);
    struct ebb_sched_offer o[2];
    bool ready[2] = {true, true};
    for (int i = 0; i < 2; i++)
        ebb_sched_offer(s[i], p2, 34, &o[i]);
    assert_int_equal(o[0].free_slots, 1);
    assert_int_equal(o[1].free_slots, 1);
    assert_int_equal(o[0].prefix, 0);
    assert_int_equal(o[1].prefix, 30); /* p1 and the 2 tokens decoded before the last */
    assert_int_equal(ebb_sched_place(o, ready, 2), 1);
    ready[1] = false;
    assert_int_equal(ebb_sched_place(o, ready, 2), 0);
    ready[0] = false;
    assert_int_equal(ebb_sched_place(o, ready, 2), -1);
    ready[0] = ready[1] = true;

    /* replica 1 busy: its slot runs a held job, so the other takes the prompt */
    atomic_store(&hold, true);
    rec_init(&b, s[1]);
    assert_int_equal(submit(s[1], &b, p1, 30, &gp), EBB_OK);
    usleep(20000);
    for (int i = 0; i < 2; i++)
        ebb_sched_offer(s[i], p2, 34, &o[i]);
    assert_int_equal(o[1].free_slots, 0);
    assert_int_equal(o[1].busy, 1);
    assert_int_equal(ebb_sched_place(o, ready, 2), 0);
    /* both full: the least busy (replica 0 runs one, replica 1 one more queued) */
    rec_init(&c, s[0]);
    assert_int_equal(submit(s[0], &c, p2, 34, &gp), EBB_OK);
    struct rec d;
    rec_init(&d, s[1]);
    assert_int_equal(submit(s[1], &d, p2, 34, &gp), EBB_OK);
    usleep(20000);
    for (int i = 0; i < 2; i++)
        ebb_sched_offer(s[i], p2, 34, &o[i]);
    assert_int_equal(o[0].free_slots + o[1].free_slots, 0);
    assert_int_equal(o[0].busy, 1);
    assert_int_equal(o[1].busy, 2);
    assert_int_equal(ebb_sched_place(o, ready, 2), 0);
    atomic_store(&hold, false);
    rec_wait(&b);
    rec_wait(&c);
    rec_wait(&d);
    ebb_sched_free(s[0]);
    ebb_sched_free(s[1]);
}

/* The rule alone: ties go to the lowest index; a free replica beats a longer prefix on a full
 * one; among free replicas without a shared prefix, the least busy. */
static void test_place_rule(void **state)
{
    (void)state;
    bool ready[3] = {true, true, true};
    struct ebb_sched_offer o[3] = {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
    assert_int_equal(ebb_sched_place(o, ready, 3), 0);
    o[0].busy = 1;
    assert_int_equal(ebb_sched_place(o, ready, 3), 1);
    o[1] = (struct ebb_sched_offer){0, 4, 100};
    assert_int_equal(ebb_sched_place(o, ready, 3), 2);
    o[0].prefix = 5;
    assert_int_equal(ebb_sched_place(o, ready, 3), 0);
    o[0].free_slots = o[2].free_slots = 0;
    o[0].busy = 5;
    o[2].busy = 3;
    assert_int_equal(ebb_sched_place(o, ready, 3), 2);
    assert_int_equal(ebb_sched_place(o, ready, 0), -1);
}

/* A prompt that shares only a short opening (a chat template's) with a cached conversation
 * takes another slot rather than evicting it; the conversation resent then reuses its KV. */
static void test_short_match_keeps_cache(void **state)
{
    (void)state;
    struct ebb_sched *s = start(2, 4, 64);
    int32_t pa[40], pb[40], pc[44];
    for (int i = 0; i < 40; i++) {
        pa[i] = i < 3 ? 9 : 1 + i % 7;
        pb[i] = i < 3 ? 9 : 2 + i % 11;
    }
    memcpy(pc, pa, sizeof(pa));
    for (int i = 40; i < 44; i++)
        pc[i] = 4;
    struct ebb_gen_params gp = greedy(3);
    struct rec a, b, c;
    rec_init(&a, s);
    rec_init(&b, s);
    rec_init(&c, s);
    assert_int_equal(submit(s, &a, pa, 40, &gp), EBB_OK);
    rec_wait(&a);
    assert_int_equal(submit(s, &b, pb, 40, &gp), EBB_OK);
    rec_wait(&b);
    assert_int_equal(b.res.n_cached, 0); /* the empty slot, not a 3-token reuse */
    assert_int_equal(submit(s, &c, pc, 44, &gp), EBB_OK);
    rec_wait(&c);
    assert_int_equal(c.res.n_cached, 40);
    ebb_sched_free(s);
}

/* Speculative decoding (n-gram drafts): the same text, token count and finish as plain decoding
 * in fewer passes; max_tokens, an end-of-generation token and a stop string inside a pass cut
 * it there; the scheduler's default applies to jobs that leave spec_max at -1. */
static void run_job(struct ebb_sched *s, struct rec *r, const struct ebb_gen_params *gp)
{
    int32_t prompt[2] = {1, 5};
    rec_init(r, s);
    assert_int_equal(submit(s, r, prompt, 2, gp), EBB_OK);
    rec_wait(r);
}

static void test_speculative(void **state)
{
    (void)state;
    struct ebb_sched *s = start(1, 4, 8);
    /* Passes cost 5 ms whatever their rows, as streamed ones nearly do: the adaptation times
     * them and drafts the most (at 1 ms a loaded CI machine's scheduling noise once hid that:
     * 14 passes against 41). */
    atomic_store(&eval_delay_us, 5000);
    struct rec plain, spec;
    struct ebb_gen_params gp = greedy(40);
    atomic_store(&evals, 0);
    run_job(s, &plain, &gp);
    unsigned plain_evals = atomic_load(&evals);
    gp.spec_max = 8;
    atomic_store(&evals, 0);
    run_job(s, &spec, &gp);
    unsigned spec_evals = atomic_load(&evals);
    print_message("speculative: %u passes for 40 tokens (plain %u)\n", spec_evals, plain_evals);
    assert_string_equal(spec.text, plain.text);
    assert_int_equal(spec.res.n_gen, 40);
    assert_int_equal(spec.res.finish, EBB_FINISH_LENGTH);
    assert_true(spec_evals * 3 < plain_evals);

    gp.max_tokens = 7; /* inside a pass of 8 drafts */
    run_job(s, &spec, &gp);
    assert_string_equal(spec.text, "abcdeab");
    assert_int_equal(spec.res.n_gen, 7);
    assert_int_equal(spec.res.finish, EBB_FINISH_LENGTH);

    gp.max_tokens = 0;
    atomic_store(&eog_at, 14); /* end of generation well inside a drafted stretch */
    run_job(s, &plain, &(struct ebb_gen_params){.sampling = gp.sampling, .spec_max = 0});
    run_job(s, &spec, &gp);
    assert_string_equal(spec.text, plain.text);
    assert_int_equal(spec.res.n_gen, plain.res.n_gen);
    assert_int_equal(spec.res.finish, EBB_FINISH_STOP);
    atomic_store(&eog_at, 0);

    gp.max_tokens = 30;
    gp.n_stop = 1;
    gp.stop[0] = "cdeab";
    run_job(s, &spec, &gp);
    assert_string_equal(spec.text, "ab");
    assert_int_equal(spec.res.n_gen, 7);
    assert_int_equal(spec.res.stop_index, 0);
    ebb_sched_free(s);

    /* The scheduler's default: on for a job that says nothing, off for one that says 0. */
    start_spec_max = 6;
    s = start(1, 4, 8);
    atomic_store(&eval_delay_us, 1000);
    gp = greedy(40);
    atomic_store(&evals, 0);
    run_job(s, &spec, &gp);
    assert_true(atomic_load(&evals) * 3 < plain_evals);
    gp.spec_max = 0;
    atomic_store(&evals, 0);
    run_job(s, &spec, &gp);
    assert_true(atomic_load(&evals) >= 39); /* a pass per token (the prompt came from cache) */
    assert_string_equal(spec.text, "abcdeabcdeabcdeabcdeabcdeabcdeabcdeabcde");
    gp.spec_max = 65;
    struct rec bad;
    rec_init(&bad, s);
    int32_t prompt[2] = {1, 5};
    assert_int_equal(submit(s, &bad, prompt, 2, &gp), EBB_EINVAL);
    ebb_sched_free(s);
    start_spec_max = 0;
}

/* A job cancelled mid-prefill inside a busy batch leaves at the next step, and the streams
 * decoding beside it go on unchanged (their text is what they give alone). */
static void test_cancel_inside_batch(void **state)
{
    (void)state;
    struct ebb_sched *s = start(3, 4, 8);
    atomic_store(&eval_delay_us, 300);
    int32_t pa[3] = {1, 2, 3}, pb[3] = {2, 3, 4}, pc[120];
    for (int i = 0; i < 120; i++)
        pc[i] = 1 + i % 13;
    struct ebb_gen_params gp = greedy(30);
    struct rec a, b, c;
    rec_init(&a, s);
    rec_init(&b, s);
    rec_init(&c, s);
    assert_int_equal(submit(s, &a, pa, 3, &gp), EBB_OK);
    assert_int_equal(submit(s, &b, pb, 3, &gp), EBB_OK);
    while (a.n_tok < 3 || b.n_tok < 3)
        usleep(1000);
    c.cancel_on_prefill = true; /* cancels itself after its first 8-token chunk */
    assert_int_equal(submit(s, &c, pc, 120, &gp), EBB_OK);
    rec_wait(&c);
    assert_int_equal(c.res.finish, EBB_FINISH_CANCEL);
    assert_int_equal(c.n_prefill_calls, 1);
    assert_int_equal(c.n_tok, 0);
    rec_wait(&a);
    rec_wait(&b);
    assert_int_equal(a.res.finish, EBB_FINISH_LENGTH);
    assert_int_equal(b.res.finish, EBB_FINISH_LENGTH);
    assert_string_equal(a.text, "deabcdeabcdeabcdeabcdeabcdeabc");
    assert_string_equal(b.text, "eabcdeabcdeabcdeabcdeabcdeabcd");
    struct ebb_sched_stats st;
    ebb_sched_stats(s, &st);
    assert_int_equal(st.active, 0);
    ebb_sched_free(s);
}

/* ---- several choices (n) ------------------------------------------------------------------ */

/* A sink for a job with several choices: each choice's text and result. */
struct mrec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char text[EBB_SCHED_MAX_CHOICES][256];
    size_t n_text[EBB_SCHED_MAX_CHOICES];
    struct ebb_sched_result ch[EBB_SCHED_MAX_CHOICES];
    unsigned n_choice_calls, n_tok, n_start;
    bool done;
    struct ebb_sched_result res;
    uint64_t id;
};

static void m_on_start(void *ud)
{
    struct mrec *r = ud;
    r->n_start++;
}

static void m_on_token(void *ud, const struct ebb_sched_token *t)
{
    struct mrec *r = ud;
    pthread_mutex_lock(&r->mu);
    assert_true(t->choice < EBB_SCHED_MAX_CHOICES);
    if (r->n_text[t->choice] + t->len < sizeof(r->text[0])) {
        memcpy(r->text[t->choice] + r->n_text[t->choice], t->text, t->len);
        r->n_text[t->choice] += t->len;
    }
    r->n_tok++;
    pthread_mutex_unlock(&r->mu);
}

static void m_on_choice(void *ud, const struct ebb_sched_result *res)
{
    struct mrec *r = ud;
    pthread_mutex_lock(&r->mu);
    assert_true(res->choice < EBB_SCHED_MAX_CHOICES);
    r->ch[res->choice] = *res;
    r->n_choice_calls++;
    pthread_mutex_unlock(&r->mu);
}

static void m_on_done(void *ud, const struct ebb_sched_result *res)
{
    struct mrec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->res = *res;
    r->done = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static ebb_err msubmit(struct ebb_sched *s, struct mrec *r, const int32_t *prompt, uint32_t n,
                       const struct ebb_gen_params *gp)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    struct ebb_sched_sink sink = {.on_start = m_on_start,
                                  .on_token = m_on_token,
                                  .on_choice = m_on_choice,
                                  .on_done = m_on_done,
                                  .ud = r};
    return ebb_sched_submit(s, prompt, n, gp, &sink, &r->id, NULL);
}

static void mwait(struct mrec *r)
{
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

/* Greedy with n = 3: three texts equal to the one-choice text; the prompt is evaluated once
 * (token count of the passes) and copied twice into the other slots, whose KV entries then hold
 * it; on_choice once per choice, n_gen summed in on_done, n_prompt counted once. */
static void test_choices_greedy(void **state)
{
    (void)state;
    struct ebb_sched *s = start(4, 4, 8);
    enum { P = 20, G = 6 };
    int32_t pa[P], pb[P];
    for (int i = 0; i < P; i++) {
        pa[i] = 1 + (i * 7) % 20;
        pb[i] = 2 + (i * 11) % 19;
    }
    pa[P - 1] = pb[P - 1] = 5; /* the same last token: the same continuation "abcdea" */
    pb[0] = 25;                /* and no prefix shared with pa's cached entries */
    struct rec one;
    rec_init(&one, s);
    struct ebb_gen_params gp = greedy(G);
    assert_int_equal(submit(s, &one, pa, P, &gp), EBB_OK);
    rec_wait(&one);
    assert_string_equal(one.text, "abcdea");

    atomic_store(&eval_tokens, 0);
    atomic_store(&kv_copies, 0);
    atomic_store(&kv_holes, 0);
    gp.n_choices = 3;
    struct mrec r;
    assert_int_equal(msubmit(s, &r, pb, P, &gp), EBB_OK);
    mwait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_LENGTH);
    assert_int_equal(r.n_start, 1);
    assert_int_equal(r.n_choice_calls, 3);
    for (int c = 0; c < 3; c++) {
        r.text[c][r.n_text[c]] = 0;
        assert_string_equal(r.text[c], one.text);
        assert_int_equal(r.ch[c].choice, c);
        assert_int_equal(r.ch[c].finish, EBB_FINISH_LENGTH);
        assert_int_equal(r.ch[c].n_gen, G);
    }
    assert_int_equal(r.res.n_gen, 3 * G);
    assert_int_equal(r.res.n_prompt, P);
    assert_int_equal(r.res.n_cached, 0);
    /* The prompt once, then G - 1 decoded tokens per choice (the last one is not evaluated). */
    assert_int_equal(atomic_load(&eval_tokens), P + 3 * (G - 1));
    assert_int_equal(atomic_load(&kv_copies), 2);
    assert_int_equal(atomic_load(&kv_holes), 0);
    unsigned with_prompt = 0;
    for (int q = 0; q < 4; q++)
        with_prompt += kv_len[q] >= P && !memcmp(kv[q], pb, sizeof(pb));
    assert_int_equal(with_prompt, 3);
    struct ebb_sched_stats st;
    ebb_sched_stats(s, &st);
    assert_int_equal(st.kv_copies, 2);
    assert_int_equal(st.active, 0);
    assert_int_equal(st.jobs_started, 2);

    /* The prompt again: choice 0 reuses its cached entries (all but the last token). */
    atomic_store(&eval_tokens, 0);
    assert_int_equal(msubmit(s, &r, pb, P, &gp), EBB_OK);
    mwait(&r);
    assert_int_equal(r.res.n_cached, P - 1);
    assert_int_equal(atomic_load(&eval_tokens), 1 + 3 * (G - 1));
    assert_int_equal(atomic_load(&kv_holes), 0);
    ebb_sched_free(s);
}

/* Sampling with a seed: the choices differ, the same request gives the same choices again,
 * and choice i draws what a one-choice request with seed + i draws. With a stop string each
 * choice ends on its own. */
static void test_choices_seeded(void **state)
{
    (void)state;
    struct ebb_sched *s = start(3, 4, 8);
    int32_t prompt[4] = {3, 1, 4, 5};
    struct ebb_gen_params gp = greedy(16);
    gp.sampling.temperature = 5; /* the favourite has about 19% */
    gp.sampling.top_k = 0;
    gp.sampling.top_p = 1;
    gp.sampling.min_p = 0;
    gp.sampling.seed = 1234;
    gp.ignore_eos = true;
    gp.n_choices = 3;
    struct mrec a, b;
    assert_int_equal(msubmit(s, &a, prompt, 4, &gp), EBB_OK);
    mwait(&a);
    assert_int_equal(msubmit(s, &b, prompt, 4, &gp), EBB_OK);
    mwait(&b);
    for (int c = 0; c < 3; c++) {
        a.text[c][a.n_text[c]] = 0;
        b.text[c][b.n_text[c]] = 0;
        print_message("choice %d: %s\n", c, a.text[c]);
        assert_string_equal(a.text[c], b.text[c]);
    }
    assert_true(strcmp(a.text[0], a.text[1]) && strcmp(a.text[1], a.text[2]) &&
                strcmp(a.text[0], a.text[2]));
    for (int c = 0; c < 3; c++) {
        struct ebb_gen_params g1 = gp;
        g1.n_choices = 1;
        g1.sampling.seed = 1234 + (uint64_t)c;
        struct rec one;
        rec_init(&one, s);
        assert_int_equal(submit(s, &one, prompt, 4, &g1), EBB_OK);
        rec_wait(&one);
        assert_string_equal(one.text, a.text[c]);
    }

    gp.max_tokens = 40;
    gp.n_stop = 1;
    gp.stop[0] = "c";
    assert_int_equal(msubmit(s, &a, prompt, 4, &gp), EBB_OK);
    mwait(&a);
    uint32_t sum = 0;
    bool differ = false;
    for (int c = 0; c < 3; c++) {
        a.text[c][a.n_text[c]] = 0;
        print_message("choice %d until 'c': %s (%u tokens)\n", c, a.text[c], a.ch[c].n_gen);
        assert_null(strchr(a.text[c], 'c'));
        assert_int_equal(a.ch[c].finish, EBB_FINISH_STOP);
        assert_int_equal(a.ch[c].stop_index, 0);
        sum += a.ch[c].n_gen;
        differ = differ || a.ch[c].n_gen != a.ch[0].n_gen;
    }
    assert_true(differ);
    assert_int_equal(a.res.n_gen, sum);
    assert_int_equal(a.res.finish, EBB_FINISH_STOP);
    assert_int_equal(atomic_load(&kv_holes), 0);
    ebb_sched_free(s);
}

/* Cancelling a job frees all its slots: while it waits for its prompt, and while its choices
 * decode. The slots then serve a job of as many choices again. */
static void test_choices_cancel(void **state)
{
    (void)state;
    struct ebb_sched *s = start(3, 4, 4);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = 1 + i % 17;
    struct ebb_gen_params gp = greedy(200);
    gp.n_choices = 3;
    struct mrec r;
    struct ebb_sched_stats st;

    /* During the prompt (10 chunks of 4): the two waiting choices end with it. */
    atomic_store(&eval_delay_us, 2000);
    assert_int_equal(msubmit(s, &r, prompt, 40, &gp), EBB_OK);
    do {
        usleep(1000);
        ebb_sched_stats(s, &st);
    } while (st.active < 3);
    ebb_sched_cancel(s, r.id);
    mwait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_CANCEL);
    assert_int_equal(r.n_choice_calls, 3);
    assert_int_equal(r.n_tok, 0);
    ebb_sched_stats(s, &st);
    assert_int_equal(st.active, 0);
    assert_int_equal(st.kv_copies, 0);

    /* While decoding. */
    atomic_store(&eval_delay_us, 500);
    assert_int_equal(msubmit(s, &r, prompt, 40, &gp), EBB_OK);
    while (__atomic_load_n(&r.n_tok, __ATOMIC_SEQ_CST) < 9)
        usleep(1000);
    ebb_sched_cancel(s, r.id);
    mwait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_CANCEL);
    assert_int_equal(r.n_choice_calls, 3);
    for (int c = 0; c < 3; c++) {
        assert_int_equal(r.ch[c].finish, EBB_FINISH_CANCEL);
        assert_true(r.ch[c].n_gen > 0 && r.ch[c].n_gen < 200);
    }
    ebb_sched_stats(s, &st);
    assert_int_equal(st.active, 0);

    atomic_store(&eval_delay_us, 0);
    gp.max_tokens = 3;
    assert_int_equal(msubmit(s, &r, prompt, 40, &gp), EBB_OK);
    mwait(&r);
    assert_int_equal(r.res.finish, EBB_FINISH_LENGTH);
    assert_int_equal(r.res.n_gen, 9);
    assert_int_equal(atomic_load(&kv_holes), 0);
    ebb_sched_free(s);
}

/* More choices than slots, or than the cap, and embedding jobs with several are refused; a job
 * of n choices waits until n slots are free, and the jobs behind it wait too. Grammar and
 * speculative drafts work per choice. */
static void test_choices_admission(void **state)
{
    (void)state;
    struct ebb_sched *s = start(3, 4, 8);
    int32_t prompt[2] = {1, 5};
    struct ebb_gen_params gp = greedy(4);
    struct mrec r;
    struct ebb_diag d = {{0}};
    struct ebb_sched_sink sink = {.on_done = m_on_done, .ud = &r};
    gp.n_choices = 4;
    assert_int_equal(ebb_sched_submit(s, prompt, 2, &gp, &sink, &r.id, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "4 choices"));
    gp.n_choices = EBB_SCHED_MAX_CHOICES + 1;
    assert_int_equal(ebb_sched_submit(s, prompt, 2, &gp, &sink, &r.id, &d), EBB_EINVAL);
    float out[N_EMBD];
    uint32_t len[1] = {2};
    struct ebb_gen_params ge = gp;
    ge.n_choices = 2;
    ge.n_embed = 1;
    ge.embed_len = len;
    ge.embed_out = out;
    assert_int_equal(ebb_sched_submit(s, prompt, 2, &ge, &sink, &r.id, &d), EBB_EINVAL);

    /* One slot busy (a held pass): a 3-choice job and a one-choice job behind it wait. */
    struct rec first, last;
    rec_init(&first, s);
    rec_init(&last, s);
    atomic_store(&hold, true);
    gp.n_choices = 1;
    assert_int_equal(submit(s, &first, prompt, 2, &gp), EBB_OK);
    struct ebb_sched_stats st;
    do {
        usleep(1000);
        ebb_sched_stats(s, &st);
    } while (st.active < 1);
    gp.n_choices = 3;
    gp.grammar = "root ::= \"ab\" [x-z] \"d\"";
    gp.max_tokens = 10;
    assert_int_equal(msubmit(s, &r, prompt, 2, &gp), EBB_OK);
    gp.n_choices = 1;
    gp.grammar = NULL;
    assert_int_equal(submit(s, &last, prompt, 2, &gp), EBB_OK);
    /* Two slots are free, yet the one-choice job does not overtake the 3-choice one. */
    usleep(20000);
    ebb_sched_stats(s, &st);
    assert_int_equal(st.queued, 2);
    assert_int_equal(st.active, 1);
    atomic_store(&hold, false);
    mwait(&r);
    rec_wait(&first);
    rec_wait(&last);
    assert_true(r.res.finish == EBB_FINISH_STOP);
    for (int c = 0; c < 3; c++) {
        r.text[c][r.n_text[c]] = 0;
        assert_string_equal(r.text[c], "abxd");
    }
    assert_string_equal(last.text, "abcdeabcde");

    /* Speculative drafts per choice: the same text in fewer passes. */
    gp = greedy(40);
    gp.n_choices = 2;
    atomic_store(&evals, 0);
    assert_int_equal(msubmit(s, &r, prompt, 2, &gp), EBB_OK);
    mwait(&r);
    unsigned plain = atomic_load(&evals);
    gp.spec_max = 8;
    struct mrec sp;
    atomic_store(&evals, 0);
    assert_int_equal(msubmit(s, &sp, prompt, 2, &gp), EBB_OK);
    mwait(&sp);
    print_message("two choices, speculative: %u passes (plain %u)\n", atomic_load(&evals), plain);
    assert_true(atomic_load(&evals) * 2 < plain);
    for (int c = 0; c < 2; c++) {
        r.text[c][r.n_text[c]] = sp.text[c][sp.n_text[c]] = 0;
        assert_string_equal(sp.text[c], r.text[c]);
        assert_int_equal(sp.ch[c].n_gen, 40);
    }
    assert_int_equal(atomic_load(&kv_holes), 0);
    ebb_sched_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_length_and_eog),
        cmocka_unit_test(test_stop_string),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_fair_interleaving),
        cmocka_unit_test(test_gate),
        cmocka_unit_test(test_cancel_during_prefill),
        cmocka_unit_test(test_queue_limit_and_cancel_queued),
        cmocka_unit_test(test_prefix_reuse_and_limits),
        cmocka_unit_test(test_store_reuse),
        cmocka_unit_test(test_store_lru),
        cmocka_unit_test(test_store_budget),
        cmocka_unit_test(test_shutdown_cancels),
        cmocka_unit_test(test_swap_model),
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_batched_decode),
        cmocka_unit_test(test_prefill_budget_interleaves),
        cmocka_unit_test(test_long_prefill_pass),
        cmocka_unit_test(test_best_prefix_slot),
        cmocka_unit_test(test_short_match_keeps_cache),
        cmocka_unit_test(test_offer_and_place),
        cmocka_unit_test(test_place_rule),
        cmocka_unit_test(test_cancel_inside_batch),
        cmocka_unit_test(test_speculative),
        cmocka_unit_test(test_choices_greedy),
        cmocka_unit_test(test_choices_seeded),
        cmocka_unit_test(test_choices_cancel),
        cmocka_unit_test(test_choices_admission),
        cmocka_unit_test(test_stream_budget_while_idle),
        cmocka_unit_test(test_stream_wake_while_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
