/*
 * config_events.c - the events section: which event types go out
 * (events.types), what happens when the backlog is full (events.when_full),
 * and the checks of the targets after the walk (events/events.h).
 */
#include <sys/socket.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "common/util.h"
#include "config/config.h"
#include "config/config_int.h"

const char *const config_event_types[CONFIG_EVENT_NTYPES] = {
    CONFIG_EVENT_TYPE_NAMES
};

static const char types_what[] = "a list of event types (reception, "
    "delivery, deferral, bounce, expiry, dsn, suspension, resumption)";


static int
config_event_type(const char *v)
{
    size_t i;

    for (i = 0; i < CONFIG_EVENT_NTYPES; i++)
        if (strcmp(v, config_event_types[i]) == 0)
            return (int)i;
    return -1;
}


/* events.types: a sequence of names, or one comma-separated string. */
static void
config_set_event_types(struct config_parse *p, const yaml_node_t *n,
    const char *path, unsigned *mask)
{
    char    ipath[CONFIG_PATH_MAX], one[32];
    unsigned m = 0;
    long    len, i;
    int     t;

    if (n->type == YAML_SCALAR_NODE) {
        const char *v = config_scalar(p, n, path, types_what), *s, *e;

        for (s = v; v != NULL && *s != '\0'; s = *e ? e + 1 : e) {
            e = s + strcspn(s, ",");
            while (s < e && (*s == ' ' || *s == '\t'))
                s++;
            if ((size_t)(e - s) >= sizeof(one) ||
                (memcpy(one, s, (size_t)(e - s)), one[e - s] = '\0',
                strtok(one, " \t") == NULL) ||
                (t = config_event_type(one)) < 0) {
                config_expected(p, n, path, types_what);
                return;
            }
            m |= 1u << t;
        }
        if (v != NULL)
            *mask = m;
        return;
    }
    if ((len = config_seq_len(p, n, path, types_what)) < 0)
        return;
    for (i = 0; i < len; i++) {
        yaml_node_t *it = config_item(p, n, i);
        const char  *v;

        config_ipath(ipath, sizeof(ipath), path, i);
        if (it == NULL ||
            (v = config_scalar(p, it, ipath, types_what)) == NULL)
            return;
        if ((t = config_event_type(v)) < 0) {
            config_expected(p, it, ipath, types_what);
            return;
        }
        m |= 1u << t;
    }
    *mask = m;
}


/* config_header_names_ok - "X-Msg-Id, X-Campaign": field names (RFC 5322
 * ftext: printable ASCII but ':'), at most CONFIG_EVENT_HEADERS. */
static int
config_header_names_ok(const char *s)
{
    size_t n = 0, len;

    while (*s != '\0') {
        s += strspn(s, " \t,");
        if ((len = strcspn(s, " \t,")) == 0)
            break;
        for (size_t i = 0; i < len; i++)
            if (s[i] <= 32 || s[i] >= 127 || s[i] == ':')
                return 0;
        if (len > 64 || ++n > CONFIG_EVENT_HEADERS)
            return 0;
        s += len;
    }
    return n > 0;
}


void
config_set_events(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    static const char *const full[] = { "drop_oldest", "backpressure" };
    void       *f = config_field(p, k);
    const char *v;
    size_t      i;

    if (k->type == CONFIG_EVTYPES) {
        config_set_event_types(p, n, path, f);
        return;
    }
    if (k->type == CONFIG_EVURL) {
        v = config_scalar(p, n, path, "an http:// or https:// URL");
        if (v != NULL && strncasecmp(v, "http://", 7) != 0 &&
            strncasecmp(v, "https://", 8) != 0)
            config_expected(p, n, path, "an http:// or https:// URL");
        else if (v != NULL)
            config_set_str(f, v);
        return;
    }
    if (k->type == CONFIG_EVADDR) {
        struct sockaddr_storage ss;
        socklen_t               len;

        v = config_scalar(p, n, path, "an address like \"127.0.0.1:6379\"");
        if (v != NULL && util_parse_hostport(v, &ss, &len) != 0)
            config_expected(p, n, path, "an address like \"127.0.0.1:6379\" "
                "or \"[::1]:6379\"");
        else if (v != NULL)
            config_set_str(f, v);
        return;
    }
    if (k->type == CONFIG_EVHEADERS) {
        v = config_scalar(p, n, path, "header field names like "
            "\"X-Msg-Id, X-Campaign\"");
        if (v != NULL && !config_header_names_ok(v))
            config_expected(p, n, path, "up to 8 header field names like "
                "\"X-Msg-Id, X-Campaign\"");
        else if (v != NULL)
            config_set_str(f, v);
        return;
    }
    if ((v = config_scalar(p, n, path, "drop_oldest or backpressure")) ==
        NULL)
        return;
    for (i = 0; i < ARRAY_LEN(full); i++)
        if (strcmp(v, full[i]) == 0) {
            *(int *)f = (int)i;
            return;
        }
    config_expected(p, n, path, "drop_oldest or backpressure");
}


void
config_show_events(FILE *f, const struct config_key *k, const void *at)
{
    unsigned m;
    size_t   i;
    int      first = 1;

    if (k->type == CONFIG_EVFULL) {
        fputs(*(const int *)at == CONFIG_EVENTS_BACKPRESSURE ?
            "backpressure" : "drop_oldest", f);
        return;
    }
    m = *(const unsigned *)at;
    fputc('[', f);
    for (i = 0; i < CONFIG_EVENT_NTYPES; i++) {
        if (!(m & (1u << i)))
            continue;
        fprintf(f, "%s%s", first ? "" : ", ", config_event_types[i]);
        first = 0;
    }
    fputc(']', f);
}


/* config_check_events - after the walk: one target at most. */
void
config_check_events(struct config_parse *p)
{
    struct config *cfg = p->cfg;

    if (cfg->events_http_url != NULL && cfg->events_redis_address != NULL)
        config_addf(p, NULL, "%s: events: give one target, events.http.url "
            "or events.redis.address, not both", p->file);
}
