/* Shared by the fuzz targets that need a real vocabulary: the tokenizer of the GGUF named by
 * EBB_FUZZ_GGUF, else SmolLM2-135M-Instruct.Q4_1.gguf in $EBB_MODELS_DIR (or
 * ~/.local/share/ebb/models). Loaded once; the process aborts when there is none, since fuzzing
 * without it would test nothing. */
#ifndef EBB_TESTS_FUZZ_VOCAB_H
#define EBB_TESTS_FUZZ_VOCAB_H

#include <stdio.h>
#include <stdlib.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static struct ebb_tokenizer *fuzz_vocab_load(void)
{
    char path[4096];
    const char *p = getenv("EBB_FUZZ_GGUF");
    if (!p) {
        const char *dir = getenv("EBB_MODELS_DIR");
        const char *home = getenv("HOME");
        if (dir)
            snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
        else
            snprintf(path, sizeof(path),
                     "%s/.local/share/ebb/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                     home ? home : ".");
        p = path;
    }
    struct ebb_gguf *g = NULL;
    struct ebb_tokenizer *tok = NULL;
    struct ebb_diag d;
    if (ebb_gguf_open(p, &g, &d) || ebb_tokenizer_new(g, &tok, &d)) {
        fprintf(stderr, "fuzz: cannot load a vocabulary from %s: %s\n", p, d.msg);
        abort();
    }
    ebb_gguf_close(g);
    return tok;
}

#endif
