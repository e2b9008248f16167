/*
 * A fake libnvidia-ml for hangdoc's tests: exactly the NVML entry points that pynvml calls
 * for hangdoc.collect.gpu, with GPUs described by the text file named in $FAKE_NVML_CONFIG.
 *
 * Build: gcc -shared -fPIC -O1 -o libfake_nvml.so fake_nvml.c
 *
 * The config has one directive a line; '#' starts a comment:
 *
 *   init_error=driver_not_loaded    nvmlInit fails (also no_permission, unknown, or a number)
 *   driver=550.54.15
 *   device name=FakeGPU uuid=GPU-0 util=97 mem_util=3 mem_total=85899345920 mem_used=2000 power_mw=250000 power_limit_mw=700000 sm_clock=1980 sm_clock_max=1980 pids=1234:1000000,5678 gfx_pids=42:4096
 *
 * Devices are numbered in the order their lines appear. The value "unsupported" makes the
 * getter behind that key return NVML_ERROR_NOT_SUPPORTED. A pid with no ":bytes" reports its
 * memory as NVML_VALUE_NOT_AVAILABLE. The file is read again on every nvmlInit, so one loaded
 * library serves many scenarios. With no $FAKE_NVML_CONFIG there are no devices.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_UNKNOWN = 999,
};

enum { NVML_CLOCK_SM = 1 };

#define NVML_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
#define MAX_DEVICES 16
#define MAX_PROCESSES 32

/* The layouts pynvml declares: c_nvmlUtilization_t, c_nvmlMemory_t (v1, unversioned call)
 * and c_nvmlProcessInfo_v2_t, which pynvml also uses for the _v3 process queries. */
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum probe { P_NAME, P_UUID, P_UTIL, P_MEMORY, P_POWER, P_POWER_LIMIT, P_CLOCK, P_CLOCK_MAX,
             P_COMPUTE, P_GRAPHICS };

typedef struct {
    unsigned int count;
    nvmlProcessInfo_t list[MAX_PROCESSES];
} processes_t;

struct nvmlDevice_st {
    char name[96], uuid[96];
    unsigned int util, mem_util, power_mw, power_limit_mw, sm_clock, sm_clock_max;
    unsigned long long mem_total, mem_used;
    processes_t compute, graphics;
    unsigned int unsupported;      /* one bit per enum probe */
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st devices[MAX_DEVICES];
static unsigned int device_count;
static char driver_version[80];
static nvmlReturn_t init_error;
static int init_count;

/* --- the config ------------------------------------------------------------------------ */

static const struct { const char *key; enum probe probe; } keys[] = {
    {"name", P_NAME}, {"uuid", P_UUID}, {"util", P_UTIL}, {"mem_util", P_UTIL},
    {"mem_total", P_MEMORY}, {"mem_used", P_MEMORY}, {"power_mw", P_POWER},
    {"power_limit_mw", P_POWER_LIMIT}, {"sm_clock", P_CLOCK}, {"sm_clock_max", P_CLOCK_MAX},
    {"pids", P_COMPUTE}, {"gfx_pids", P_GRAPHICS},
};

static int parse_processes(processes_t *out, char *value)
{
    char *save = NULL;
    for (char *item = strtok_r(value, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (out->count == MAX_PROCESSES)
            return -1;
        char *end;
        nvmlProcessInfo_t *p = &out->list[out->count++];
        p->pid = (unsigned int)strtoul(item, &end, 10);
        p->usedGpuMemory = *end == ':' ? strtoull(end + 1, NULL, 10) : NVML_VALUE_NOT_AVAILABLE;
    }
    return 0;
}

static int set_device_field(struct nvmlDevice_st *d, const char *key, char *value)
{
    size_t i;
    for (i = 0; i < sizeof keys / sizeof keys[0] && strcmp(keys[i].key, key); i++)
        ;
    if (i == sizeof keys / sizeof keys[0])
        return -1;
    if (!strcmp(value, "unsupported")) {
        d->unsupported |= 1u << keys[i].probe;
        return 0;
    }
    unsigned long long n = strtoull(value, NULL, 10);
    if (!strcmp(key, "name"))                snprintf(d->name, sizeof d->name, "%s", value);
    else if (!strcmp(key, "uuid"))           snprintf(d->uuid, sizeof d->uuid, "%s", value);
    else if (!strcmp(key, "util"))           d->util = (unsigned int)n;
    else if (!strcmp(key, "mem_util"))       d->mem_util = (unsigned int)n;
    else if (!strcmp(key, "mem_total"))      d->mem_total = n;
    else if (!strcmp(key, "mem_used"))       d->mem_used = n;
    else if (!strcmp(key, "power_mw"))       d->power_mw = (unsigned int)n;
    else if (!strcmp(key, "power_limit_mw")) d->power_limit_mw = (unsigned int)n;
    else if (!strcmp(key, "sm_clock"))       d->sm_clock = (unsigned int)n;
    else if (!strcmp(key, "sm_clock_max"))   d->sm_clock_max = (unsigned int)n;
    else if (!strcmp(key, "pids"))           return parse_processes(&d->compute, value);
    else if (!strcmp(key, "gfx_pids"))       return parse_processes(&d->graphics, value);
    return 0;
}

static nvmlReturn_t parse_init_error(const char *value)
{
    if (!strcmp(value, "driver_not_loaded")) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!strcmp(value, "no_permission"))     return NVML_ERROR_NO_PERMISSION;
    if (!strcmp(value, "unknown"))           return NVML_ERROR_UNKNOWN;
    return (nvmlReturn_t)strtol(value, NULL, 10);
}

/* Returns 0, or -1 after telling stderr what in the config is wrong. */
static int load_config(void)
{
    memset(devices, 0, sizeof devices);
    device_count = 0;
    init_error = NVML_SUCCESS;
    snprintf(driver_version, sizeof driver_version, "fake");

    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path)
        return 0;
    FILE *file = fopen(path, "r");
    if (!file) {
        fprintf(stderr, "fake_nvml: cannot open FAKE_NVML_CONFIG=%s\n", path);
        return -1;
    }
    char line[4096];
    int lineno = 0, bad = 0;
    while (!bad && fgets(line, sizeof line, file)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        struct nvmlDevice_st *device = NULL;
        char *save = NULL;
        for (char *tok = strtok_r(line, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
            if (!strcmp(tok, "device") && !device) {
                if (device_count == MAX_DEVICES) { bad = 1; break; }
                device = &devices[device_count];
                snprintf(device->name, sizeof device->name, "Fake GPU %u", device_count);
                snprintf(device->uuid, sizeof device->uuid, "GPU-fake-%u", device_count);
                device_count++;
                continue;
            }
            char *value = strchr(tok, '=');
            if (!value) { bad = 1; break; }
            *value++ = '\0';
            if (device)
                bad = set_device_field(device, tok, value) != 0;
            else if (!strcmp(tok, "driver"))
                snprintf(driver_version, sizeof driver_version, "%s", value);
            else if (!strcmp(tok, "init_error"))
                init_error = parse_init_error(value);
            else
                bad = 1;
            if (bad)
                break;
        }
    }
    fclose(file);
    if (bad)
        fprintf(stderr, "fake_nvml: %s:%d: cannot understand this line\n", path, lineno);
    return bad ? -1 : 0;
}

/* --- helpers --------------------------------------------------------------------------- */

static nvmlReturn_t check(nvmlDevice_t device, enum probe probe, const void *out)
{
    if (!init_count)
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t at = (uintptr_t)device, first = (uintptr_t)devices;
    if (!out || at < first || at >= (uintptr_t)(devices + device_count) ||
        (at - first) % sizeof devices[0])
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->unsupported & (1u << probe))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

#define CHECK(device, probe, out)                                   \
    do {                                                            \
        nvmlReturn_t rc_ = check(device, probe, out);               \
        if (rc_ != NVML_SUCCESS)                                    \
            return rc_;                                             \
    } while (0)

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value)
{
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* NVML's two-call protocol: a count too small gets the needed count and INSUFFICIENT_SIZE. */
static nvmlReturn_t running(const processes_t *p, unsigned int *count, nvmlProcessInfo_t *infos)
{
    if (*count < p->count) {
        *count = p->count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (p->count && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    memcpy(infos, p->list, p->count * sizeof *infos);
    *count = p->count;
    return NVML_SUCCESS;
}

/* --- the NVML entry points ------------------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    if (load_config() != 0)
        return NVML_ERROR_UNKNOWN;
    if (init_error != NVML_SUCCESS)
        return init_error;
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    if (!init_count)
        return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS:                 return "Success";
    case NVML_ERROR_UNINITIALIZED:     return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:  return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:     return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:     return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default:                           return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!init_count)
        return NVML_ERROR_UNINITIALIZED;
    return version ? copy_string(version, length, driver_version) : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!init_count)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!init_count)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    CHECK(device, P_NAME, name);
    return copy_string(name, length, device->name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    CHECK(device, P_UUID, uuid);
    return copy_string(uuid, length, device->uuid);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    CHECK(device, P_UTIL, utilization);
    utilization->gpu = device->util;
    utilization->memory = device->mem_util;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    CHECK(device, P_MEMORY, memory);
    memory->total = device->mem_total;
    memory->used = device->mem_used;
    memory->free = device->mem_total > device->mem_used ? device->mem_total - device->mem_used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts)
{
    CHECK(device, P_POWER, milliwatts);
    *milliwatts = device->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *milliwatts)
{
    CHECK(device, P_POWER_LIMIT, milliwatts);
    *milliwatts = device->power_limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *mhz)
{
    CHECK(device, P_CLOCK, mhz);
    if (type != NVML_CLOCK_SM)
        return NVML_ERROR_NOT_SUPPORTED;
    *mhz = device->sm_clock;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned int *mhz)
{
    CHECK(device, P_CLOCK_MAX, mhz);
    if (type != NVML_CLOCK_SM)
        return NVML_ERROR_NOT_SUPPORTED;
    *mhz = device->sm_clock_max;
    return NVML_SUCCESS;
}

/* pynvml resolves the _v3 queries; the _v2 ones (same struct) are what drivers before _v3 had. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    CHECK(device, P_COMPUTE, count);
    return running(&device->compute, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos)
{
    CHECK(device, P_GRAPHICS, count);
    return running(&device->graphics, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos)
{
    return nvmlDeviceGetGraphicsRunningProcesses_v3(device, count, infos);
}
