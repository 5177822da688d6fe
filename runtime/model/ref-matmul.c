/* The reference's matrix products: quantized row dot products for one token, dequantized rows
 * reused over the tokens of a batch, output rows split between the caller and its helper
 * threads. */
#include "ref-int.h"

#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static float f16_table[65536]; /* every fp16 bit pattern as a float, for the block scales */
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void f16_init(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        f16_table[h] = ebb_fp16_to_fp32((uint16_t)h);
}

/* Per block: the 32 weights (low nibbles then high, minus 8) as signed bytes, their products
 * with the activations summed exactly in integers (|w| <= 8 and |a| <= 127 keep maddubs' 16-bit
 * pair sums far from saturation), then the block's float step as the generic code has it. */
__attribute__((target("avx2"))) static float dot_q4_0_avx2(const void *row,
                                                           const struct ebb_q8_act *x, uint64_t n)
{
    const struct ebb_block_q4_0 *b = row;
    const __m256i lo = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
    const __m256i ones = _mm256_set1_epi16(1);
    float sum = 0, summ = 0;
    for (uint64_t ib = 0; ib < n / 32; ib++, b++, x++) {
        __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)b->qs);
        __m256i w = _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs);
        w = _mm256_sub_epi8(_mm256_and_si256(w, lo), eight);
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)x->q);
        __m256i p = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)), ones);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        sum += f16_table[b->d] * x->d * (float)_mm_cvtsi128_si32(s);
        summ += 0.0f * x->s; /* Q4_0's min is 0, added as the generic code adds it */
    }
    return sum + summ;
}

ebb__ref_dot_q8_fn ebb__ref_fast_dot_q4_0(void)
{
    if (!__builtin_cpu_supports("avx2"))
        return NULL;
    pthread_once(&f16_once, f16_init);
    return dot_q4_0_avx2;
}
#else
ebb__ref_dot_q8_fn ebb__ref_fast_dot_q4_0(void)
{
    return NULL;
}
#endif

/* y[t][o] = W[o] . x[t] for rows o in [o0, o1). One token: the quantized dot directly. More:
 * dequantize each row once and reuse it for every token. */
static void matmul_rows(const struct job *j, float *rowbuf, uint32_t o0, uint32_t o1)
{
    const struct wmat *w = j->w;
    for (uint32_t o = o0; o < o1; o++) {
        const uint8_t *row = w->data + (uint64_t)o * w->row_bytes;
        if (j->xact && j->dot_q8) {
            for (uint32_t t = 0; t < j->n; t++)
                j->y[(uint64_t)t * w->n_out + o] =
                    j->dot_q8(row, j->xact + (uint64_t)t * (w->n_in / 32), w->n_in);
            continue;
        }
        if (j->xact) {
            for (uint32_t t = 0; t < j->n; t++)
                j->y[(uint64_t)t * w->n_out + o] = ebb_quant_dot_q8_act(
                    w->type, row, j->xact + (uint64_t)t * (w->n_in / 32), w->n_in);
            continue;
        }
        if (j->n == 1) {
            j->y[o] = w->dot(row, j->x, w->n_in);
            continue;
        }
        ebb_quant_dequantize_row(w->type, row, rowbuf, w->n_in);
        for (uint32_t t = 0; t < j->n; t++)
            j->y[(uint64_t)t * w->n_out + o] =
                ebb__ref_dot_f32(rowbuf, j->x + (uint64_t)t * w->n_in, w->n_in);
    }
}

/* Output rows of part i of n parts. */
static void part_rows(uint32_t n_out, int i, int n, uint32_t *o0, uint32_t *o1)
{
    *o0 = (uint32_t)((uint64_t)n_out * (uint32_t)i / (uint32_t)n);
    *o1 = (uint32_t)((uint64_t)n_out * (uint32_t)(i + 1) / (uint32_t)n);
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Helpers poll gen r->spins times, then sleep on cv (counted in sleepers, so that the caller
 * knows to wake them); the last helper done wakes the caller if it sleeps. Every flag is
 * sequentially consistent, so a sleeper either sees the new gen before waiting or is woken. */
static void *helper_main(void *arg)
{
    const struct ref_helper *h = arg;
    struct ref *r = h->r;
    uint64_t seen = 0, g;
    for (;;) {
        int k = 0;
        while ((g = atomic_load(&r->gen)) == seen && k++ < r->spins)
            relax();
        if (g == seen) {
            pthread_mutex_lock(&r->mu);
            atomic_fetch_add(&r->sleepers, 1);
            while ((g = atomic_load(&r->gen)) == seen)
                pthread_cond_wait(&r->cv, &r->mu);
            atomic_fetch_sub(&r->sleepers, 1);
            pthread_mutex_unlock(&r->mu);
        }
        if (atomic_load(&r->quit))
            break;
        seen = g;
        struct job j = r->job;
        uint32_t o0, o1;
        part_rows(j.w->n_out, h->i, r->n_threads, &o0, &o1);
        matmul_rows(&j, r->rowbuf[h->i], o0, o1);
        if (atomic_fetch_add(&r->n_done, 1) + 1 == r->n_threads - 1 &&
            atomic_load(&r->main_sleeps)) {
            pthread_mutex_lock(&r->mu);
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
    }
    return NULL;
}

void ebb__ref_matmul(struct ref *r, const struct wmat *w, const float *x, float *y, uint32_t n)
{
    struct job j = {w, NULL, x, NULL, y, n};
    if (r->q8 && ebb_quant_q8_act_supported(w->type)) {
        for (uint32_t t = 0; t < n; t++)
            ebb_quant_q8_act_row(x + (uint64_t)t * w->n_in, w->n_in,
                                 r->xact + (uint64_t)t * (w->n_in / 32));
        j.xact = r->xact;
        if (r->fast && w->type == EBB_GGML_Q4_0)
            j.dot_q8 = ebb__ref_fast_dot_q4_0();
    }
    if (r->n_threads < 2 || w->n_out < 64) {
        matmul_rows(&j, r->rowbuf[0], 0, w->n_out);
        return;
    }
    r->job = j;
    atomic_store(&r->n_done, 0);
    atomic_fetch_add(&r->gen, 1);
    if (atomic_load(&r->sleepers)) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    uint32_t o0, o1;
    part_rows(w->n_out, 0, r->n_threads, &o0, &o1);
    matmul_rows(&j, r->rowbuf[0], o0, o1);
    for (int k = 0; atomic_load(&r->n_done) != r->n_threads - 1 && k < r->spins; k++)
        relax();
    if (atomic_load(&r->n_done) == r->n_threads - 1)
        return;
    pthread_mutex_lock(&r->mu);
    atomic_store(&r->main_sleeps, true);
    while (atomic_load(&r->n_done) != r->n_threads - 1)
        pthread_cond_wait(&r->cv, &r->mu);
    atomic_store(&r->main_sleeps, false);
    pthread_mutex_unlock(&r->mu);
}

void ebb__ref_start_helper(struct ref *r, int n_threads)
{
    if (n_threads > EBB__REF_MAX_THREADS)
        n_threads = EBB__REF_MAX_THREADS;
    r->n_threads = 1;
    if (n_threads < 2)
        return;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int started = 0;
    for (int i = 1; i < n_threads; i++) {
        r->helper[i] = (struct ref_helper){r, i};
        if (pthread_create(&r->th[i], NULL, helper_main, &r->helper[i]))
            break;
        started = i;
    }
    /* Helpers read n_threads only after a job is posted, which happens after this store. */
    r->n_threads = started + 1;
    if (started)
        return;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

void ebb__ref_stop_helper(struct ref *r)
{
    if (r->n_threads > 1) {
        atomic_store(&r->quit, true);
        atomic_fetch_add(&r->gen, 1);
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        for (int i = 1; i < r->n_threads; i++)
            pthread_join(r->th[i], NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
}
