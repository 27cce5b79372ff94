/*
 * route.c - "mtactl route ...": edit and inspect the routes table.
 *
 * PURPOSE   add, del, get, list, import, export, hash on cfg->routes_db.
 * CONTRACT  Opens the live LMDB file directly with router_open() (creating
 *           it if missing for add/import); LMDB serialises writers.  No
 *           worker maps that file (router/router.h, TRUST): after a change
 *           mtactl asks the running mtad ("routes") to publish a snapshot
 *           to its workers, which see it at their next lookup, so nothing
 *           is reloaded.  Every step on the file has a deadline
 *           (MTACTL_ROUTES_DB_S): a writer that holds the table (a stopped
 *           mtactl) cannot make this one hang.  list and export print keys in the table's sorted
 *           order; export prints "key route" lines that import reads back
 *           (export | import round-trips).  import checks every line first
 *           and then writes all of them in one transaction, or none;
 *           with --replace the old keys are deleted in the same
 *           transaction, so a lookup sees the old table or the new one.
 *           export is the same on every node holding the same table (its
 *           comment line names no path), and hash prints the SHA-256 of
 *           its route lines: "sha256:<hex> <n> routes".
 * FAILURE   Messages to stderr as "mtactl: route <cmd>: <why>"; returns
 *           MTACTL_OK (0), MTACTL_FAIL (1) or MTACTL_USAGE (2).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/ctl.h"
#include "common/ev.h"
#include "config/config.h"
#include "dns/dns.h"
#include "router/route.h"
#include "router/router.h"
#include "mtactl/mtactl.h"

struct route_line {
    char   *key;
    char   *value;
};

void
mtactl_route_help(void)
{
    printf(
"mtactl route add KEY ROUTE     add or replace a route (ROUTE may be several\n"
"                               words: reject:550 5.7.1 no such user)\n"
"mtactl route del KEY           delete a route\n"
"mtactl route get ADDRESS [--json]\n"
"                               show the route for ADDRESS and which key\n"
"                               matched (a bare DOMAIN is looked up as a\n"
"                               domain); for an MX route (mx, smtp:host)\n"
"                               also the MX hosts and addresses delivery\n"
"                               would use now, with TTLs (dns.* settings)\n"
"mtactl route list [--json]     every route, \"KEY<TAB>ROUTE\", sorted\n"
"  --json (get, list): one JSON object; get --json does no DNS\n"
"mtactl route import [--replace] FILE\n"
"                               add the \"KEY ROUTE\" lines of FILE ('-' =\n"
"                               stdin; '#' comments) in one transaction;\n"
"                               --replace also deletes every other key\n"
"mtactl route export            every route as \"KEY ROUTE\" lines, sorted\n"
"mtactl route hash              SHA-256 of the export's route lines, to\n"
"                               compare tables across nodes\n"
"  KEY:   user@domain | domain | .domain (its subdomains only)\n"
"  ROUTE: smtp:[host]:port (that host) | smtp:domain:port (the MX hosts\n"
"         of domain), comma-separated for fail-over (max 8; IPv6 as\n"
"         smtp:[::1]:25 or smtp:[IPv6:::1]:25; port 25 when left out) |\n"
"         mx (the MX of each recipient's domain) | maildir:/path | discard |\n"
"         reject:5xx 5.x.x text | defer:4xx 4.x.x text\n"
"  smtp: and mx may end in options: ' fallback=smtp:[h]:p,...' (the\n"
"  fallback relay of the route; fallback=none: none, not even\n"
"  delivery.fallback_relay)\n"
"  Lookup order: address, domain, .parent wildcards nearest first,\n"
"  then routes.default.  Changes apply at once; no reload needed.\n");
}


#define MTACTL_ROUTES_DB_S      60      /* one command's work on the file */
#define MTACTL_ROUTES_TELL_MS   10000   /* mtad publishing the snapshot */

/* mtactl_routes_alarm - the table was not done in time: say so, end. */
static void
mtactl_routes_alarm(int sig)
{
    static const char msg[] = "mtactl: routes db: not done within 60 s "
        "(is another writer holding it?); giving up, nothing committed\n";

    ssize_t n;

    (void)sig;
    n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)n;                        /* exiting either way */
    _exit(MTACTL_FAIL);
}


void
mtactl_routes_deadline(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = mtactl_routes_alarm;
    (void)sigaction(SIGALRM, &sa, NULL);
    alarm(MTACTL_ROUTES_DB_S);
}


int
mtactl_routes_publish(const struct config *cfg, const char *what)
{
    char   *reply = NULL;
    int     rc, e;

    rc = ctl_request(cfg->control_socket, "routes", MTACTL_ROUTES_TELL_MS,
        &reply);
    e = errno;
    if (rc == CTL_OK || (rc == CTL_ESYS && (e == ENOENT ||
        e == ECONNREFUSED))) {
        free(reply);                /* not running: read at its start */
        return MTACTL_OK;
    }
    fprintf(stderr, "mtactl: %s: changed, but the running mtad did not "
        "publish it to its workers (%s): %.*s\n", what, cfg->control_socket,
        (int)strcspn(rc == CTL_ESYS ? strerror(e) : reply != NULL ? reply :
        "no reply", "\n"), rc == CTL_ESYS ? strerror(e) : reply != NULL ?
        reply : "no reply");
    free(reply);
    return MTACTL_FAIL;
}


/* mtactl_route_open - the table from cfg; NULL after an error message. */
static struct router *
mtactl_route_open(const struct config *cfg, const char *cmd, int create)
{
    struct router *r = NULL;

    if (cfg == NULL) {
        fprintf(stderr, "mtactl: route %s: no configuration loaded\n", cmd);
        return NULL;
    }
    mtactl_routes_deadline();
    if (router_open(&r, cfg->routes_db, cfg->routes_default, create)
        != ROUTER_OK) {
        fprintf(stderr, "mtactl: route %s: %s\n", cmd, router_errstr(r));
        router_close(r);
        return NULL;
    }
    return r;
}


/* mtactl_route_lower - the key as stored (argv is ours to change). */
static const char *
mtactl_route_lower(char *key)
{
    route_key_normalize(key);
    return key;
}


static int
mtactl_route_add(struct router *r, const struct config *cfg, int argc,
    char **argv)
{
    char    value[ROUTE_VALUE_MAX + 2];
    size_t  len = 0, n;
    int     i;

    /* Join the words of ROUTE with single blanks so that an unquoted
     * "reject:550 5.7.1 no such user" works as typed. */
    value[0] = '\0';
    for (i = 3; i < argc; i++) {
        n = strlen(argv[i]);
        if (len + n + 1 >= sizeof(value)) {
            fprintf(stderr, "mtactl: route add: route too long (max %d "
                "bytes)\n", ROUTE_VALUE_MAX);
            return MTACTL_FAIL;
        }
        if (i > 3)
            value[len++] = ' ';
        memcpy(value + len, argv[i], n + 1);
        len += n;
    }
    if (router_put(r, argv[2], value) != ROUTER_OK) {
        fprintf(stderr, "mtactl: route add: %s\n", router_errstr(r));
        return MTACTL_FAIL;
    }
    printf("%s -> %s\n", mtactl_route_lower(argv[2]), value);
    mtactl_audit("route_add %s %s", argv[2], value);
    return mtactl_routes_publish(cfg, "route add");
}


/* One DNS lookup of "route get": what to print when it comes back. */
struct mtactl_dns_job {
    unsigned    port;
    int        *left;               /* lookups still running */
    int        *failed;
    struct ev_loop *loop;
};


/* mtactl_route_show - print a destination (names from DNS are escaped by
 * the parser as \DDD, so they are safe on a terminal). */
static void
mtactl_route_show(struct dns_dest *dest, void *arg)
{
    struct mtactl_dns_job *j = arg;
    char    a[INET6_ADDRSTRLEN];
    size_t  i, k;

    if (dest->implicit && dest->status == DNS_OK)
        printf("  %s: no MX; implicit MX: the domain's own addresses%s\n",
            dest->domain, dest->secure ? " (dnssec)" : "");
    else if (dest->status == DNS_OK)
        printf("  %s: MX ttl=%us%s\n", dest->domain, dest->ttl,
            dest->secure ? " (dnssec)" : "");
    else {
        printf("  %s: %s: %s\n", dest->domain,
            dns_status_name(dest->status), dest->why);
        *j->failed = 1;
    }
    if (strcmp(dest->name, dest->domain) != 0)
        printf("  %s: CNAME to %s\n", dest->domain, dest->name);
    for (i = 0; i < dest->nhost; i++) {
        const struct dns_host *h = &dest->host[i];

        if (h->naddr == 0)
            printf("    %u %s: no address (%s)\n", h->pref, h->name,
                dns_status_name(h->status));
        for (k = 0; k < h->naddr; k++) {
            dns_addr_str(&h->addr[k], a, sizeof(a));
            printf("    %u %s[%s]:%u ttl=%us%s\n", h->pref, h->name, a,
                j->port, h->ttl, h->secure ? " (dnssec)" : "");
        }
    }
    dns_dest_free(dest);
    if (--*j->left == 0)
        ev_stop(j->loop);
}


/* mtactl_route_dns_options - dns.* of relay.yaml as dns.h options. */
void
mtactl_route_dns_options(const struct config *cfg, struct dns_options *o)
{
    dns_options_default(o);
    o->servers = cfg->dns_servers;
    o->timeout_ms = (unsigned)cfg->dns_timeout_ms;
    o->attempts = (unsigned)cfg->dns_attempts;
    o->min_ttl = (uint32_t)(cfg->dns_min_ttl_ms / 1000);
    o->max_ttl = (uint32_t)(cfg->dns_max_ttl_ms / 1000);
    o->cache_max = (size_t)cfg->dns_cache_size;
    o->family = (enum dns_family)cfg->dns_address_family;
    o->prefer = (enum dns_family)cfg->dns_prefer;
    o->address_limit = (size_t)cfg->dns_address_limit;
}


/* mtactl_route_needs_dns - an MX lookup, or a bracketed host name. */
static int
mtactl_route_needs_dns(const struct route_host *h)
{
    struct in6_addr a6;
    struct in_addr  a4;

    if (route_host_mx(h))
        return 1;
    return inet_pton(AF_INET, h->name, &a4) != 1 &&
        inet_pton(AF_INET6, h->name, &a6) != 1;
}


/*
 * mtactl_route_resolve - for an MX route, the hosts and addresses
 * delivery would use now, resolved as the workers do (dns.h, an ev loop
 * of our own).  MTACTL_FAIL when a lookup did not give addresses.
 */
static int
mtactl_route_resolve(const struct config *cfg, const char *addr,
    const char *value)
{
    struct mtactl_dns_job jobs[ROUTE_MAX_HOSTS];
    struct dns_options o;
    struct ev_loop *loop;
    struct route rt;
    struct dns *d = NULL;
    const char *at;
    char    why[512];
    size_t  i;
    int     left = 0, failed = 0, rc;

    if (route_parse(value, &rt, why, sizeof(why)) != 0)
        return MTACTL_OK;           /* printed as stored; nothing to resolve */
    if (rt.kind == ROUTE_SMTP) {
        for (i = 0; i < rt.nhosts; i++)
            if (mtactl_route_needs_dns(&rt.hosts[i]))
                break;
        if (i == rt.nhosts)
            return MTACTL_OK;       /* only addresses */
    } else if (rt.kind != ROUTE_MX)
        return MTACTL_OK;
    if ((loop = ev_new()) == NULL) {
        fprintf(stderr, "mtactl: route get: event loop: %s\n",
            strerror(errno));
        return MTACTL_FAIL;
    }
    mtactl_route_dns_options(cfg, &o);
    if (dns_new(&d, loop, &o, why, sizeof(why)) != 0) {
        fprintf(stderr, "mtactl: route get: %s\n", why);
        ev_free(loop);
        return MTACTL_FAIL;
    }
    if (rt.kind == ROUTE_MX) {
        at = strrchr(addr, '@');
        at = at != NULL ? at + 1 : addr;
        jobs[0] = (struct mtactl_dns_job){ 25, &left, &failed, loop };
        left = 1;
        if ((rc = dns_mx(d, at, mtactl_route_show, &jobs[0], NULL)) != 0) {
            printf("  %s: not a domain name that can be looked up (%s)\n",
                at, dns_strerror(rc));
            failed = 1;
            left = 0;
        }
    } else
        for (i = 0; i < rt.nhosts; i++) {
            const struct route_host *h = &rt.hosts[i];

            if (!mtactl_route_needs_dns(h))
                continue;           /* an address: shown in the route */
            jobs[i] = (struct mtactl_dns_job){ h->port, &left, &failed, loop };
            left++;
            rc = route_host_mx(h) ? dns_mx(d, h->name, mtactl_route_show,
                &jobs[i], NULL) : dns_host(d, h->name, mtactl_route_show,
                &jobs[i], NULL);
            if (rc != 0) {
                printf("  %s: cannot be looked up (%s)\n", h->name,
                    dns_strerror(rc));
                failed = 1;
                left--;
            }
        }
    if (left > 0)
        ev_run(loop);
    dns_free(d);
    ev_free(loop);
    return failed ? MTACTL_FAIL : MTACTL_OK;
}


/* mtactl_route_get_json - route get --json: the lookup only (no DNS):
 * {"address", "route" (null: none), "match" (address, domain, wildcard,
 * default), "key" (the key that matched; null for the default)}. */
static int
mtactl_route_get_json(const char *arg, int rc,
    const struct router_result *res)
{
    static const char *name[] = {
        [ROUTER_MATCH_ADDRESS] = "address", [ROUTER_MATCH_DOMAIN] = "domain",
        [ROUTER_MATCH_WILDCARD] = "wildcard",
        [ROUTER_MATCH_DEFAULT] = "default",
    };

    fputs("{\"address\":", stdout);
    queue_json_str(arg);
    fputs(",\"route\":", stdout);
    queue_json_str(rc == ROUTER_OK ? res->value : NULL);
    fputs(",\"match\":", stdout);
    queue_json_str(rc == ROUTER_OK ? name[res->match] : NULL);
    fputs(",\"key\":", stdout);
    queue_json_str(rc == ROUTER_OK && res->match != ROUTER_MATCH_DEFAULT ?
        res->key : NULL);
    fputs("}\n", stdout);
    return rc == ROUTER_OK ? MTACTL_OK : MTACTL_FAIL;
}


static int
mtactl_route_get(struct router *r, const struct config *cfg, const char *arg,
    int json)
{
    static const char *why[] = {
        [ROUTER_MATCH_ADDRESS] = "address", [ROUTER_MATCH_DOMAIN] = "domain",
        [ROUTER_MATCH_WILDCARD] = "wildcard",
    };
    struct router_result res;
    char    addr[1024];
    int     rc;

    /* A bare domain ("example.org") is looked up as "@example.org": no
     * address key can match it, so the domain and its parents decide. */
    if (strchr(arg, '@') == NULL && arg[0] != '\0')
        snprintf(addr, sizeof(addr), "@%s", arg);
    else
        snprintf(addr, sizeof(addr), "%s", arg);
    rc = router_lookup(r, addr, &res);
    if (json && (rc == ROUTER_OK || rc == ROUTER_ENOTFOUND))
        return mtactl_route_get_json(arg, rc, &res);
    if (rc == ROUTER_ENOTFOUND) {
        printf("%s -> no route (no key matched and no routes.default)\n",
            arg);
        return MTACTL_FAIL;
    }
    if (rc != ROUTER_OK) {
        fprintf(stderr, "mtactl: route get: %s\n", router_errstr(r));
        return MTACTL_FAIL;
    }
    if (res.match == ROUTER_MATCH_DEFAULT)
        printf("%s -> %s (no key matched; routes.default)\n", arg,
            res.value);
    else
        printf("%s -> %s (matched %s key '%s')\n", arg, res.value,
            why[res.match], res.key);
    fflush(stdout);
    return mtactl_route_resolve(cfg, addr[0] == '@' ? addr + 1 : addr,
        res.value);
}


/* mtactl_route_print - router_each callback; arg is the separator, or
 * NULL for JSON (route list --json: {"routes":[{"key","route"},...]}). */
static int
mtactl_route_print(const char *key, const char *value, void *arg)
{
    static int first = 1;

    if (arg != NULL)
        printf("%s%s%s\n", key, (const char *)arg, value);
    else {
        fputs(first ? "{\"key\":" : ",{\"key\":", stdout);
        queue_json_str(key);
        fputs(",\"route\":", stdout);
        queue_json_str(value);
        putchar('}');
        first = 0;
    }
    return ferror(stdout) ? 1 : 0;
}


static int
mtactl_route_list(struct router *r, const char *cmd, const char *sep)
{
    if (sep == NULL)
        fputs("{\"routes\":[", stdout);
    if (router_each(r, mtactl_route_print, (void *)sep) != ROUTER_OK) {
        fprintf(stderr, "mtactl: route %s: %s\n", cmd, router_errstr(r));
        return MTACTL_FAIL;
    }
    if (sep == NULL)
        fputs("]}\n", stdout);
    if (fflush(stdout) == EOF || ferror(stdout)) {
        fprintf(stderr, "mtactl: route %s: stdout: %s\n", cmd,
            strerror(errno));
        return MTACTL_FAIL;
    }
    return MTACTL_OK;
}


/* mtactl_route_read - every entry of FILE into *linesp (owned strings);
 * the number of errors printed, or -1 when FILE cannot be read. */
static int
mtactl_route_read(const char *file, struct route_line **linesp, size_t *np)
{
    struct route_line *lines = NULL, ent;
    size_t  n = 0, cap = 0, lineno = 0, bufsz = 0;
    ssize_t got;
    char   *buf = NULL, why[512];
    FILE   *fp;
    int     errs = 0, rc;

    fp = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
    if (fp == NULL) {
        fprintf(stderr, "mtactl: route import: %s: %s\n", file,
            strerror(errno));
        return -1;
    }
    while ((got = getline(&buf, &bufsz, fp)) != -1) {
        lineno++;
        rc = route_line_parse(buf, (size_t)got, &ent.key, &ent.value, why,
            sizeof(why));
        if (rc == -1) {
            fprintf(stderr, "mtactl: route import: %s:%zu: %s\n", file,
                lineno, why);
            errs++;
            continue;
        }
        if (rc == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            if ((lines = realloc(lines, cap * sizeof(*lines))) == NULL) {
                fprintf(stderr, "mtactl: route import: out of memory\n");
                exit(MTACTL_FAIL);
            }
        }
        if ((lines[n].key = strdup(ent.key)) == NULL ||
            (lines[n].value = strdup(ent.value)) == NULL) {
            fprintf(stderr, "mtactl: route import: out of memory\n");
            exit(MTACTL_FAIL);
        }
        n++;
    }
    if (ferror(fp)) {
        fprintf(stderr, "mtactl: route import: %s: %s\n", file,
            strerror(errno));
        errs++;
    }
    free(buf);
    if (fp != stdin)
        fclose(fp);
    *linesp = lines;
    *np = n;
    return errs;
}


static void
mtactl_route_free(struct route_line *lines, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        free(lines[i].key);
        free(lines[i].value);
    }
    free(lines);
}


static int
mtactl_route_import(const struct config *cfg, const char *file, int replace)
{
    struct route_line *lines = NULL;
    struct router *r;
    size_t  n = 0, i;
    int     errs, rc = MTACTL_FAIL;

    if ((errs = mtactl_route_read(file, &lines, &n)) != 0) {
        if (errs > 0)
            fprintf(stderr, "mtactl: route import: %d bad line%s in %s; "
                "nothing imported\n", errs, errs == 1 ? "" : "s", file);
        mtactl_route_free(lines, n);
        return MTACTL_FAIL;
    }
    if ((r = mtactl_route_open(cfg, "import", 1)) == NULL)
        goto out;
    if (router_begin(r) != ROUTER_OK)
        goto fail;
    if (replace && router_clear(r) != ROUTER_OK)
        goto fail;
    for (i = 0; i < n; i++)         /* a later line replaces an earlier one */
        if (router_put(r, lines[i].key, lines[i].value) != ROUTER_OK)
            goto fail;
    if (router_commit(r) != ROUTER_OK)
        goto fail;
    printf("imported %zu route%s from %s%s\n", n, n == 1 ? "" : "s", file,
        replace ? " (replacing the table)" : "");
    mtactl_audit("route_import %s: %zu routes%s", file, n,
        replace ? " (replacing the table)" : "");
    rc = mtactl_routes_publish(cfg, "route import");
    goto close;
fail:
    fprintf(stderr, "mtactl: route import: %s; nothing imported\n",
        router_errstr(r));
    router_abort(r);
close:
    router_close(r);
out:
    mtactl_route_free(lines, n);
    return rc;
}


/* One export line into the digest: "key route\n", as export prints it. */
static int
mtactl_route_hash_line(const char *key, const char *value, void *arg)
{
    EVP_MD_CTX **ctx = arg;

    if (EVP_DigestUpdate(ctx[0], key, strlen(key)) != 1 ||
        EVP_DigestUpdate(ctx[0], " ", 1) != 1 ||
        EVP_DigestUpdate(ctx[0], value, strlen(value)) != 1 ||
        EVP_DigestUpdate(ctx[0], "\n", 1) != 1)
        return -1;
    (*(size_t *)ctx[1])++;
    return 0;
}


/* mtactl_route_hash - "sha256:<hex> N routes": equal on two nodes exactly
 * when `mtactl route export` prints the same lines (= sed 1d | sha256sum). */
static int
mtactl_route_hash(struct router *r)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int  mdlen = 0, i;
    size_t        n = 0;
    void         *arg[2];
    EVP_MD_CTX   *ctx = EVP_MD_CTX_new();
    int           rc;

    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        fprintf(stderr, "mtactl: route hash: cannot start SHA-256\n");
        EVP_MD_CTX_free(ctx);
        return MTACTL_FAIL;
    }
    arg[0] = ctx;
    arg[1] = &n;
    rc = router_each(r, mtactl_route_hash_line, arg);
    if (rc != ROUTER_OK || EVP_DigestFinal_ex(ctx, md, &mdlen) != 1) {
        fprintf(stderr, "mtactl: route hash: %s\n", rc != ROUTER_OK ?
            router_errstr(r) : "SHA-256 failed");
        EVP_MD_CTX_free(ctx);
        return MTACTL_FAIL;
    }
    EVP_MD_CTX_free(ctx);
    printf("sha256:");
    for (i = 0; i < mdlen; i++)
        printf("%02x", md[i]);
    printf(" %zu route%s\n", n, n == 1 ? "" : "s");
    return MTACTL_OK;
}


/* mtactl_route_usage - a usage error: the one-line hint and exit 2. */
static int
mtactl_route_usage(const char *msg)
{
    fprintf(stderr, "mtactl: route: %s\n"
        "usage: mtactl route add KEY ROUTE | del KEY | get ADDRESS | list |\n"
        "       import [--replace] FILE | export | hash\n"
        "       (mtactl route help)\n",
        msg);
    return MTACTL_USAGE;
}


int
mtactl_route(int argc, char **argv, const struct config *cfg)
{
    struct router *r;
    const char *cmd;
    int         rc, json = 0;

    if (argc < 2)
        return mtactl_route_usage("missing command");
    cmd = argv[1];
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "--help") == 0) {
        mtactl_route_help();
        return MTACTL_OK;
    }
    if (strcmp(cmd, "add") == 0) {
        if (argc < 4)
            return mtactl_route_usage("add needs KEY and ROUTE");
    } else if (strcmp(cmd, "get") == 0 || strcmp(cmd, "list") == 0) {
        json = argc >= 3 && strcmp(argv[argc - 1], "--json") == 0;
        if (argc - json != (strcmp(cmd, "get") == 0 ? 3 : 2))
            return mtactl_route_usage(strcmp(cmd, "get") == 0 ?
                "get needs exactly one ADDRESS (and --json)" :
                "list takes no arguments but --json");
    } else if (strcmp(cmd, "del") == 0) {
        if (argc != 3)
            return mtactl_route_usage("del needs exactly one KEY");
    } else if (strcmp(cmd, "export") == 0 || strcmp(cmd, "hash") == 0) {
        if (argc != 2)
            return mtactl_route_usage("export and hash take no "
                "arguments");
    } else if (strcmp(cmd, "import") == 0) {
        if (argc == 4 && strcmp(argv[2], "--replace") == 0)
            return mtactl_route_import(cfg, argv[3], 1);
        if (argc != 3 || argv[2][0] == '\0' || (argv[2][0] == '-' &&
            argv[2][1] != '\0'))
            return mtactl_route_usage("import needs one FILE (or '-')");
        return mtactl_route_import(cfg, argv[2], 0);
    } else {
        char msg[128];

        snprintf(msg, sizeof(msg), "unknown command '%.40s'", cmd);
        return mtactl_route_usage(msg);
    }

    if ((r = mtactl_route_open(cfg, cmd, strcmp(cmd, "add") == 0)) == NULL)
        return MTACTL_FAIL;
    if (strcmp(cmd, "add") == 0)
        rc = mtactl_route_add(r, cfg, argc, argv);
    else if (strcmp(cmd, "del") == 0) {
        rc = MTACTL_OK;
        if (router_del(r, argv[2]) != ROUTER_OK) {
            fprintf(stderr, "mtactl: route del: %s\n", router_errstr(r));
            rc = MTACTL_FAIL;
        } else {
            mtactl_audit("route_del %s", argv[2]);
            rc = mtactl_routes_publish(cfg, "route del");
        }
    } else if (strcmp(cmd, "get") == 0)
        rc = mtactl_route_get(r, cfg, argv[2], json);
    else if (strcmp(cmd, "list") == 0)
        rc = mtactl_route_list(r, "list", json ? NULL : "\t");
    else if (strcmp(cmd, "hash") == 0)
        rc = mtactl_route_hash(r);
    else {
        /* No path or date here: nodes with one table print one text. */
        printf("# mtad routes (mtactl route export; read back with "
            "mtactl route import --replace FILE)\n");
        rc = mtactl_route_list(r, "export", " ");
    }
    router_close(r);
    return rc;
}
