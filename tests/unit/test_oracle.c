/*
 * test_oracle.c: the oracle of DESIGN.md over model files: every model in
 * tests/models/ run partitioned on N devices in one process must equal its
 * reference run on the same random inputs, for each N the model lists.
 *
 * Model files are HLO text with two substitutions so one file serves every
 * device count: `@N` becomes N and `@D` the device list 0,1,...,N-1. A
 * comment line `// devices: 1,2,3,4,8` lists the counts (default 1,2,4),
 * each count runs with 1 and 2 replicas (`// replicas: R,...` lists
 * others), and `// expect-collectives:
 * all-reduce=1 all-gather=0` checks what the partitioner inserted (for N>1).
 * The subfolders shardy, grad, memfit and memory run too (test_model_subfolders),
 * each model on its `// devices:` x 1 and 2 replicas. With TESSEL_SGEMM=avx512
 * every f32 dot runs in tessel's own GEMM (device/sgemm_avx512.c).
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compile/compile.h"
#include "runtime/program.h"
#include "runtime/run_internal.h"

/* The fusion of the partitioned runs (the suites' setups below). */
static CollTuning g_tuning;

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

/* On one device a tiled sharding such as {devices=[1,1]0} is not valid
 * HLO (XLA asks for {replicated} or {maximal}): rewrite it in place. */
static void single_device_is_replicated(char *s)
{
    char *p;
    while ((p = strstr(s, "{devices=["))) {
        char *q = p + strlen("{devices=[");
        while (*q == '1' || *q == ',')
            q++;
        if (strncmp(q, "]0", 2) != 0) {
            s = q;
            continue;
        }
        q += 2;
        if (strncmp(q, " last_tile_dim_replicate", 24) == 0)
            q += 24;
        if (*q != '}') {
            s = q;
            continue;
        }
        const char *r = "{replicated}";
        size_t rl = strlen(r);
        memmove(p + rl, q + 1, strlen(q + 1) + 1);
        memcpy(p, r, rl);
        s = p + rl;
    }
}

/* Replace @N and @D in a model template. */
static char *instantiate(const char *t, int n)
{
    char dev[4096] = "";
    for (int k = 0; k < n; k++)
        snprintf(dev + strlen(dev), sizeof dev - strlen(dev), k ? ",%d" : "%d", k);
    size_t cap = strlen(t) * 2 + 64 * strlen(dev) + 64;
    char *o = malloc(cap), *p = o;
    for (const char *s = t; *s; s++) {
        if (s[0] == '@' && s[1] == 'N') {
            p += sprintf(p, "%d", n);
            s++;
        } else if (s[0] == '@' && s[1] == 'D') {
            p += sprintf(p, "%s", dev);
            s++;
        } else if (s[0] == '@' && s[1] == 'S') {
            /* tests/models/memfit: the batch sharding of the leading dim */
            p += sprintf(p, "{devices=[%d,1]%s}", n, dev);
            s++;
        } else {
            *p++ = *s;
        }
        if ((size_t)(p - o) + strlen(dev) + 32 > cap) {
            size_t off = (size_t)(p - o);
            cap *= 2;
            o = realloc(o, cap);
            p = o + off;
        }
    }
    *p = 0;
    if (n == 1)
        single_device_is_replicated(o);
    return o;
}

static IrModule *parse_text(const char *name, const char *text, IrDiag *d)
{
    IrParseOptions opt = ir_default_parse_options();
    /* XLA's tests declare shapes of up to 10^11 elements; they are
     * skipped by size (largest_array), not rejected by the parser. */
    opt.limits.max_elements = INT64_MAX;
    IrModule *m = NULL;
    if (ir_parse(name, text, strlen(text), &opt, &m, d) != IR_OK)
        return NULL;
    return m;
}

static int count_collectives(const IrModule *m, IrOpcode op)
{
    int n = 0;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            n += m->comp[c]->instr[i].op == op;
    return n;
}

/* Check `// expect-collectives: NAME=COUNT ...` lines. */
static void check_expectations(const char *name, const char *text, const IrModule *spmd)
{
    const char *e = strstr(text, "// expect-collectives:");
    if (!e)
        return;
    e += strlen("// expect-collectives:");
    char op[64];
    int want, used;
    while (sscanf(e, " %63[a-z-]=%d%n", op, &want, &used) == 2) {
        IrOpcode code = ir_op_from_name(op, strlen(op));
        assert_int_not_equal(code, OP_COUNT);
        int got = count_collectives(spmd, code);
        if (got != want)
            fail_msg("%s: %d %s, expected %d", name, got, op, want);
        e += used;
    }
}

/* The largest array (elements) any instruction of m produces. */
static int64_t largest_array(const IrModule *m)
{
    int64_t mx = 0;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            const IrShape *s = &m->comp[c]->instr[i].shape;
            for (int32_t l = 0; l < ir_shape_leaf_count(s); l++) {
                int64_t e = ir_shape_elements(ir_shape_leaf(s, l));
                if (e > mx)
                    mx = e;
            }
        }
    return mx;
}

/* Check `// expect-clusters: K`. */
static void check_cluster_count(const char *name, const char *text, int32_t got)
{
    const char *e = strstr(text, "// expect-clusters:");
    int want;
    if (e && sscanf(e + strlen("// expect-clusters:"), " %d", &want) == 1 && want != got)
        fail_msg("%s: %d clusters, expected %d", name, (int)got, want);
}

/* Reference vs partitioned on N partitions x R replicas. Returns 0 on a
 * match, 1 on a mismatch or error (message printed), -1 when the
 * reference itself cannot run the module (unsupported op), -2 when the
 * module's arrays exceed max_elements (too large for a unit test). */

/* 0 when got equals the reference (the oracle's comparison), else 1 and a
 * message; `what` says which run it was. */
static int compare(const char *name, int n, int r, const char *what, const DevValue *ref, const DevValue *got)
{
    char *why = NULL;
    bool same = rt_values_match(ref, got, &why);
    if (!same)
        print_message("%s N=%d R=%d: %smismatch: %s\n", name, n, r, what, why ? why : "?");
    ts_free(why);
    return same ? 0 : 1;
}

/* Write the plan file of res, load it back and run it: 0 when it equals
 * the reference, 1 otherwise (d says why when a step failed). */
static int run_from_plan(const char *name, int n, int r, const CompileResult *res, const RtArgs *args,
                         const DevValue *ref, IrDiag *d)
{
    char *text = compile_plan_file_text(res);
    if (!text) {
        print_message("%s N=%d R=%d: no plan file text\n", name, n, r);
        return 1;
    }
    CompileResult back;
    int rc = 1;
    DevValue *got = NULL;
    if (compile_plan_load(name, text, strlen(text), 0, &back, d) == IR_OK) {
        if (rt_run_program_local(&back.prog, args, 1, 0, NULL, &g_tuning, &got, d) == IR_OK)
            rc = compare(name, n, r, "from its plan: ", ref, got);
        compile_result_free(&back);
    }
    dev_value_unref(got);
    ts_free(text);
    return rc;
}

/* Every leaf of a and b holds the same bytes. */
static bool same_bytes(const DevValue *a, const DevValue *b)
{
    int32_t n = ir_shape_leaf_count(&a->shape);
    if (n != ir_shape_leaf_count(&b->shape))
        return false;
    for (int32_t i = 0; i < n; i++) {
        const DevValue *x = dev_value_leaf((DevValue *)a, i), *y = dev_value_leaf((DevValue *)b, i);
        if (x->nbytes != y->nbytes || (x->nbytes && memcmp(x->data, y->data, (size_t)x->nbytes) != 0))
            return false;
    }
    return true;
}

/* The printed SPMD program replayed (compile_spmd_program): the plan's
 * text parsed back as an ordinary module, every device given its shard of
 * the inputs, the devices' roots put back together by the output
 * sharding. What XLA's tools would read is what runs: it must equal the
 * partitioned run bit for bit (the same program on the same devices) and
 * the reference. Programs without host work only (a host plan holds
 * several modules). */
static int run_replayed(const char *name, int n, int r, const CompileResult *res, const RtArgs *args,
                        const DevValue *ref, const DevValue *got, IrDiag *d)
{
    const PlanCluster *pc = &res->prog.cluster[0];
    char *text = compile_plan_file_text(res);
    IrModule *m = text ? parse_text(name, text, d) : NULL;
    ts_free(text);
    CompileOptions co = {.num_partitions = n, .num_replicas = r};
    CompileResult rep;
    if (!m || compile_spmd_program(m, &co, &rep, d) != IR_OK)
        return 1;
    int64_t ndev = (int64_t)n * r;
    RtArgs *shards = calloc((size_t)ndev, sizeof *shards);
    DevValue **roots = calloc((size_t)ndev, sizeof *roots), *whole = NULL;
    IrStatus st = shards && roots ? IR_OK : IR_ENOMEM;
    for (int64_t g = 0; st == IR_OK && g < ndev; g++) {
        shards[g].nargs = args->nargs;
        shards[g].args = calloc((size_t)(args->nargs > 0 ? args->nargs : 1), sizeof(DevValue *));
        for (int32_t k = 0; st == IR_OK && k < args->nargs; k++)
            st = rt_shard_value(args->args[k], plan_param_sharding(pc, k), g % n, &shards[g].args[k], d);
    }
    RtRunOptions ro = {.tune = &g_tuning};
    if (st == IR_OK)
        st = rt_run_devices(&rep.prog.cluster[0], shards, 0, ndev, NULL, &ro, NULL, roots, d);
    if (st == IR_OK)
        st = rt_unshard_value(&pc->out_shape, plan_root_sharding(pc), n, roots, &whole, d);
    int rc = 1;
    if (st == IR_OK) {
        char *why = NULL;
        rc = rt_values_match(got, whole, &why) && same_bytes(got, whole) ? 0 : 1;
        if (rc)
            print_message("%s N=%d R=%d: replayed SPMD program differs from the partitioned run: %s\n", name, n, r,
                          why ? why : "not bit for bit");
        ts_free(why);
        if (rc == 0)
            rc = compare(name, n, r, "replayed: ", ref, whole);
    }
    for (int64_t g = 0; g < ndev; g++) {
        if (shards)
            rt_args_free(&shards[g]);
        if (roots)
            dev_value_unref(roots[g]);
    }
    free(shards);
    free(roots);
    dev_value_unref(whole);
    compile_result_free(&rep);
    return rc;
}

static int oracle_one(const char *name, const char *text, int n, int r, bool expect, int64_t max_elements)
{
    IrDiag d = {0};
    IrModule *ref_m = parse_text(name, text, &d);
    if (ref_m && max_elements > 0 && largest_array(ref_m) > max_elements) {
        ir_module_free(ref_m);
        return -2;
    }
    if (!ref_m) {
        char *msg = ir_diag_format(&d, "parse");
        print_message("%s N=%d: %s", name, n, msg);
        ts_free(msg);
        ir_diag_clear(&d);
        return 1;
    }
    RtBindOptions bo = {.random = true, .seed = 7};
    RtArgs args = {0};
    DevValue *ref = NULL, *got = NULL;
    int rc = 1;
    if (rt_bind_inputs(ref_m, &bo, &args, &d) != IR_OK)
        goto out;
    /* The reference: the whole module on one device, host targets too,
     * unfused (the partitioned runs are fused: see main). */
    RtHostCtx hc = {.silent = false, .saves = NULL};
    DevCustomCalls host = rt_host_calls(&hc);
    DevExecOptions ropt = {.custom = &host, .no_fusion = true};
    if (dev_execute(ref_m, ref_m->entry, args.nargs, args.args, &ropt, &ref, &d) != IR_OK) {
        rc = d.status == IR_EUNSUPPORTED ? -1 : 1;
        goto out;
    }
    IrModule *m = parse_text(name, text, &d);
    /* One pipeline for every module: a host program calling clusters
     * (one, when the module has no host work), each partitioned. */
    CompileOptions co = {.num_partitions = n, .num_replicas = r};
    CompileResult res;
    if (!m || compile_module(m, &co, &res, &d) != IR_OK)
        goto out;
    if (expect && n > 1)
        for (int32_t k = 0; k < res.prog.ncluster; k++)
            check_expectations(name, text, res.prog.cluster[k].spmd);
    if (res.prog.host)
        check_cluster_count(name, text, res.prog.ncluster);
    if (rt_run_program_local(&res.prog, &args, 1, 0, NULL, &g_tuning, &got, &d) == IR_OK)
        rc = compare(name, n, r, "", ref, got);
    /* The same program from its plan file: written, loaded back with every
     * check, run without recompiling. */
    if (rc == 0)
        rc = run_from_plan(name, n, r, &res, &args, ref, &d);
    if (rc == 0 && !res.prog.host)
        rc = run_replayed(name, n, r, &res, &args, ref, got, &d);
    compile_result_free(&res);
out:
    if (d.status != IR_OK && rc != -1) {
        char *msg = ir_diag_format(&d, name);
        print_message("%s N=%d R=%d: %s", name, n, r, msg ? msg : "error\n");
        ts_free(msg);
    }
    ir_diag_clear(&d);
    dev_value_unref(ref);
    dev_value_unref(got);
    rt_args_free(&args);
    ir_module_free(ref_m);
    return rc;
}

static void parse_list(const char *text, const char *key, int *vals, int *n, int dflt)
{
    const char *e = strstr(text, key);
    *n = 0;
    if (!e) {
        vals[(*n)++] = dflt;
        return;
    }
    e += strlen(key);
    int v, used;
    while (*n < 16 && sscanf(e, " %d%n", &v, &used) == 1) {
        vals[(*n)++] = v;
        e += used;
        if (*e == ',')
            e++;
    }
}

/* True when one of the comma-separated words of `list` occurs in name. */
static bool name_listed(const char *name, const char *list)
{
    while (*list) {
        size_t l = strcspn(list, ",");
        for (const char *p = name; l > 0 && *p; p++)
            if (strncmp(p, list, l) == 0)
                return true;
        list += l + (list[l] == ',');
    }
    return false;
}

static void test_models(void **state)
{
    (void)state;
    const char *dir = TESSEL_SRC_DIR "/tests/models";
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    struct dirent *de;
    int failures = 0, runs = 0;
    char **names = NULL;
    int nn = 0;
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name);
        if (l > 4 && strcmp(de->d_name + l - 4, ".hlo") == 0) {
            names = realloc(names, (size_t)(nn + 1) * sizeof *names);
            names[nn++] = strdup(de->d_name);
        }
    }
    closedir(dp);
    /* TESSEL_MODELS_ONLY=fft,topk runs the models whose names contain one
     * of the comma-separated words (a quick loop while working on one). */
    const char *only = getenv("TESSEL_MODELS_ONLY");
    for (int k = 0; k < nn; k++) {
        if (only && !name_listed(names[k], only)) {
            free(names[k]);
            continue;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        char *tmpl = read_text(path);
        assert_non_null(tmpl);
        int devs[16], ndev, reps[16], nrep;
        parse_list(tmpl, "// devices:", devs, &ndev, 0);
        if (ndev == 1 && devs[0] == 0) {
            devs[0] = 1;
            devs[1] = 2;
            devs[2] = 4;
            ndev = 3;
        }
        parse_list(tmpl, "// replicas:", reps, &nrep, 1);
        if (!strstr(tmpl, "// replicas:")) {
            /* Every model also runs on each N partitions x 2 replicas
             * (issue 30: a permute's pairs named global ids >= N, which
             * the verifier refused, once there were replicas). */
            reps[nrep++] = 2;
        }
        for (int i = 0; i < ndev; i++)
            for (int j = 0; j < nrep; j++) {
                char *text = instantiate(tmpl, devs[i]);
                int rc = oracle_one(names[k], text, devs[i], reps[j], true, 0);
                runs++;
                if (rc != 0) {
                    failures++;
                    print_message("FAIL %s N=%d R=%d\n", names[k], devs[i], reps[j]);
                }
                free(text);
            }
        free(tmpl);
        free(names[k]);
    }
    free(names);
    print_message("oracle: %d runs over model files, %d failures\n", runs, failures);
    assert_int_equal(failures, 0);
}

/* The models of tests/models' subfolders, each on the partition counts it
 * runs on (`// devices:`, else 1,2,4 for a template with @N, else 1) x 1
 * and 2 replicas (issue 30: every model that runs on P partitions also
 * runs on P x 2 replicas). `// not-oracle: WHY` marks a model the oracle
 * cannot take (an error case, a result NumPy checks); tests/models/fed is
 * outside it as a whole (its runs need --infeed files or chosen values:
 * tests/e2e/control.sh). */
static void test_model_subfolders(void **state)
{
    (void)state;
    static const char *const SUB[] = {"shardy", "grad", "memfit", "memory"};
    const char *only = getenv("TESSEL_MODELS_ONLY");
    int failures = 0, runs = 0, skipped = 0;
    for (size_t f = 0; f < sizeof SUB / sizeof *SUB; f++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/tests/models/%s", TESSEL_SRC_DIR, SUB[f]);
        struct dirent **names = NULL;
        int nn = scandir(dir, &names, NULL, alphasort);
        assert_true(nn > 0);
        for (int k = 0; k < nn; k++) {
            const char *nm = names[k]->d_name;
            size_t l = strlen(nm);
            bool tmpl_file = l > 7 && strcmp(nm + l - 7, ".hlo.in") == 0;
            if (!(tmpl_file || (l > 4 && strcmp(nm + l - 4, ".hlo") == 0)) || (only && !name_listed(nm, only))) {
                free(names[k]);
                continue;
            }
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            char *tmpl = read_text(path);
            assert_non_null(tmpl);
            if (strstr(tmpl, "// not-oracle:")) {
                skipped++;
                free(tmpl);
                free(names[k]);
                continue;
            }
            int devs[16], ndev, reps[2] = {1, 2};
            parse_list(tmpl, "// devices:", devs, &ndev, 0);
            if (ndev == 1 && devs[0] == 0) {
                bool has_n = strstr(tmpl, "@N") || strstr(tmpl, "@D") || strstr(tmpl, "@S");
                ndev = has_n ? 3 : 1;
                devs[0] = 1, devs[1] = 2, devs[2] = 4;
            }
            for (int i = 0; i < ndev; i++)
                for (int j = 0; j < 2; j++) {
                    char *text = instantiate(tmpl, devs[i]);
                    char label[512];
                    snprintf(label, sizeof label, "%s/%s", SUB[f], nm);
                    int rc = oracle_one(label, text, devs[i], reps[j], true, 0);
                    runs++;
                    if (rc != 0) {
                        failures++;
                        print_message("FAIL %s N=%d R=%d\n", label, devs[i], reps[j]);
                    }
                    free(text);
                }
            free(tmpl);
            free(names[k]);
        }
        free(names);
    }
    print_message("oracle: %d runs over the subfolders' models, %d marked not-oracle, %d failures\n", runs, skipped,
                  failures);
    assert_int_equal(failures, 0);
}

/* Modules whose oracle run is known not to pass, and why. */
static const char *const KNOWN[][2] = {
    /* XLA's test expects the verifier to reject it, and tessel's does. */
    {"SubgroupIllegalManualAllReduce", "rejected as intended: an all-reduce across manual subgroups"},
};

static const char *known_failure(const char *test)
{
    for (size_t k = 0; k < sizeof KNOWN / sizeof *KNOWN; k++)
        if (strcmp(KNOWN[k][0], test) == 0)
            return KNOWN[k][1];
    return NULL;
}

/* XLA's own SPMD partitioner test modules, each on the device count its
 * test uses. Modules the reference executor cannot run (infeed, rng, ...)
 * are counted and skipped; every other module must match, except the
 * KNOWN list above (which must still fail, so the list stays true). */
static void test_conformance(void **state)
{
    (void)state;
    const char *dir = TESSEL_SHARED_DIR "/conformance/xla_spmd";
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    FILE *mf = fopen(path, "r");
    if (!mf)
        skip();
    char line[4096];
    int pass = 0, unsupported = 0, failures = 0, large = 0, known = 0;
    const char *only = getenv("TESSEL_CONFORMANCE_ONLY");
    /* Modules with arrays above this many elements are skipped (XLA's
     * tests go up to 10^11 elements); TESSEL_CONFORMANCE_MAX_ELEMENTS
     * raises the bound. */
    const char *lim = getenv("TESSEL_CONFORMANCE_MAX_ELEMENTS");
    int64_t max_elements = lim ? atoll(lim) : (int64_t)1 << 18;
    while (fgets(line, sizeof line, mf)) {
        char file[512], test[512];
        int ndev;
        if (sscanf(line, "%511[^\t]\t%511[^\t]\t%d", file, test, &ndev) != 3)
            continue; /* header */
        if (only && strcmp(only, test) != 0)
            continue;
        snprintf(path, sizeof path, "%s/modules/%s", dir, file);
        char *text = read_text(path);
        assert_non_null(text);
        int rc = oracle_one(file, text, ndev, 1, false, max_elements);
        const char *why = known_failure(test);
        if (why && rc == 1) {
            known++;
            print_message("known: %s: %s\n", test, why);
        } else if (why && rc == 0) {
            failures++;
            print_message("FAIL conformance %s passes now: remove it from KNOWN\n", test);
        } else if (rc == 0)
            pass++;
        else if (rc == -2)
            large++;
        else if (rc < 0)
            unsupported++;
        else {
            failures++;
            print_message("FAIL conformance %s (%d devices)\n", test, ndev);
            fflush(stdout);
        }
        free(text);
    }
    fclose(mf);
    print_message("conformance: %d match the reference, %d not runnable by the reference, %d larger than %lld "
                  "elements, %d known gaps, %d failures\n", pass, unsupported, large, (long long)max_elements, known,
                  failures);
    assert_int_equal(failures, 0);
}

/* Partitioned runs are fused (device/fusion.c); the reference is not.
 * The models are small, so each suite runs twice, fusing arrays of every
 * size: once through the f32 chunk interpreter and the default blocks
 * (fusion COLL_FUSION_ALL), once in uneven blocks of 5 elements through
 * the range kernels (fusion_block 5), which cross rows and shard edges. */
static int fuse_chunks(void **state)
{
    (void)state;
    g_tuning = (CollTuning){.fusion = COLL_FUSION_ALL};
    return 0;
}

static int fuse_blocks(void **state)
{
    (void)state;
    g_tuning = (CollTuning){.fusion_block = 5};
    return 0;
}

int main(void)
{
    /* TESSEL_SGEMM=avx512 (ctest's test_oracle_avx512): every f32 dot in
     * tessel's own kernel, small ones too; otherwise as the library decides */
    const char *sgemm = getenv("TESSEL_SGEMM");
    if (sgemm && !strcmp(sgemm, "avx512"))
        dev_blas_choose_sgemm(DEV_SGEMM_AVX512);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_models, fuse_chunks),
        cmocka_unit_test_setup(test_model_subfolders, fuse_chunks),
        cmocka_unit_test_setup(test_conformance, fuse_chunks),
        cmocka_unit_test_setup(test_models, fuse_blocks),
        cmocka_unit_test_setup(test_conformance, fuse_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
