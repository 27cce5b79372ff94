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
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

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
        "           TLS certificate: key type, subject, expiry)\n"
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
