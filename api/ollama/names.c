/* Ollama's model names, its timestamps and keep_alive values: what every endpoint of the room
 * checks or writes. */
#include "ollama-int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- names and times --------------------------------------------------------------------------
 */

/* A requested name matches the loaded model's id (as /v1/models gives it) when, ignoring case:
 * it is the id; or the id with the tag ":latest" (the name /api/tags lists); or "base:tag"
 * where the id is base and tag joined by '.', '-' or '_' (SmolLM2-135M-Instruct:Q4_1 for the
 * file SmolLM2-135M-Instruct.Q4_1.gguf). */
bool ebb__ollama_name_matches(const char *id, const char *name)
{
    if (!strcasecmp(name, id))
        return true;
    const char *colon = strrchr(name, ':');
    if (!colon)
        return false;
    size_t nb = (size_t)(colon - name), ni = strlen(id);
    const char *tag = colon + 1;
    if (!strcasecmp(tag, "latest"))
        return nb == ni && !strncasecmp(name, id, nb);
    return nb + 1 + strlen(tag) == ni && !strncasecmp(name, id, nb) && strchr(".-_", id[nb]) &&
           id[nb] && !strcasecmp(id + nb + 1, tag);
}

bool ebb__ollama_model_ok(struct ebb__req *r, json_t *o)
{
    json_t *m = json_object_get(o, "model");
    if (!json_is_string(m) || !json_string_length(m)) {
        ebb__reply_error(r, 400,
                         m && !json_is_null(m) ? "model must be a string" : "model is required",
                         "model", NULL);
        return false;
    }
    if (ebb__ollama_name_matches(r->sv->id, json_string_value(m)) ||
        (r->api->catalogue && ebb__served_named(r, json_string_value(m))))
        return true;
    char msg[300];
    snprintf(msg, sizeof(msg), "model '%.200s' not found", json_string_value(m));
    ebb__reply_error(r, 404, msg, "model", NULL);
    return false;
}

void ebb__ollama_time(char *out, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%09ldZ", day, ts.tv_nsec);
}

bool ebb__ollama_keep_alive_ok(json_t *v, char *msg, size_t cap)
{
    if (!v || json_is_null(v) || json_is_number(v))
        return true;
    if (json_is_string(v)) {
        /* A number of seconds ("-1", "300"), or Go's time.ParseDuration: an optional sign,
         * then numbers each with a unit ("5m", "1h30m"). */
        const char *s = json_string_value(v);
        char *end;
        strtod(s, &end);
        if (*s && !*end)
            return true;
        if (*s == '-' || *s == '+')
            s++;
        bool ok = *s != 0;
        while (ok && *s) {
            const char *d = s;
            while (isdigit((unsigned char)*s) || *s == '.')
                s++;
            static const char *const units[] = {"ns", "us", "\xc2\xb5s", "ms", "s", "m", "h"};
            size_t best = 0;
            for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
                size_t n = strlen(units[i]);
                if (n > best && !strncmp(s, units[i], n))
                    best = n;
            }
            ok = s > d && best > 0;
            s += best;
        }
        if (ok)
            return true;
    }
    snprintf(msg, cap,
             "keep_alive must be a duration (\"5m\", \"1h\", \"-1\") or a number of "
             "seconds");
    return false;
}
