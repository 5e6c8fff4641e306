/*
 * view_html.c: the plan view as one self-contained HTML page: nothing is
 * fetched (a Content-Security-Policy forbids every source but the page's
 * own inline style and script), so the file can be mailed or attached to a
 * bug and opened anywhere.
 *
 * The page: the header (devices, hosts, islands), then per cluster the
 * graph (the SVG Graphviz drew from the DOT dump when the caller has one,
 * else a layered layout of tessel's own, drawn from the same DOT text so
 * that both show the same nodes and edges), the instructions with their
 * shardings and per-device shapes, the collectives with the bytes they
 * move, the reshards, the sharding grids of the inputs and outputs (CSS
 * grids in the proportions of view_grid.c), memory per device, and the
 * split and concat trees. Clicking a node of the graph shows its row of
 * the tables (and clicking a row shows its node).
 */
#include "compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text as HTML (element content and attribute values alike). */
static void esc(IrStrBuf *o, const char *s)
{
    for (; s && *s; s++)
        switch (*s) {
        case '<': ir_sb_puts(o, "&lt;"); break;
        case '>': ir_sb_puts(o, "&gt;"); break;
        case '&': ir_sb_puts(o, "&amp;"); break;
        case '"': ir_sb_puts(o, "&quot;"); break;
        default: ir_sb_putn(o, s, 1);
        }
}

void compile_html_esc(IrStrBuf *o, const char *s)
{
    esc(o, s);
}

static void esc_owned(IrStrBuf *o, char *s)
{
    esc(o, s ? s : "?");
    ts_free(s);
}

static const char STYLE[] =
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1.05em}"
    "table{border-collapse:collapse;font-family:monospace;font-size:12px;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}tr.sel td{background:#fff3b0}"
    ".graph{overflow:auto;border:1px solid #ddd;max-height:80vh;background:#fff}"
    ".graph g.node{cursor:pointer}.graph g.sel polygon,.graph g.sel rect,.graph g.sel ellipse{stroke:#d00;stroke-width:3}"
    ".grid{display:grid;gap:0;border:1px solid #333;width:420px;margin:.3em 0 1em}"
    ".grid div{border:1px solid #333;display:flex;align-items:center;justify-content:center;"
    "font-family:monospace;font-size:12px;overflow:hidden;min-height:1.4em}"
    ".caption{font-size:12px;color:#555;white-space:pre-line}"
    "ul.tree{font-family:monospace;font-size:12px}.fallback{color:#c00;font-weight:bold}"
    "#info{position:fixed;bottom:0;left:0;right:0;background:#222;color:#fff;padding:4px 10px;"
    "font-family:monospace;font-size:12px;display:none}";

/* Click a node: select its row (ids n-K-I -> row-K-I, c-K-J -> crow-K-J)
 * and say what it is; click a row: select its node. */
static const char SCRIPT[] =
    "(function(){'use strict';"
    "var info=document.getElementById('info');"
    "function clear(){document.querySelectorAll('.sel').forEach(function(e){e.classList.remove('sel');});}"
    "function rowFor(id){return document.getElementById(id.replace(/^n-/,'row-').replace(/^c-/,'crow-'));}"
    "function nodeFor(id){return document.getElementById(id.replace(/^row-/,'n-').replace(/^crow-/,'c-'));}"
    "document.querySelectorAll('.graph g.node').forEach(function(g){"
    "g.addEventListener('click',function(){clear();g.classList.add('sel');var r=rowFor(g.id);"
    "if(r){r.classList.add('sel');r.scrollIntoView({block:'center'});info.textContent=r.textContent.replace(/\\s+/g,' ');"
    "info.style.display='block';}});});"
    "document.querySelectorAll('tr[id]').forEach(function(r){"
    "r.addEventListener('click',function(){clear();r.classList.add('sel');var g=nodeFor(r.id);"
    "if(g){g.classList.add('sel');g.scrollIntoView({block:'center',inline:'center'});}});});"
    /* #select=ID clicks node ID once loaded (how the tests click). */
    "var h=location.hash;if(h.indexOf('#select=')===0){var t=document.getElementById(h.slice(8));"
    "if(t)t.dispatchEvent(new MouseEvent('click',{bubbles:true}));}"
    "document.body.setAttribute('data-ready','1');"
    "})();";

/* ---- tessel's own layout of the DOT text ---- */

typedef struct LNode {
    char name[32];           /* DOT node name */
    char id[48];             /* the SVG id (the id= attribute) */
    char fill[16];
    char *label;             /* lines separated by \n (heap) */
    bool octagon, plain;
    int32_t layer, order;
    double x, y, w, h;
} LNode;

typedef struct LEdge {
    int32_t from, to;
    bool dashed;
    char colour[16];
} LEdge;

typedef struct Layout {
    int32_t nnode, nedge;
    int64_t capn, cape;
    LNode *node;
    LEdge *edge;
} Layout;

static int32_t find_node(const Layout *l, const char *name, size_t n)
{
    for (int32_t k = 0; k < l->nnode; k++)
        if (strlen(l->node[k].name) == n && strncmp(l->node[k].name, name, n) == 0)
            return k;
    return -1;
}

/* The value of attribute `key="..."` in attrs (DOT escapes undone). */
static bool attr(const char *attrs, const char *key, char *out, size_t n)
{
    char pat[32];
    snprintf(pat, sizeof pat, "%s=\"", key);
    const char *p = attrs;
    while ((p = strstr(p, pat)) && p > attrs && p[-1] != ' ' && p[-1] != '[')
        p++;
    if (!p)
        return false;
    p += strlen(pat);
    size_t k = 0;
    for (; *p && *p != '"' && k + 1 < n; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            out[k++] = *p == 'n' ? '\n' : *p;
        } else {
            out[k++] = *p;
        }
    }
    out[k] = 0;
    return true;
}

/* Node and edge lines of our own DOT (compile_plan_dot writes one
 * statement a line: `NAME [attrs];` and `A -> B [attrs];`). */
static bool parse_dot(const char *dot, Layout *l)
{
    char *buf = ts_malloc(strlen(dot) + 1);
    if (!buf)
        return false;
    for (const char *line = dot; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        memcpy(buf, line, len);
        buf[len] = 0;
        line += len + (nl ? 1 : 0);
        char *s = buf;
        while (*s == ' ')
            s++;
        size_t nlen = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (nlen == 0 || nlen >= 32 || strncmp(s, "subgraph", 8) == 0 || strncmp(s, "node", nlen) == 0 ||
            strncmp(s, "edge", nlen) == 0 || strncmp(s, "digraph", 7) == 0)
            continue;
        char *rest = s + nlen;
        if (strncmp(rest, " -> ", 4) == 0) {
            char *b = rest + 4;
            size_t blen = strspn(b, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            int32_t f = find_node(l, s, nlen), t = find_node(l, b, blen);
            if (f < 0 || t < 0)
                continue;
            if (!IR_GROW(l->edge, l->cape, l->nedge + 1)) {
                ts_free(buf);
                return false;
            }
            LEdge *e = &l->edge[l->nedge++];
            *e = (LEdge){.from = f, .to = t, .dashed = strstr(b, "style=dashed") != NULL};
            if (!attr(b, "color", e->colour, sizeof e->colour))
                snprintf(e->colour, sizeof e->colour, "#555555");
            continue;
        }
        if (strncmp(rest, " [", 2) != 0)
            continue;
        if (!IR_GROW(l->node, l->capn, l->nnode + 1)) {
            ts_free(buf);
            return false;
        }
        LNode *n = &l->node[l->nnode];
        memset(n, 0, sizeof *n);
        memcpy(n->name, s, nlen);
        attr(rest, "id", n->id, sizeof n->id);
        if (!attr(rest, "fillcolor", n->fill, sizeof n->fill))
            snprintf(n->fill, sizeof n->fill, "#ffffff");
        n->octagon = strstr(rest, "shape=octagon") != NULL;
        n->plain = strstr(rest, "shape=plaintext") != NULL;
        size_t cap = strlen(rest) + 1;
        if (!(n->label = ts_malloc(cap))) {
            ts_free(buf);
            return false;
        }
        attr(rest, "label", n->label, cap);
        l->nnode++;
    }
    ts_free(buf);
    return true;
}

static void layout_free(Layout *l)
{
    for (int32_t k = 0; k < l->nnode; k++)
        ts_free(l->node[k].label);
    ts_free(l->node);
    ts_free(l->edge);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Layers by longest path from the sources (edges go down; dashed "calls"
 * edges are drawn but do not rank), order in a layer by the mean position
 * of the predecessors (one downward sweep), boxes sized to their labels. */
static bool place(Layout *l, double *width, double *height)
{
    int32_t n = l->nnode;
    for (int32_t pass = 0; pass < n + 1; pass++) {
        bool changed = false;
        for (int32_t e = 0; e < l->nedge; e++) {
            const LEdge *ed = &l->edge[e];
            if (ed->dashed)
                continue;
            if (l->node[ed->to].layer < l->node[ed->from].layer + 1 && l->node[ed->from].layer < n) {
                l->node[ed->to].layer = l->node[ed->from].layer + 1;
                changed = true;
            }
        }
        if (!changed)
            break;
    }
    int32_t nlayer = 0;
    for (int32_t k = 0; k < n; k++) {
        LNode *nd = &l->node[k];
        int32_t lines = 1, cur = 0, wmax = 0;
        for (const char *p = nd->label; *p; p++) {
            if (*p == '\n') {
                lines++;
                cur = 0;
            } else {
                cur++;
                wmax = cur > wmax ? cur : wmax;
            }
        }
        nd->w = wmax * 6.6 + 16;
        nd->h = lines * 13.0 + 10;
        nlayer = nd->layer + 1 > nlayer ? nd->layer + 1 : nlayer;
    }
    double *key = ts_calloc((size_t)(n > 0 ? n : 1), sizeof(double) * 2);
    if (!key)
        return false;
    double y = 20, wmax = 0;
    for (int32_t L = 0; L < nlayer; L++) {
        /* order: mean x of predecessors (already placed), else definition order */
        int32_t cnt = 0;
        for (int32_t k = 0; k < n; k++) {
            if (l->node[k].layer != L)
                continue;
            double sum = 0;
            int32_t np = 0;
            for (int32_t e = 0; e < l->nedge; e++)
                if (l->edge[e].to == k && l->node[l->edge[e].from].layer < L) {
                    sum += l->node[l->edge[e].from].x;
                    np++;
                }
            key[2 * cnt] = np ? sum / np + k * 1e-6 : 1e9 + k;
            key[2 * cnt + 1] = k;
            cnt++;
        }
        qsort(key, (size_t)cnt, sizeof(double) * 2, cmp_double);
        double x = 20, hmax = 0;
        for (int32_t q = 0; q < cnt; q++) {
            LNode *nd = &l->node[(int32_t)key[2 * q + 1]];
            nd->order = q;
            nd->x = x + nd->w / 2;
            nd->y = y;
            x += nd->w + 24;
            hmax = nd->h > hmax ? nd->h : hmax;
        }
        wmax = x > wmax ? x : wmax;
        y += hmax + 44;
    }
    ts_free(key);
    *width = wmax + 20;
    *height = y;
    return true;
}

static void own_svg(IrStrBuf *o, const char *dot)
{
    Layout l = {0};
    double w = 100, h = 100;
    if (!parse_dot(dot, &l) || !place(&l, &w, &h)) {
        layout_free(&l);
        ir_sb_puts(o, "<p>(out of memory while drawing the graph)</p>");
        return;
    }
    ir_sb_printf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n",
                 w, h, w, h);
    ir_sb_puts(o, "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" "
                  "markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"#555\"/></marker></defs>\n");
    for (int32_t e = 0; e < l.nedge; e++) {
        const LNode *a = &l.node[l.edge[e].from], *b = &l.node[l.edge[e].to];
        double x1 = a->x, y1 = a->y + a->h, x2 = b->x, y2 = b->y;
        ir_sb_printf(o, "<path class=\"edge\" d=\"M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"none\" "
                        "stroke=\"%s\"%s marker-end=\"url(#arrow)\"/>\n",
                     x1, y1, x1, (y1 + y2) / 2, x2, (y1 + y2) / 2, x2, y2, l.edge[e].colour,
                     l.edge[e].dashed ? " stroke-dasharray=\"5,3\"" : "");
    }
    for (int32_t k = 0; k < l.nnode; k++) {
        const LNode *nd = &l.node[k];
        ir_sb_puts(o, "<g class=\"node\" id=\"");
        esc(o, nd->id[0] ? nd->id : nd->name);
        ir_sb_puts(o, "\">");
        double x0 = nd->x - nd->w / 2, y0 = nd->y;
        if (nd->octagon) {
            double c = 8;
            ir_sb_printf(o, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f "
                            "%.1f,%.1f\" fill=\"%s\" stroke=\"#333\"/>",
                         x0 + c, y0, x0 + nd->w - c, y0, x0 + nd->w, y0 + c, x0 + nd->w, y0 + nd->h - c,
                         x0 + nd->w - c, y0 + nd->h, x0 + c, y0 + nd->h, x0, y0 + nd->h - c, x0, y0 + c, nd->fill);
        } else if (!nd->plain) {
            ir_sb_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"3\" fill=\"%s\" "
                            "stroke=\"%s\"/>",
                         x0, y0, nd->w, nd->h, nd->fill, strstr(nd->label, "[fallback") ? "#d00" : "#333");
        }
        ir_sb_printf(o, "<text x=\"%.1f\" y=\"%.1f\" font-family=\"monospace\" font-size=\"11\" "
                        "text-anchor=\"middle\">",
                     nd->x, y0 + 15);
        int32_t line = 0;
        for (const char *p = nd->label; *p || line == 0;) {
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            char *t = ts_malloc(len + 1);
            if (t) {
                memcpy(t, p, len);
                t[len] = 0;
                ir_sb_printf(o, "<tspan x=\"%.1f\" dy=\"%s\">", nd->x, line ? "13" : "0");
                esc(o, t);
                ir_sb_puts(o, "</tspan>");
                ts_free(t);
            }
            line++;
            p += len;
            if (!e)
                break;
            p++;
        }
        ir_sb_puts(o, "</text></g>\n");
    }
    ir_sb_puts(o, "</svg>\n");
    layout_free(&l);
}

/* Graphviz's SVG without its XML prologue and DOCTYPE (the page is HTML). */
static void graphviz_svg(IrStrBuf *o, const char *svg)
{
    const char *p = strstr(svg, "<svg");
    ir_sb_puts(o, p ? p : "<p>(the SVG from Graphviz has no &lt;svg&gt; element)</p>");
    ir_sb_puts(o, "\n");
}

/* ---- tables ---- */

static void site_text(IrStrBuf *o, const SpmdSite *s, const char *entry)
{
    if (!s->source) {
        ir_sb_puts(o, "-");
        return;
    }
    if (s->comp && strcmp(s->comp, entry) != 0) {
        ir_sb_puts(o, "in ");
        esc(o, s->comp);
        ir_sb_puts(o, ": ");
    }
    if (s->operand) {
        esc(o, s->operand);
        ir_sb_puts(o, " &rarr; ");
        esc(o, s->source);
    } else {
        esc(o, s->source);
        ir_sb_puts(o, s->output ? " &rarr; result" : "'s value");
    }
}

/* Devices a collective's groups name: the numbers in its groups text. */
static int64_t group_devices(const char *g)
{
    long long a = 0, b = 0;
    if (g && g[0] == '[' && sscanf(g, "[%lld,%lld]", &a, &b) == 2)
        return (int64_t)a * (int64_t)b; /* the iota form [G,S]<=...: G groups of S */
    int64_t n = 0;
    for (const char *p = g; p && *p; p++)
        if (*p >= '0' && *p <= '9' && (p == g || p[-1] < '0' || p[-1] > '9'))
            n++;
    return n;
}

/* The instructions; each sharding cell in its graph colour (pc, empty
 * for a loaded plan: no colour). */
static void instr_table(IrStrBuf *o, const DeviceLayout *p, int32_t k, const PlanColours *pc)
{
    ir_sb_puts(o, "<h3>Instructions</h3>\n<table class=\"instrs\"><tr><th>#</th><th>name</th><th>opcode</th>"
                  "<th>shape</th><th>sharding</th><th>per device</th><th></th></tr>\n");
    for (int32_t i = 0; i < p->ninstrs; i++) {
        const PlanInstr *pi = &p->instrs[i];
        ir_sb_printf(o, "<tr id=\"row-%d-%d\"><td>%d</td><td>", (int)k, (int)i, (int)i);
        esc(o, pi->name);
        ir_sb_puts(o, "</td><td>");
        esc(o, pi->opcode);
        ir_sb_puts(o, "</td><td>");
        esc_owned(o, ir_shape_str(&pi->shape, false));
        if (pc->n)
            ir_sb_printf(o, "</td><td style=\"background:%s\">", plan_colour(pc, pi->sharding));
        else
            ir_sb_puts(o, "</td><td>");
        esc_owned(o, ir_sharding_str(pi->sharding));
        ir_sb_puts(o, "</td><td>");
        esc_owned(o, ir_shape_str(&pi->device_shape, false));
        ir_sb_printf(o, "</td><td>%s</td></tr>\n", pi->fallback ? "<span class=\"fallback\">fallback</span>" : "");
    }
    ir_sb_puts(o, "</table>\n");
}

/* A collective's reason: who asked, where, the conflict, the way out. */
static void why_html(IrStrBuf *o, const SpmdCollective *c, const char *file)
{
    if (!c->why.text) {
        ir_sb_puts(o, "not recorded");
        return;
    }
    if (c->site.source) {
        ir_sb_puts(o, "<b>");
        esc(o, c->site.source);
        ir_sb_puts(o, "</b> at <code>");
        IrStrBuf pos = {0};
        compile_site_pos(&pos, &c->site, file);
        esc_owned(o, ir_sb_take(&pos));
        ir_sb_puts(o, "</code>: ");
    }
    esc(o, c->why.text);
    if (c->why.avoid) {
        ir_sb_puts(o, "<br><i>avoid:</i> ");
        esc(o, c->why.avoid);
    }
}

static void collective_table(IrStrBuf *o, const DeviceLayout *p, const SpmdReport *rep, int32_t k, const char *entry)
{
    ir_sb_puts(o, "<h3>Collectives</h3>\n");
    if (!rep || rep->ncoll == 0) {
        ir_sb_puts(o, "<p>None: no device sends anything to another.</p>\n");
        return;
    }
    int64_t total = 0;
    ir_sb_puts(o, "<table class=\"collectives\"><tr><th>name</th><th>kind</th><th>groups</th>"
                  "<th>bytes per device</th><th>bytes moved (all devices)</th><th>on the edge</th>"
                  "<th>why (asked for by, at, the conflict; how to avoid it)</th></tr>\n");
    for (int32_t j = 0; j < rep->ncoll; j++) {
        const SpmdCollective *c = &rep->coll[j];
        int64_t nd = group_devices(c->replica_groups);
        if (nd == 0)
            nd = p->num_partitions * p->num_replicas;
        total += c->bytes_per_device * nd;
        ir_sb_printf(o, "<tr id=\"crow-%d-%d\"><td>", (int)k, (int)j);
        esc(o, c->name);
        ir_sb_puts(o, "</td><td>");
        esc(o, ir_op_name(c->op));
        ir_sb_puts(o, "</td><td>");
        esc(o, c->replica_groups);
        ir_sb_printf(o, "</td><td>%lld</td><td>%lld</td><td>", (long long)c->bytes_per_device,
                     (long long)(c->bytes_per_device * nd));
        site_text(o, &c->site, entry);
        ir_sb_puts(o, "</td><td class=\"why\">");
        why_html(o, c, rep->file);
        ir_sb_puts(o, "</td></tr>\n");
    }
    ir_sb_printf(o, "</table>\n<p>%d collectives move %lld bytes in all.</p>\n", (int)rep->ncoll, (long long)total);
    if (rep->nreshard) {
        ir_sb_puts(o, "<h3>Reshards</h3>\n<table class=\"reshards\"><tr><th>edge</th><th>from</th><th>to</th></tr>\n");
        for (int32_t j = 0; j < rep->nreshard; j++) {
            ir_sb_puts(o, "<tr><td>");
            site_text(o, &rep->reshard[j].site, entry);
            ir_sb_puts(o, "</td><td>");
            esc(o, rep->reshard[j].from);
            ir_sb_puts(o, "</td><td>");
            esc(o, rep->reshard[j].to);
            ir_sb_puts(o, "</td></tr>\n");
        }
        ir_sb_puts(o, "</table>\n");
    }
}

/* Pastel backgrounds per first device (as the terminal grids). */
static const char *const CELL_COLOURS[] = {"#afd7ff", "#afd7af", "#ffafaf", "#ffd7af", "#d7afff", "#ffffaf",
                                           "#afffff", "#d7ffd7", "#ffd7d7", "#d7d7ff", "#d0d0d0", "#ffaf87"};

static void grid_html(IrStrBuf *o, const char *title, const IrShape *shape, const IrSharding *s, int64_t ndev)
{
    if (shape->type == IR_TUPLE) {
        for (int32_t k = 0; k < shape->ntuple; k++) {
            char t[256];
            snprintf(t, sizeof t, "%s.%d", title, (int)k);
            grid_html(o, t, &shape->tuple[k], s && s->kind == SHD_TUPLE && k < s->ntuple ? &s->tuple[k] : s, ndev);
        }
        return;
    }
    GridView g;
    int64_t *dev = ts_malloc((size_t)(ndev > 0 ? ndev : 1) * sizeof(int64_t));
    if (!dev || grid_view(shape, s, &g) != IR_OK) {
        ts_free(dev);
        ir_sb_puts(o, "<p>(out of memory)</p>");
        return;
    }
    ir_sb_puts(o, "<div class=\"gridbox\"><b>");
    esc(o, title);
    ir_sb_puts(o, "</b> ");
    esc_owned(o, ir_shape_str(shape, false));
    ir_sb_puts(o, " ");
    esc_owned(o, s ? ir_sharding_str(s) : NULL);
    IrStrBuf cap = {0};
    grid_caption(&cap, &g, shape, s, ndev);
    char *ct = ir_sb_take(&cap);
    ir_sb_puts(o, "<div class=\"caption\">");
    esc(o, ct);
    ts_free(ct);
    ir_sb_puts(o, "</div>\n");
    /* Height: the data's aspect (rows / columns), within 40..260 px. */
    double hpx = 40 * (double)g.nrows;
    if (g.rowdim >= 0 && g.coldim >= 0 && shape->dims[g.coldim] > 0)
        hpx = 420.0 * (double)shape->dims[g.rowdim] / (double)shape->dims[g.coldim];
    hpx = hpx < 28 * (double)g.nrows ? 28 * (double)g.nrows : hpx > 260 ? 260 : hpx;
    for (int64_t pg = 0; pg < g.npages; pg++) {
        ir_sb_printf(o, "<div class=\"grid\" style=\"height:%.0fpx;grid-template-columns:", hpx);
        for (int64_t c = 0; c < g.ncols; c++)
            ir_sb_printf(o, " minmax(1.6em,%lldfr)", (long long)(g.cext[c] > 0 ? g.cext[c] : 0));
        ir_sb_puts(o, ";grid-template-rows:");
        for (int64_t r = 0; r < g.nrows; r++)
            ir_sb_printf(o, " minmax(1.4em,%lldfr)", (long long)(g.rext[r] > 0 ? g.rext[r] : 0));
        ir_sb_puts(o, "\">");
        for (int64_t r = 0; r < g.nrows; r++)
            for (int64_t c = 0; c < g.ncols; c++) {
                int64_t n = grid_cell_devices(&g, s, ndev, pg, r, c, dev, ndev);
                char *label = grid_device_label(dev, n);
                int64_t ci = n > 0 ? dev[0] % 12 : 0;
                ir_sb_printf(o, "<div style=\"background:%s\" title=\"devices %s\">", CELL_COLOURS[ci < 0 ? 0 : ci],
                             label ? label : "");
                esc(o, label);
                ir_sb_puts(o, "</div>");
                ts_free(label);
            }
        ir_sb_puts(o, "</div>\n");
    }
    ir_sb_puts(o, "</div>\n");
    grid_view_free(&g);
    ts_free(dev);
}

static void tree_html_of(IrStrBuf *o, const PlanTree *t)
{
    if (!t)
        return;
    ir_sb_puts(o, "<li>");
    if (t->leaf) {
        /* digits, braces and brackets only: nothing to escape */
        compile_tree_leaf(o, t);
        ir_sb_puts(o, "</li>\n");
        return;
    }
    ir_sb_printf(o, "split dim %d into %lld<ul>\n", (int)t->dim, (long long)t->pieces);
    for (int64_t k = 0; k < t->pieces; k++)
        tree_html_of(o, &t->child[k]);
    ir_sb_puts(o, "</ul></li>\n");
}

/* A value's tree, built for the page alone (partition.h: plans keep none). */
static void tree_html(IrStrBuf *o, const PlanValue *v)
{
    IrArena *ta = ir_arena_new();
    tree_html_of(o, ta ? plan_split_tree(ta, &v->shape, v->sharding) : NULL);
    ir_arena_free(ta);
}

static void values_html(IrStrBuf *o, const DeviceLayout *p)
{
    int64_t ndev = p->num_partitions;
    ir_sb_puts(o, "<h3>Sharding grids</h3>\n");
    for (int32_t k = 0; k < p->ninputs; k++) {
        char t[256];
        snprintf(t, sizeof t, "input %d %s", (int)p->inputs[k].index, p->inputs[k].name ? p->inputs[k].name : "");
        grid_html(o, t, &p->inputs[k].shape, p->inputs[k].sharding, ndev);
    }
    for (int32_t k = 0; k < p->noutputs; k++) {
        char t[64];
        snprintf(t, sizeof t, "output %d", (int)p->outputs[k].index);
        grid_html(o, t, &p->outputs[k].shape, p->outputs[k].sharding, ndev);
    }
    ir_sb_puts(o, "<h3>Memory per device</h3>\n<table class=\"memory\"><tr><th>value</th><th>per device</th>"
                  "<th>bytes per device</th></tr>\n");
    int64_t in = 0;
    for (int32_t k = 0; k < p->ninputs; k++) {
        int64_t b = ir_shape_bytes(&p->inputs[k].device_shape);
        in += b > 0 ? b : 0;
        ir_sb_printf(o, "<tr><td>input %d ", (int)p->inputs[k].index);
        esc(o, p->inputs[k].name);
        ir_sb_puts(o, "</td><td>");
        esc_owned(o, ir_shape_str(&p->inputs[k].device_shape, false));
        ir_sb_printf(o, "</td><td>%lld</td></tr>\n", (long long)b);
    }
    for (int32_t k = 0; k < p->noutputs; k++) {
        int64_t b = ir_shape_bytes(&p->outputs[k].device_shape);
        ir_sb_printf(o, "<tr><td>output %d</td><td>", (int)p->outputs[k].index);
        esc_owned(o, ir_shape_str(&p->outputs[k].device_shape, false));
        ir_sb_printf(o, "</td><td>%lld</td></tr>\n", (long long)b);
    }
    ir_sb_printf(o, "<tr><th>inputs</th><td></td><td>%lld</td></tr><tr><th>peak (estimate)</th><td></td>"
                    "<td>%lld</td></tr></table>\n",
                 (long long)in, (long long)p->peak_bytes_per_device);
    ir_sb_puts(o, "<h3>Split and concat trees</h3>\n<ul class=\"tree\">\n");
    for (int32_t k = 0; k < p->ninputs; k++) {
        ir_sb_printf(o, "<li>input %d ", (int)p->inputs[k].index);
        esc(o, p->inputs[k].name);
        ir_sb_puts(o, " (split tree)<ul>\n");
        tree_html(o, &p->inputs[k]);
        ir_sb_puts(o, "</ul></li>\n");
    }
    for (int32_t k = 0; k < p->noutputs; k++) {
        ir_sb_printf(o, "<li>output %d (concat tree)<ul>\n", (int)p->outputs[k].index);
        tree_html(o, &p->outputs[k]);
        ir_sb_puts(o, "</ul></li>\n");
    }
    ir_sb_puts(o, "</ul>\n");
}

static void header_html(IrStrBuf *o, const CompileResult *r)
{
    const DeviceLayout *p = r->layouts[0];
    ir_sb_puts(o, "<h1>tessel plan: ");
    esc(o, p->module);
    ir_sb_printf(o, "</h1>\n<p>%lld partitions &times; %lld replicas on %lld hosts &times; %lld local devices; "
                    "%d device cluster%s%s.</p>\n",
                 (long long)p->num_partitions, (long long)p->num_replicas, (long long)p->hosts,
                 (long long)p->local_devices, (int)r->prog.ncluster, r->prog.ncluster == 1 ? "" : "s",
                 r->prog.host ? " called by a host program" : "");
    ir_sb_puts(o, "<table class=\"devices\"><tr><th>replica</th><th>partition</th><th>device</th><th>host</th></tr>\n");
    for (int64_t q = 0; q < p->num_replicas; q++)
        for (int64_t j = 0; j < p->num_partitions; j++) {
            int64_t dev = p->device_assignment[q * p->num_partitions + j];
            ir_sb_printf(o, "<tr><td>%lld</td><td>%lld</td><td>%lld</td><td>%lld</td></tr>\n", (long long)q,
                         (long long)j, (long long)dev, (long long)(dev / (p->local_devices > 0 ? p->local_devices : 1)));
        }
    ir_sb_puts(o, "</table>\n");
}

static void host_html(IrStrBuf *o, const CluResult *res)
{
    ir_sb_puts(o, "<h2>Host program</h2>\n<table class=\"host\"><tr><th>computation</th><th>instruction</th>"
                  "<th>kind</th></tr>\n");
    for (int32_t k = 0; k < res->nhost; k++) {
        ir_sb_puts(o, "<tr><td>");
        esc(o, res->host[k].comp);
        ir_sb_puts(o, "</td><td>");
        esc(o, res->host[k].name);
        ir_sb_puts(o, "</td><td>");
        esc(o, compile_place_name(res->host[k].place));
        ir_sb_puts(o, "</td></tr>\n");
    }
    ir_sb_puts(o, "</table>\n<h3>Values cut between host and devices</h3>\n<table class=\"cuts\"><tr><th>value</th>"
                  "<th>from</th><th>to</th><th>bytes</th></tr>\n");
    for (int32_t k = 0; k < res->ncuts; k++) {
        ir_sb_puts(o, "<tr><td>");
        esc(o, res->cuts[k].value);
        ir_sb_printf(o, "</td><td>%s %d</td><td>%s %d</td><td>%lld</td></tr>\n",
                     res->cuts[k].from < 0 ? "host" : "cluster", (int)res->cuts[k].from,
                     res->cuts[k].to < 0 ? "host" : "cluster", (int)res->cuts[k].to, (long long)res->cuts[k].bytes);
    }
    ir_sb_puts(o, "</table>\n");
}

/* The graph's colours and what each means (the table the DOT graph uses). */
static void legend_html(IrStrBuf *o, const PlanColours *c)
{
    if (c->n) {
        ir_sb_puts(o, "<h3>Colours</h3>\n<table class=\"legend\"><tr><th>colour</th><th>meaning</th>"
                      "<th>sharding (canonical form)</th></tr>\n");
        for (int32_t j = 0; j < c->n; j++) {
            ir_sb_printf(o, "<tr><td style=\"background:%s\">%s</td><td>", c->e[j].colour, c->e[j].colour);
            esc(o, c->e[j].words);
            ir_sb_puts(o, "</td><td><code>");
            esc(o, c->e[j].key);
            ir_sb_puts(o, "</code></td></tr>\n");
        }
        ir_sb_puts(o, "</table>\n");
    }
}

char *compile_plan_html(const CompileResult *r, const PlanView *v)
{
    IrStrBuf o = {0};
    const DeviceLayout *p0 = r->layouts[0];
    ir_sb_puts(&o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                   "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                   "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n<title>tessel plan: ");
    esc(&o, p0->module);
    ir_sb_printf(&o, "</title>\n<style>%s</style>\n</head><body>\n", STYLE);
    header_html(&o, r);
    ir_sb_puts(&o, "<h2>Graph</h2>\n<p class=\"caption\">Boxes are instructions (name, opcode, shape, per-device "
                   "shape, sharding; colour by what the sharding means, listed under Colours; red border: computed by the fallback), octagons the "
                   "collectives on the edges they serve, dashed orange edges reshards. Click a node to see its "
                   "row.</p>\n<div class=\"graph\" id=\"graph\">\n");
    if (v && v->graph_svg) {
        ir_sb_puts(&o, "<!-- drawn by Graphviz -->\n");
        graphviz_svg(&o, v->graph_svg);
    } else {
        char *dot = compile_plan_dot(r, v);
        ir_sb_puts(&o, "<!-- drawn by tessel's own layout (Graphviz's dot was not used) -->\n");
        if (dot)
            own_svg(&o, dot);
        ts_free(dot);
    }
    ir_sb_puts(&o, "</div>\n");
    PlanColours pc;
    if (!plan_colours_build(r, &pc)) {
        ir_sb_free(&o);
        return NULL;
    }
    legend_html(&o, &pc);
    for (int32_t k = 0; k < r->prog.ncluster; k++) {
        const DeviceLayout *p = r->layouts[k];
        const PlanCluster *c = &r->prog.cluster[k];
        ir_sb_printf(&o, "<h2 id=\"cluster-%d\">Cluster %d: ", (int)k, (int)k);
        esc(&o, p->cluster);
        ir_sb_printf(&o, "</h2>\n<p>peak memory per device (estimate): %lld bytes%s</p>\n",
                     (long long)p->peak_bytes_per_device,
                     c->src ? "" : "; loaded from a plan file: the instructions are the SPMD program's");
        instr_table(&o, p, k, &pc);
        const IrModule *m = c->src ? c->src : c->spmd;
        collective_table(&o, p, &c->report, k, ir_entry(m)->name);
        values_html(&o, p);
        compile_memory_html(&o, &p->memory);
    }
    plan_colours_free(&pc);
    if (r->prog.host)
        host_html(&o, &r->res);
    if (r->autoshard.explain) {
        ir_sb_puts(&o, "<h2 id=\"auto-shard\">Why these shardings (--auto-shard)</h2>\n<p class=\"caption\">"
                       "Each group of instructions that share one choice (a leader and the elementwise "
                       "instructions that follow it): the sharding chosen per tensor dim (mesh axes; '-': none; "
                       "+axis: replicated along it), its own estimated cost and that of its reshards, then the "
                       "alternatives, each with its cost and the difference (docs/auto-shard.md).</p>\n<pre>");
        esc(&o, r->autoshard.explain);
        ir_sb_puts(&o, "</pre>\n");
    }
    ir_sb_printf(&o, "<div id=\"info\"></div>\n<script>%s</script>\n</body></html>\n", SCRIPT);
    return ir_sb_take(&o);
}
