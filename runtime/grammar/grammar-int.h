/* Private to runtime/grammar: the compiled form of a grammar and the parse state. */
#ifndef EBB_RUNTIME_GRAMMAR_INT_H
#define EBB_RUNTIME_GRAMMAR_INT_H

#include "grammar.h"

/* One element of a rule body. A rule is its alternatives one after another, each ended by
 * ALT (another follows) or END (the rule's last). Repetitions, optionals and groups are rewritten
 * into generated rules at compile time, so only these four kinds remain. */
enum ebb__gkind {
    EBB__G_END = 0,
    EBB__G_ALT,
    EBB__G_REF,  /* a = rule id */
    EBB__G_CHAR, /* one character from ranges[a .. a + n), or outside them if neg */
};

struct ebb__gelem {
    uint8_t kind;
    uint8_t neg;
    uint32_t a, n;
};

struct ebb__grange {
    uint32_t lo, hi; /* code points, inclusive */
};

struct ebb_grammar {
    struct ebb__gelem *elems; /* (n_elems) every rule's body, concatenated */
    uint32_t n_elems;
    struct ebb__grange *ranges; /* (n_ranges) */
    uint32_t n_ranges;
    uint32_t *alts;      /* (n_alts) element index where each alternative starts */
    uint32_t *rule_alt0; /* (n_rules) index into alts of the rule's first alternative */
    uint32_t *rule_nalt; /* (n_rules) */
    uint32_t n_rules;
    uint32_t root;
};

/* A parse stack is a chain of nodes from its top: the top's pos is the character element to
 * match next, each parent's pos where to continue once the rule above it is complete. Stacks
 * share their tails. Node id -1 as a whole stack means "complete": the root rule has ended. */
struct ebb__gnode {
    uint32_t pos;
    int32_t parent;
    uint32_t depth;
};

/* Where a multi-byte UTF-8 character stands: acc holds its bits so far, need the continuation
 * bytes still missing (0: at a character boundary), min the smallest code point its length may
 * encode (shorter forms are overlong, invalid UTF-8). */
struct ebb__utf {
    uint32_t acc;
    uint32_t need;
    uint32_t min;
};

#define EBB__GNODE_CAP (1u << 17)
#define EBB__GMAX_TOKEN 256 /* longest token piece the trie holds (bytes) */

struct ebb_grammar_state {
    const struct ebb_grammar *g;
    struct ebb__gnode *arena[2]; /* (EBB__GNODE_CAP) committed stacks live in arena[cur] */
    int cur;
    uint32_t n_committed; /* nodes of arena[cur] the committed stacks use */
    uint32_t nn;          /* allocation top of arena[cur] during a walk */
    int32_t *stacks;      /* (EBB_GRAMMAR_MAX_STACKS) the committed set */
    uint32_t n_stacks;
    struct ebb__utf utf;
    int32_t *scratch; /* ((EBB__GMAX_TOKEN + 2) * EBB_GRAMMAR_MAX_STACKS) sets during walks */
    uint32_t *remap;  /* (EBB__GNODE_CAP) compaction: new id of an old node, valid if stamp */
    uint32_t *stamp;  /* (EBB__GNODE_CAP) */
    uint32_t gen;
    bool overflow; /* a limit was hit during the current walk */
};

/* Advances the set in[0..n_in) over one byte with UTF-8 state *u, writing the surviving stacks
 * to out (room for EBB_GRAMMAR_MAX_STACKS) and updating *u. New nodes come from st->nn upwards.
 * Returns the count; sets st->overflow on a limit. An invalid UTF-8 byte leaves nothing. */
uint32_t ebb__grammar_step(struct ebb_grammar_state *st, const int32_t *in, uint32_t n_in,
                           struct ebb__utf *u, uint8_t byte, int32_t *out);

#endif
