/*
 * config_show.c - "mtad -n": the configuration in force, key by key, as
 * postconf -n / -d show Postfix's (config.h, config_show()).
 *
 * The walk is over config.c's key tables, the ones the parser uses, and
 * the value of each key is formatted by its type (a switch without a
 * default: a new type does not compile until it is shown here), so no
 * key can be left out.  Values are written so that relay.yaml takes them
 * back: sizes and durations in the largest unit that is exact, lists in
 * flow style, text quoted when YAML would read it otherwise.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "dkim/dkim.h"
#include "proxy/proxy.h"
#include "router/router.h"
#include "config/config.h"
#include "config/config_int.h"

/* config_show_str - s as a YAML scalar: plain when it is made of
 * characters YAML reads back as the same string (inside a flow list or
 * mapping, flow, no ':', '[' or ']' either), else double-quoted with '"',
 * '\' and control bytes escaped (what reaches a terminal is text). */
static void
config_show_flowstr(FILE *f, const char *s, int flow)
{
    const char *p;
    int         plain = s[0] != '\0' && s[0] != '-' && s[0] != '[' &&
        s[0] != '*';

    for (p = s; plain && *p != '\0'; p++)
        if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
            "0123456789._/@:+-*[]=", *p) == NULL ||
            (flow && strchr(":[]", *p) != NULL))
            plain = 0;
    if (plain && s[strlen(s) - 1] == ':')
        plain = 0;                  /* "mtad:" would read as a mapping */
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (p = s; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < ' ' || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}


static void
config_show_str(FILE *f, const char *s)
{
    config_show_flowstr(f, s, 0);
}


/* config_show_optstr - a string key; unset (NULL) is YAML's null. */
static void
config_show_optstr(FILE *f, const char *s)
{
    if (s == NULL)
        fputs("~", f);
    else
        config_show_str(f, s);
}


static void
config_show_size(FILE *f, uint64_t v)
{
    static const struct { char unit; uint64_t n; } units[] = {
        { 'G', 1024ull * 1024 * 1024 }, { 'M', 1024 * 1024 }, { 'K', 1024 },
    };
    size_t i;

    for (i = 0; i < ARRAY_LEN(units); i++)
        if (v >= units[i].n && v % units[i].n == 0) {
            fprintf(f, "%llu%c", (unsigned long long)(v / units[i].n),
                units[i].unit);
            return;
        }
    fprintf(f, "%llu", (unsigned long long)v);
}


static void
config_show_duration(FILE *f, uint64_t ms)
{
    static const struct { const char *unit; uint64_t ms; } units[] = {
        { "d", 86400000 }, { "h", 3600000 }, { "m", 60000 }, { "s", 1000 },
    };
    size_t i;

    if (ms == 0) {
        fputs("0s", f);
        return;
    }
    for (i = 0; i < ARRAY_LEN(units); i++)
        if (ms >= units[i].ms && ms % units[i].ms == 0) {
            fprintf(f, "%llu%s", (unsigned long long)(ms / units[i].ms),
                units[i].unit);
            return;
        }
    fprintf(f, "%llums", (unsigned long long)ms);
}


static void
config_show_cidrs(FILE *f, const struct cidr *c, size_t n)
{
    char   ip[INET6_ADDRSTRLEN], net[INET6_ADDRSTRLEN + 8];
    size_t i;

    fputc('[', f);
    for (i = 0; i < n; i++) {
        if (inet_ntop(c[i].family, c[i].addr, ip, sizeof(ip)) == NULL)
            snprintf(ip, sizeof(ip), "?");
        snprintf(net, sizeof(net), "%s/%u", ip, c[i].prefix);
        fputs(i ? ", " : "", f);
        config_show_flowstr(f, net, 1);
    }
    fputc(']', f);
}


/* config_show_listen - server.listen: the plain form for a plain entry,
 * the mapping for one with more than its address. */

/* a listener's milters, in flow style, every key shown */
static void
config_show_milters(FILE *f, const struct config_milter *m, size_t n)
{
    static const char *const steps[] = { "connect", "helo", "mail", "rcpt",
        "body", "headers", "eoh", NULL, NULL, "data" };
    size_t i, b;
    int    first;

    fputs(", milters: [", f);
    for (i = 0; i < n; i++) {
        fprintf(f, "%s{name: %s, socket: ", i ? ", " : "", m[i].name);
        config_show_flowstr(f, m[i].socket, 1);
        fputs(", timeouts: {connect: ", f);
        config_show_duration(f, m[i].connect_ms);
        fputs(", command: ", f);
        config_show_duration(f, m[i].command_ms);
        fputs(", eom: ", f);
        config_show_duration(f, m[i].eom_ms);
        fprintf(f, "}, default_action: %s, skip: [",
            m[i].default_accept ? "accept" : "tempfail");
        for (b = 0, first = 1; b < sizeof(steps) / sizeof(steps[0]); b++)
            if (steps[b] != NULL && (m[i].proto_off & (1u << b))) {
                fprintf(f, "%s%s", first ? "" : ", ", steps[b]);
                first = 0;
            }
        fputs("]}", f);
    }
    fputc(']', f);
}

static void
config_show_listen(FILE *f, const struct config *cfg)
{
    size_t i;

    fputc('[', f);
    for (i = 0; i < cfg->nlisten; i++) {
        const struct config_listen *l = &cfg->listen[i];

        fputs(i ? ", " : "", f);
        if (l->proxy == 0 && l->role == CONFIG_ROLE_MX && !l->tls_implicit &&
            l->pregreet_ms == 0 && !l->pregreet_multiline && !l->no_dnsbl &&
            !l->no_greylist && l->nmilters == 0) {
            config_show_flowstr(f, l->spec, 1);
            continue;
        }
        fputs("{address: ", f);
        config_show_flowstr(f, l->spec, 1);
        if (l->proxy != 0) {
            fprintf(f, ", proxy_protocol: %s, proxy_from: ",
                proxy_mode_name(l->proxy));
            config_show_cidrs(f, l->proxy_from, l->nproxy_from);
        }
        if (l->role == CONFIG_ROLE_SUBMISSION)
            fputs(", role: submission", f);
        if (l->tls_implicit)
            fputs(", tls: implicit", f);
        if (l->pregreet_ms != 0) {
            fputs(", pregreet: ", f);
            config_show_duration(f, l->pregreet_ms);
        }
        if (l->pregreet_multiline)
            fputs(", pregreet_multiline: true", f);
        if (l->no_dnsbl)
            fputs(", dnsbl: false", f);
        if (l->no_greylist)
            fputs(", greylist: false", f);
        if (l->nmilters > 0)
            config_show_milters(f, l->milters, l->nmilters);
        fputc('}', f);
    }
    fputc(']', f);
}


static void
config_show_strs(FILE *f, char *const *v, size_t n)
{
    size_t i;

    if (n == 0) {
        fputs("~", f);
        return;
    }
    if (n == 1) {
        config_show_str(f, v[0]);
        return;
    }
    fputc('[', f);
    for (i = 0; i < n; i++) {
        fputs(i ? ", " : "", f);
        config_show_flowstr(f, v[i], 1);
    }
    fputc(']', f);
}


static void
config_show_static(FILE *f, const struct config *cfg)
{
    size_t i;

    fputc('{', f);
    for (i = 0; i < cfg->nstatic_routes; i++) {
        fputs(i ? ", " : "", f);
        config_show_flowstr(f, cfg->static_routes[i].key, 1);
        fputs(": ", f);
        config_show_flowstr(f, cfg->static_routes[i].route, 1);
    }
    fputc('}', f);
}


static void
config_show_dkim(FILE *f, const struct config *cfg)
{
    size_t i;

    fputc('[', f);
    for (i = 0; i < cfg->ndkim_sign; i++) {
        const struct config_dkim_key *k = &cfg->dkim_sign[i];

        fputs(i ? ", " : "", f);
        fputs("{domain: ", f);
        config_show_flowstr(f, k->domain, 1);
        fputs(", selector: ", f);
        config_show_flowstr(f, k->selector, 1);
        fputs(", key_file: ", f);
        config_show_flowstr(f, k->key_file, 1);
        fprintf(f, ", algorithm: %s}", dkim_alg_name(k->algorithm));
    }
    fputc(']', f);
}


static void
config_show_dnsbl(FILE *f, const struct config *cfg)
{
    size_t i;

    fputc('[', f);
    for (i = 0; i < cfg->nscreen_dnsbl; i++) {
        const struct config_dnsbl *z = &cfg->screen_dnsbl[i];

        fputs(i ? ", {zone: " : "{zone: ", f);
        config_show_flowstr(f, z->zone, 1);
        fprintf(f, ", weight: %d", z->weight);
        if (z->match != NULL) {
            fputs(", match: ", f);
            config_show_flowstr(f, z->match, 1);
        }
        fputc('}', f);
    }
    fputc(']', f);
}


static const char *
config_show_level(int level)
{
    size_t i;

    for (i = 0; i < ARRAY_LEN(config_levels); i++)
        if (config_levels[i].level == level)
            return config_levels[i].name;
    return "?";
}


/* config_show_domains - a list of domains in flow style. */
static void
config_show_domains(FILE *f, const struct config_domains *d)
{
    size_t i;

    fputc('[', f);
    for (i = 0; i < d->n; i++) {
        fputs(i ? ", " : "", f);
        config_show_flowstr(f, d->v[i], 1);
    }
    fputc(']', f);
}


/* config_show_value - the value of key k of cfg, by its type. */
static void
config_show_value(FILE *f, const struct config *cfg,
    const struct config_key *k)
{
    static const char *const family[] = { "both", "ipv4", "ipv6" };
    const char *at = (const char *)cfg + k->off;
    uint32_t    load;
    int         i;
    size_t      n;

    switch (k->type) {
    case CONFIG_SECTION:
    case CONFIG_OPAQUE:
        break;                      /* walked by the caller */
    case CONFIG_STRING:
    case CONFIG_HOSTNAME:
    case CONFIG_ROUTE:
    case CONFIG_FALLBACK:
    case CONFIG_HOSTPORT:
        config_show_optstr(f, *(char *const *)(const void *)at);
        break;
    case CONFIG_INT:
    case CONFIG_WORKERS:
        fprintf(f, "%d", *(const int *)(const void *)at);
        break;
    case CONFIG_SIZE:
        config_show_size(f, *(const uint64_t *)(const void *)at);
        break;
    case CONFIG_DURATION:
        config_show_duration(f, *(const uint64_t *)(const void *)at);
        break;
    case CONFIG_BOOL:               /* as config_set_scalar_kind() stores it */
        fputs(*(const bool *)(const void *)at ? "true" : "false", f);
        break;
    case CONFIG_BARE_NL:
        fputs(*(const bool *)(const void *)at ? "accept" : "reject", f);
        break;
    case CONFIG_LOGLEVEL:
        fputs(config_show_level(*(const int *)(const void *)at), f);
        break;
    case CONFIG_LOGFMT:
        fputs(*(const int *)(const void *)at == LOG_FORMAT_JSON ? "json" :
            "text", f);
        break;
    case CONFIG_LISTEN:
        config_show_listen(f, cfg);
        break;
    case CONFIG_CIDRS:
        config_show_cidrs(f, cfg->allow_networks, cfg->nallow_networks);
        break;
    case CONFIG_DKIM_NETS:
        config_show_cidrs(f, cfg->dkim_sign_networks,
            cfg->ndkim_sign_networks);
        break;
    case CONFIG_METRICS_NETS:
        config_show_cidrs(f, cfg->metrics_allow, cfg->nmetrics_allow);
        break;
    case CONFIG_RETRY:
        fputc('[', f);
        for (n = 0; n < cfg->nretry; n++) {
            fputs(n ? ", " : "", f);
            config_show_duration(f, cfg->retry_ms[n]);
        }
        fputc(']', f);
        break;
    case CONFIG_STATIC:
        config_show_static(f, cfg);
        break;
    case CONFIG_TLSFILE:
        config_show_strs(f, (char *const *)(const void *)at, cfg->ntls_certs);
        break;
    case CONFIG_TLSVER:
        fputs(*(const int *)(const void *)at == CONFIG_TLS13 ? "TLSv1.3" :
            "TLSv1.2", f);
        break;
    case CONFIG_CLADDRS:
        config_show_optstr(f, *(char *const *)(const void *)at);
        break;
    case CONFIG_DNSSERVERS:
        config_show_optstr(f, cfg->dns_servers);
        break;
    case CONFIG_DNSFAMILY:
        i = *(const int *)(const void *)at;
        fputs(i >= 0 && (size_t)i < ARRAY_LEN(family) ? family[i] : "?", f);
        break;
    case CONFIG_DKIM_SIGN:
        config_show_dkim(f, cfg);
        break;
    case CONFIG_DNSBL:
        config_show_dnsbl(f, cfg);
        break;
    case CONFIG_EGRESS_SOURCES:
    case CONFIG_EGRESS_POOLS:
        config_show_egress(f, cfg, k->type == CONFIG_EGRESS_POOLS);
        break;
    case CONFIG_GREY_NETS:
        config_show_cidrs(f, cfg->grey_allow_networks,
            cfg->ngrey_allow_networks);
        break;
    case CONFIG_DOMAINS:
        config_show_domains(f, (const struct config_domains *)
            (const void *)at);
        break;
    case CONFIG_LOAD:
        load = *(const uint32_t *)(const void *)at;
        if (load % 100 == 0)
            fprintf(f, "%u", load / 100);
        else
            fprintf(f, "%u.%02u", load / 100, load % 100);
        break;
    case CONFIG_TLSLEVEL:
        fputs(router_tls_level_name(*(const int *)(const void *)at), f);
        break;
    case CONFIG_EVTYPES:
    case CONFIG_EVFULL:
        config_show_events(f, k, at);
        break;
    case CONFIG_EVURL:
    case CONFIG_EVHEADERS:
    case CONFIG_EVADDR:
        config_show_optstr(f, *(char *const *)(const void *)at);
        break;
    }
}


/* config_show_section - the keys of one table under prefix ("" at the
 * top), sections recursively. */
static void
config_show_section(FILE *f, const struct config *cfg,
    const struct config_key *keys, const char *prefix)
{
    char path[CONFIG_PATH_MAX], needle[CONFIG_PATH_MAX + 2];
    const struct config_key *k;

    for (k = keys; k->name != NULL; k++) {
        config_path(path, sizeof(path), prefix, k->name);
        if (k->type == CONFIG_SECTION) {
            config_show_section(f, cfg, k->sub, path);
            continue;
        }
        if (k->type == CONFIG_OPAQUE)
            continue;                   /* shown by its own module */
        fprintf(f, "%s: ", path);
        config_show_value(f, cfg, k);
        snprintf(needle, sizeof(needle), "\n%s\n", path);
        if (cfg->given == NULL || strstr(cfg->given, needle) == NULL)
            fputs("  # default", f);
        fputc('\n', f);
    }
}


int
config_show(const struct config *cfg, FILE *f)
{
    fprintf(f, "# mtad -n: the configuration in force, from ");
    config_show_str(f, cfg->path);
    fputc('\n', f);
    config_show_section(f, cfg, config_top, "");
    return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
