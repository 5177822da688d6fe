/* Tokenizers read from GGUF metadata: byte-level BPE (tokenizer.ggml.model "gpt2", with the
 * pre-tokenizer named by tokenizer.ggml.pre), BPE over raw UTF-8 ("gemma4") and
 * SentencePiece-style ("llama": scores, byte fallback). Encoding matches llama.cpp's llama_tokenize
 * for the same flags. A tokenizer is immutable after creation and may be used from any thread. */
#ifndef EBB_RUNTIME_TOKENIZER_H
#define EBB_RUNTIME_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

enum ebb_tok_kind {
    EBB_TOK_BPE = 1, /* "gpt2", "gemma4" */
    EBB_TOK_SPM = 2, /* "llama" */
};

/* Flags for ebb_tokenizer_encode. */
enum {
    EBB_TOK_ADD_SPECIAL = 1u << 0,   /* add BOS/EOS as the model's metadata asks */
    EBB_TOK_PARSE_SPECIAL = 1u << 1, /* text of special/control tokens becomes those tokens */
};

struct ebb_tokenizer;

/* Builds a tokenizer from g's metadata. g must outlive nothing: everything needed is copied.
 * EBB_EUNSUPPORTED names an unknown tokenizer model or pre-tokenizer. */
ebb_err ebb_tokenizer_new(const struct ebb_gguf *g, struct ebb_tokenizer **out,
                          struct ebb_diag *diag);
void ebb_tokenizer_free(struct ebb_tokenizer *t);

enum ebb_tok_kind ebb_tokenizer_kind(const struct ebb_tokenizer *t);
const char *ebb_tokenizer_kind_name(const struct ebb_tokenizer *t); /* "gpt2 (smollm)" */
uint32_t ebb_tokenizer_n_vocab(const struct ebb_tokenizer *t);
int32_t ebb_tokenizer_bos(const struct ebb_tokenizer *t); /* -1 if none */
int32_t ebb_tokenizer_eos(const struct ebb_tokenizer *t); /* -1 if none */
int32_t ebb_tokenizer_eot(const struct ebb_tokenizer *t); /* -1 if none */
bool ebb_tokenizer_add_bos(const struct ebb_tokenizer *t);
bool ebb_tokenizer_add_eos(const struct ebb_tokenizer *t);
/* True for tokens that end generation (EOS, EOT, and end-of-generation control tokens such as
 * <|im_end|> or <end_of_turn>). */
bool ebb_tokenizer_is_eog(const struct ebb_tokenizer *t, int32_t id);
/* Looks a token up by its exact text (e.g. "<|im_start|>"); -1 if absent. */
int32_t ebb_tokenizer_find(const struct ebb_tokenizer *t, const char *text, size_t len);

/* Encodes len bytes of UTF-8 text into ids[0..cap). Writes the count to *n_out. If cap is too
 * small returns EBB_ERANGE with *n_out set to the count needed (nothing else is guaranteed in
 * ids). Invalid UTF-8 is never rejected; it is tokenized as llama.cpp does (byte-level BPE:
 * each undecodable byte as U+FFFD; SentencePiece: byte tokens). */
ebb_err ebb_tokenizer_encode(const struct ebb_tokenizer *t, const char *text, size_t len,
                             unsigned flags, int32_t *ids, size_t cap, size_t *n_out);

/* The bytes a token stands for when detokenized (byte-level BPE decoded, SentencePiece '▁'
 * turned into a space, <0xNN> into the byte). Special/control tokens give their text only when
 * render_special is true, otherwise an empty piece. EBB_ERANGE for an id outside the vocab. */
ebb_err ebb_tokenizer_piece(const struct ebb_tokenizer *t, int32_t id, bool render_special,
                            struct ebb_str *out);

/* Streaming detokenizer: turns a sequence of pieces into text that never ends in the middle of
 * a UTF-8 character; incomplete trailing bytes are held until the next piece completes them.
 * Caller-owned storage; zero-initialise or call ebb_detok_init. */
struct ebb_detok {
    uint8_t pending[4];
    uint32_t n_pending;
};
void ebb_detok_init(struct ebb_detok *d);
/* Appends the piece; writes the newly complete text to out and returns its length. Byte
 * sequences that can never form valid UTF-8 are passed through as U+FFFD (one per maximal
 * invalid subpart). For valid UTF-8 at most n + 4 bytes are written, so cap >= n + 4 suffices;
 * since each invalid byte may grow to 3, cap >= 3 * (n + 3) suffices for any input. Output that
 * does not fit in cap is dropped, never written past it. */
size_t ebb_detok_push(struct ebb_detok *d, const char *piece, size_t n, char *out, size_t cap);
/* Ends the stream: any held incomplete sequence is emitted as U+FFFD; returns bytes written
 * (cap >= 3 suffices). */
size_t ebb_detok_finish(struct ebb_detok *d, char *out, size_t cap);

#endif
