/* The parse state: a set of parse stacks advanced one byte at a time. Stacks are chains of
 * nodes in a preallocated arena; advancing writes new top nodes above the committed ones, so a
 * walk that is abandoned (a rejected token, a trie branch) is undone by resetting the arena top,
 * and a committed advance copies the surviving stacks into the other arena. */
#include "grammar-int.h"

#include <stdlib.h>
#include <string.h>

ebb_err ebb_grammar_state_new(struct ebb_grammar_state **out)
{
    struct ebb_grammar_state *st = calloc(1, sizeof(*st));
    if (!st)
        return EBB_ENOMEM;
    st->arena[0] = malloc(sizeof(struct ebb__gnode) * EBB__GNODE_CAP);
    st->arena[1] = malloc(sizeof(struct ebb__gnode) * EBB__GNODE_CAP);
    st->stacks = malloc(sizeof(int32_t) * EBB_GRAMMAR_MAX_STACKS);
    st->scratch = malloc(sizeof(int32_t) * (EBB__GMAX_TOKEN + 2) * EBB_GRAMMAR_MAX_STACKS);
    st->remap = malloc(sizeof(uint32_t) * EBB__GNODE_CAP);
    st->stamp = calloc(EBB__GNODE_CAP, sizeof(uint32_t));
    if (!st->arena[0] || !st->arena[1] || !st->stacks || !st->scratch || !st->remap || !st->stamp) {
        ebb_grammar_state_free(st);
        return EBB_ENOMEM;
    }
    *out = st;
    return EBB_OK;
}

void ebb_grammar_state_free(struct ebb_grammar_state *st)
{
    if (!st)
        return;
    free(st->arena[0]);
    free(st->arena[1]);
    free(st->stacks);
    free(st->scratch);
    free(st->remap);
    free(st->stamp);
    free(st);
}

/* ---- one step ---------------------------------------------------------------------------- */

static bool is_end(const struct ebb__gelem *e)
{
    return e->kind == EBB__G_END || e->kind == EBB__G_ALT;
}

/* Adds stack (pos, parent) to out unless an equal one is there; pos < 0 adds the complete
 * stack. */
static void push(struct ebb_grammar_state *st, int32_t *out, uint32_t *n, int64_t pos,
                 int32_t parent)
{
    struct ebb__gnode *a = st->arena[st->cur];
    for (uint32_t i = 0; i < *n; i++) {
        int32_t id = out[i];
        if (pos < 0 ? id < 0 : (id >= 0 && a[id].pos == pos && a[id].parent == parent))
            return;
    }
    if (*n >= EBB_GRAMMAR_MAX_STACKS) {
        st->overflow = true;
        return;
    }
    if (pos < 0) {
        out[(*n)++] = -1;
        return;
    }
    uint32_t depth = parent < 0 ? 1 : a[parent].depth + 1;
    if (st->nn >= EBB__GNODE_CAP || depth > EBB_GRAMMAR_MAX_DEPTH) {
        st->overflow = true;
        return;
    }
    a[st->nn] = (struct ebb__gnode){.pos = (uint32_t)pos, .parent = parent, .depth = depth};
    out[(*n)++] = (int32_t)st->nn++;
}

/* Expands the stack whose next element is pos (under parent) until every resulting stack has
 * a character element on top, or is complete. Terminates because left recursion was rejected
 * at compile time. */
static void expand(struct ebb_grammar_state *st, uint32_t pos, int32_t parent, int32_t *out,
                   uint32_t *n)
{
    const struct ebb_grammar *g = st->g;
    struct ebb__gnode *a = st->arena[st->cur];
    for (;;) {
        const struct ebb__gelem *e = &g->elems[pos];
        if (is_end(e)) {
            if (parent < 0) {
                push(st, out, n, -1, -1);
                return;
            }
            pos = a[parent].pos;
            parent = a[parent].parent;
            continue;
        }
        if (e->kind == EBB__G_CHAR) {
            push(st, out, n, pos, parent);
            return;
        }
        /* A reference: continue after it once the rule is done (nothing to remember when the
         * reference ends its alternative, which keeps right recursion flat). */
        int32_t ret = parent;
        if (!is_end(&g->elems[pos + 1])) {
            uint32_t depth = parent < 0 ? 1 : a[parent].depth + 1;
            if (st->nn >= EBB__GNODE_CAP || depth > EBB_GRAMMAR_MAX_DEPTH) {
                st->overflow = true;
                return;
            }
            a[st->nn] = (struct ebb__gnode){.pos = pos + 1, .parent = parent, .depth = depth};
            ret = (int32_t)st->nn++;
        }
        uint32_t a0 = g->rule_alt0[e->a], na = g->rule_nalt[e->a];
        for (uint32_t i = 0; i < na && !st->overflow; i++)
            expand(st, g->alts[a0 + i], ret, out, n);
        return;
    }
}

static bool char_match(const struct ebb_grammar *g, const struct ebb__gelem *e, uint32_t c)
{
    bool in = false;
    for (uint32_t i = 0; i < e->n && !in; i++)
        in = g->ranges[e->a + i].lo <= c && c <= g->ranges[e->a + i].hi;
    return in != (bool)e->neg;
}

/* Could some character in [lo, hi] match? (Negated classes: unless one range covers it all.) */
static bool char_match_span(const struct ebb_grammar *g, const struct ebb__gelem *e, uint32_t lo,
                            uint32_t hi)
{
    for (uint32_t i = 0; i < e->n; i++) {
        const struct ebb__grange *r = &g->ranges[e->a + i];
        if (e->neg && r->lo <= lo && hi <= r->hi)
            return false;
        if (!e->neg && r->lo <= hi && lo <= r->hi)
            return true;
    }
    return e->neg;
}

uint32_t ebb__grammar_step(struct ebb_grammar_state *st, const int32_t *in, uint32_t n_in,
                           struct ebb__utf *u, uint8_t b, int32_t *out)
{
    uint32_t n = 0;
    if (u->need == 0) {
        if (b < 0x80) {
            *u = (struct ebb__utf){b, 0, 0};
        } else if (b >= 0xC2 && b <= 0xDF) {
            *u = (struct ebb__utf){b & 0x1Fu, 1, 0x80};
        } else if (b >= 0xE0 && b <= 0xEF) {
            *u = (struct ebb__utf){b & 0x0Fu, 2, 0x800};
        } else if (b >= 0xF0 && b <= 0xF4) {
            *u = (struct ebb__utf){b & 0x07u, 3, 0x10000};
        } else {
            return 0;
        }
    } else {
        if ((b & 0xC0) != 0x80)
            return 0;
        u->acc = (u->acc << 6) | (b & 0x3Fu);
        u->need--;
    }
    if (u->need == 0 &&
        (u->acc < u->min || u->acc > 0x10FFFF || (u->acc >= 0xD800 && u->acc <= 0xDFFF)))
        return 0;
    const struct ebb_grammar *g = st->g;
    struct ebb__gnode *a = st->arena[st->cur];
    if (u->need) { /* mid-character: keep the stacks some completion could still satisfy */
        uint32_t lo = u->acc << (6 * u->need), hi = lo | ((1u << (6 * u->need)) - 1);
        if (hi < u->min || lo > 0x10FFFF || (lo >= 0xD800 && hi <= 0xDFFF))
            return 0; /* overlong, beyond Unicode, or a surrogate */
        if (lo < u->min)
            lo = u->min;
        for (uint32_t i = 0; i < n_in; i++) {
            if (in[i] >= 0 && char_match_span(g, &g->elems[a[in[i]].pos], lo, hi))
                out[n++] = in[i];
        }
        return n;
    }
    for (uint32_t i = 0; i < n_in && !st->overflow; i++) {
        if (in[i] < 0)
            continue;
        const struct ebb__gnode *top = &a[in[i]];
        if (char_match(g, &g->elems[top->pos], u->acc))
            expand(st, top->pos + 1, top->parent, out, &n);
    }
    return n;
}

/* ---- the committed state ----------------------------------------------------------------- */

/* Copies the stacks in set[0..n) into the other arena (with their shared tails once) and makes
 * them the committed set. */
static void commit(struct ebb_grammar_state *st, const int32_t *set, uint32_t n)
{
    struct ebb__gnode *from = st->arena[st->cur], *to = st->arena[!st->cur];
    uint32_t nt = 0;
    if (++st->gen == 0) {
        memset(st->stamp, 0, sizeof(uint32_t) * EBB__GNODE_CAP);
        st->gen = 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = set[i];
        int32_t first = -1, prev = -1;
        /* Copy the chain down to the first node already copied. */
        while (id >= 0 && st->stamp[id] != st->gen) {
            to[nt] = from[id];
            st->stamp[id] = st->gen;
            st->remap[id] = nt;
            if (prev >= 0)
                to[prev].parent = (int32_t)nt;
            else
                first = (int32_t)nt;
            prev = (int32_t)nt++;
            id = from[id].parent;
        }
        if (prev >= 0)
            to[prev].parent = id < 0 ? -1 : (int32_t)st->remap[id];
        else
            first = id < 0 ? -1 : (int32_t)st->remap[id];
        st->stacks[i] = first;
    }
    st->n_stacks = n;
    st->cur = !st->cur;
    st->n_committed = st->nn = nt;
}

ebb_err ebb_grammar_state_reset(struct ebb_grammar_state *st, const struct ebb_grammar *g,
                                struct ebb_diag *diag)
{
    st->g = g;
    st->cur = 0;
    st->nn = 0;
    st->overflow = false;
    st->utf = (struct ebb__utf){0, 0, 0};
    uint32_t n = 0;
    int32_t *set = st->scratch;
    uint32_t a0 = g->rule_alt0[g->root];
    for (uint32_t i = 0; i < g->rule_nalt[g->root]; i++)
        expand(st, g->alts[a0 + i], -1, set, &n);
    if (st->overflow)
        return ebb_diag_set(diag, EBB_ERANGE,
                            "the grammar needs more than %d parse stacks or %d nested rules",
                            EBB_GRAMMAR_MAX_STACKS, EBB_GRAMMAR_MAX_DEPTH);
    commit(st, set, n);
    return EBB_OK;
}

/* Runs bytes over the committed set in scratch; returns the final set size (0: rejected) and
 * its place and UTF-8 state. The arena top is left above the new nodes. */
static uint32_t run(struct ebb_grammar_state *st, const uint8_t *bytes, size_t len, int32_t **set,
                    struct ebb__utf *u)
{
    st->nn = st->n_committed;
    st->overflow = false;
    *u = st->utf;
    const int32_t *cur = st->stacks;
    uint32_t n = st->n_stacks;
    int32_t *bufs[2] = {st->scratch, st->scratch + EBB_GRAMMAR_MAX_STACKS};
    for (size_t i = 0; i < len && n; i++) {
        int32_t *out = bufs[i & 1];
        n = ebb__grammar_step(st, cur, n, u, bytes[i], out);
        cur = out;
        if (st->overflow)
            return 0;
    }
    *set = (int32_t *)cur;
    return n;
}

bool ebb_grammar_state_allows(struct ebb_grammar_state *st, const uint8_t *bytes, size_t n)
{
    int32_t *set;
    struct ebb__utf u;
    bool ok = run(st, bytes, n, &set, &u) > 0;
    st->nn = st->n_committed;
    return ok;
}

ebb_err ebb_grammar_state_advance(struct ebb_grammar_state *st, const uint8_t *bytes, size_t n,
                                  struct ebb_diag *diag)
{
    int32_t *set;
    struct ebb__utf u;
    uint32_t k = run(st, bytes, n, &set, &u);
    if (st->overflow) {
        st->nn = st->n_committed;
        return ebb_diag_set(diag, EBB_ERANGE,
                            "the grammar needs more than %d parse stacks or %d nested rules",
                            EBB_GRAMMAR_MAX_STACKS, EBB_GRAMMAR_MAX_DEPTH);
    }
    if (k == 0) {
        st->nn = st->n_committed;
        return ebb_diag_set(diag, EBB_EINVAL, "the grammar does not allow this text here");
    }
    if (n == 0)
        return EBB_OK;
    st->utf = u;
    commit(st, set, k);
    return EBB_OK;
}

bool ebb_grammar_state_can_end(const struct ebb_grammar_state *st)
{
    if (st->utf.need)
        return false;
    for (uint32_t i = 0; i < st->n_stacks; i++) {
        if (st->stacks[i] < 0)
            return true;
    }
    return false;
}

bool ebb_grammar_state_done(const struct ebb_grammar_state *st)
{
    return st->utf.need == 0 && st->n_stacks == 1 && st->stacks[0] < 0;
}
