/*
 * cuda/loader.c: planrun's side of the CUDA backend's module (rt_cuda.h, "The module"). It
 * finds planrun-cuda.so, loads it with every symbol bound at once (RTLD_NOW: a CUDA library that
 * is missing is said here, not at the first call into it), checks the module's table against
 * this planrun, and defines rt_cuda_device_open, rt_cuda_nccl_id and rt_backend_cuda_init as
 * calls through that table. Plain C and the dynamic loader: no CUDA header, no CUDA library.
 *
 * Where it looks, in order, stopping at the first module that loads and matches:
 *   $PLANRUN_CUDA_MODULE   a path (then nothing else: the user said where);
 *   beside the executable  the build folder (/proc/self/exe's folder);
 *   PLANRUN_CUDA_MODULE_REL from the executable's folder (an install moved with DESTDIR, or
 *                         relocated whole), where meson could work it out;
 *   PLANRUN_CUDA_MODULE_DIR the install's module folder (LIBDIR/plancc).
 */
#include "rt_cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PLANRUN_CUDA_MODULE_DIR
#error "build with -DPLANRUN_CUDA_MODULE_DIR=\"...\" (meson.build does)"
#endif
#define MODULE_NAME "planrun-cuda.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const rt_cuda_module *mod; // set once by load, never unloaded: the backend runs until exit
static char why[4096];            // every path tried and what was wrong with it

// Adds "PATH: WHAT" to why (WHAT alone where it names PATH itself, as dlerror's messages do).
static void tried(const char *path, const char *what) {
    size_t n = strlen(why);
    if (!strncmp(what, path, strlen(path)))
        snprintf(why + n, sizeof why - n, "%s%s", n ? "; " : "", what);
    else
        snprintf(why + n, sizeof why - n, "%s%s: %s", n ? "; " : "", path, what);
}

static bool try_path(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        tried(path, e ? e : "dlopen failed");
        return false;
    }
    const rt_cuda_module *m = dlsym(h, RT_CUDA_MODULE_SYMBOL);
    if (!m) {
        tried(path, "it has no " RT_CUDA_MODULE_SYMBOL " (not planrun's cuda module)");
        dlclose(h);
        return false;
    }
    if (m->abi != RT_CUDA_MODULE_ABI || m->options_bytes != sizeof (rt_options) || m->backend_bytes != sizeof (rt_backend)) {
        char what[200];
        snprintf(what, sizeof what, "built from other sources than this planrun (module ABI %d, %zu/%zu bytes; planrun's %d, "
                 "%zu/%zu): install the two together", m->abi, m->options_bytes, m->backend_bytes, RT_CUDA_MODULE_ABI,
                 sizeof (rt_options), sizeof (rt_backend));
        tried(path, what);
        dlclose(h);
        return false;
    }
    mod = m;
    return true;
}

static void load(void) {
    const char *env = getenv("PLANRUN_CUDA_MODULE");
    if (env && *env) {
        try_path(env);
        return;
    }
    char exe[PATH_MAX], path[PATH_MAX + 256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = 0;
        snprintf(path, sizeof path, "%s/" MODULE_NAME, exe);
        if (try_path(path)) return;
#ifdef PLANRUN_CUDA_MODULE_REL
        snprintf(path, sizeof path, "%s/" PLANRUN_CUDA_MODULE_REL "/" MODULE_NAME, exe);
        if (try_path(path)) return;
#endif
    }
    try_path(PLANRUN_CUDA_MODULE_DIR "/" MODULE_NAME);
}

int rt_cuda_load(char *err, size_t err_n) {
    pthread_once(&once, load);
    if (mod) return 0;
    snprintf(err, err_n, "cannot load the cuda backend's module (%s)", why);
    return -1;
}

int rt_cuda_device_open(int local_rank, rt_cuda_device *dev, char *err, size_t err_n) {
    return rt_cuda_load(err, err_n) ? -1 : mod->device_open(local_rank, dev, err, err_n);
}

int rt_cuda_nccl_id(uint8_t id[RT_CUDA_ID_BYTES], char *err, size_t err_n) {
    return rt_cuda_load(err, err_n) ? -1 : mod->nccl_id(id, err, err_n);
}

rt_backend *rt_backend_cuda_init(const plan *p, const rt_options *o, char *err, size_t err_n) {
    return rt_cuda_load(err, err_n) ? NULL : mod->backend_init(p, o, err, err_n);
}
