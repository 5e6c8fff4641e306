/*
 * profile_stats.c: the statistics of `tessel profile`. A figure measured
 * on a loaded machine moves from run to run, so each is repeated and
 * reported as its median and interquartile range; a collective's alpha
 * and beta are the intercept and slope of the least-squares line through
 * its times at several sizes.
 */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted s[0..n), interpolated. */
static double quantile(const double *s, int n, double q)
{
    double at = q * (n - 1);
    int i = (int)at;
    return i + 1 < n ? s[i] + (at - i) * (s[i + 1] - s[i]) : s[n - 1];
}

ProfileFigure profile_figure(const double *v, int n)
{
    double s[PROFILE_MAX_REPEATS];
    n = n < PROFILE_MAX_REPEATS ? n : PROFILE_MAX_REPEATS;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, by_value);
    return (ProfileFigure){quantile(s, n, 0.25), quantile(s, n, 0.5), quantile(s, n, 0.75)};
}

bool profile_fit_line(const double *x, const double *y, int n, double *intercept, double *slope)
{
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) {
        mx += x[i] / n;
        my += y[i] / n;
    }
    double sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    if (!(sxx > 0))
        return false;
    *slope = sxy / sxx;
    *intercept = my - *slope * mx;
    return true;
}
