/*
 * replay_inputs.c: the inputs of each device of a replayed SPMD program (a
 * module that is already one program per device, run as it is). XLA's
 * multihost runner offers the same three: every device the same random
 * values, every device its own, or files per device (KEY@DEVICE).
 */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>

uint64_t rt_device_seed(uint64_t seed, int64_t device)
{
    return rt_splitmix64(seed ^ rt_splitmix64((uint64_t)device));
}

/* KEY@D: the length of KEY and D; false when key has no @D suffix. A
 * suffix that is not a decimal number is no suffix (HLO names have no
 * '@', so such a key cannot name a parameter and binding it fails). */
static bool device_suffix(const char *key, size_t *klen, int64_t *dev)
{
    const char *at = strrchr(key, '@');
    if (!at || at == key || at[1] == '\0')
        return false;
    char *end = NULL;
    long long v = strtoll(at + 1, &end, 10);
    if (*end != '\0' || at[1] == '-' || at[1] == '+')
        return false;
    *klen = (size_t)(at - key);
    *dev = v;
    return true;
}

void rt_device_bind_free(RtBindOptions *o)
{
    for (int32_t k = 0; o->inputs && k < o->ninputs; k++)
        ts_free((char *)o->inputs[k].key);
    ts_free((RtInput *)o->inputs);
    memset(o, 0, sizeof *o);
}

IrStatus rt_device_bind_options(const RtBindOptions *all, int64_t device, int64_t ndev, bool per_device,
                                RtBindOptions *out, IrDiag *d)
{
    *out = (RtBindOptions){.random = all->random, .seed = per_device ? rt_device_seed(all->seed, device) : all->seed};
    RtInput *in = ts_calloc((size_t)(all->ninputs > 0 ? all->ninputs : 1), sizeof *in);
    if (!in)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    out->inputs = in;
    for (int32_t k = 0; k < all->ninputs; k++) {
        const RtInput *x = &all->inputs[k];
        size_t klen = strlen(x->key);
        int64_t dev = -1;
        bool mine = true;
        if (device_suffix(x->key, &klen, &dev)) {
            if (dev < 0 || dev >= ndev) {
                rt_device_bind_free(out);
                return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                "input %s: there is no device %s (the program runs on %lld)", x->key,
                                strrchr(x->key, '@') + 1, (long long)ndev); /* as given: strtoll saturates */
            }
            mine = dev == device;
        } else {
            /* A key for every device gives way to the same key for this one. */
            for (int32_t j = 0; j < all->ninputs; j++) {
                size_t jl = 0;
                int64_t jd = -1;
                if (device_suffix(all->inputs[j].key, &jl, &jd) && jd == device && jl == klen &&
                    memcmp(all->inputs[j].key, x->key, klen) == 0)
                    mine = false;
            }
        }
        if (!mine)
            continue;
        char *key = ts_malloc(klen + 1);
        if (!key) {
            rt_device_bind_free(out);
            return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
        }
        memcpy(key, x->key, klen);
        key[klen] = '\0';
        in[out->ninputs++] = (RtInput){key, x->path, x->array};
    }
    return IR_OK;
}
