/*
 * pipeline.c: what compile, plan and run share: read MODEL.hlo or a plan
 * file, and bring it to a compiled program (propagate + partition, or load
 * and check the plan), with N and R from the options, else the module
 * header, else 1.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>

/* Read a whole file; NULL with a diagnostic on failure. */
static char *read_file(const char *path, size_t *len, IrDiag *d)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > ((off_t)1 << 32)) {
        fclose(f);
        ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "not a regular file of at most 4 GiB");
        return NULL;
    }
    char *text = ts_malloc((size_t)st.st_size + 1);
    if (!text || fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        ts_free(text);
        fclose(f);
        ir_error(d, text ? IR_EINPUT : IR_ENOMEM, path, NULL, (IrPos){0, 0}, "cannot read the file");
        return NULL;
    }
    fclose(f);
    text[st.st_size] = 0;
    *len = (size_t)st.st_size;
    return text;
}

int cli_prepare(const CliOptions *o, const char *path, CliProgram *p)
{
    IrDiag d = {0};
    IrStatus st = cli_prepare_diag(o, path, p, &d);
    return st == IR_OK ? CLI_OK : cli_report(st, &d);
}

IrStatus cli_prepare_diag(const CliOptions *o, const char *path, CliProgram *p, IrDiag *dp)
{
    memset(p, 0, sizeof *p);
    IrDiag d = {0};
    size_t len = 0;
    char *text = read_file(path, &len, &d);
    if (!text) {
        *dp = d;
        return IR_EINPUT;
    }
    IrStatus st;
    if (compile_is_plan_text(text, len)) {
        p->from_plan = true;
        st = compile_plan_load(path, text, len, 0, &p->r, &d);
        for (int32_t k = 0; st == IR_OK && k < p->r.prog.ncluster; k++)
            st = rt_check_custom_calls(p->r.prog.cluster[k].spmd, &d);
        if (st == IR_OK && p->r.prog.host)
            st = rt_check_custom_calls(p->r.prog.host, &d);
        if (st == IR_OK && ((o->num_partitions && o->num_partitions != p->r.prog.num_partitions) ||
                            (o->num_replicas && o->num_replicas != p->r.prog.num_replicas)))
            st = ir_error(&d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                          "the plan was compiled for %lld partitions x %lld replicas; recompile to change them",
                          (long long)p->r.prog.num_partitions, (long long)p->r.prog.num_replicas);
    } else {
        IrParseOptions po = ir_default_parse_options();
        po.limits = o->limits;
        IrModule *m = NULL;
        st = ir_parse(path, text, len, &po, &m, &d);
        if (st == IR_OK && (st = rt_check_custom_calls(m, &d)) != IR_OK) {
            ir_module_free(m);
            m = NULL;
        }
        if (st == IR_OK) {
            CompileOptions co = {.num_partitions = o->num_partitions, .num_replicas = o->num_replicas,
                                 .hosts = o->hosts, .local_devices = o->local_devices};
            IrModule *ref = ir_module_clone(m);
            if (!ref) {
                ir_module_free(m);
                st = ir_error(&d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
            } else {
                st = compile_module(m, &co, &p->r, &d);
                if (st == IR_OK)
                    p->reference = ref;
                else
                    ir_module_free(ref);
            }
        }
    }
    ts_free(text);
    if (st != IR_OK)
        cli_program_free(p);
    *dp = d;
    return st;
}

void cli_program_free(CliProgram *p)
{
    compile_result_free(&p->r);
    ir_module_free(p->reference);
    memset(p, 0, sizeof *p);
}

int cli_replan(const CliOptions *o, CliProgram *p)
{
    IrDiag d = {0};
    int64_t hosts = o->hosts ? o->hosts : (p->r.prog.hosts ? p->r.prog.hosts : 1);
    int64_t local = o->local_devices ? o->local_devices : (o->hosts ? 0 : p->r.prog.local_devices);
    IrStatus st = compile_replan(&p->r, hosts, local, &d);
    return st == IR_OK ? CLI_OK : cli_report(st, &d);
}
