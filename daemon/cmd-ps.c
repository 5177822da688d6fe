/* `ebb ps`: asks a running ebb serve which models it has and which are loaded (GET
 * /models/status over plain HTTP on the configured host and port, with the configured API key),
 * and prints a table, or the JSON with --json. */
#include "cmds.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/ask.h"
#include "daemon/config.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ebb ps [--host ADDR] [--port PORT] [--api-key KEY] [--config FILE] "
               "[--json]\n\n"
               "Lists the models a running ebb serve has (all of them with several models, the\n"
               "one it serves otherwise): state, size, family, context, pinned, keep_alive, the\n"
               "requests on each now and the devices it runs on (a replica on each). Host, port\n"
               "and key default to the configuration's, as ebb serve reads it (a host of 0.0.0.0\n"
               "or :: is asked on the loopback address).\n"
               "exit status: 0 success, 1 no daemon answered or it refused, 2 usage error\n");
}

/* The devices of a model's replicas, "cl:0:0,cl:0:1" (the daemon's device when one). */
static void devices_of(json_t *m, char *buf, size_t n)
{
    size_t i, w = 0;
    json_t *r;
    buf[0] = 0;
    json_array_foreach(json_object_get(m, "replicas"), i, r)
    {
        const char *d = json_string_value(json_object_get(r, "device"));
        int k = snprintf(buf + w, n - w, "%s%s", i ? "," : "", d ? d : "?");
        if (k < 0 || (size_t)k >= n - w)
            break;
        w += (size_t)k;
    }
    if (!buf[0])
        snprintf(buf, n, "-");
}

static void print_table(json_t *o)
{
    printf("%-36s %-9s %9s %-10s %8s %-6s %10s %8s %s\n", "NAME", "STATE", "SIZE", "FAMILY",
           "CONTEXT", "PINNED", "KEEP_ALIVE", "REQUESTS", "DEVICES");
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(o, "data"), i, m)
    {
        double ka = json_number_value(json_object_get(m, "keep_alive"));
        char kas[32], devs[256];
        if (ka < 0)
            snprintf(kas, sizeof(kas), "forever");
        else
            snprintf(kas, sizeof(kas), "%gs", ka);
        devices_of(m, devs, sizeof(devs));
        printf("%-36s %-9s %8.0fM %-10s %8lld %-6s %10s %8lld %s\n",
               json_string_value(json_object_get(m, "id")),
               json_string_value(json_object_get(m, "state")),
               (double)json_integer_value(json_object_get(m, "size")) / (1 << 20),
               json_string_value(json_object_get(m, "family")),
               (long long)json_integer_value(json_object_get(m, "context")),
               json_is_true(json_object_get(m, "pinned")) ? "yes" : "no", kas,
               (long long)json_integer_value(json_object_get(m, "in_flight")), devs);
    }
}

int ebb_cmd_ps(int argc, char **argv)
{
    enum { O_HOST = 256, O_PORT, O_KEY, O_CONFIG, O_JSON };
    static const struct option longs[] = {{"host", required_argument, NULL, O_HOST},
                                          {"port", required_argument, NULL, O_PORT},
                                          {"api-key", required_argument, NULL, O_KEY},
                                          {"config", required_argument, NULL, O_CONFIG},
                                          {"json", no_argument, NULL, O_JSON},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *host = NULL, *port = NULL, *key = NULL, *config = NULL;
    bool json = false;
    int c, ret = 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case O_HOST:
            host = optarg;
            break;
        case O_PORT:
            port = optarg;
            break;
        case O_KEY:
            key = optarg;
            break;
        case O_CONFIG:
            config = optarg;
            break;
        case O_JSON:
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ebb ps: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    struct ebb_config cfg;
    struct ebb_diag d = {{0}};
    char *body = NULL;
    json_t *o = NULL;
    if (ebb_config_init(&cfg) || ebb_config_build(&cfg, config, NULL, 0, &d)) {
        fprintf(stderr, "ebb ps: %s\n", d.msg[0] ? d.msg : "out of memory");
        goto out;
    }
    unsigned p = port ? (unsigned)strtoul(port, NULL, 10) : 0;
    ebb__ask_address(&cfg, &host, &p, &key);
    int status = 0;
    body = ebb__ask(host, p, "GET", "/models/status", key, NULL, 10, &status);
    if (!body) {
        fprintf(stderr, "ebb ps: no ebb serve answered on %s port %u\n", host, p);
        goto out;
    }
    o = json_loads(body, 0, NULL);
    if (status != 200 || !json_is_object(o)) {
        json_t *e = json_object_get(json_object_get(o, "error"), "message");
        fprintf(stderr, "ebb ps: %s:%u answered %d%s%s\n", host, p, status, e ? ": " : "",
                e ? json_string_value(e) : "");
        goto out;
    }
    if (json)
        printf("%s\n", body);
    else
        print_table(o);
    ret = 0;
out:
    json_decref(o);
    free(body);
    ebb_config_fini(&cfg);
    return ret;
}
