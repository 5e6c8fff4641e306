/*
 * view_grid.c: how an array is cut over the devices, drawn as a grid of
 * boxes (as jax.debug.visualize_array_sharding does): one box per tile,
 * sized in proportion to the tile's extent (uneven tiles are visibly
 * smaller), holding the ids of the devices that hold it (several under
 * replication). Rank 1 is one row of boxes; rank 2 is rows x columns; a
 * higher rank shows its two sharded dims (one grid per tile of any further
 * sharded dim), the others named in a caption.
 *
 * Worked example: f32[10,16] {devices=[4,2]0..7}: dim 0 is 10 in 4 tiles
 * of ceil(10/4) = 3 (3, 3, 3, 1: the last is short), dim 1 is 16 in 2
 * tiles of 8. The grid has 4 rows, the last about a third the height of
 * the others, and 2 columns; box (r, c) holds device 2r + c.
 *
 * The same layout (GridView) feeds the HTML report (view_html.c), which
 * draws it with CSS grid tracks in the same proportions.
 */
#include "compile.h"

#include <stdio.h>
#include <string.h>

/* Total width of a grid line, borders included, before minimums. */
#define GRID_WIDTH 48
/* The tallest grid, in lines of box interior (before label minimums). */
#define GRID_MAX_LINES 8

/* The extent of tile j of a dim of `n` elements cut in `t` tiles: XLA's
 * shard is ceil(n/t); the last tiles are short (or empty). */
static int64_t tile_extent(int64_t n, int64_t t, int64_t j)
{
    int64_t c = t > 0 ? (n + t - 1) / t : n;
    int64_t lo = j * c, hi = (j + 1) * c < n ? (j + 1) * c : n;
    return hi > lo ? hi - lo : 0;
}

static int64_t data_tiles(const IrSharding *s, int32_t d)
{
    if (!s || s->kind != SHD_TILED || d >= ir_sharding_data_rank(s))
        return 1;
    return s->tile[d];
}

IrStatus grid_view(const IrShape *shape, const IrSharding *s, GridView *g)
{
    memset(g, 0, sizeof *g);
    g->rowdim = g->coldim = -1;
    g->rank = shape->type == IR_TUPLE ? 0 : shape->rank;
    int32_t sharded[IR_MAX_RANK], ns = 0;
    for (int32_t d = 0; d < g->rank; d++)
        if (data_tiles(s, d) > 1)
            sharded[ns++] = d;
    if (ns >= 2) {
        g->rowdim = sharded[0];
        g->coldim = sharded[1];
    } else if (g->rank == 1) {
        g->coldim = 0;
    } else if (g->rank >= 2) {
        int32_t d = ns == 1 ? sharded[0] : g->rank - 1;
        g->rowdim = d == g->rank - 1 ? g->rank - 2 : d;
        g->coldim = d == g->rank - 1 ? d : g->rank - 1;
    }
    g->nextra = 0;
    for (int32_t k = 2; k < ns; k++)
        g->extra[g->nextra++] = sharded[k];
    g->npages = 1;
    for (int32_t k = 0; k < g->nextra; k++)
        g->npages *= data_tiles(s, g->extra[k]);
    g->nrows = g->rowdim >= 0 ? data_tiles(s, g->rowdim) : 1;
    g->ncols = g->coldim >= 0 ? data_tiles(s, g->coldim) : 1;
    g->rext = ts_calloc((size_t)g->nrows, sizeof(int64_t));
    g->cext = ts_calloc((size_t)g->ncols, sizeof(int64_t));
    if (!g->rext || !g->cext) {
        grid_view_free(g);
        return IR_ENOMEM;
    }
    for (int64_t r = 0; r < g->nrows; r++)
        g->rext[r] = g->rowdim >= 0 ? tile_extent(shape->dims[g->rowdim], g->nrows, r) : 1;
    for (int64_t c = 0; c < g->ncols; c++)
        g->cext[c] = g->coldim >= 0 ? tile_extent(shape->dims[g->coldim], g->ncols, c) : 1;
    return IR_OK;
}

void grid_view_free(GridView *g)
{
    ts_free(g->rext);
    ts_free(g->cext);
    memset(g, 0, sizeof *g);
}

int64_t grid_cell_devices(const GridView *g, const IrSharding *s, int64_t ndevices, int64_t page, int64_t row,
                          int64_t col, int64_t *out, int64_t cap)
{
    if (!s || s->kind == SHD_REPLICATED || s->kind == SHD_MANUAL || s->kind == SHD_TUPLE) {
        int64_t n = 0;
        for (int64_t k = 0; k < ndevices && n < cap; k++)
            out[n++] = k;
        return n;
    }
    if (s->kind == SHD_MAXIMAL) {
        if (cap > 0)
            out[0] = s->device;
        return cap > 0 ? 1 : 0;
    }
    /* The tile's index in each data dim; subgroup dims run over all. */
    int64_t idx[IR_MAX_RANK + 8] = {0};
    int32_t dr = ir_sharding_data_rank(s);
    for (int32_t k = g->nextra - 1; k >= 0; k--) {
        int64_t t = data_tiles(s, g->extra[k]);
        idx[g->extra[k]] = page % t;
        page /= t;
    }
    if (g->rowdim >= 0 && g->rowdim < dr)
        idx[g->rowdim] = row;
    if (g->coldim >= 0 && g->coldim < dr)
        idx[g->coldim] = col;
    int64_t nsub = ir_sharding_replication(s), n = 0;
    for (int64_t q = 0; q < nsub && n < cap; q++) {
        int64_t rest = q, flat = 0;
        int64_t sub[IR_MAX_RANK + 8];
        for (int32_t k = s->ntile - 1; k >= dr; k--) {
            sub[k] = rest % s->tile[k];
            rest /= s->tile[k];
        }
        for (int32_t k = 0; k < s->ntile; k++)
            flat = flat * s->tile[k] + (k < dr ? idx[k] : sub[k]);
        out[n++] = flat < s->ndevices ? s->devices[flat] : -1;
    }
    return n;
}

/* "0", "0,1", runs of three or more as "0-3": the devices of a box. */
char *grid_device_label(const int64_t *dev, int64_t n)
{
    IrStrBuf b = {0};
    for (int64_t k = 0; k < n;) {
        int64_t j = k;
        while (j + 1 < n && dev[j + 1] == dev[j] + 1)
            j++;
        if (j - k >= 2) {
            ir_sb_printf(&b, "%s%lld-%lld", k ? "," : "", (long long)dev[k], (long long)dev[j]);
            k = j + 1;
        } else {
            ir_sb_printf(&b, "%s%lld", k ? "," : "", (long long)dev[k]);
            k++;
        }
    }
    if (n == 0)
        ir_sb_puts(&b, "-");
    return ir_sb_take(&b);
}

/* ---- the caption ---- */

static void caption_dim(IrStrBuf *o, const IrShape *shape, const IrSharding *s, int32_t d)
{
    int64_t n = shape->dims[d], t = data_tiles(s, d);
    ir_sb_printf(o, "dim %d (%lld)", (int)d, (long long)n);
    if (t <= 1) {
        ir_sb_puts(o, " not split");
        return;
    }
    if (n % t == 0) {
        ir_sb_printf(o, " in %lld tiles of %lld", (long long)t, (long long)(n / t));
        return;
    }
    ir_sb_printf(o, " in %lld uneven tiles:", (long long)t);
    for (int64_t j = 0; j < t; j++)
        ir_sb_printf(o, "%s%lld", j ? ", " : " ", (long long)tile_extent(n, t, j));
}

void grid_caption(IrStrBuf *o, const GridView *g, const IrShape *shape, const IrSharding *s, int64_t ndevices)
{
    if (!s || s->kind == SHD_REPLICATED) {
        ir_sb_printf(o, "replicated: every one of the %lld devices holds the whole array\n", (long long)ndevices);
        return;
    }
    if (s->kind == SHD_MAXIMAL) {
        ir_sb_printf(o, "maximal: device %lld computes it (tessel runs it on every device)\n", (long long)s->device);
        return;
    }
    if (s->kind == SHD_MANUAL) {
        ir_sb_puts(o, "manual: each device holds a value of its own, of the declared shape\n");
        return;
    }
    if (g->rowdim >= 0) {
        ir_sb_puts(o, "rows: ");
        caption_dim(o, shape, s, g->rowdim);
        ir_sb_puts(o, "\n");
    }
    if (g->coldim >= 0) {
        ir_sb_puts(o, "columns: ");
        caption_dim(o, shape, s, g->coldim);
        ir_sb_puts(o, "\n");
    }
    bool first = true;
    for (int32_t d = 0; d < g->rank; d++) {
        bool shown = d == g->rowdim || d == g->coldim;
        for (int32_t k = 0; k < g->nextra; k++)
            shown = shown || d == g->extra[k];
        if (shown)
            continue;
        ir_sb_puts(o, first ? "not shown: " : "; ");
        caption_dim(o, shape, s, d);
        first = false;
    }
    if (!first)
        ir_sb_puts(o, "\n");
    for (int32_t k = 0; k < g->nextra; k++) {
        ir_sb_puts(o, "one grid per tile of ");
        caption_dim(o, shape, s, g->extra[k]);
        ir_sb_puts(o, "\n");
    }
    int32_t dr = ir_sharding_data_rank(s);
    for (int32_t k = dr; k < s->ntile; k++) {
        bool manual = s->subgroup && k - dr < s->nsubgroup && s->subgroup[k - dr] == SUBGROUP_MANUAL;
        ir_sb_printf(o, "each tile on %lld devices (%s)\n", (long long)s->tile[k],
                     manual ? "a manual subgroup: each keeps its own value" : "replicated");
    }
}

/* ---- text ---- */

/* Sizes of n tracks of extents e[] over about `budget` cells: each
 * rounded on its own (equal tiles get equal boxes, whatever the rounding
 * of their neighbours), at least min[k]. */
static void proportion(int64_t n, const int64_t *e, int64_t budget, const int32_t *min, int32_t *out)
{
    int64_t total = 0;
    for (int64_t k = 0; k < n; k++)
        total += e[k];
    for (int64_t k = 0; k < n; k++) {
        int64_t w = total > 0 ? (e[k] * budget * 2 + total) / (total * 2) : budget / n;
        out[k] = (int32_t)(w < min[k] ? min[k] : w);
    }
}

typedef struct Cell {
    char *label;
    int32_t nlines;
    char **line;    /* pieces of the label, each fitting the box */
    int64_t first;  /* first device, for the colour */
} Cell;

/* Break a label at commas into lines of at most w characters. */
static bool wrap(Cell *c, int32_t w)
{
    size_t n = strlen(c->label);
    c->line = ts_calloc(n + 1, sizeof *c->line);
    if (!c->line)
        return false;
    const char *p = c->label;
    while (*p) {
        size_t take = strlen(p);
        if ((int32_t)take > w) {
            /* the last comma within w (keep it on this line) */
            size_t cut = 0;
            for (size_t k = 0; k < (size_t)w && p[k]; k++)
                if (p[k] == ',')
                    cut = k + 1;
            take = cut ? cut : (size_t)w;
        }
        char *l = ts_malloc(take + 1);
        if (!l)
            return false;
        memcpy(l, p, take);
        l[take] = 0;
        c->line[c->nlines++] = l;
        p += take;
    }
    return true;
}

static void free_cells(Cell *cells, int64_t n)
{
    for (int64_t k = 0; cells && k < n; k++) {
        for (int32_t j = 0; j < cells[k].nlines; j++)
            ts_free(cells[k].line[j]);
        ts_free(cells[k].line);
        ts_free(cells[k].label);
    }
    ts_free(cells);
}

/* Pastel backgrounds (xterm-256 numbers) with black text. */
static const int PALETTE[] = {153, 151, 217, 223, 183, 229, 159, 194, 224, 189, 252, 216};
#define NPALETTE ((int64_t)(sizeof PALETTE / sizeof *PALETTE))

/* The junction or line character at a border crossing; up/down/left/right
 * say which of the four arms exist. */
static const char *junction(bool ascii, bool up, bool down, bool left, bool right)
{
    if (ascii)
        return (up || down) && (left || right) ? "+" : (up || down) ? "|" : "-";
    static const char *box[16] = {
        /* index: up<<3 | down<<2 | left<<1 | right */
        " ", "\u2500", "\u2500", "\u2500", "\u2502", "\u250c", "\u2510", "\u252c",
        "\u2502", "\u2514", "\u2518", "\u2534", "\u2502", "\u251c", "\u2524", "\u253c",
    };
    return box[(up << 3) | (down << 2) | (left << 1) | right];
}

static IrStatus grid_text_page(IrStrBuf *o, const GridView *g, const IrShape *shape, const IrSharding *s,
                               int64_t ndevices, int64_t page, unsigned flags)
{
    bool ascii = flags & GRID_ASCII, colour = flags & GRID_COLOUR;
    int64_t nr = g->nrows, nc = g->ncols, ncell = nr * nc;
    Cell *cells = ts_calloc((size_t)ncell, sizeof *cells);
    int64_t *dev = ts_malloc((size_t)(ndevices > 0 ? ndevices : 1) * sizeof(int64_t));
    int32_t *minw = ts_calloc((size_t)nc, sizeof(int32_t)), *w = ts_calloc((size_t)nc, sizeof(int32_t));
    int32_t *minh = ts_calloc((size_t)nr, sizeof(int32_t)), *h = ts_calloc((size_t)nr, sizeof(int32_t));
    IrStatus st = cells && dev && minw && w && minh && h ? IR_OK : IR_ENOMEM;
    /* Labels first: a box is at least as wide as its widest device id. */
    for (int64_t k = 0; st == IR_OK && k < ncell; k++) {
        int64_t n = grid_cell_devices(g, s, ndevices, page, k / nc, k % nc, dev, ndevices);
        cells[k].first = n > 0 ? dev[0] : 0;
        if (!(cells[k].label = grid_device_label(dev, n)))
            st = IR_ENOMEM;
        int32_t tok = 0, cur = 0;
        for (const char *p = cells[k].label; p && *p; p++) {
            cur = *p == ',' ? 0 : cur + 1;
            tok = cur > tok ? cur : tok;
        }
        int32_t need = tok + 2 > 3 ? tok + 2 : 3;
        minw[k % nc] = need > minw[k % nc] ? need : minw[k % nc];
    }
    if (st == IR_OK)
        proportion(nc, g->cext, GRID_WIDTH - (nc + 1), minw, w);
    int64_t width = 0;
    for (int64_t c = 0; st == IR_OK && c < nc; c++)
        width += w[c];
    for (int64_t k = 0; st == IR_OK && k < ncell; k++) {
        if (!wrap(&cells[k], w[k % nc] - 2))
            st = IR_ENOMEM;
        else
            minh[k / nc] = cells[k].nlines > minh[k / nc] ? cells[k].nlines : minh[k / nc];
    }
    if (st == IR_OK) {
        /* A terminal cell is about twice as tall as it is wide: a square
         * block of data is `width` columns by width/2 lines. */
        int64_t lines = nr;
        if (g->rowdim >= 0 && g->coldim >= 0 && shape->dims[g->coldim] > 0) {
            lines = width * shape->dims[g->rowdim] / shape->dims[g->coldim] / 2;
            lines = lines > GRID_MAX_LINES ? GRID_MAX_LINES : lines;
            lines = lines < nr ? nr : lines;
        }
        proportion(nr, g->rext, lines, minh, h);
    }
    if (st != IR_OK)
        goto done;
    if (g->npages > 1) {
        int64_t rest = page;
        ir_sb_puts(o, "tile");
        char sep = ' ';
        int64_t idx[IR_MAX_RANK];
        for (int32_t k = g->nextra - 1; k >= 0; k--) {
            int64_t t = data_tiles(s, g->extra[k]);
            idx[k] = rest % t;
            rest /= t;
        }
        for (int32_t k = 0; k < g->nextra; k++) {
            ir_sb_printf(o, "%c%lld of dim %d", sep, (long long)idx[k], (int)g->extra[k]);
            sep = ',';
        }
        ir_sb_puts(o, ":\n");
    }
    /* Row by row: a border line, then the interior lines of that row. */
    for (int64_t r = 0; r <= nr; r++) {
        for (int64_t c = 0; c <= nc; c++) {
            bool up = r > 0, down = r < nr, left = c > 0, right = c < nc;
            ir_sb_puts(o, junction(ascii, up, down, left, right));
            if (c < nc)
                for (int32_t x = 0; x < w[c]; x++)
                    ir_sb_puts(o, junction(ascii, false, false, true, true));
        }
        ir_sb_puts(o, "\n");
        if (r == nr)
            break;
        for (int32_t y = 0; y < h[r]; y++) {
            for (int64_t c = 0; c < nc; c++) {
                const Cell *cell = &cells[r * nc + c];
                ir_sb_puts(o, junction(ascii, true, true, false, false));
                int32_t top = (h[r] - cell->nlines) / 2;
                const char *text = y >= top && y - top < cell->nlines ? cell->line[y - top] : "";
                int32_t len = (int32_t)strlen(text), pad = (w[c] - len) / 2;
                if (colour)
                    ir_sb_printf(o, "\033[48;5;%dm\033[38;5;16m",
                                 PALETTE[(cell->first % NPALETTE + NPALETTE) % NPALETTE]);
                ir_sb_printf(o, "%*s%s%*s", pad, "", text, w[c] - len - pad, "");
                if (colour)
                    ir_sb_puts(o, "\033[0m");
            }
            ir_sb_printf(o, "%s\n", junction(ascii, true, true, false, false));
        }
    }
done:
    free_cells(cells, ncell);
    ts_free(dev);
    ts_free(minw);
    ts_free(w);
    ts_free(minh);
    ts_free(h);
    return st;
}

IrStatus grid_text(IrStrBuf *o, const char *title, const IrShape *shape, const IrSharding *s, int64_t ndevices,
                   unsigned flags)
{
    if (shape->type == IR_TUPLE) {
        for (int32_t k = 0; k < shape->ntuple; k++) {
            const IrSharding *ks = s && s->kind == SHD_TUPLE && k < s->ntuple ? &s->tuple[k] : s;
            char *t = ts_malloc(strlen(title) + 24);
            if (!t)
                return IR_ENOMEM;
            sprintf(t, "%s.%d", title, (int)k);
            IrStatus st = grid_text(o, t, &shape->tuple[k], ks, ndevices, flags);
            ts_free(t);
            if (st != IR_OK)
                return st;
        }
        return IR_OK;
    }
    GridView g;
    if (grid_view(shape, s, &g) != IR_OK)
        return IR_ENOMEM;
    char *sh = ir_shape_str(shape, false), *sd = s ? ir_sharding_str(s) : NULL;
    ir_sb_printf(o, "%s: %s %s\n", title, sh ? sh : "?", sd ? sd : "{replicated}");
    ts_free(sh);
    ts_free(sd);
    grid_caption(o, &g, shape, s, ndevices);
    IrStatus st = IR_OK;
    for (int64_t p = 0; st == IR_OK && p < g.npages; p++)
        st = grid_text_page(o, &g, shape, s, ndevices, p, flags);
    grid_view_free(&g);
    return st;
}

/* ---- names of a plan ---- */

/* The value `name` names in plan p: an input by name or as "input K", an
 * output as "output K", else (compiled plans) an instruction. */
static bool find_value(const DeviceLayout *p, bool has_src, const char *name, const IrShape **shape,
                       const IrSharding **s, const char **what)
{
    for (int32_t k = 0; k < p->ninputs; k++) {
        char alt[32];
        snprintf(alt, sizeof alt, "input %d", (int)p->inputs[k].index);
        if ((p->inputs[k].name && strcmp(p->inputs[k].name, name) == 0) || strcmp(alt, name) == 0) {
            *shape = &p->inputs[k].shape;
            *s = p->inputs[k].sharding;
            *what = "input";
            return true;
        }
    }
    for (int32_t k = 0; k < p->noutputs; k++) {
        char alt[32];
        snprintf(alt, sizeof alt, "output %d", (int)p->outputs[k].index);
        if (strcmp(alt, name) == 0) {
            *shape = &p->outputs[k].shape;
            *s = p->outputs[k].sharding;
            *what = "output";
            return true;
        }
    }
    for (int32_t k = 0; has_src && k < p->ninstrs; k++)
        if (strcmp(p->instrs[k].name, name) == 0) {
            *shape = &p->instrs[k].shape;
            *s = p->instrs[k].sharding;
            *what = p->instrs[k].opcode;
            return true;
        }
    return false;
}

static IrStatus show_one(IrStrBuf *o, const CompileResult *r, int32_t k, const char *name, unsigned flags,
                         bool *found)
{
    const DeviceLayout *p = r->layouts[k];
    const IrShape *shape;
    const IrSharding *s;
    const char *what;
    bool has_src = r->prog.cluster[k].src != NULL;
    if (!find_value(p, has_src, name, &shape, &s, &what))
        return IR_OK;
    *found = true;
    char title[512];
    if (r->prog.ncluster > 1)
        snprintf(title, sizeof title, "%s (%s, cluster %s)", name, what, p->cluster);
    else
        snprintf(title, sizeof title, "%s (%s)", name, what);
    if (o->n)
        ir_sb_puts(o, "\n");
    return grid_text(o, title, shape, s, p->num_partitions, flags);
}

char *compile_plan_show(const CompileResult *r, const char *name, unsigned flags, IrDiag *d)
{
    IrStrBuf o = {0};
    bool found = false, all = strcmp(name, "all") == 0;
    IrStatus st = IR_OK;
    for (int32_t k = 0; st == IR_OK && k < r->prog.ncluster; k++) {
        const DeviceLayout *p = r->layouts[k];
        if (!all) {
            st = show_one(&o, r, k, name, flags, &found);
            continue;
        }
        /* every input, then every output */
        for (int32_t j = 0; st == IR_OK && j < p->ninputs; j++) {
            char alt[32];
            snprintf(alt, sizeof alt, "input %d", (int)p->inputs[j].index);
            st = show_one(&o, r, k, p->inputs[j].name && *p->inputs[j].name ? p->inputs[j].name : alt, flags,
                          &found);
        }
        for (int32_t j = 0; st == IR_OK && j < p->noutputs; j++) {
            char alt[32];
            snprintf(alt, sizeof alt, "output %d", (int)p->outputs[j].index);
            st = show_one(&o, r, k, alt, flags, &found);
        }
    }
    if (st != IR_OK) {
        ir_sb_free(&o);
        ir_oom(d, NULL);
        return NULL;
    }
    if (!found) {
        ir_sb_free(&o);
        bool loaded = r->prog.ncluster > 0 && !r->prog.cluster[0].src;
        const char *near = compile_plan_nearest_name(r, name, false);
        ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                 "--show %s: no such %s (names: an instruction, an entry parameter, 'input K', 'output K', "
                 "or 'all')%s%s%s",
                 name, loaded ? "input or output in this plan file (a plan keeps the shardings of its inputs "
                                "and outputs only)"
                              : "instruction, input or output",
                 near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
        return NULL;
    }
    char *s = ir_sb_take(&o);
    if (!s)
        ir_oom(d, NULL);
    return s;
}
