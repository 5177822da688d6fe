/* One Go-style duration parser for the config file and request bodies (duration.h). */
#include "duration.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned unit;
    double secs;
} units_table[] = {
    {"ns", EBB_DURATION_NS, 1e-9},
    {"us", EBB_DURATION_US, 1e-6},
    {"\xc2\xb5s", EBB_DURATION_US, 1e-6},
    {"ms", EBB_DURATION_MS, 1e-3},
    {"s", EBB_DURATION_S, 1},
    {"m", EBB_DURATION_M, 60},
    {"h", EBB_DURATION_H, 3600},
};

bool ebb_duration_parse(const char *s, unsigned units, double *secs)
{
    char *end;
    if (!s || !*s)
        return false;
    double x = strtod(s, &end);
    if (!*end) {
        *secs = x;
        return true;
    }
    double sign = 1, total = 0;
    if (*s == '-' || *s == '+')
        sign = *s++ == '-' ? -1 : 1;
    if (!*s)
        return false;
    while (*s) {
        if (!isdigit((unsigned char)*s) && *s != '.')
            return false;
        x = strtod(s, &end);
        if (end == s)
            return false;
        s = end;
        size_t best = 0;
        double f = 0;
        for (size_t i = 0; i < sizeof(units_table) / sizeof(units_table[0]); i++) {
            size_t n = strlen(units_table[i].name);
            if ((units & units_table[i].unit) && n > best && !strncmp(s, units_table[i].name, n))
                best = n, f = units_table[i].secs;
        }
        if (!best)
            return false;
        s += best;
        total += x * f;
    }
    *secs = sign * total;
    return true;
}
