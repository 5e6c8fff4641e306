/*
 * stack_frames.c: where an instruction comes from in the program that
 * wrote the module. Newer XLA (JAX's compiled modules) prints four tables
 * after the header, kept raw in IrModule.stack_frames (parse_header.c
 * checks their form), and an instruction's metadata names a frame:
 *
 *   FileNames      1 "model.py"
 *   FunctionNames  1 "mlp"
 *   FileLocations  1 {file_name_id=1 function_name_id=1 line=6 end_line=6 column=37 end_column=37}
 *   StackFrames    1 {file_location_id=1 parent_frame_id=1}
 *   ... metadata={op_name="jit(mlp)/tanh" stack_frame_id=1}
 *
 * gives "model.py:6:37 in mlp": the innermost frame's file location. The
 * tables are read on demand (only when a diagnostic wants them), by a
 * small scanner over the kept text.
 */
#include "ir.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One row of a table: its id and the text after it ("..." or {...}). */
typedef struct Row {
    long long id;
    const char *s, *e;
} Row;

static const char *skip_blank(const char *p)
{
    while (*p && isspace((unsigned char)*p))
        p++;
    return p;
}

/* The end of a "..." or {...} value starting at p, or NULL. */
static const char *value_end(const char *p)
{
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1])
                p++;
        return *p ? p + 1 : NULL;
    }
    if (*p == '{') {
        int depth = 0;
        for (; *p; p++) {
            if (*p == '{')
                depth++;
            else if (*p == '}' && --depth == 0)
                return p + 1;
        }
    }
    return NULL;
}

/* Row `id` of table `name` in the kept text. */
static bool find_row(const char *text, const char *name, long long id, Row *out)
{
    size_t n = strlen(name);
    for (const char *p = skip_blank(text); *p;) {
        const char *w = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        bool mine = (size_t)(p - w) == n && memcmp(w, name, n) == 0;
        for (p = skip_blank(p); isdigit((unsigned char)*p); p = skip_blank(p)) {
            char *end = NULL;
            long long k = strtoll(p, &end, 10);
            const char *v = skip_blank(end), *ve = value_end(v);
            if (!ve)
                return false;
            if (mine && k == id) {
                *out = (Row){k, v, ve};
                return true;
            }
            p = ve;
        }
        if (mine)
            return false;
    }
    return false;
}

/* The integer after `key=` inside a {...} row; -1 when absent. */
static long long row_int(const Row *r, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = r->s; p + n < r->e; p++)
        if ((p[-1] == '{' || p[-1] == ' ') && memcmp(p, key, n) == 0 && p[n] == '=')
            return strtoll(p + n + 1, NULL, 10);
    return -1;
}

/* The stack_frame_id= of an instruction's metadata; -1 when none. */
static long long frame_of(const IrInstr *ins)
{
    const char *md = ins->a.metadata;
    const char *p = md ? strstr(md, "stack_frame_id=") : NULL;
    while (p && p != md && p[-1] != ' ' && p[-1] != '{')
        p = strstr(p + 1, "stack_frame_id=");
    return p ? strtoll(p + strlen("stack_frame_id="), NULL, 10) : -1;
}

bool ir_instr_origin(const IrModule *m, const IrInstr *ins, char *buf, size_t n)
{
    if (n > 0)
        buf[0] = '\0';
    long long frame = frame_of(ins);
    Row fr, loc, file, fn;
    if (!m->stack_frames || frame < 0 || !find_row(m->stack_frames, "StackFrames", frame, &fr) ||
        !find_row(m->stack_frames, "FileLocations", row_int(&fr, "file_location_id"), &loc) ||
        !find_row(m->stack_frames, "FileNames", row_int(&loc, "file_name_id"), &file) || file.s[0] != '"')
        return false;
    bool has_fn = find_row(m->stack_frames, "FunctionNames", row_int(&loc, "function_name_id"), &fn) &&
                  fn.s[0] == '"';
    snprintf(buf, n, "%.*s:%lld:%lld%s%.*s", (int)(file.e - file.s - 2), file.s + 1, row_int(&loc, "line"),
             row_int(&loc, "column"), has_fn ? " in " : "", has_fn ? (int)(fn.e - fn.s - 2) : 0,
             has_fn ? fn.s + 1 : "");
    return true;
}
