/*
 * cmd_devices.c: `tessel devices [--local-devices L] [--format text|json]`:
 * the local devices this process would run, as hwloc sees the machine:
 * each device's ordinal, cpuset (hwloc list syntax), cores, NUMA node and
 * its memory, and whether its executor thread could be bound. The devices
 * are really created (threads started and bound), so "bound" is what
 * happened, not what should happen. The work is in api/device_report.c.
 *
 * Text, on a 2-core machine with --local-devices 3:
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
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HELP[] =
    "Usage: tessel devices [--local-devices L] [--format text|json]\n"
    "\n"
    "List the local devices this process would run, as hwloc sees the\n"
    "machine. The process's cpuset (its binding, e.g. from mpirun or taskset,\n"
    "within what the system allows) is divided into L devices without\n"
    "splitting a core; each device has one executor thread bound to its\n"
    "cpuset and allocates its memory on its NUMA node. With more devices\n"
    "than cores, devices share cores (and the output says so).\n"
    "\n"
    "For each device: its ordinal, cpuset (hwloc list syntax, e.g. 0-1),\n"
    "cores, NUMA node and that node's memory, and whether its thread was\n"
    "bound (if not, why: binding failed or is not supported; this is a\n"
    "warning, not an error).\n"
    "\n"
    "Options:\n"
    "  --local-devices L   devices in this process (default: one per core)\n"
    "  --format text|json  output format (default text); JSON has a\n"
    "                      \"devices\" array and a \"topology\" object\n"
    "  -h, --help          show this help\n"
    "\n"
    "hwloc's environment applies, e.g. HWLOC_SYNTHETIC=\"pack:2 core:2 pu:1\"\n"
    "describes an imaginary machine (nothing is bound then).\n"
    "\n"
    "Exit status: 0 success; 1 hwloc or the threads failed; 2 bad usage.\n";

static int run_devices(const CliOptions *o)
{
    if (o->npos)
        return cli_usage_error(&cli_cmd_devices, "devices takes no arguments, not '%s'",
                               o->pos[0]);
    if (o->format && strcmp(o->format, "json") != 0 && strcmp(o->format, "text") != 0)
        return cli_usage_error(&cli_cmd_devices, "--format is text or json for 'tessel devices'"
                               ", not '%s'", o->format);
    if (o->local_devices > INT32_MAX)
        return cli_usage_error(&cli_cmd_devices, "--local-devices is too large: %lld",
                               (long long)o->local_devices);
    TsDiag d = {0};
    char *text = NULL;
    TsStatus st = ts_devices_describe((int32_t)o->local_devices, o->format, &text, &d);
    int rc = st == TS_OK ? CLI_OK : cli_report(st, &d);
    if (text)
        fputs(text, stdout);
    ts_free(text);
    ts_shutdown();
    return rc;
}

const CliCommand cli_cmd_devices = {
    .name = "devices",
    .summary = "list the local devices hwloc finds (cpusets, cores, NUMA nodes)",
    .help = HELP,
    .accepts = OPT_LOCAL_DEVICES | OPT_FORMAT,
    .run = run_devices,
};
