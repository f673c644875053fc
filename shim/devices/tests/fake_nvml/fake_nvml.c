/*
 * A fake libnvidia-ml.so for rund's tests: two GPUs whose minors (3, 7) differ from
 * their indices (0, 1), so a test can prove /dev/nvidia<minor> comes from
 * nvmlDeviceGetMinorNumber. Getters fail with NVML_ERROR_UNINITIALIZED unless
 * nvmlInit_v2 was called, as the real library does.
 * Exports what nvml-wrapper 0.13 calls for rund, including nvmlShutdown (its Drop needs it).
 */
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

struct fake_gpu {
    const char *uuid, *name, *bus_id;
    unsigned int bus, minor;
    unsigned long long mem;
};
typedef struct fake_gpu *nvmlDevice_t;

static struct fake_gpu gpus[2] = {
    {"GPU-11111111-2222-3333-4444-555555555555", "Fake Tesla T4", "00000000:3B:00.0", 0x3b, 3,
     16ULL << 30},
    {"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "Fake A100-SXM4-80GB", "00000000:AF:00.0", 0xaf, 7,
     80ULL << 30},
};
static int inited;

static int ready(void) { return __atomic_load_n(&inited, __ATOMIC_SEQ_CST) > 0; }

static nvmlReturn_t put(char *buf, unsigned int len, const char *s) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

static struct fake_gpu *gpu(nvmlDevice_t d) {
    return (d == &gpus[0] || d == &gpus[1]) ? d : NULL;
}

nvmlReturn_t nvmlInit_v2(void) { __atomic_add_fetch(&inited, 1, __ATOMIC_SEQ_CST); return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }
nvmlReturn_t nvmlShutdown(void) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    __atomic_sub_fetch(&inited, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
    return ready() ? put(buf, len, "550.54.15") : NVML_ERROR_UNINITIALIZED;
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int len) {
    return ready() ? put(buf, len, "12.550.54.15") : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    if (!dev || index >= 2) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    return gpu(d) ? put(buf, len, gpu(d)->uuid) : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    return gpu(d) ? put(buf, len, gpu(d)->name) : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    if (!gpu(d) || !pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", gpu(d)->bus);
    snprintf(pci->busId, sizeof(pci->busId), "%s", gpu(d)->bus_id);
    pci->bus = gpu(d)->bus;
    pci->pciDeviceId = 0x1eb810de;
    pci->pciSubSystemId = 0x12a210de;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    /* NVML_STRUCT_VERSION(Memory, 2): the caller must set it, as with the real library. */
    if (!gpu(d) || !m || m->version != (unsigned int)(sizeof(*m) | (2u << 24)))
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = gpu(d)->mem;
    m->reserved = 0;
    m->used = 1ULL << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    if (!gpu(d) || !m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = gpu(d)->mem;
    m->used = 1ULL << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    if (!ready()) return NVML_ERROR_UNINITIALIZED;
    if (!gpu(d) || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = gpu(d)->minor;
    return NVML_SUCCESS;
}
