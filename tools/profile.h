/*
 * profile.h: the parts of `tessel profile` (cmd_profile.c measures, checks
 * and writes; docs/auto-shard.md, "Profile"):
 *
 *   profile_modules.c  the measuring programs' HLO text
 *   profile_stats.c    a figure's median and interquartile range over its
 *                      repeats, and the least-squares line alpha and beta
 *                      come from
 */
#ifndef TESSEL_PROFILE_H
#define TESSEL_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

/* Collective kinds, in the profile's order. */
enum { PROFILE_ALL_REDUCE, PROFILE_ALL_GATHER, PROFILE_REDUCE_SCATTER, PROFILE_ALL_TO_ALL, PROFILE_NKIND };

/* What one round of a work program does, on each device. */
typedef struct ProfileWork {
    int64_t dot;    /* a dot f32[dot,dot] x f32[dot,dot] */
    int64_t elems;  /* an add over f32[elems] of the dot's largest element */
    int kind;       /* then a collective of this kind ... */
    int64_t celems; /* ... over f32[celems] per device, of the add's largest element, */
    int every;      /* after every `every`-th round (1: each) */
} ProfileWork;

/* Rounds in each work program. */
#define PROFILE_ROUNDS 16

/* PROFILE_ROUNDS rounds of w over n devices, each (every w->every-th)
 * ending in the collective, which waits for every device's work and the
 * next round's work waits for it, as in a step. Heap text (free), NULL on
 * OOM. */
char *profile_work_module(const ProfileWork *w, int64_t n);

/* `count` collectives of `kind` back to back over n devices, each on
 * f32[elems] per device (the operand), each after the one before
 * (control-predecessors), with no work between them: what a collective
 * costs where nothing hides its latency. Heap text (free), NULL on OOM. */
char *profile_chain_module(int kind, int64_t elems, int count, int64_t n);

/* The most repeats a figure takes. */
#define PROFILE_MAX_REPEATS 32

/* A figure over its repeats: the median and the quartiles around it. */
typedef struct ProfileFigure {
    double lo, median, hi; /* first quartile, median, third quartile */
} ProfileFigure;

/* The figure of v[0..n) (1 <= n <= PROFILE_MAX_REPEATS; quartiles
 * interpolated between the sorted values). */
ProfileFigure profile_figure(const double *v, int n);

/* The least-squares line y = *intercept + *slope x through n points;
 * false where the x are all equal. */
bool profile_fit_line(const double *x, const double *y, int n, double *intercept, double *slope);

#endif
