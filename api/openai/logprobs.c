/* The logprobs objects of OpenAI's answers: chat's logprobs.content entries and completions'
 * token lists, built from the records the engine reported. */
#include "openai.h"

#include "tokenizer/tokenizer.h"

static json_t *piece_text(const struct ebb_tokenizer *tok, int32_t id, json_t **bytes)
{
    struct ebb_str p = {0};
    if (ebb_tokenizer_piece(tok, id, true, &p))
        p.n = 0;
    if (bytes) {
        *bytes = json_array();
        for (uint64_t i = 0; i < p.n; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)p.p[i]));
    }
    return ebb__json_text(p.p ? p.p : "", (size_t)p.n);
}

json_t *ebb__chat_logprobs(const struct ebb_tokenizer *tok, const struct ebb__lp *lps, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_object(), *bytes;
        json_object_set_new(e, "token", piece_text(tok, lps[i].id, &bytes));
        json_object_set_new(e, "logprob", json_real(lps[i].logprob));
        json_object_set_new(e, "bytes", bytes);
        json_t *tops = json_array();
        for (uint32_t k = 0; k < lps[i].n_top; k++) {
            json_t *t = json_object(), *tb;
            json_object_set_new(t, "token", piece_text(tok, lps[i].top_ids[k], &tb));
            json_object_set_new(t, "logprob", json_real(lps[i].top_logprobs[k]));
            json_object_set_new(t, "bytes", tb);
            json_array_append_new(tops, t);
        }
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(arr, e);
    }
    return arr;
}

json_t *ebb__compl_logprobs(const struct ebb_tokenizer *tok, const struct ebb__lp *lps, size_t n,
                            size_t offset)
{
    json_t *o = json_object(), *tokens = json_array(), *tlp = json_array(), *tops = json_array(),
           *offs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *t = piece_text(tok, lps[i].id, NULL);
        json_array_append_new(offs, json_integer((json_int_t)offset));
        offset += json_string_length(t);
        json_array_append_new(tokens, t);
        json_array_append_new(tlp, json_real(lps[i].logprob));
        json_t *m = json_object();
        for (uint32_t k = 0; k < lps[i].n_top; k++) {
            json_t *kt = piece_text(tok, lps[i].top_ids[k], NULL);
            if (!json_object_get(m, json_string_value(kt)))
                json_object_set_new(m, json_string_value(kt), json_real(lps[i].top_logprobs[k]));
            json_decref(kt);
        }
        json_array_append_new(tops, m);
    }
    json_object_set_new(o, "tokens", tokens);
    json_object_set_new(o, "token_logprobs", tlp);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}
