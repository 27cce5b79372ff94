/*
 * mtactl.c - main() of mtactl: the operator's tool.
 *
 * PURPOSE   mtactl [-c FILE] [-s SOCKET] COMMAND [ARGS]: the commands are
 *           one table (mtactl_verbs[]): name, usage, a line of help, the
 *           long help (or the family's help function), the handler, what
 *           it needs (the configuration, the running mtad, the spool) and
 *           its argument count.  --help, `help VERB` and the dispatch all
 *           read it, so a command cannot be listed and missing or the
 *           reverse.  The families live in their own files: route.c,
 *           queue*.c, tls.c, tls_check.c, dkim.c, user.c, drain.c, pool.c,
 *           trace.c.
 * CONTRACT  Exit codes: 0 ok, 1 failed (including a rejected reload),
 *           2 usage.  Errors on stderr as "mtactl: <what>: <why>".
 *           The control socket is server.control_socket of the config; when
 *           the config cannot be loaded (a reload of a broken file must
 *           still reach the master, which then reports the errors) the path
 *           is taken from -s, else from a plain scan of the file for
 *           "control_socket:", else the default.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bclass/bclass.h"
#include "common/util.h"
#include "common/ctl.h"
#include "config/config.h"
#include "shape/shape.h"
#include "mtactl/mtactl.h"

#define MTACTL_DEFAULT_CONFIG  "/etc/mtad/relay.yaml"
#define MTACTL_DEFAULT_SOCKET  "/run/mtad/control.sock"
#define MTACTL_TIMEOUT_MS      30000
#define MTACTL_RELOAD_MS       120000   /* the master waits up to 10 s + */
#define MTACTL_STOP_WAIT_MS    120000

struct mtactl {
    const char    *config_path;
    const char    *sock_opt;        /* -s */
    struct config *cfg;             /* NULL when it did not load */
    char           cfg_err[8192];
    char           sock[4096];
};

/* Fallback when the config does not load: find "control_socket:" in it. */
static int
mtactl_scan_socket(const char *path, char *out, size_t outsz)
{
    FILE *f = fopen(path, "r");
    char  line[4096], *p, *e;
    int   found = 0;

    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        p = strstr(line, "control_socket:");
        if (p == NULL || (strchr(line, '#') != NULL &&
            strchr(line, '#') < p))
            continue;
        p += strlen("control_socket:");
        p += strspn(p, " \t\"'");
        e = p + strcspn(p, "\"'#\r\n");
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > p && (size_t)(e - p) < outsz) {
            memcpy(out, p, (size_t)(e - p));
            out[e - p] = '\0';
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static void
mtactl_find_socket(struct mtactl *c)
{
    if (c->sock_opt != NULL)
        util_strlcpy(c->sock, c->sock_opt, sizeof(c->sock));
    else if (c->cfg != NULL)
        util_strlcpy(c->sock, c->cfg->control_socket, sizeof(c->sock));
    else if (!mtactl_scan_socket(c->config_path, c->sock, sizeof(c->sock)))
        util_strlcpy(c->sock, MTACTL_DEFAULT_SOCKET, sizeof(c->sock));
}

static void
mtactl_print_errors(const char *text)
{
    fprintf(stderr, "%s%s", text, text[0] && text[strlen(text) - 1] != '\n' ?
        "\n" : "");
}

/* Sends one request and prints the reply; the exit code. */
static int
mtactl_request(struct mtactl *c, const char *req, int timeout_ms,
    char **replyp)
{
    char *reply = NULL;
    int   rc, e;

    mtactl_find_socket(c);
    rc = ctl_request(c->sock, req, timeout_ms, &reply);
    if (rc == CTL_ESYS) {
        e = errno;
        fprintf(stderr, "mtactl: cannot connect to %s: %s%s\n", c->sock,
            strerror(e), e == ENOENT || e == ECONNREFUSED ?
            " (is mtad running?)" : e == EACCES ?
            " (run as root or as a member of server.admin_group)" : "");
        return MTACTL_FAIL;
    }
    if (rc == CTL_EREFUSED) {
        fprintf(stderr, "mtactl: %s: ", req);
        mtactl_print_errors(reply + strlen("error: "));
        free(reply);
        return MTACTL_FAIL;
    }
    if (rc == CTL_EPROTO) {
        fprintf(stderr, "mtactl: %s: unexpected reply: %.200s\n", req, reply);
        free(reply);
        return MTACTL_FAIL;
    }
    if (replyp != NULL)
        *replyp = reply;
    else {
        fputs(ctl_reply_body(reply), stdout);
        free(reply);
    }
    return MTACTL_OK;
}

static int
mtactl_check(struct mtactl *c)
{
    struct shape_rules *rules = NULL;

    if (c->cfg == NULL) {
        mtactl_print_errors(c->cfg_err);
        return MTACTL_FAIL;
    }
    /* the shaping rules too (shaping: and its rules_file), as mtad -t */
    if (shape_rules_load(c->config_path, &rules, c->cfg_err,
        sizeof(c->cfg_err)) < 0) {
        mtactl_print_errors(c->cfg_err);
        return MTACTL_FAIL;
    }
    shape_rules_free(rules);
    printf("%s: ok\n", c->config_path);
    return MTACTL_OK;
}

/* "stop" returns at once; wait until the master closed its socket. */
static int
mtactl_stop(struct mtactl *c)
{
    uint64_t deadline;
    char    *reply = NULL;
    int      rc;

    rc = mtactl_request(c, "stop", MTACTL_TIMEOUT_MS, NULL);
    if (rc != MTACTL_OK)
        return rc;
    deadline = util_now_ms() + MTACTL_STOP_WAIT_MS;
    while (util_now_ms() < deadline) {
        if (access(c->sock, F_OK) < 0)
            return MTACTL_OK;
        if (ctl_request(c->sock, "status", 2000, &reply) == CTL_ESYS &&
            (errno == ENOENT || errno == ECONNREFUSED))
            return MTACTL_OK;
        free(reply);
        reply = NULL;
        usleep(100 * 1000);
    }
    fprintf(stderr, "mtactl: stop: mtad still running after %ds\n",
        MTACTL_STOP_WAIT_MS / 1000);
    return MTACTL_FAIL;
}

/* ---- the verbs -------------------------------------------------------- */

/* What a verb needs; the dispatcher enforces MV_CONFIG and MV_AUDIT, and
 * `mtactl help VERB` says what all of them mean. */
#define MV_CONFIG  0x01     /* the configuration must load */
#define MV_DAEMON  0x02     /* asks the running mtad (control socket) */
#define MV_SPOOL   0x04     /* reads or changes the spool or routes db */
#define MV_AUDIT   0x08     /* changes are reported to mtad's log */

struct mtactl_verb {
    const char *name;
    const char *usage;              /* what follows the name */
    const char *help;               /* one line, for mtactl --help */
    const char *long_help;          /* mtactl help VERB, or NULL: ... */
    void      (*help_fn)(void);     /* ... the family's own help */
    int       (*run)(struct mtactl *c, int argc, char **argv);
    unsigned    flags;              /* MV_* */
    int         min_args, max_args; /* after the name; -1: any */
};

static int mtactl_help(struct mtactl *c, int argc, char **argv);

static int
mtactl_run_status(struct mtactl *c, int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--json") != 0) {
        fprintf(stderr, "mtactl: status: unexpected '%s'\n"
            "usage: mtactl status [--json]\n", argv[1]);
        return MTACTL_USAGE;
    }
    return mtactl_request(c, argc == 2 ? "status json" : "status",
        MTACTL_TIMEOUT_MS, NULL);
}

static int
mtactl_run_reload(struct mtactl *c, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return mtactl_request(c, "reload", MTACTL_RELOAD_MS, NULL);
}

static int
mtactl_run_stop(struct mtactl *c, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return mtactl_stop(c);
}

static int
mtactl_run_check(struct mtactl *c, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return mtactl_check(c);
}

static int
mtactl_run_drain(struct mtactl *c, int argc, char **argv)
{
    mtactl_find_socket(c);
    return mtactl_drain(argc, argv, c->sock, c->cfg);
}

static int
mtactl_run_kick(struct mtactl *c, int argc, char **argv)
{
    char req[1024];

    (void)argc;
    snprintf(req, sizeof(req), "kick %s", argv[1]);
    return mtactl_request(c, req, MTACTL_TIMEOUT_MS, NULL);
}

/* "ban list", "ban add ADDR [--for D]", "ban del ADDR": the master
 * changes the node's ban table (master/ban.c) and logs the admin record. */
static int
mtactl_run_ban(struct mtactl *c, int argc, char **argv)
{
    char     req[CTL_REQUEST_MAX];
    uint64_t ms = 0;

    if (argc == 2 && strcmp(argv[1], "list") == 0)
        return mtactl_request(c, "ban list", MTACTL_TIMEOUT_MS, NULL);
    if (argc >= 3 && strlen(argv[2]) < 64 &&
        strcspn(argv[2], " \t\r\n") == strlen(argv[2]) &&
        ((strcmp(argv[1], "del") == 0 && argc == 3) ||
        (strcmp(argv[1], "add") == 0 && (argc == 3 || (argc == 5 &&
        strcmp(argv[3], "--for") == 0 &&
        util_parse_duration(argv[4], &ms) == 0 && ms >= 1000))))) {
        snprintf(req, sizeof(req), "ban %s %s", argv[1], argv[2]);
        if (ms > 0)
            snprintf(req + strlen(req), sizeof(req) - strlen(req), " %llu",
                (unsigned long long)(ms / 1000));
        return mtactl_request(c, req, MTACTL_TIMEOUT_MS, NULL);
    }
    fprintf(stderr, "mtactl: usage: mtactl ban list | add ADDR [--for D] | "
        "del ADDR\n");
    return MTACTL_USAGE;
}

/* "hosts": the node's next-hop health table (master/hosts.c). */
static int
mtactl_run_hosts(struct mtactl *c, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return mtactl_request(c, "hosts", MTACTL_TIMEOUT_MS, NULL);
}

/* "shaping [--json]": the master reads the node's shaping table. */
static int
mtactl_run_shaping(struct mtactl *c, int argc, char **argv)
{
    if (argc == 1)
        return mtactl_request(c, "shaping list", MTACTL_TIMEOUT_MS, NULL);
    if (argc == 2 && strcmp(argv[1], "--json") == 0)
        return mtactl_request(c, "shaping json", MTACTL_TIMEOUT_MS, NULL);
    fprintf(stderr, "mtactl: usage: mtactl shaping [--json]\n");
    return MTACTL_USAGE;
}

/* "cluster status [--json]": the sync agent's report (cluster.h) */
static int
mtactl_run_cluster(struct mtactl *c, int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "status") == 0)
        return mtactl_request(c, "cluster status", MTACTL_TIMEOUT_MS, NULL);
    if (argc == 3 && strcmp(argv[1], "status") == 0 &&
        strcmp(argv[2], "--json") == 0)
        return mtactl_request(c, "cluster json", MTACTL_TIMEOUT_MS, NULL);
    fprintf(stderr, "mtactl: usage: mtactl cluster status [--json]\n");
    return MTACTL_USAGE;
}

/* "suspend|resume SITE|DOMAIN [--source S] [--for D]" (--for: suspend
 * only, default an hour) as "shaping suspend NAME SOURCE|- SECONDS". */
static int
mtactl_run_suspend(struct mtactl *c, int argc, char **argv)
{
    char        req[CTL_REQUEST_MAX];
    const char *src = "-";
    uint64_t    ms = 3600 * 1000;
    int         i, resume = strcmp(argv[0], "resume") == 0;

    for (i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--source") == 0 && strlen(argv[i + 1]) < 64)
            src = argv[i + 1];
        else if (!resume && strcmp(argv[i], "--for") == 0 &&
            util_parse_duration(argv[i + 1], &ms) == 0 && ms >= 1000)
            ;
        else
            break;
    }
    if (i != argc || strlen(argv[1]) >= 64 ||
        strcspn(argv[1], " \t\r\n") != strlen(argv[1]) ||
        strcspn(src, " \t\r\n") != strlen(src)) {
        fprintf(stderr, "mtactl: usage: mtactl %s SITE|DOMAIN [--source S]%s"
            "\n", argv[0], resume ? "" : " [--for D]");
        return MTACTL_USAGE;
    }
    if (resume)
        snprintf(req, sizeof(req), "shaping resume %s %s", argv[1], src);
    else
        snprintf(req, sizeof(req), "shaping suspend %s %s %llu", argv[1], src,
            (unsigned long long)(ms / 1000));
    return mtactl_request(c, req, MTACTL_TIMEOUT_MS, NULL);
}

/* "greylist list [NET]", "greylist del NET [SENDER [RCPT]]", "greylist
 * flush": the master reads and edits greylist.mdb (master/greylist.c). */
static int
mtactl_run_greylist(struct mtactl *c, int argc, char **argv)
{
    char   req[CTL_REQUEST_MAX];
    size_t n;
    int    i;

    if ((argc == 2 && strcmp(argv[1], "flush") == 0) ||
        (argc >= 2 && argc <= 3 && strcmp(argv[1], "list") == 0) ||
        (argc >= 3 && argc <= 5 && strcmp(argv[1], "del") == 0)) {
        n = (size_t)snprintf(req, sizeof(req), "greylist %s", argv[1]);
        for (i = 2; i < argc; i++) {
            if (strcspn(argv[i], " \t\r\n") != strlen(argv[i]) ||
                n + strlen(argv[i]) + 2 >= sizeof(req))
                goto usage;
            n += (size_t)snprintf(req + n, sizeof(req) - n, " %s", argv[i]);
        }
        return mtactl_request(c, req, MTACTL_TIMEOUT_MS, NULL);
    }
usage:
    fprintf(stderr, "mtactl: usage: mtactl greylist list [NET] | del NET "
        "[SENDER [RCPT]] | flush\n");
    return MTACTL_USAGE;
}

/* "quota list", "quota set KIND KEY|* [messages=N] [bytes=SIZE]", "quota
 * del KIND KEY|*": the master reads and edits the node's quota rows
 * (master/quota.c). */
static int
mtactl_run_quota(struct mtactl *c, int argc, char **argv)
{
    char   req[CTL_REQUEST_MAX];
    size_t n;
    int    i;

    if ((argc == 2 && strcmp(argv[1], "list") == 0) ||
        (argc >= 5 && argc <= 6 && strcmp(argv[1], "set") == 0) ||
        (argc == 4 && strcmp(argv[1], "del") == 0)) {
        n = (size_t)snprintf(req, sizeof(req), "quota %s", argv[1]);
        for (i = 2; i < argc; i++) {
            if (argv[i][0] == '\0' ||
                strcspn(argv[i], " \t\r\n") != strlen(argv[i]) ||
                n + strlen(argv[i]) + 2 >= sizeof(req))
                goto usage;
            n += (size_t)snprintf(req + n, sizeof(req) - n, " %s", argv[i]);
        }
        return mtactl_request(c, req, MTACTL_TIMEOUT_MS, NULL);
    }
usage:
    fprintf(stderr, "mtactl: usage: mtactl quota list | set KIND KEY|* "
        "[messages=N] [bytes=SIZE] | del KIND KEY|*\n");
    return MTACTL_USAGE;
}

/* "tls report [DOMAIN]" and "tls report --send" (TLS-RPT, RFC 8460). */
static int
mtactl_tls_report(struct mtactl *c, int argc, char **argv)
{
    char req[CTL_REQUEST_MAX];

    if (argc == 2)
        return mtactl_request(c, "tls report", MTACTL_TIMEOUT_MS, NULL);
    if (argc == 3 && strcmp(argv[2], "--send") == 0)
        return mtactl_request(c, "tls report-send", MTACTL_TIMEOUT_MS, NULL);
    if (argc == 3 && argv[2][0] != '-' && strlen(argv[2]) < 256 &&
        strcspn(argv[2], " \t\r\n") == strlen(argv[2])) {
        snprintf(req, sizeof(req), "tls report %s", argv[2]);
        return mtactl_request(c, req, MTACTL_TIMEOUT_MS, NULL);
    }
    fprintf(stderr, "mtactl: usage: mtactl tls report [DOMAIN | --send]\n");
    return MTACTL_USAGE;
}

/* tls: report asks mtad and needs no configuration (a broken file must
 * not hide the counts); policy and check read it. */
static int
mtactl_run_tls(struct mtactl *c, int argc, char **argv)
{
    int rc;

    if (argc >= 2 && strcmp(argv[1], "report") == 0)
        return mtactl_tls_report(c, argc, argv);
    if (c->cfg == NULL && argc > 2) {       /* "tls help" needs none */
        mtactl_print_errors(c->cfg_err);
        return MTACTL_FAIL;
    }
    if (argc >= 2 && strcmp(argv[1], "check") == 0)
        return mtactl_tls_check(argc, argv, c->cfg);
    mtactl_audit_init(c->cfg);
    rc = mtactl_tls(argc, argv, c->cfg);
    mtactl_audit_flush();
    return rc;
}

static int
mtactl_run_route(struct mtactl *c, int argc, char **argv)
{
    return mtactl_route(argc, argv, c->cfg);
}

static int
mtactl_run_pool(struct mtactl *c, int argc, char **argv)
{
    return mtactl_pool(argc, argv, c->cfg);
}

static int
mtactl_run_queue(struct mtactl *c, int argc, char **argv)
{
    return mtactl_queue(argc, argv, c->cfg);
}

static int
mtactl_run_dkim(struct mtactl *c, int argc, char **argv)
{
    (void)c;
    return mtactl_dkim(argc, argv);
}

static int
mtactl_run_user(struct mtactl *c, int argc, char **argv)
{
    return mtactl_user(argc, argv, c->cfg, c->cfg_err);
}

static int
mtactl_run_trace(struct mtactl *c, int argc, char **argv)
{
    return mtactl_trace(argc, argv, c->cfg);
}

/* mtactl_run_class - the bounce class the configuration's rules give a
 * reply (its words joined by spaces, so quoting is optional). */
static int
mtactl_run_class(struct mtactl *c, int argc, char **argv)
{
    char   reply[1024] = "";
    size_t n = 0;
    int    i;

    for (i = 1; i < argc; i++) {
        size_t l = strlen(argv[i]);

        if (n + l + 2 > sizeof(reply)) {
            fprintf(stderr, "mtactl: class: the reply is longer than %zu "
                "bytes\n", sizeof(reply) - 1);
            return MTACTL_USAGE;
        }
        if (n > 0)
            reply[n++] = ' ';
        memcpy(reply + n, argv[i], l + 1);
        n += l;
    }
    printf("%s\n", bclass_name(bclass_of(c->cfg->bclass, reply)));
    return MTACTL_OK;
}

#define MTACTL_QUEUE_VERB(name, usage, help) \
    { name, usage, help, NULL, mtactl_queue_help, mtactl_run_queue, \
      MV_CONFIG | MV_SPOOL | MV_AUDIT, 0, -1 }

static const struct mtactl_verb mtactl_verbs[] = {
    { "status", "[--json]", "processes, counters, rates, queue size",
      "The master's version, pid, uptime, generation, load, each worker's "
      "counters, totals, messages per second over the last minute, queue "
      "size, dropped log records; --json: the same as one JSON object "
      "(keys in mtactl(8)).",
      NULL, mtactl_run_status, MV_DAEMON, 0, 1 },
    { "reload", "", "re-read the configuration; exit 1 when rejected",
      "Like SIGHUP, but waits: exit 0 when the new workers serve, 1 (with "
      "the errors) when the config was rejected and the old one keeps "
      "serving.",
      NULL, mtactl_run_reload, MV_DAEMON, 0, 0 },
    { "stop", "", "stop mtad gracefully and wait until it is gone",
      "Like SIGTERM; waits until mtad is gone.",
      NULL, mtactl_run_stop, MV_DAEMON, 0, 0 },
    { "drain", "[--timeout D]", "stop accepting, deliver the queue, then stop",
      "Stop accepting (the listeners close; 421 to connections already "
      "waiting), deliver every queued message, then stop; waits until mtad "
      "is gone.  Exit 0 when the queue was emptied, 1 when messages were "
      "left at the deadline (they stay in the spool).",
      NULL, mtactl_run_drain, MV_DAEMON, 0, -1 },
    { "check", "", "check the configuration (like mtad -t)",
      "Load the configuration and print \"FILE: ok\" or its errors (exit "
      "1); reads the file itself, so mtad need not run.",
      NULL, mtactl_run_check, 0, 0, 0 },
    { "kick", "ID|*", "deliver a queued message (or all) now",
      "Ask the worker that owns the message to try it now instead of at "
      "its next retry (* every queued message); a held message stays "
      "held.",
      NULL, mtactl_run_kick, MV_DAEMON, 1, 1 },
    { "ban", "list|add ADDR [--for D]|del ADDR",
      "client addresses refused at connect (limits.ban)",
      "list: the banned addresses (IPv6 by limits.ipv6_prefix) and the "
      "seconds left; add: ban ADDR for D (a duration such as 30m; default "
      "limits.ban.duration), on every worker at once; del: lift its ban "
      "and forget its error count.  Works with limits.ban.errors 0 too; "
      "relay.allow_networks are never refused.  add and del are logged as "
      "admin records.",
      NULL, mtactl_run_ban, MV_DAEMON, 1, 4 },
    { "hosts", "", "next hops marked down (delivery.host_down_for)",
      "The next hops (address:port) that did not answer (connect refused "
      "or timed out, no greeting) and that every worker skips: state "
      "(down; probe-due: the next connection probes it; probing), until "
      "when (UTC) and the seconds left, failures in this episode (each "
      "failed probe doubles the down time, up to delivery.host_down_max), "
      "seconds since it went down, and its last error.  A hop comes back "
      "by itself when a probe gets a greeting.",
      NULL, mtactl_run_hosts, MV_DAEMON, 0, 0 },
    { "shaping", "[--json]", "traffic shaping: each site x source now",
      "Each site x source the workers have met (or mtactl suspended): the "
      "limits in force (connections open/limit, messages per connection, "
      "recipients per message, the rates as scaled by a slow-down), its "
      "state (normal, slow with its factor and step, suspended) and until "
      "when, the reply that triggered it (escaped), and its counters; "
      "--json: one JSON object (keys in mtactl(8)).",
      NULL, mtactl_run_shaping, MV_DAEMON, 0, 1 },
    { "cluster", "status [--json]", "the fleet: nodes, shared limits, Redis",
      "With relay.yaml cluster: the nodes seen in Redis and how long ago "
      "(live within three sync intervals), each site x source's fleet "
      "connections (open here, granted here, held by the others, the "
      "limit) and the delivery tokens in stock, the bans, AUTH failure "
      "addresses and quota keys shared, and Redis's health: address, role, "
      "connected, the last round trip's latency, round trips, commands, "
      "errors, fallback (on, episodes); --json: one JSON object (keys in "
      "mtactl(8)).",
      NULL, mtactl_run_cluster, MV_DAEMON, 1, 2 },
    { "suspend", "SITE|DOMAIN [--source S] [--for D]",
      "send nothing to a site for a while",
      "No new connection and no message to the site (a site name, or a "
      "domain a rule lists or a worker saw) from source S (default: every "
      "source) for D (default 1h), on every worker at once; its mail waits "
      "(not a retry, nothing written).  Logged.",
      NULL, mtactl_run_suspend, MV_DAEMON, 1, 5 },
    { "resume", "SITE|DOMAIN [--source S]",
      "end a suspension or slow-down now",
      "End the site's back-off episode (suspended or slowed, by mtactl or "
      "a reply) now; its waiting mail goes at the next wake.",
      NULL, mtactl_run_suspend, MV_DAEMON, 1, 3 },
    { "greylist", "list [NET]|del NET [SENDER [RCPT]]|flush",
      "greylisting's triplets (greylist)",
      "list: the triplets (client network, sender, recipient) in "
      "greylist.mdb, waiting or passed, their age and deferrals (NET: only "
      "that client's, an address or a network as listed); del: forget "
      "NET's triplets (or one sender's, or one triplet), so they are "
      "greylisted again; flush: forget them all.  del and flush are logged "
      "as admin records.",
      NULL, mtactl_run_greylist, MV_DAEMON, 1, 4 },
    { "quota", "list|set KIND KEY|* [messages=N] [bytes=SIZE]|del KIND KEY|*",
      "queue quotas: usage and limits (quotas)",
      "list: each kind's limit and every key counted, with its messages "
      "and bytes in the queue (node-wide) and limit, \"over\" while its "
      "mail gets 452; set: a limit for one key, or * for the kind's every "
      "key, on every worker at once (0: none), until del or until mtad "
      "stops (a reload keeps it; relay.yaml is not written); del: back to "
      "the kind's, or relay.yaml's, limit.  KIND: sender_domain, "
      "recipient_domain, user, network (KEY a network like 192.0.2.0/24 or "
      "an address in it).  set and del are logged as admin records.",
      NULL, mtactl_run_quota, MV_DAEMON, 1, 5 },
    MTACTL_QUEUE_VERB("queue", "[filters] [--summary [--top N]] [--json]",
        "the queue; --summary: by domain and age"),
    MTACTL_QUEUE_VERB("show", "ID [--body | --raw | --json]",
        "one message: envelope, history, headers"),
    MTACTL_QUEUE_VERB("delete", "ID... | --all [filters]",
        "remove messages, no DSN"),
    MTACTL_QUEUE_VERB("hold", "ID... | --all [filters]",
        "keep messages, but do not deliver them"),
    MTACTL_QUEUE_VERB("release", "ID... | --all [filters]",
        "undo hold and deliver now"),
    MTACTL_QUEUE_VERB("flush", "[ID... | --all [filters]]", "deliver now"),
    MTACTL_QUEUE_VERB("bounce", "ID... | --all [filters]",
        "give up now: a DSN to the sender, then removed"),
    { "class", "REPLY...", "the bounce class of a reply",
      "The bounce class the rules give REPLY (a next hop's reply as mtad "
      "logs it, \"550 5.1.1 no such user\", or one of mtad's own reasons): "
      "delivery.bounce_classes's rules first, then the built-in ones; the "
      "words are joined by spaces.",
      NULL, mtactl_run_class, MV_CONFIG, 1, -1 },
    { "trace", "ID", "a message's log records, also after delivery",
      NULL, mtactl_trace_help, mtactl_run_trace, MV_CONFIG, 1, 1 },
    { "route", "add|del|get|list|import|export|hash ...", "the routes db",
      NULL, mtactl_route_help, mtactl_run_route,
      MV_CONFIG | MV_SPOOL | MV_AUDIT, 0, -1 },
    { "pool", "set DOMAIN POOL|del DOMAIN|list",
      "egress pool per sender domain (routes db)",
      NULL, mtactl_pool_help, mtactl_run_pool,
      MV_CONFIG | MV_SPOOL | MV_AUDIT, 1, 3 },
    { "tls", "policy ...|report ...|check DOMAIN",
      "outbound TLS: levels, TLS-RPT, a domain's check",
      NULL, mtactl_tls_help, mtactl_run_tls, 0, 0, -1 },
    { "dkim", "keygen DOMAIN SELECTOR", "a DKIM key and its DNS record",
      NULL, mtactl_dkim_help, mtactl_run_dkim, 0, 0, -1 },
    { "user", "add|del|list", "SMTP AUTH users of auth.password_file",
      NULL, mtactl_user_help, mtactl_run_user, 0, 0, -1 },
    { "help", "[COMMAND]", "this list, or one command's help",
      "Without COMMAND the list of commands; with it that command's usage, "
      "what it does and what it needs.",
      NULL, mtactl_help, 0, 0, 1 },
};

static const struct mtactl_verb *
mtactl_verb_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(mtactl_verbs); i++)
        if (strcmp(mtactl_verbs[i].name, name) == 0)
            return &mtactl_verbs[i];
    return NULL;
}

static void
mtactl_usage(FILE *f)
{
    char head[128];

    fprintf(f,
        "usage: mtactl [-c FILE] [-s SOCKET] COMMAND [ARGS]\n"
        "       mtactl --version | --help\n"
        "  -c FILE    configuration (default " MTACTL_DEFAULT_CONFIG ")\n"
        "  -s SOCKET  control socket (default: server.control_socket)\n"
        "commands:\n");
    for (size_t i = 0; i < ARRAY_LEN(mtactl_verbs); i++) {
        const struct mtactl_verb *v = &mtactl_verbs[i];

        snprintf(head, sizeof(head), "%s%s%s", v->name, v->usage[0] ? " " :
            "", v->usage);
        if (strlen(head) <= 28)
            fprintf(f, "  %-28s %s\n", head, v->help);
        else
            fprintf(f, "  %s\n  %-28s %s\n", head, "", v->help);
    }
    fprintf(f, "exit codes: 0 ok, 1 failed, 2 usage\n");
}

/* mtactl_wrap - text folded at 76 columns, each line indented by two. */
static void
mtactl_wrap(const char *text)
{
    const char *p = text;
    size_t      col = 0, w;

    while (*p) {
        p += strspn(p, " ");
        w = strcspn(p, " ");
        if (w == 0)
            break;
        if (col > 0 && col + 1 + w > 76) {
            putchar('\n');
            col = 0;
        }
        printf("%s%.*s", col ? " " : "  ", (int)w, p);
        col += (col ? 1 : 2) + w;
        p += w;
    }
    putchar('\n');
}

static void
mtactl_verb_help(const struct mtactl_verb *v)
{
    printf("usage: mtactl %s%s%s\n", v->name, v->usage[0] ? " " : "",
        v->usage);
    if (v->help_fn != NULL)
        v->help_fn();
    else
        mtactl_wrap(v->long_help);
    if (v->flags & MV_DAEMON)
        printf("  needs: a running mtad; root or a member of "
            "server.admin_group (the control socket)\n");
    if (v->flags & MV_SPOOL)
        printf("  needs: root or the user mtad runs as (the spool and the "
            "routes db)\n");
    if (v->flags & MV_AUDIT)
        printf("  changes are reported to mtad's log\n");
}

static int
mtactl_help(struct mtactl *c, int argc, char **argv)
{
    const struct mtactl_verb *v;

    (void)c;
    if (argc < 2) {
        mtactl_usage(stdout);
        return MTACTL_OK;
    }
    if ((v = mtactl_verb_find(argv[1])) == NULL) {
        fprintf(stderr, "mtactl: help: unknown command '%s'\n", argv[1]);
        return MTACTL_USAGE;
    }
    mtactl_verb_help(v);
    return MTACTL_OK;
}

static int
mtactl_dispatch(struct mtactl *c, int argc, char **argv)
{
    const struct mtactl_verb *v = mtactl_verb_find(argv[0]);
    int                       rc, nargs = argc - 1;

    if (v == NULL) {
        fprintf(stderr, "mtactl: unknown command '%s' (mtactl help)\n",
            argv[0]);
        return MTACTL_USAGE;
    }
    if (nargs < v->min_args || (v->max_args >= 0 && nargs > v->max_args)) {
        fprintf(stderr, "mtactl: %s: wrong number of arguments\n"
            "usage: mtactl %s %s\n", v->name, v->name, v->usage);
        return MTACTL_USAGE;
    }
    /* "VERB help" needs no configuration */
    if ((v->flags & MV_CONFIG) && c->cfg == NULL &&
        !(argc == 2 && strcmp(argv[1], "help") == 0)) {
        mtactl_print_errors(c->cfg_err);
        return MTACTL_FAIL;
    }
    if (v->flags & MV_AUDIT)
        mtactl_audit_init(c->cfg);
    rc = v->run(c, argc, argv);
    if (v->flags & MV_AUDIT)
        mtactl_audit_flush();
    return rc;
}

int
main(int argc, char **argv)
{
    struct mtactl c;
    int           ch, rc;

    memset(&c, 0, sizeof(c));
    c.config_path = MTACTL_DEFAULT_CONFIG;
    /* --help as GNU tools take it (getopt would call it an invalid -) */
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        mtactl_usage(stdout);
        return MTACTL_OK;
    }
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("mtactl %s\n", MTAD_VERSION);
        return MTACTL_OK;
    }
    while ((ch = getopt(argc, argv, "+c:s:h")) != -1) {
        switch (ch) {
        case 'c': c.config_path = optarg; break;
        case 's': c.sock_opt = optarg; break;
        case 'h': mtactl_usage(stdout); return MTACTL_OK;
        default:  mtactl_usage(stderr); return MTACTL_USAGE;
        }
    }
    if (optind >= argc) {
        mtactl_usage(stderr);
        return MTACTL_USAGE;
    }
    if (strcmp(argv[optind], "help") != 0)
        c.cfg = config_load(c.config_path, c.cfg_err, sizeof(c.cfg_err));
    rc = mtactl_dispatch(&c, argc - optind, argv + optind);
    config_free(c.cfg);
    return rc;
}
