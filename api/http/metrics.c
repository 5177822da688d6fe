/* Prometheus text exposition (version 0.0.4) of the API's counters. */
#include "http.h"

static const char *const ep_names[EBB__EP_COUNT] = {
    "other",
    "chat_completions",
    "completions",
    "models",
    "health",
    "metrics",
    "tokenize",
    "detokenize",
    "embeddings",
    "messages",
    "messages_count_tokens",
    "responses",
    "ollama_chat",
    "ollama_generate",
    "ollama_embed",
    "ollama",
};

static const unsigned statuses[EBB__N_STATUS] = {200, 202, 204, 400, 401, 403,
                                                 404, 405, 409, 413, 503, 500};

/* Upper bounds in seconds of the time-to-first-token histogram. */
static const double ttft_le[EBB__TTFT_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                  1,    2.5,   5,    10,  30,   60};

void ebb__metrics_request(struct ebb__metrics *m, enum ebb__ep ep, unsigned status)
{
    size_t k = EBB__N_STATUS - 1; /* other statuses count as 500 */
    for (size_t i = 0; i < EBB__N_STATUS; i++) {
        if (statuses[i] == status)
            k = i;
    }
    m->requests[ep][k]++;
}

void ebb__metrics_ttft(struct ebb__metrics *m, double s)
{
    size_t i = 0;
    while (i < EBB__TTFT_BUCKETS && s > ttft_le[i])
        i++;
    m->ttft_bucket[i]++;
    m->ttft_sum += s;
    m->ttft_count++;
}

void ebb__metrics_render(const struct ebb__metrics *m, const struct ebb_sched_stats *st,
                         bool loaded, struct ebb__abuf *o)
{
    ebb__abuf_puts(o, "# HELP ebb_requests_total HTTP requests answered, by endpoint and status.\n"
                      "# TYPE ebb_requests_total counter\n");
    for (size_t e = 0; e < EBB__EP_COUNT; e++) {
        for (size_t k = 0; k < EBB__N_STATUS; k++) {
            if (m->requests[e][k])
                ebb__abuf_printf(o, "ebb_requests_total{endpoint=\"%s\",status=\"%u\"} %llu\n",
                                 ep_names[e], statuses[k], (unsigned long long)m->requests[e][k]);
        }
    }
    ebb__abuf_printf(o,
                     "# HELP ebb_prompt_tokens_total Prompt tokens of finished requests.\n"
                     "# TYPE ebb_prompt_tokens_total counter\n"
                     "ebb_prompt_tokens_total %llu\n"
                     "# HELP ebb_prompt_tokens_cached_total Prompt tokens reused from the KV "
                     "cache.\n"
                     "# TYPE ebb_prompt_tokens_cached_total counter\n"
                     "ebb_prompt_tokens_cached_total %llu\n"
                     "# HELP ebb_generated_tokens_total Generated tokens.\n"
                     "# TYPE ebb_generated_tokens_total counter\n"
                     "ebb_generated_tokens_total %llu\n",
                     (unsigned long long)m->prompt_tokens, (unsigned long long)m->cached_tokens,
                     (unsigned long long)m->generated_tokens);
    ebb__abuf_printf(o,
                     "# HELP ebb_prefill_seconds_total Seconds spent evaluating prompts.\n"
                     "# TYPE ebb_prefill_seconds_total counter\n"
                     "ebb_prefill_seconds_total %.6f\n"
                     "# HELP ebb_decode_seconds_total Seconds spent generating tokens.\n"
                     "# TYPE ebb_decode_seconds_total counter\n"
                     "ebb_decode_seconds_total %.6f\n"
                     "# HELP ebb_queue_seconds_total Seconds requests waited for a slot.\n"
                     "# TYPE ebb_queue_seconds_total counter\n"
                     "ebb_queue_seconds_total %.6f\n",
                     m->prefill_seconds, m->decode_seconds, m->queue_seconds);
    ebb__abuf_puts(o, "# HELP ebb_time_to_first_token_seconds From request to first token.\n"
                      "# TYPE ebb_time_to_first_token_seconds histogram\n");
    uint64_t cum = 0;
    for (size_t i = 0; i < EBB__TTFT_BUCKETS; i++) {
        cum += m->ttft_bucket[i];
        ebb__abuf_printf(o, "ebb_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", ttft_le[i],
                         (unsigned long long)cum);
    }
    cum += m->ttft_bucket[EBB__TTFT_BUCKETS];
    ebb__abuf_printf(o,
                     "ebb_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n"
                     "ebb_time_to_first_token_seconds_sum %.6f\n"
                     "ebb_time_to_first_token_seconds_count %llu\n",
                     (unsigned long long)cum, m->ttft_sum, (unsigned long long)m->ttft_count);
    ebb__abuf_printf(o,
                     "# HELP ebb_cancellations_total Requests cancelled (client gone, shutdown).\n"
                     "# TYPE ebb_cancellations_total counter\n"
                     "ebb_cancellations_total %llu\n"
                     "# HELP ebb_rejected_queue_full_total Requests refused with 503, queue full.\n"
                     "# TYPE ebb_rejected_queue_full_total counter\n"
                     "ebb_rejected_queue_full_total %llu\n"
                     "# HELP ebb_engine_errors_total Generations that failed in the engine.\n"
                     "# TYPE ebb_engine_errors_total counter\n"
                     "ebb_engine_errors_total %llu\n",
                     (unsigned long long)m->cancellations,
                     (unsigned long long)m->rejected_queue_full, (unsigned long long)m->errors);
    static const char *const refusal[EBB__REFUSE_N] = {
        "per_client",  "global",      "header_timeout", "body_timeout",
        "bad_framing", "peer_closed", "accept_rate",    "silent"};
    ebb__abuf_puts(o, "# HELP ebb_http_refused_total Connections refused or closed by the edge "
                      "limits (connection caps, phase deadlines).\n"
                      "# TYPE ebb_http_refused_total counter\n");
    for (int k = 0; k < EBB__REFUSE_N; k++)
        ebb__abuf_printf(o, "ebb_http_refused_total{reason=\"%s\"} %llu\n", refusal[k],
                         (unsigned long long)m->refused[k]);
    ebb__abuf_printf(o,
                     "# HELP ebb_http_connections Open HTTP connections.\n"
                     "# TYPE ebb_http_connections gauge\n"
                     "ebb_http_connections %zu\n",
                     m->open_connections);
    ebb__abuf_printf(o,
                     "# HELP ebb_queue_depth Requests waiting for a slot.\n"
                     "# TYPE ebb_queue_depth gauge\n"
                     "ebb_queue_depth %u\n"
                     "# HELP ebb_active_slots Slots generating now.\n"
                     "# TYPE ebb_active_slots gauge\n"
                     "ebb_active_slots %u\n"
                     "# HELP ebb_slots Configured slots (--parallel).\n"
                     "# TYPE ebb_slots gauge\n"
                     "ebb_slots %u\n"
                     "# HELP ebb_model_loaded 1 once the model is ready.\n"
                     "# TYPE ebb_model_loaded gauge\n"
                     "ebb_model_loaded %d\n"
                     "# HELP ebb_start_time_seconds Unix time the daemon started.\n"
                     "# TYPE ebb_start_time_seconds gauge\n"
                     "ebb_start_time_seconds %.3f\n",
                     st->queued, st->active, st->n_slots, loaded ? 1 : 0, m->started_at);
    ebb__abuf_printf(o,
                     "# HELP ebb_engine_steps_total Batched forward passes of the engine.\n"
                     "# TYPE ebb_engine_steps_total counter\n"
                     "ebb_engine_steps_total %llu\n"
                     "# HELP ebb_batch_tokens_total Tokens evaluated by those passes (divided by "
                     "the steps: the mean batch size).\n"
                     "# TYPE ebb_batch_tokens_total counter\n"
                     "ebb_batch_tokens_total %llu\n"
                     "# HELP ebb_batch_sequences_total Slots evaluated by those passes.\n"
                     "# TYPE ebb_batch_sequences_total counter\n"
                     "ebb_batch_sequences_total %llu\n"
                     "# HELP ebb_batch_tokens_last Tokens in the latest pass.\n"
                     "# TYPE ebb_batch_tokens_last gauge\n"
                     "ebb_batch_tokens_last %u\n"
                     "# HELP ebb_batch_sequences_last Slots in the latest pass.\n"
                     "# TYPE ebb_batch_sequences_last gauge\n"
                     "ebb_batch_sequences_last %u\n",
                     (unsigned long long)st->steps, (unsigned long long)st->batch_rows,
                     (unsigned long long)st->batch_seqs, st->last_batch_rows, st->last_batch_seqs);
    ebb__abuf_printf(o,
                     "# HELP ebb_jobs_started_total Jobs the engine started (left the queue).\n"
                     "# TYPE ebb_jobs_started_total counter\n"
                     "ebb_jobs_started_total %llu\n"
                     "# HELP ebb_queue_wait_seconds_total Seconds those jobs waited in the "
                     "queue.\n"
                     "# TYPE ebb_queue_wait_seconds_total counter\n"
                     "ebb_queue_wait_seconds_total %.6f\n"
                     "# HELP ebb_prompt_cache_hits_total Jobs that reused a cached prompt "
                     "prefix.\n"
                     "# TYPE ebb_prompt_cache_hits_total counter\n"
                     "ebb_prompt_cache_hits_total %llu\n"
                     "# HELP ebb_prompt_cache_tokens_total Prompt tokens reused from the cache.\n"
                     "# TYPE ebb_prompt_cache_tokens_total counter\n"
                     "ebb_prompt_cache_tokens_total %llu\n",
                     (unsigned long long)st->jobs_started, st->queue_wait_s,
                     (unsigned long long)st->cache_hits, (unsigned long long)st->cache_tokens);
    ebb__abuf_printf(o,
                     "# HELP ebb_spec_drafted_total Speculative drafts verified.\n"
                     "# TYPE ebb_spec_drafted_total counter\n"
                     "ebb_spec_drafted_total %llu\n"
                     "# HELP ebb_spec_accepted_total Speculative drafts accepted.\n"
                     "# TYPE ebb_spec_accepted_total counter\n"
                     "ebb_spec_accepted_total %llu\n",
                     (unsigned long long)st->spec_drafted, (unsigned long long)st->spec_accepted);
    ebb__abuf_printf(o,
                     "# HELP ebb_kv_copies_total Prompts copied into another choice's slot "
                     "(requests with n > 1).\n"
                     "# TYPE ebb_kv_copies_total counter\n"
                     "ebb_kv_copies_total %llu\n",
                     (unsigned long long)st->kv_copies);
    ebb__abuf_printf(
        o,
        "# HELP ebb_prompt_store_hits_total Jobs whose prompt prefix came from the prompt-cache "
        "store (also in ebb_prompt_cache_hits_total).\n"
        "# TYPE ebb_prompt_store_hits_total counter\n"
        "ebb_prompt_store_hits_total %llu\n"
        "# HELP ebb_prompt_store_tokens_total Prompt tokens reused from the store.\n"
        "# TYPE ebb_prompt_store_tokens_total counter\n"
        "ebb_prompt_store_tokens_total %llu\n"
        "# HELP ebb_prompt_store_saves_total Slot sequences saved into the store.\n"
        "# TYPE ebb_prompt_store_saves_total counter\n"
        "ebb_prompt_store_saves_total %llu\n"
        "# HELP ebb_prompt_store_evictions_total Store entries evicted to make room.\n"
        "# TYPE ebb_prompt_store_evictions_total counter\n"
        "ebb_prompt_store_evictions_total %llu\n"
        "# HELP ebb_prompt_store_entries Prefixes the store holds.\n"
        "# TYPE ebb_prompt_store_entries gauge\n"
        "ebb_prompt_store_entries %u\n"
        "# HELP ebb_prompt_store_bytes_used Bytes of KV entries the store holds.\n"
        "# TYPE ebb_prompt_store_bytes_used gauge\n"
        "ebb_prompt_store_bytes_used %llu\n"
        "# HELP ebb_prompt_store_bytes Bytes of the store (--prompt-cache; 0: none).\n"
        "# TYPE ebb_prompt_store_bytes gauge\n"
        "ebb_prompt_store_bytes %llu\n",
        (unsigned long long)st->store_hits, (unsigned long long)st->store_tokens,
        (unsigned long long)st->store_saves, (unsigned long long)st->store_evictions,
        st->store_entries, (unsigned long long)st->store_bytes_used,
        (unsigned long long)st->store_bytes);
}
