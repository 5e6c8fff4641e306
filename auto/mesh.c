/*
 * mesh.c: the device mesh of --mesh and specs over it.
 *
 * A mesh `data=2,model=4` lays devices 0..7 out row-major: device =
 * data*4 + model, so the model axis joins neighbours (0-3, 4-7: a host of
 * four devices holds a model group) and the data axis strides by 4. A spec sends each mesh axis to one tensor dim or to none;
 * as a sharding, the tile of a device is its coordinates along the axes
 * of each dim (major axis first), and the devices of one tile differ only
 * along the unused axes (last_tile_dim_replicate):
 *
 *   f32[16,24], mesh data=2,model=4, spec dim[data]=0, dim[model]=-1
 *     -> {devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}
 */
#include "auto.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DEFAULT_NAMES[AUTO_MAX_AXES] = {"x", "y", "z", "w"};

static IrStatus mesh_error(IrDiag *d, const char *spec, const char *why)
{
    return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                    "--mesh '%s': %s (a mesh is sizes like 2x4, or named axes like data=2,model=4)", spec, why);
}

/* What parse_size read. */
typedef enum SizeRead { SIZE_OK, SIZE_BAD, SIZE_TOO_LARGE } SizeRead;

/* A size: a decimal integer in [1, IR_MAX_DEVICES]; *end after it (its
 * digits all read, so a size too large is told apart from a bad one). */
static SizeRead parse_size(const char *p, const char **end, int64_t *out)
{
    if (!isdigit((unsigned char)*p))
        return SIZE_BAD;
    int64_t v = 0;
    bool large = false;
    while (isdigit((unsigned char)*p)) {
        v = v * 10 + (*p++ - '0');
        if (v > IR_MAX_DEVICES) {
            large = true;
            v = IR_MAX_DEVICES + 1; /* kept small: 20 digits would overflow */
        }
    }
    *end = p;
    *out = v;
    return large ? SIZE_TOO_LARGE : v >= 1 ? SIZE_OK : SIZE_BAD;
}

IrStatus auto_mesh_parse(const char *spec, AutoMesh *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return mesh_error(d, spec ? spec : "", "empty");
    bool named = strchr(spec, '=') != NULL;
    const char *p = spec;
    while (*p) {
        if (out->naxes == AUTO_MAX_AXES)
            return mesh_error(d, spec, "at most 4 axes");
        char *name = out->name[out->naxes];
        if (named) {
            size_t k = 0;
            while (*p && *p != '=' && *p != ',') {
                if (!(isalnum((unsigned char)*p) || *p == '_') || k + 1 >= sizeof out->name[0])
                    return mesh_error(d, spec, "an axis name is letters, digits and _ (at most 23)");
                name[k++] = *p++;
            }
            if (k == 0 || *p != '=')
                return mesh_error(d, spec, "every axis needs NAME=SIZE");
            p++;
        } else {
            snprintf(name, sizeof out->name[0], "%s", DEFAULT_NAMES[out->naxes]);
        }
        const char *e;
        SizeRead r = parse_size(p, &e, &out->size[out->naxes]);
        if (r == SIZE_TOO_LARGE)
            return mesh_error(d, spec, "a size is too large: the largest is 65536");
        if (r == SIZE_BAD)
            return mesh_error(d, spec, "a size is a whole number from 1 to 65536");
        for (int32_t a = 0; a < out->naxes; a++)
            if (strcmp(out->name[a], name) == 0)
                return mesh_error(d, spec, "an axis name appears twice");
        out->naxes++;
        p = e;
        char sep = named ? ',' : 'x';
        if (*p == sep && p[1])
            p++;
        else if (*p)
            return mesh_error(d, spec, named ? "axes are separated by ','" : "sizes are separated by 'x'");
    }
    out->ndevices = 1;
    for (int32_t a = 0; a < out->naxes; a++) {
        out->ndevices *= out->size[a];
        if (out->ndevices > IR_MAX_DEVICES)
            return mesh_error(d, spec, "more than 65536 devices");
    }
    return IR_OK;
}

void auto_mesh_text(const AutoMesh *m, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int32_t a = 0; a < m->naxes && n < cap; a++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s=%lld", a ? "," : "", m->name[a], (long long)m->size[a]);
}

AutoSpec auto_spec_replicated(void)
{
    AutoSpec s;
    memset(s.dim, -1, sizeof s.dim);
    return s;
}

int64_t auto_spec_tiles(const AutoMesh *m, const AutoSpec *s, int32_t d)
{
    int64_t t = 1;
    for (int32_t a = 0; a < m->naxes; a++)
        if (s->dim[a] == d)
            t *= m->size[a];
    return t;
}

int64_t auto_spec_replication(const AutoMesh *m, const AutoSpec *s)
{
    int64_t t = 1;
    for (int32_t a = 0; a < m->naxes; a++)
        if (s->dim[a] < 0)
            t *= m->size[a];
    return t;
}

bool auto_spec_equal(const AutoSpec *a, const AutoSpec *b)
{
    return memcmp(a->dim, b->dim, sizeof a->dim) == 0;
}

IrSharding *auto_spec_sharding(IrArena *a, const AutoMesh *m, const AutoSpec *s, int32_t rank)
{
    const int32_t order[AUTO_MAX_AXES] = {0, 1, 2, 3};
    return auto_spec_sharding_order(a, m, s, rank, order);
}

IrSharding *auto_spec_sharding_order(IrArena *a, const AutoMesh *m, const AutoSpec *s, int32_t rank,
                                     const int32_t *order)
{
    int64_t tile[IR_MAX_RANK + 1];
    for (int32_t d = 0; d < rank; d++)
        tile[d] = auto_spec_tiles(m, s, d);
    tile[rank] = auto_spec_replication(m, s);
    int64_t *dev = ir_alloc_array(a, (size_t)m->ndevices, sizeof *dev);
    if (!dev)
        return NULL;
    /* Walk the mesh coordinates; place each device at its tile position. */
    int64_t coord[AUTO_MAX_AXES] = {0};
    for (int64_t id = 0; id < m->ndevices; id++) {
        int64_t pos = 0;
        for (int32_t d = 0; d <= rank; d++) {
            int64_t c = 0;
            for (int32_t j = 0; j < m->naxes; j++) {
                int32_t ax = order[j];
                if (s->dim[ax] == (d < rank ? d : -1))
                    c = c * m->size[ax] + coord[ax];
            }
            pos = pos * tile[d] + c;
        }
        dev[pos] = id;
        for (int32_t ax = m->naxes - 1; ax >= 0; ax--) {
            if (++coord[ax] < m->size[ax])
                break;
            coord[ax] = 0;
        }
    }
    return shd_tiled(a, rank + 1, tile, dev, 1);
}

void auto_spec_text(const AutoMesh *m, const AutoSpec *s, int32_t rank, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int32_t d = 0; d < rank && n < cap; d++) {
        int k = 0;
        n += (size_t)snprintf(buf + n, cap - n, "%s", d ? "," : "");
        for (int32_t a = 0; a < m->naxes && n < cap; a++)
            if (s->dim[a] == d)
                n += (size_t)snprintf(buf + n, cap - n, "%s%s", k++ ? "*" : "", m->name[a]);
        if (!k && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "-");
    }
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "]");
    for (int32_t a = 0; a < m->naxes && n < cap; a++)
        if (s->dim[a] < 0 && m->size[a] > 1)
            n += (size_t)snprintf(buf + n, cap - n, "+%s", m->name[a]);
}
