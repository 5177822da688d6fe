#include "stream-opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream/stream-plan.h"

const char ebb_stream_opts_usage[] =
    "      --memory-budget SIZE|auto  stream decoder layers so that weights + KV + buffers\n"
    "                          fit SIZE (256M, 1.5G, ...) or what the memory probes allow;\n"
    "                          default: no streaming\n"
    "      --prefetch N        streamed layers read ahead (default 2)\n"
    "      --residency-mode M  speed, balanced (default) or context: KV reserve vs layers\n"
    "      --pack FILE         stream from a pack made by `ebb pack` instead of the GGUF\n"
    "      --residency F       tests: force this fraction of layers resident (0..1)\n"
    "      --stream-io MODE    cached, direct (O_DIRECT) or dontneed; default: direct (else\n"
    "                          dontneed) under a cgroup memory limit, or on a device that\n"
    "                          shares host memory when memory is short; cached otherwise\n"
    "      --stream-threads N  reader threads per streamed layer (default: half the\n"
    "                          physical cores, 1 to 4)\n"
    "      --host-layers N     compute the last N non-resident layers on the host's cores\n"
    "                          instead of streaming them (default 0)\n"
    "      --host-threads N    threads for host layers (default: physical cores - 1)\n"
    "                          and for --device cpu (default: physical cores)\n"
    "      --host-q8           host layers with 8-bit activations (llama.cpp's CPU numerics;\n"
    "                          AVX2 Q4_0 products) instead of the reference's fp32\n"
    "      --expert-cache N|auto  MoE models: N expert slots per layer on the device (auto:\n"
    "                          what --memory-budget SIZE leaves), the experts the router\n"
    "                          picks copied in on demand (default off)\n"
    "      --split layer|none|auto  with --device all or a list (cl:0:0,cl:0:1): layer runs\n"
    "                          the model's layers across the devices, each a range of\n"
    "                          them (default auto: layer; one device: nothing to split)\n"
    "      --tensor-split A,B  with --split layer: each device's share of the layers, in\n"
    "                          the list's order (default: in proportion to free memory)\n";

bool ebb_stream_opt_apply(int c, const char *arg, struct ebb_model_params *mp)
{
    char *end = NULL;
    switch (c) {
    case EBB_SOPT_BUDGET:
        if (!strcmp(arg, "auto")) {
            mp->memory_budget_auto = true;
            return true;
        }
        return ebb_stream_budget_parse(arg, &mp->memory_budget) == EBB_OK;
    case EBB_SOPT_PREFETCH: {
        unsigned long v = strtoul(arg, &end, 10);
        mp->prefetch = (uint32_t)v;
        return end != arg && !*end && v >= 1 && v <= 64;
    }
    case EBB_SOPT_MODE: {
        enum ebb_stream_mode md;
        mp->residency_mode = arg;
        return ebb_stream_mode_parse(arg, &md) == EBB_OK;
    }
    case EBB_SOPT_PACK:
        mp->pack_path = arg;
        return *arg != 0;
    case EBB_SOPT_RESIDENCY: {
        double v = strtod(arg, &end);
        mp->residency = v;
        mp->residency_forced = true;
        return end != arg && !*end && v >= 0 && v <= 1;
    }
    case EBB_SOPT_IO:
        mp->stream_cache = arg;
        return !strcmp(arg, "cached") || !strcmp(arg, "direct") || !strcmp(arg, "dontneed");
    case EBB_SOPT_THREADS: {
        unsigned long v = strtoul(arg, &end, 10);
        mp->stream_threads = (uint32_t)v;
        return end != arg && !*end && v >= 1 && v <= 64;
    }
    case EBB_SOPT_HOST_LAYERS: {
        unsigned long v = strtoul(arg, &end, 10);
        mp->host_layers = (uint32_t)v;
        return end != arg && !*end && *arg != '-' && v <= 4096;
    }
    case EBB_SOPT_HOST_Q8:
        mp->host_q8 = true;
        return true;
    case EBB_SOPT_EXPERT_CACHE: {
        if (!strcmp(arg, "auto")) {
            mp->expert_cache = EBB_EXPERT_CACHE_AUTO;
            return true;
        }
        unsigned long v = strtoul(arg, &end, 10);
        mp->expert_cache = (uint32_t)v;
        return end != arg && !*end && *arg != '-' && v >= 1 && v <= 65536;
    }
    case EBB_SOPT_SPLIT:
        return ebb_split_parse(arg, &mp->split);
    case EBB_SOPT_TENSOR_SPLIT:
        mp->tensor_split = arg;
        return *arg != 0;
    case EBB_SOPT_HOST_THREADS: {
        unsigned long v = strtoul(arg, &end, 10);
        mp->host_threads = (uint32_t)v;
        return end != arg && !*end && v >= 1 && v <= 64;
    }
    default:
        return false;
    }
}

uint64_t ebb_peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}
