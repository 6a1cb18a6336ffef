/* An LD_PRELOAD shim that logs every CUDA driver (cu*) and NVRTC (nvrtc*) entry point a process
 * resolves with dlsym to /tmp/dlsym_trace.log: what cudarc loads at run time, checked against
 * ns_compute::cuda::library's lists by bench/gpu_hardening.sh. Built by bench/gpu_build.sh. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void *(*real_dlsym)(void *, const char *) = 0;

void *dlsym(void *handle, const char *name) {
    if (!real_dlsym) {
        real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    if (name && (strncmp(name, "cu", 2) == 0 || strncmp(name, "nvrtc", 5) == 0)) {
        FILE *log = fopen("/tmp/dlsym_trace.log", "a");
        if (log) {
            fprintf(log, "%s\n", name);
            fclose(log);
        }
    }
    return real_dlsym(handle, name);
}
