/*
 * main.c - mtad's main(): options, "mtad -t" and "mtad -n", then the master.
 *
 * PURPOSE   mtad -c FILE [-f] [-t] [-n] [-h].
 * CONTRACT  Exit codes (sysexits.h), also in the usage text:
 *             0  EX_OK           stopped cleanly; -t: the config is valid
 *                                and passes the start's checks; -n shown
 *             1                  -t, -n: the config is invalid
 *                                (-t: 67, 69, 73 when the start's checks
 *                                would refuse it, as the start exits)
 *            64  EX_USAGE        bad command line
 *            67  EX_NOUSER       server.user / server.group do not exist
 *            69  EX_UNAVAILABLE  a listener or the control socket failed
 *            71  EX_OSERR        fork, epoll, signalfd ... failed
 *            73  EX_CANTCREAT    spool, routes db, pid file or log file
 *            78  EX_CONFIG       the config is invalid (at start)
 * FAILURE   Messages on stderr, "mtad: <what>: <why>".
 */
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sysexits.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/net.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master.h"

#define MTAD_DEFAULT_CONFIG "/etc/mtad/relay.yaml"

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: mtad [-f] [-t] [-n] [-c FILE] | --version\n"
        "  -c FILE  configuration (default " MTAD_DEFAULT_CONFIG ")\n"
        "  -f       stay in the foreground (systemd, make run)\n"
        "  -t       check the configuration and what the start checks (users,\n"
        "           spool, pid file, control socket, log file; the listeners\n"
        "           are not bound), print \"FILE: ok\" or the errors (and each\n"
        "           TLS certificate: key type, subject, expiry; each egress\n"
        "           source: its address here, its PTR against its EHLO name)\n"
        "  -n       print every key with the value in force, \"# default\"\n"
        "           after those the file does not set\n"
        "  -h       this help\n"
        "exit codes: 0 ok; 1 -t or -n: invalid (-t: else the start's code);\n"
        "  64 usage; 67 no such user or\n"
        "  group; 69 cannot listen or open the control socket; 71 system\n"
        "  error; 73 cannot create the spool, routes db, pid or log file;\n"
        "  78 invalid configuration\n"
        "signals: HUP reload, TERM/INT stop, USR1 reopen the log file\n");
}

/* print_certs - "mtad -t": which certificates STARTTLS will offer, of
 * which key type, and when each expires (an expired one is not an error:
 * clients that do not check still get TLS, but the operator should know). */
static void
print_certs(const struct config *cfg)
{
    char   info[512];
    size_t i;

    /* On failure info holds the reason instead: the line says either. */
    for (i = 0; i < cfg->ntls_certs; i++) {
        (void)net_tls_cert_info(cfg->tls_cert_files[i], info, sizeof(info));
        printf("tls.cert_file: %s: %s\n", cfg->tls_cert_files[i], info);
    }
}

/*
 * print_egress - "mtad -t": each egress source, whether its address is on
 * this host now (a test bind, port 0 and no port taken: the delivery
 * takes a source whose address is gone out of its pools) and what its
 * PTR says against its EHLO name (receivers compare them).  Warnings
 * only: the address may come later, DNS may be down.  The PTR lookup
 * waits one try of 2 s at most; the start never asks.
 */
static void
print_egress(const struct config *cfg)
{
    char   host[NI_MAXHOST];
    size_t i;

    if (cfg->negress_sources > 0 && res_init() == 0) {
        _res.retrans = 2;
        _res.retry = 1;
    }
    for (i = 0; i < cfg->negress_sources; i++) {
        const struct config_egress_source *s = &cfg->egress_sources[i];
        int fd = socket(s->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1, here, rc;

        if (fd >= 0)
            (void)setsockopt(fd, IPPROTO_IP, 24 /* IP_BIND_ADDRESS_NO_PORT */,
                &one, sizeof(one));
        here = fd >= 0 && bind(fd, (const struct sockaddr *)&s->addr,
            s->addrlen) == 0;
        if (fd >= 0)
            close(fd);
        rc = getnameinfo((const struct sockaddr *)&s->addr, s->addrlen, host,
            sizeof(host), NULL, 0, NI_NAMEREQD);
        printf("egress.sources %s: %s ehlo %s: %s; %s%s%s\n", s->name,
            s->address, s->ehlo, here ? "address on this host" :
            "warning: address not on this host (taken out until it is)",
            rc != 0 ? "no PTR found" : strcasecmp(host, s->ehlo) == 0 ?
            "PTR " : "warning: PTR ", rc != 0 ? "" : host,
            rc != 0 || strcasecmp(host, s->ehlo) == 0 ? "" :
            " is not the EHLO name");
    }
}

/* check_config - "mtad -t" (show 0) or "mtad -n" (show 1). */
static int
check_config(const char *path, int show)
{
    char           err[8192] = "";
    struct config *cfg = config_load(path, err, sizeof(err));
    int            code;

    if (cfg == NULL) {
        fprintf(stderr, "%s%s", err, err[0] && err[strlen(err) - 1] != '\n' ?
            "\n" : "");
        return 1;
    }
    if (show) {
        code = config_show(cfg, stdout) == 0 ? EX_OK : EX_IOERR;
        config_free(cfg);
        return code;
    }
    /* the start's own checks, by the same function: a config -t passes
     * is one the start takes, but for the listeners it binds */
    if ((code = master_check(cfg, err, sizeof(err))) != EX_OK) {
        fprintf(stderr, "mtad: %s\n", err);
        config_free(cfg);
        return code;
    }
    print_certs(cfg);
    print_egress(cfg);
    config_free(cfg);
    printf("%s: ok\n", path);
    return 0;
}

int
main(int argc, char **argv)
{
    struct master_opts o = { MTAD_DEFAULT_CONFIG, 0, { NULL, 0 } };
    int                c, test = 0, show = 0;

    proctitle_init(&o.title, argc, argv);
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        usage(stdout);          /* as GNU tools take it */
        return EX_OK;
    }
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("mtad %s\n", MTAD_VERSION);
        return EX_OK;
    }
    while ((c = getopt(argc, argv, "c:ftnh")) != -1) {
        switch (c) {
        case 'c': o.config_path = optarg; break;
        case 'f': o.foreground = 1; break;
        case 't': test = 1; break;
        case 'n': show = 1; break;
        case 'h': usage(stdout); return EX_OK;
        default:  usage(stderr); return EX_USAGE;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return EX_USAGE;
    }
    if (test || show)
        return check_config(o.config_path, show && !test);
    return master_run(&o);
}
