/* Entry point: dispatches to subcommands. Only this file exits the process. */
#include "cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "version.h"

struct subcmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct subcmd subcmds[] = {
    {"serve", ebb_cmd_serve, "serve the OpenAI-compatible HTTP API (default 127.0.0.1:8077)"},
    {"run", ebb_cmd_run, "generate text from a prompt on the command line"},
    {"ps", ebb_cmd_ps, "list the models a running ebb serve has and which are loaded"},
    {"pull", ebb_cmd_pull, "download a GGUF model from Hugging Face into models_dir"},
    {"ls", ebb_cmd_ls, "list the models in models_dir (size, family, quantization)"},
    {"rm", ebb_cmd_rm, "remove a model from models_dir"},
    {"info", ebb_cmd_info, "describe a GGUF model (or list OpenCL devices)"},
    {"tokenize", ebb_cmd_tokenize, "print the token ids of a text"},
    {"detokenize", ebb_cmd_detokenize, "print the text of token ids"},
    {"perplexity", ebb_cmd_perplexity, "perplexity of a model over a text file"},
    {"bench", ebb_cmd_bench, "measure prefill and decode speed"},
    {"pack", ebb_cmd_pack, "write a model in the device layout for streaming"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: ebb [--version] [--help] <command> [<args>]\n\n"
               "ebb is a local LLM inference daemon with an OpenAI-compatible API.\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof(subcmds) / sizeof(subcmds[0]); i++)
        fprintf(f, "  %-11s %s\n", subcmds[i].name, subcmds[i].summary);
    fprintf(f, "\nRun 'ebb <command> --help' for the flags of a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        exit(2);
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        exit(0);
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("ebb %s (commit %s)\n", EBB_VERSION, EBB_VERSION_COMMIT);
        exit(0);
    }
    for (size_t i = 0; i < sizeof(subcmds) / sizeof(subcmds[0]); i++) {
        if (!strcmp(cmd, subcmds[i].name))
            exit(subcmds[i].fn(argc - 1, argv + 1));
    }
    fprintf(stderr, "ebb: unknown command '%s'\n\n", cmd);
    usage(stderr);
    exit(2);
}
