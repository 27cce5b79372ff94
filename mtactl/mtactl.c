/*
 * mtactl.c - main() of mtactl: the operator's tool.
 *
 * PURPOSE   mtactl [-c FILE] [-s SOCKET] COMMAND [ARGS]:
 *             status   the master's report (through the control socket)
 *             reload   re-read the config; waits for the outcome
 *             stop     stop mtad gracefully; waits until it is gone
 *             check    check the config locally (like mtad -t)
 *             tls report [DOMAIN|--send]  TLS-RPT counts (RFC 8460)
 *             help [COMMAND]
 *             dkim keygen ...  (dkim.c)
 *             route ...  (route.c)     queue/show/delete/hold/release/
 *                                      flush/bounce ... (queue.c)
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

#include "common/util.h"
#include "common/ctl.h"
#include "config/config.h"
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

static void
mtactl_usage(FILE *f)
{
    fprintf(f,
        "usage: mtactl [-c FILE] [-s SOCKET] COMMAND [ARGS]\n"
        "  -c FILE    configuration (default " MTACTL_DEFAULT_CONFIG ")\n"
        "  -s SOCKET  control socket (default: server.control_socket)\n"
        "commands:\n"
        "  status [--json]  processes, counters, rates, queue size\n"
        "  reload           re-read the configuration; fails (exit 1) when "
        "it is rejected\n"
        "  stop             stop mtad gracefully and wait until it is gone\n"
        "  drain [--timeout D]  stop accepting, deliver the queue, then stop\n"
        "  check            check the configuration (like mtad -t)\n"
        "  kick ID|*        deliver a queued message (or all) now\n"
        "  route ...        routes (mtactl help route)\n"
        "  tls policy ...   outbound TLS level per destination "
        "(mtactl help tls)\n"
        "  queue ...        the queue (mtactl help queue)\n"
        "  tls report [DOMAIN|--send]  TLS-RPT counts of today; --send "
        "mails the reports now\n"
        "  dkim keygen DOMAIN SELECTOR  a DKIM key and its DNS record "
        "(mtactl help dkim)\n"
        "  user add|del|list  SMTP AUTH users of auth.password_file "
        "(mtactl help user)\n"
        "  help [COMMAND]\n"
        "exit codes: 0 ok, 1 failed, 2 usage\n");
}

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
    if (c->cfg == NULL) {
        mtactl_print_errors(c->cfg_err);
        return MTACTL_FAIL;
    }
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

static int
mtactl_help(int argc, char **argv)
{
    if (argc < 2) {
        mtactl_usage(stdout);
        return MTACTL_OK;
    }
    if (strcmp(argv[1], "route") == 0)
        mtactl_route_help();
    else if (strcmp(argv[1], "dkim") == 0)
        mtactl_dkim_help();
    else if (strcmp(argv[1], "user") == 0)
        mtactl_user_help();
    else if (strcmp(argv[1], "tls") == 0)
        mtactl_tls_help();
    else if (strcmp(argv[1], "queue") == 0 || strcmp(argv[1], "show") == 0 ||
        strcmp(argv[1], "delete") == 0 || strcmp(argv[1], "hold") == 0 ||
        strcmp(argv[1], "release") == 0 || strcmp(argv[1], "flush") == 0 ||
        strcmp(argv[1], "bounce") == 0)
        mtactl_queue_help();
    else if (strcmp(argv[1], "status") == 0)
        printf("mtactl status: the master's pid, uptime, generation, load, "
            "each worker's counters, totals, messages per second over the "
            "last minute, queue size, dropped log records; --json: the "
            "same as one JSON object (keys in mtactl(8))\n");
    else if (strcmp(argv[1], "reload") == 0)
        printf("mtactl reload: like SIGHUP, but waits: exit 0 when the new "
            "workers serve, 1 (with the errors) when the config was "
            "rejected and the old one keeps serving\n");
    else if (strcmp(argv[1], "stop") == 0)
        printf("mtactl stop: like SIGTERM; waits until mtad is gone\n");
    else if (strcmp(argv[1], "drain") == 0)
        printf("mtactl drain [--timeout D]: stop accepting (the listeners "
            "close; 421 to connections already waiting), deliver every "
            "queued message, then stop; waits until mtad is gone.  Exit 0 "
            "when the queue was emptied, 1 when messages were left at the "
            "deadline (they stay in the spool)\n");
    else if (strcmp(argv[1], "check") == 0)
        printf("mtactl check: load the configuration and print \"FILE: ok\" "
            "or its errors (exit 1); reads the file itself, so mtad need "
            "not run\n");
    else if (strcmp(argv[1], "kick") == 0)
        printf("mtactl kick ID|*: ask the worker that owns the message to "
            "try it now instead of at its next retry (* every queued "
            "message); a held message stays held\n");
    else if (strcmp(argv[1], "help") == 0)
        mtactl_usage(stdout);
    else {
        fprintf(stderr, "mtactl: help: unknown command '%s'\n", argv[1]);
        return MTACTL_USAGE;
    }
    return MTACTL_OK;
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

static int
mtactl_is_queue(const char *cmd)
{
    static const char *const words[] = {
        "queue", "show", "delete", "hold", "release", "flush", "bounce"
    };

    for (size_t i = 0; i < ARRAY_LEN(words); i++)
        if (strcmp(cmd, words[i]) == 0)
            return 1;
    return 0;
}

static int
mtactl_dispatch(struct mtactl *c, int argc, char **argv)
{
    const char *cmd = argv[0];
    char        req[1024];

    if (strcmp(cmd, "help") == 0)
        return mtactl_help(argc, argv);
    if (strcmp(cmd, "check") == 0 && argc == 1)
        return mtactl_check(c);
    if (strcmp(cmd, "status") == 0 && argc == 1)
        return mtactl_request(c, "status", MTACTL_TIMEOUT_MS, NULL);
    if (strcmp(cmd, "status") == 0 && argc == 2 &&
        strcmp(argv[1], "--json") == 0)
        return mtactl_request(c, "status json", MTACTL_TIMEOUT_MS, NULL);
    if (strcmp(cmd, "reload") == 0 && argc == 1)
        return mtactl_request(c, "reload", MTACTL_RELOAD_MS, NULL);
    if (strcmp(cmd, "stop") == 0 && argc == 1)
        return mtactl_stop(c);
    if (strcmp(cmd, "drain") == 0) {
        mtactl_find_socket(c);
        return mtactl_drain(argc, argv, c->sock, c->cfg);
    }
    if (strcmp(cmd, "kick") == 0 && argc == 2) {
        snprintf(req, sizeof(req), "kick %s", argv[1]);
        return mtactl_request(c, req, MTACTL_TIMEOUT_MS, NULL);
    }
    if (strcmp(cmd, "tls") == 0 && argc >= 2 && strcmp(argv[1], "report") == 0)
        return mtactl_tls_report(c, argc, argv);
    if (strcmp(cmd, "dkim") == 0)
        return mtactl_dkim(argc, argv);     /* needs no configuration */
    if (strcmp(cmd, "user") == 0)
        return mtactl_user(argc, argv, c->cfg, c->cfg_err);
    if (strcmp(cmd, "tls") == 0) {
        int rc;

        if (c->cfg == NULL && argc > 2) {   /* "tls help" needs none */
            mtactl_print_errors(c->cfg_err);
            return MTACTL_FAIL;
        }
        mtactl_audit_init(c->cfg);
        rc = mtactl_tls(argc, argv, c->cfg);
        mtactl_audit_flush();
        return rc;
    }
    if (strcmp(cmd, "route") == 0 || mtactl_is_queue(cmd)) {
        if (c->cfg == NULL) {
            mtactl_print_errors(c->cfg_err);
            return MTACTL_FAIL;
        }
        int rc;

        mtactl_audit_init(c->cfg);
        rc = strcmp(cmd, "route") == 0 ? mtactl_route(argc, argv, c->cfg) :
            mtactl_queue(argc, argv, c->cfg);
        mtactl_audit_flush();
        return rc;
    }
    if (strcmp(cmd, "status") == 0 || strcmp(cmd, "reload") == 0 ||
        strcmp(cmd, "stop") == 0 || strcmp(cmd, "check") == 0 ||
        strcmp(cmd, "kick") == 0) {
        fprintf(stderr, "mtactl: %s: wrong number of arguments\n", cmd);
        return MTACTL_USAGE;
    }
    fprintf(stderr, "mtactl: unknown command '%s' (mtactl help)\n", cmd);
    return MTACTL_USAGE;
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
