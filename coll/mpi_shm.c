/*
 * mpi_shm.c: the all-reduce between ranks of one host through a shared
 * memory segment (issue 34), where every rank of the world runs on the same
 * host.
 *
 * Why: across processes on one host the pipelined all-reduce
 * (mpi_pipeline.c) moves each chunk through Open MPI's shared-memory
 * transport, which copies a large message with process_vm_readv inside
 * the receiver's own MPI calls: the kernel pins the sender's pages and
 * copies them, and every chunk needs both ranks to poll. An all-reduce of
 * 3 MiB (peers-block-infer's) between two ranks doing nothing else took
 * 1.2-1.3 ms a step that way on the loaded 2-core machine, 0.35-0.36 ms
 * here (BENCHMARKS.md, "The across-process step"). Inside the block's step
 * the all-reduce is bound by memory (its operand just written by a dot,
 * its result cold): about 1 ms either way.
 *
 * The segment: a header of three counters a rank (each on its own cache
 * line), then one region a rank, as large as the buffer. An all-reduce
 * of count elements over k ranks cuts the buffer into k blocks (as the
 * pipeline does, rank q owns block q) and counts its calls (seq s):
 *   0. wait until every peer has taken what it read from my region in
 *      the previous call (taken >= s - 1);
 *   1. copy block p of my contribution into my region, for every p != q;
 *      posted = s;
 *   2. wait for every peer's posted; combine block q in rank order (mine
 *      and the peers' copies in their regions) into my result, and copy
 *      it into my region; combined = s;
 *   3. wait for every peer's combined; copy block p from rank p's region
 *      into my result, for every p != q; taken = s.
 * Stores into my region stream (non-temporal): its lines sit in the
 * peers' caches since they read them at the last call, and ordinary stores
 * wait for each line to come back from there (1.5 MiB: 0.5-0.7 ms against
 * 0.06 ms streamed). Every element is combined once, in rank order, on its
 * block's rank and copied to the others, as in the pipeline: the same bits
 * on every rank and the same bits as the pipeline's. A rank waits as the
 * pipeline does (spin, yield, sleep; the heartbeat's messages read), so a
 * peer that stops or diverges still ends the job through the heartbeat.
 *
 * When: every rank of the world on one host (their host names equal, and
 * the segment rank 0 made opens on every rank with rank 0's nonce in it),
 * MPI's own shared memory not left out of its transports (Open MPI's
 * `--mca btl tcp,self` asks for TCP: then MPI's messages, as asked), a
 * group of all the ranks, a buffer the pipeline would take (pipe_min()
 * and more) and at most SHM_MAX, and message shapes left at their
 * defaults (a run that sets piece, chunk or pipeline bytes asks for MPI's
 * messages: the tests that force the pipeline on small arrays). Whether
 * the ranks share a host and MPI's shared memory is allowed is asked once,
 * before the first step where the program all-reduces enough
 * (coll_mpi_shm_prepare), else at the first such all-reduce. The
 * segment is made at the first such all-reduce (a few collective MPI
 * calls of the world, not checked in: every rank is in the same
 * all-reduce), sized for it (at least SHM_MIN_REGION a rank), and made
 * again, larger, by the first larger one; the name is unlinked once every
 * rank has opened it (from then on nothing is left in /dev/shm however
 * the job ends). Where anything fails (no /dev/shm, no room in it:
 * posix_fallocate reserves it first, so a full tmpfs is an answer here,
 * not a SIGBUS later), every rank learns it and the pipeline carries on.
 */
#include "mpi_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { SHM_LINE = 64, SHM_HDR = 4 * SHM_LINE, SHM_NAME = 48, SHM_HOST = 64 };
enum { SHM_POSTED = 0, SHM_COMBINED = 1, SHM_TAKEN = 2, SHM_NONCE = 3 };
#define SHM_MAX ((size_t)16 << 20)
#define SHM_MIN_REGION ((size_t)4 << 20)

static int64_t *shm_word(const CollMpi *t, int r, int which)
{
    return (int64_t *)(void *)(t->shm + (size_t)r * SHM_HDR + (size_t)which * SHM_LINE);
}

static size_t shm_data_at(const CollMpi *t)
{
    size_t h = (size_t)t->size * SHM_HDR;
    return (h + 4095) & ~(size_t)4095;
}

static uint8_t *shm_region(const CollMpi *t, int r)
{
    return t->shm + shm_data_at(t) + (size_t)r * t->shm_region;
}

void cmpi_shm_release(CollMpi *t)
{
    if (t->shm)
        munmap(t->shm, t->shm_bytes);
    t->shm = NULL;
    t->shm_bytes = t->shm_region = 0;
    t->shm_seq = 0;
}

/* An all-gather of `bytes` from every rank of the world, outside the
 * program's collectives (no check-in, never skipped), as coll_mpi_tune's. */
static int shm_allgather(CollMpi *t, const void *mine, void *all, int bytes)
{
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = tmpi_iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, t->comm, &req);
    return rc == MPI_SUCCESS ? cmpi_finish(t, &req) : rc;
}

/* MPI's own shared-memory transport left out of the run's transports
 * (Open MPI's `--mca btl tcp,self` or `^vader`): the run asks for another
 * transport, so tessel's shared memory stays out too. */
static bool shm_btl_excluded(void)
{
    char v[256];
    if (tmpi_cvar_string("btl", v, sizeof v) != MPI_SUCCESS || !v[0])
        return false;
    bool listed = false, negated = v[0] == '^';
    for (char *save = NULL, *w = strtok_r(v + negated, ",", &save); w; w = strtok_r(NULL, ",", &save))
        listed = listed || strcmp(w, "vader") == 0 || strcmp(w, "sm") == 0;
    return negated ? listed : !listed;
}

/* Every rank's host name equal to this one's, then MPI's shared memory
 * allowed on every rank (every rank sees the same answers, so every rank
 * answers the same). The transport question goes to MPI_T only where the
 * ranks share a host: MPI_T_init_thread registers every component's
 * variables, about 0.2 s a call with Open MPI 4.1, so ranks on several
 * hosts never pay it. */
static int shm_one_host(CollMpi *t, bool *one)
{
    char mine[SHM_HOST] = "";
    if (gethostname(mine, SHM_HOST - 1) != 0)
        snprintf(mine, SHM_HOST, "?rank %d", t->rank);
    mine[SHM_HOST - 1] = 0;
    char *all = ts_malloc((size_t)t->size * SHM_HOST);
    if (!all)
        return MPI_ERR_NO_MEM;
    int rc = shm_allgather(t, mine, all, SHM_HOST);
    *one = rc == MPI_SUCCESS;
    for (int r = 0; *one && r < t->size; r++)
        *one = memcmp(all + (size_t)r * SHM_HOST, all, SHM_HOST) == 0;
    if (*one) {
        char excluded = shm_btl_excluded();
        rc = shm_allgather(t, &excluded, all, 1);
        for (int r = 0; rc == MPI_SUCCESS && r < t->size; r++)
            *one = *one && !all[r];
        *one = *one && rc == MPI_SUCCESS;
    }
    ts_free(all);
    return rc;
}

/* Rank 0 makes the segment (name and nonce in *info), the others open
 * it: the mapping, or NULL. */
typedef struct ShmInfo {
    int64_t ok, nonce;
    char name[SHM_NAME];
} ShmInfo;

static uint8_t *shm_make(size_t bytes, ShmInfo *info)
{
    static int made;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    info->nonce = (int64_t)(((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40)) | 1;
    snprintf(info->name, sizeof info->name, "/tessel.%ld.%d.%lx", (long)getpid(), made++,
             (unsigned long)(info->nonce & 0xffffff));
    int fd = shm_open(info->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return NULL;
    uint8_t *p = NULL;
    if (posix_fallocate(fd, 0, (off_t)bytes) == 0) {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        p = p == MAP_FAILED ? NULL : p;
    }
    close(fd);
    if (!p) {
        shm_unlink(info->name);
        return NULL;
    }
    __atomic_store_n((int64_t *)(void *)(p + SHM_NONCE * SHM_LINE), info->nonce, __ATOMIC_RELEASE);
    info->ok = 1;
    return p;
}

static uint8_t *shm_open_peer(const ShmInfo *r0, size_t bytes)
{
    if (!r0->ok)
        return NULL;
    int fd = shm_open(r0->name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat sb;
    uint8_t *p = NULL;
    if (fstat(fd, &sb) == 0 && (size_t)sb.st_size == bytes) {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        p = p == MAP_FAILED ? NULL : p;
    }
    close(fd);
    /* Another host's segment of the same name would not carry the nonce. */
    if (p && __atomic_load_n((int64_t *)(void *)(p + SHM_NONCE * SHM_LINE), __ATOMIC_ACQUIRE) != r0->nonce) {
        munmap(p, bytes);
        p = NULL;
    }
    return p;
}

/* Whether the segment can be used at all (state 0: asked now, of every
 * rank at once), false for good where it cannot. */
static bool shm_decide(CollMpi *t, int *rc)
{
    if (t->shm_state == 0) {
        bool one = false;
        *rc = shm_one_host(t, &one);
        t->shm_state = *rc == MPI_SUCCESS && one ? 1 : -1;
    }
    return t->shm_state > 0;
}

/* A segment with regions of at least `need` bytes, made by every rank at
 * once (every rank calls this at the same all-reduce). false: the
 * pipeline's turn (and for good, where the ranks are not on one host or
 * the segment could not be made). MPI failures go to *rc. */
static bool shm_ready(CollMpi *t, size_t need, int *rc)
{
    *rc = MPI_SUCCESS;
    if (t->shm_state < 0)
        return false;
    if (t->shm && t->shm_region >= need)
        return true;
    if (!shm_decide(t, rc))
        return false;
    cmpi_shm_release(t);
    size_t region = need > SHM_MIN_REGION ? need : SHM_MIN_REGION;
    region = (region + 4095) & ~(size_t)4095;
    t->shm_region = region;
    size_t bytes = shm_data_at(t) + (size_t)t->size * region;
    ShmInfo mine = {0}, *all = ts_calloc((size_t)t->size, sizeof *all);
    if (!all) {
        *rc = MPI_ERR_NO_MEM;
        return false;
    }
    uint8_t *p = t->rank == 0 ? shm_make(bytes, &mine) : NULL;
    *rc = shm_allgather(t, &mine, all, (int)sizeof mine);
    if (*rc == MPI_SUCCESS && t->rank != 0)
        p = shm_open_peer(&all[0], bytes);
    /* Every rank's answer; then the name goes (every rank has opened it). */
    int64_t ok = p != NULL, *oks = (int64_t *)all;
    if (*rc == MPI_SUCCESS)
        *rc = shm_allgather(t, &ok, oks, (int)sizeof ok);
    if (t->rank == 0 && mine.ok)
        shm_unlink(mine.name);
    bool every = *rc == MPI_SUCCESS;
    for (int r = 0; every && r < t->size; r++)
        every = oks[r] != 0;
    ts_free(all);
    if (!every) {
        if (p)
            munmap(p, bytes);
        t->shm_region = 0;
        t->shm_state = -1;
        return false;
    }
    t->shm = p;
    t->shm_bytes = bytes;
    t->shm_seq = 0;
    return true;
}

bool cmpi_shm_usable(CollMpi *t, size_t bytes, int *rc)
{
    *rc = MPI_SUCCESS;
    if (!t->shm_allowed || t->size < 2 || bytes > SHM_MAX)
        return false;
    return shm_ready(t, bytes, rc);
}

int64_t coll_mpi_shm_calls(const CollMpi *t)
{
    return t->shm_calls;
}

IrStatus coll_mpi_shm_prepare(CollMpi *t, int64_t bytes, IrDiag *d)
{
    if (!t->shm_allowed || t->size < 2 || t->shm_state != 0)
        return IR_OK;
    /* The largest answer of any rank, so that every rank decides alike
     * (the ranks' programs are compared only later, api/agree.c). */
    int64_t most = bytes > 0 ? bytes : 0;
    int64_t *all = ts_malloc((size_t)t->size * sizeof most);
    if (!all)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    int rc = shm_allgather(t, &most, all, (int)sizeof most);
    for (int r = 0; rc == MPI_SUCCESS && r < t->size; r++)
        most = all[r] > most ? all[r] : most;
    ts_free(all);
    if (rc == MPI_SUCCESS && most >= (int64_t)t->pipe_min)
        shm_decide(t, &rc);
    return rc == MPI_SUCCESS ? IR_OK : cmpi_fail(d, rc, "MPI_Allgather", t->rank);
}

/* Until every peer's counter `which` reaches s. */
static void shm_wait(CollMpi *t, int which, int64_t s)
{
    CmpiBackoff b = {0};
    for (int r = 0; r < t->size; r++) {
        if (r == t->rank)
            continue;
        while (__atomic_load_n(shm_word(t, r, which), __ATOMIC_ACQUIRE) < s)
            cmpi_idle(t, &b);
    }
}

void cmpi_shm_allreduce(CollMpi *t, const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty,
                        IrOpcode op, const void **list)
{
    int k = t->size, q = t->rank;
    size_t es = ir_type_size(ty);
    int64_t per = (count + k - 1) / k, s = ++t->shm_seq;
    t->shm_calls++;
    const uint8_t *mine = src[0];
    if (nsrc > 1) {
        coll_combine(op, ty, &dst, 1, 0, src, nsrc, 0, count, false);
        mine = dst;
    }
    uint8_t *out = dst;
    /* Into my region with streaming stores: its lines are in the peers'
     * caches since they read them at the last call, and ordinary stores
     * wait for each line to be taken from there (1.5 MiB: 0.5-0.7 ms
     * against 0.06 streamed). */
    void *to = shm_region(t, q);
#define LO(b) ((per * (b) < count ? per * (b) : count))
#define LEN(b) (LO((b) + 1) - LO(b))
    shm_wait(t, SHM_TAKEN, s - 1);
    for (int p = 0; p < k; p++)
        if (p != q && LEN(p) > 0)
            coll_copy(&to, 1, (size_t)LO(p) * es, mine + (size_t)LO(p) * es, (size_t)LEN(p) * es, true);
    __atomic_store_n(shm_word(t, q, SHM_POSTED), s, __ATOMIC_RELEASE);
    shm_wait(t, SHM_POSTED, s);
    if (LEN(q) > 0) {
        for (int r = 0; r < k; r++)
            list[r] = (r == q ? mine : shm_region(t, r)) + (size_t)LO(q) * es;
        void *o = out + (size_t)LO(q) * es;
        coll_combine(op, ty, &o, 1, 0, list, k, 0, LEN(q), false);
        coll_copy(&to, 1, (size_t)LO(q) * es, o, (size_t)LEN(q) * es, true);
    }
    __atomic_store_n(shm_word(t, q, SHM_COMBINED), s, __ATOMIC_RELEASE);
    shm_wait(t, SHM_COMBINED, s);
    for (int p = 0; p < k; p++)
        if (p != q && LEN(p) > 0)
            memcpy(out + (size_t)LO(p) * es, shm_region(t, p) + (size_t)LO(p) * es, (size_t)LEN(p) * es);
    __atomic_store_n(shm_word(t, q, SHM_TAKEN), s, __ATOMIC_RELEASE);
#undef LO
#undef LEN
}
