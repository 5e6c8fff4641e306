/*
 * device_report.c: the local devices this process would run, as hwloc sees
 * the machine (`tessel devices`): each device's ordinal, cpuset (hwloc list
 * syntax), cores, NUMA node and its memory, and whether its executor thread
 * could be bound. The devices are really created (threads started and
 * bound), so "bound" is what happened, not what should happen.
 *
 * Text, on a 2-core machine with 3 local devices:
 *   topology: hwloc 2.9.0, cpuset 0-1: 1 package, 2 cores, 2 PUs, 1 NUMA node (9.6 GiB)
 *   binding: threads yes, memory yes
 *   local devices: 3 (more than cores: devices share cores), BLAS threads per device: 1
 *   device 0: cpuset 0, 1 core (shared), NUMA node 0 (9.6 GiB), bound
 *   ...
 * JSON: {"devices": [{"ordinal", "cpuset", "cores", "pus", "numa_node",
 * "memory_bytes", "bound", "shares_cores", "bind_error"}], "topology":
 * {"hwloc_version", "cpuset", "packages", "cores", "pus", "numa_nodes",
 * "memory_bytes", "this_system", "cpubind", "membind", "local_devices",
 * "shared_cores", "blas_threads"}}.
 */
#include "api_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "9.6 GiB", "512.0 MiB", "0 bytes": a size for people. */
static void human_size(uint64_t b, char *buf, size_t n)
{
    static const char *unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (b < 1024) {
        snprintf(buf, n, "%llu bytes", (unsigned long long)b);
        return;
    }
    double v = (double)b / 1024;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%.1f %s", v, unit[u]);
}

static const char *plural(int64_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* Why a device is not bound, as one phrase (static or in buf). */
static const char *bind_reason(const DevDevice *dv, char *buf, size_t n)
{
    if (dv->bind_errno) {
        snprintf(buf, n, "%s: %s", dv->bind_note, strerror(dv->bind_errno));
        return buf;
    }
    return dv->bind_note ? dv->bind_note : "unknown";
}

static void text_of(IrStrBuf *s, const DevTopologyInfo *in, const DevDevices *set)
{
    char mem[32], why[160];
    human_size(in->memory_bytes, mem, sizeof mem);
    ir_sb_printf(s, "topology: hwloc %s, cpuset %s: %d %s, %d %s, %d %s, %d NUMA %s (%s)\n",
           in->hwloc_version, in->cpuset, (int)in->npackages,
           plural(in->npackages, "package", "packages"), (int)in->ncores,
           plural(in->ncores, "core", "cores"), (int)in->npus, plural(in->npus, "PU", "PUs"),
           (int)in->nnuma, plural(in->nnuma, "node", "nodes"), mem);
    ir_sb_printf(s, "binding: threads %s, memory %s%s\n", in->cpubind ? "yes" : "no",
           in->membind ? "yes" : "no",
           in->this_system ? "" : " (the topology is not this machine's)");
    ir_sb_printf(s, "local devices: %d%s, BLAS threads per device: %d\n", (int)set->n,
           set->shared_cores ? " (more than cores: devices share cores)" : "",
           dev_blas_threads_for(set));
    for (int32_t i = 0; i < set->n; i++) {
        const DevDevice *dv = &set->dev[i];
        char numa[64] = "NUMA node unknown";
        if (dv->numa_node >= 0) {
            human_size(dv->memory_bytes, mem, sizeof mem);
            snprintf(numa, sizeof numa, "NUMA node %d (%s)", (int)dv->numa_node, mem);
        }
        ir_sb_printf(s, "device %d: cpuset %s, %d %s%s, %s, ", (int)dv->ordinal, dv->cpuset,
               (int)dv->ncores, plural(dv->ncores, "core", "cores"),
               dv->shares_cores ? " (shared)" : "", numa);
        if (dv->bound)
            ir_sb_printf(s, "bound\n");
        else
            ir_sb_printf(s, "not bound: %s\n", bind_reason(dv, why, sizeof why));
    }
}

/* json_object_set_new with a NULL value leaves *ok false (jansson's OOM). */
static void put(json_t *o, const char *key, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(o, key, v) != 0)
        *ok = false;
}

static json_t *topology_json(const DevTopologyInfo *in, const DevDevices *set, bool *ok)
{
    json_t *t = json_object();
    if (!t) {
        *ok = false;
        return NULL;
    }
    put(t, "hwloc_version", json_string(in->hwloc_version), ok);
    put(t, "cpuset", json_string(in->cpuset), ok);
    put(t, "packages", json_integer(in->npackages), ok);
    put(t, "cores", json_integer(in->ncores), ok);
    put(t, "pus", json_integer(in->npus), ok);
    put(t, "numa_nodes", json_integer(in->nnuma), ok);
    put(t, "memory_bytes", json_integer((json_int_t)in->memory_bytes), ok);
    put(t, "this_system", json_boolean(in->this_system), ok);
    put(t, "cpubind", json_boolean(in->cpubind), ok);
    put(t, "membind", json_boolean(in->membind), ok);
    put(t, "local_devices", json_integer(set->n), ok);
    put(t, "shared_cores", json_boolean(set->shared_cores), ok);
    put(t, "blas_threads", json_integer(dev_blas_threads_for(set)), ok);
    return t;
}

static json_t *device_json(const DevDevice *dv, bool *ok)
{
    char why[160];
    json_t *o = json_object();
    if (!o) {
        *ok = false;
        return NULL;
    }
    put(o, "ordinal", json_integer(dv->ordinal), ok);
    put(o, "cpuset", json_string(dv->cpuset), ok);
    put(o, "cores", json_integer(dv->ncores), ok);
    put(o, "pus", json_integer(dv->npus), ok);
    put(o, "numa_node", dv->numa_node >= 0 ? json_integer(dv->numa_node) : json_null(), ok);
    put(o, "memory_bytes", json_integer((json_int_t)dv->memory_bytes), ok);
    put(o, "bound", json_boolean(dv->bound), ok);
    put(o, "shares_cores", json_boolean(dv->shares_cores), ok);
    put(o, "bind_error",
        dv->bound ? json_null() : json_string(bind_reason(dv, why, sizeof why)), ok);
    return o;
}

static char *json_of(const DevTopologyInfo *in, const DevDevices *set)
{
    bool ok = true;
    json_t *root = json_object(), *devs = json_array();
    if (!root || !devs)
        ok = false;
    for (int32_t i = 0; ok && i < set->n; i++) {
        json_t *o = device_json(&set->dev[i], &ok);
        if (!o || json_array_append_new(devs, o) != 0)
            ok = false;
    }
    if (ok) {
        put(root, "devices", devs, &ok);
        devs = NULL;
        put(root, "topology", topology_json(in, set, &ok), &ok);
    }
    char *j = ok ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(devs);
    json_decref(root);
    IrStrBuf s = {0};
    if (j) {
        ir_sb_puts(&s, j);
        ir_sb_puts(&s, "\n");
    } else {
        s.oom = true;
    }
    free(j); /* jansson's allocation */
    return ir_sb_take(&s);
}

int32_t ts_host_cores(void)
{
    IrDiag id = {0};
    DevTopology *t = NULL;
    int32_t n = dev_topology_load(&t, &id) == IR_OK ? dev_topology_info(t)->ncores : 0;
    ir_diag_clear(&id);
    return n > 0 ? n : 0;
}

TsStatus ts_devices_describe(int32_t local_devices, const char *format, char **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    bool json = format && strcmp(format, "json") == 0;
    if (format && !json && strcmp(format, "text") != 0)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "--format is text or json for 'tessel devices', not '%s'", format),
                        &id, d);
    if (local_devices < 0 || local_devices > DEV_MAX_LOCAL_DEVICES)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "--local-devices is at most %d, not %lld", DEV_MAX_LOCAL_DEVICES,
                                 (long long)local_devices),
                        &id, d);
    DevTopology *t = NULL;
    DevDevices *set = NULL;
    IrStatus st = dev_topology_load(&t, &id);
    if (st == IR_OK) {
        const DevTopologyInfo *in = dev_topology_info(t);
        int32_t L = local_devices ? local_devices : (in->ncores > 0 ? in->ncores : 1);
        DevDevicesOptions opt = {.keep_blas_threads = true}; /* only describing */
        st = dev_devices_create(t, L, &opt, &set, &id);
    }
    if (st == IR_OK) {
        if (json) {
            *out = json_of(dev_topology_info(t), set);
        } else {
            IrStrBuf s = {0};
            text_of(&s, dev_topology_info(t), set);
            *out = ir_sb_take(&s);
        }
        if (!*out)
            st = ir_oom(&id, NULL);
    }
    dev_devices_free(set);
    return api_give(st, &id, d);
}
