/* A stand-in for NVIDIA's libnvidia-ml with the five entry points the memory probe uses, so
 * the dlopen path, the bus-id/UUID lookup and the memory reading are tested without a GPU.
 * The device it pretends to have is set through the environment:
 *   FAKE_NVML_BUS   PCI bus id it answers to (default "0000:65:00.0", compared ignoring case)
 *   FAKE_NVML_UUID  UUID it answers to (default "GPU-00000000-1111-2222-3333-444444444444")
 *   FAKE_NVML_FREE_MIB / FAKE_NVML_TOTAL_MIB  memory it reports (default 3000 / 8192)
 *   FAKE_NVML_INIT_FAIL=1  nvmlInit_v2 fails
 * Return codes follow NVML's: 0 success, 1 uninitialized, 2 invalid argument, 6 not found. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct fake_nvml_memory {
    unsigned long long total, free, used;
};

static int g_init;
static int g_device = 1; /* the one device's handle points here */

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev);
int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev);
int nvmlDeviceGetMemoryInfo(void *dev, struct fake_nvml_memory *mem);

int nvmlInit_v2(void)
{
    if (atoi(env_or("FAKE_NVML_INIT_FAIL", "0")))
        return 999;
    g_init++;
    return 0;
}

int nvmlShutdown(void)
{
    if (!g_init)
        return 1;
    g_init--;
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev)
{
    if (!g_init)
        return 1;
    if (!bus || !dev)
        return 2;
    if (strcasecmp(bus, env_or("FAKE_NVML_BUS", "0000:65:00.0")))
        return 6;
    *dev = &g_device;
    return 0;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev)
{
    if (!g_init)
        return 1;
    if (!uuid || !dev)
        return 2;
    if (strcmp(uuid, env_or("FAKE_NVML_UUID", "GPU-00000000-1111-2222-3333-444444444444")))
        return 6;
    *dev = &g_device;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *dev, struct fake_nvml_memory *mem)
{
    if (!g_init)
        return 1;
    if (dev != &g_device || !mem)
        return 2;
    unsigned long long mib = 1024ull * 1024;
    mem->total = strtoull(env_or("FAKE_NVML_TOTAL_MIB", "8192"), NULL, 10) * mib;
    mem->free = strtoull(env_or("FAKE_NVML_FREE_MIB", "3000"), NULL, 10) * mib;
    mem->used = mem->total > mem->free ? mem->total - mem->free : 0;
    return 0;
}
