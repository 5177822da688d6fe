/* Subcommands of the ebb binary. Each returns the process exit status (0 success, 1 failure,
 * 2 usage error); only main() exits. */
#ifndef EBB_DAEMON_CMDS_H
#define EBB_DAEMON_CMDS_H

#include <stdbool.h>
#include <stddef.h>

int ebb_cmd_serve(int argc, char **argv);
int ebb_cmd_run(int argc, char **argv);
int ebb_cmd_info(int argc, char **argv);
int ebb_cmd_tokenize(int argc, char **argv);
int ebb_cmd_detokenize(int argc, char **argv);
int ebb_cmd_bench(int argc, char **argv);
int ebb_cmd_pack(int argc, char **argv);
int ebb_cmd_ps(int argc, char **argv);
int ebb_cmd_perplexity(int argc, char **argv);
int ebb_cmd_pull(int argc, char **argv);
int ebb_cmd_ls(int argc, char **argv);
int ebb_cmd_rm(int argc, char **argv);
/* The models directory pull, ls and rm work on (cmd-pull.c): dir when non-NULL, else the
 * configuration's models_dir (config file, EBB_MODELS_DIR); 1 after printing why not. */
int ebb__models_dir(const char *cmd, const char *dir, const char *config, char *out, size_t n);
/* `ebb info --memory [--device SPEC] [--json]` (cmd-info-memory.c): what the memory probes see;
 * device NULL = auto, "none" = no OpenCL device. */
int ebb_cmd_info_memory(const char *device, bool json);

#endif
