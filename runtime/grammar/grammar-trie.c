/* The vocabulary's token byte strings in a trie, and the walk that computes a next-token mask:
 * depth first over the trie with the set of parse stacks each prefix leaves, dropping a whole
 * subtree as soon as the set is empty. Each byte of a shared prefix is matched once for all
 * the tokens that start with it. */
#include "grammar-int.h"

#include <stdlib.h>
#include <string.h>

struct tnode {
    uint32_t first_child; /* 0: none (node 0 is the root, never a child) */
    uint32_t next_sibling;
    int32_t tok_head; /* first token ending here, -1 if none; more through tok_next */
    uint8_t byte;
};

struct ebb_token_trie {
    struct tnode *nodes; /* (n_nodes) */
    uint32_t n_nodes, cap_nodes;
    int32_t *tok_next;   /* (n_vocab) next token with the same bytes, -1 at the end */
    uint32_t *piece_off; /* (n_vocab + 1) token i's bytes are bytes[piece_off[i] .. [i + 1]) */
    uint8_t *bytes;
    int32_t *eog; /* (n_eog) end-of-generation tokens */
    uint32_t n_eog;
    uint32_t n_vocab;
};

static uint32_t child(struct ebb_token_trie *t, uint32_t parent, uint8_t b)
{
    uint32_t *link = &t->nodes[parent].first_child;
    while (*link && t->nodes[*link].byte < b)
        link = &t->nodes[*link].next_sibling;
    if (*link && t->nodes[*link].byte == b)
        return *link;
    if (t->n_nodes == t->cap_nodes) {
        uint32_t nc = t->cap_nodes * 2;
        struct tnode *nn = realloc(t->nodes, sizeof(*nn) * nc);
        if (!nn)
            return 0;
        t->nodes = nn;
        t->cap_nodes = nc;
        link = &t->nodes[parent].first_child; /* the array moved: find the link again */
        while (*link && t->nodes[*link].byte < b)
            link = &t->nodes[*link].next_sibling;
    }
    uint32_t id = t->n_nodes++;
    t->nodes[id] =
        (struct tnode){.first_child = 0, .next_sibling = *link, .tok_head = -1, .byte = b};
    *link = id;
    return id;
}

ebb_err ebb_token_trie_new(const struct ebb_tokenizer *tok, struct ebb_token_trie **out,
                           struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    uint32_t nv = ebb_tokenizer_n_vocab(tok);
    struct ebb_token_trie *t = calloc(1, sizeof(*t));
    if (!t)
        return EBB_ENOMEM;
    t->n_vocab = nv;
    t->cap_nodes = 1024;
    t->nodes = malloc(sizeof(*t->nodes) * t->cap_nodes);
    t->tok_next = malloc(sizeof(int32_t) * (nv ? nv : 1));
    t->piece_off = malloc(sizeof(uint32_t) * (nv + 1));
    t->eog = malloc(sizeof(int32_t) * (nv ? nv : 1));
    size_t total = 0;
    for (uint32_t i = 0; i < nv; i++) {
        struct ebb_str p = {0};
        if (!ebb_tokenizer_piece(tok, (int32_t)i, false, &p) && p.n <= EBB__GMAX_TOKEN)
            total += p.n;
    }
    t->bytes = malloc(total ? total : 1);
    if (!t->nodes || !t->tok_next || !t->piece_off || !t->eog || !t->bytes) {
        rc = ebb_diag_set(diag, EBB_ENOMEM, "out of memory for the token trie");
        goto out;
    }
    t->nodes[0] = (struct tnode){.first_child = 0, .next_sibling = 0, .tok_head = -1};
    t->n_nodes = 1;
    uint32_t off = 0;
    for (uint32_t i = 0; i < nv; i++) {
        t->piece_off[i] = off;
        t->tok_next[i] = -1;
        if (ebb_tokenizer_is_eog(tok, (int32_t)i))
            t->eog[t->n_eog++] = (int32_t)i;
        struct ebb_str p = {0};
        /* Empty pieces (special tokens) and over-long ones never enter the trie. */
        if (ebb_tokenizer_piece(tok, (int32_t)i, false, &p) || p.n == 0 || p.n > EBB__GMAX_TOKEN)
            continue;
        memcpy(t->bytes + off, p.p, (size_t)p.n);
        off += (uint32_t)p.n;
        uint32_t node = 0;
        for (size_t k = 0; k < (size_t)p.n; k++) {
            node = child(t, node, (uint8_t)p.p[k]);
            if (!node) {
                rc = ebb_diag_set(diag, EBB_ENOMEM, "out of memory for the token trie");
                goto out;
            }
        }
        t->tok_next[i] = t->nodes[node].tok_head;
        t->nodes[node].tok_head = (int32_t)i;
    }
    t->piece_off[nv] = off;
    *out = t;
out:
    if (rc)
        ebb_token_trie_free(t);
    return rc;
}

void ebb_token_trie_free(struct ebb_token_trie *t)
{
    if (!t)
        return;
    free(t->nodes);
    free(t->tok_next);
    free(t->piece_off);
    free(t->bytes);
    free(t->eog);
    free(t);
}

uint32_t ebb_token_trie_n_vocab(const struct ebb_token_trie *t)
{
    return t->n_vocab;
}

static bool is_eog(const struct ebb_token_trie *t, int32_t id)
{
    for (uint32_t i = 0; i < t->n_eog; i++) {
        if (t->eog[i] == id)
            return true;
    }
    return false;
}

bool ebb_grammar_token_allowed(struct ebb_grammar_state *st, const struct ebb_token_trie *t,
                               int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return false;
    if (is_eog(t, id))
        return ebb_grammar_state_can_end(st);
    uint32_t a = t->piece_off[id], b = t->piece_off[id + 1];
    return b > a && ebb_grammar_state_allows(st, t->bytes + a, b - a);
}

ebb_err ebb_grammar_accept_token(struct ebb_grammar_state *st, const struct ebb_token_trie *t,
                                 int32_t id, struct ebb_diag *diag)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return ebb_diag_set(diag, EBB_EINVAL, "token %d is outside the vocabulary", (int)id);
    if (is_eog(t, id))
        return ebb_grammar_state_can_end(st)
                   ? EBB_OK
                   : ebb_diag_set(diag, EBB_EINVAL, "the grammar cannot end here");
    uint32_t a = t->piece_off[id], b = t->piece_off[id + 1];
    if (b == a)
        return ebb_diag_set(diag, EBB_EINVAL, "token %d has no text a grammar could match",
                            (int)id);
    return ebb_grammar_state_advance(st, t->bytes + a, b - a, diag);
}

/* Visits the children of node with the stacks in[0..n) (UTF-8 state u); level picks the
 * scratch area for the children's sets. */
static void walk(struct ebb_grammar_state *st, const struct ebb_token_trie *t, uint32_t node,
                 const int32_t *in, uint32_t n, struct ebb__utf u, uint32_t level, uint8_t *allowed)
{
    int32_t *out = st->scratch + (size_t)(level + 2) * EBB_GRAMMAR_MAX_STACKS;
    for (uint32_t c = t->nodes[node].first_child; c && !st->overflow;
         c = t->nodes[c].next_sibling) {
        uint32_t mark = st->nn;
        struct ebb__utf cu = u;
        uint32_t k = ebb__grammar_step(st, in, n, &cu, t->nodes[c].byte, out);
        if (k) {
            for (int32_t id = t->nodes[c].tok_head; id >= 0; id = t->tok_next[id])
                allowed[id >> 3] |= (uint8_t)(1u << (id & 7));
            if (t->nodes[c].first_child && level + 1 < EBB__GMAX_TOKEN)
                walk(st, t, c, out, k, cu, level + 1, allowed);
        }
        st->nn = mark;
    }
}

ebb_err ebb_grammar_mask(struct ebb_grammar_state *st, const struct ebb_token_trie *t,
                         uint8_t *allowed, struct ebb_diag *diag)
{
    memset(allowed, 0, (t->n_vocab + 7) / 8);
    st->nn = st->n_committed;
    st->overflow = false;
    walk(st, t, 0, st->stacks, st->n_stacks, st->utf, 0, allowed);
    st->nn = st->n_committed;
    if (st->overflow)
        return ebb_diag_set(diag, EBB_ERANGE,
                            "the grammar needs more than %d parse stacks or %d nested rules",
                            EBB_GRAMMAR_MAX_STACKS, EBB_GRAMMAR_MAX_DEPTH);
    if (ebb_grammar_state_can_end(st)) {
        for (uint32_t i = 0; i < t->n_eog; i++)
            allowed[t->eog[i] >> 3] |= (uint8_t)(1u << (t->eog[i] & 7));
    }
    return EBB_OK;
}
