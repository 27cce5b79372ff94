/*
 * worker_keys.c - what worker_init() loads before the privilege drop and
 * the sandbox: the TLS context, the DKIM keys, the greylist state (opened
 * later), whether queue quotas count
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include "common/chan.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/status.h"
#include "common/tlskey.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "tlspol/tlspol.h"
#include "common/net.h"
#include "common/sandbox.h"
#include "grey/grey.h"
#include "events/events.h"
#include "worker/worker.h"
#include "smtpd/smtpd.h"
#include "dkim/dkim.h"
#include "worker/worker_int.h"


/* worker_tls_init - the STARTTLS context, before the privilege drop (the
 * key may be readable by root only).  Without exec the key stays in this
 * process's memory for its life, like nginx's workers: the price of not
 * re-reading it unprivileged. */
int
worker_tls_init(struct worker *w)
{
    struct net_tls_opts o;
    char err[512];

    if (w->cfg->ntls_certs == 0)
        return 0;
    for (size_t i = 0; i < w->cfg->ntls_certs; i++)
        if (safefs_secret_path_exposed(w->cfg->tls_key_files[i], w->a.gid,
            w->a.admin_gid, err, sizeof(err)))
            log_warn("tls.key_file %s: %s", w->cfg->tls_key_files[i], err);
    o.cert_files = (const char *const *)w->cfg->tls_cert_files;
    o.key_files = (const char *const *)w->cfg->tls_key_files;
    o.ncerts = w->cfg->ntls_certs;
    o.min_version = w->cfg->tls_min_version;
    o.ciphers = w->cfg->tls_ciphers;
    /* The daemon-wide ticket keys, mapped read-only here: a worker opens
     * and seals tickets, it never writes keys (see common/tlskey.h). */
    if (w->a.tickets != NULL)
        tlskey_readonly(w->a.tickets);
    o.tickets = w->a.tickets;
    w->tls_ctx = net_tls_ctx(&o, err, sizeof(err));
    if (w->tls_ctx == NULL) {
        log_err("STARTTLS: %s", err);
        return -1;
    }
    return 0;
}


/* worker_dkim_init - the DKIM signing keys, before the privilege drop
 * (they may be readable by root only). */
int
worker_dkim_init(struct worker *w)
{
    const struct config *cfg = w->cfg;
    char                 err[512];
    size_t               i;

    if (cfg->ndkim_sign == 0)
        return 0;
    if ((w->dkim = dkim_keys_new()) == NULL) {
        log_err("dkim: cannot set up SHA-256");
        return -1;
    }
    for (i = 0; i < cfg->ndkim_sign; i++)
        if (safefs_secret_path_exposed(cfg->dkim_sign[i].key_file,
            w->a.gid, w->a.admin_gid, err, sizeof(err)))
            log_warn("dkim.sign[%zu].key_file %s: %s", i,
                cfg->dkim_sign[i].key_file, err);
    for (i = 0; i < cfg->ndkim_sign; i++)
        if (dkim_keys_add(w->dkim, cfg->dkim_sign[i].domain,
            cfg->dkim_sign[i].selector, cfg->dkim_sign[i].key_file,
            cfg->dkim_sign[i].algorithm, err, sizeof(err)) != DKIM_OK) {
            log_err("dkim.sign[%zu]: %s", i, err);
            return -1;
        }
    return 0;
}


/* worker_quotas_on - relay.yaml has a queue quota: the queue is counted
 * (a file read per message at start when no index was saved). */
int
worker_quotas_on(const struct config *cfg)
{
    int i;

    for (i = 0; i < CONFIG_QUOTA_KINDS; i++)
        if (cfg->quota_msgs[i] != 0 || cfg->quota_bytes[i] != 0)
            return 1;
    return 0;
}


/* worker_grey_init - greylist.mdb, from worker_run(): after fork (an
 * LMDB environment is never shared across one) and after the privilege
 * drop, as the workers' user, who owns the spool and so could have put a
 * link in place of the file (root must not follow it, nor create the
 * file as root's); Landlock allows the spool, seccomp what LMDB calls.
 * A file that does not open turns greylisting off in this worker
 * (logged): mail is never refused for it. */
void
worker_grey_init(struct worker *w)
{
    const struct config *cfg = w->cfg;
    char                 path[PATH_MAX];

    if (!cfg->grey_enabled)
        return;
    snprintf(path, sizeof(path), "%s/%s", cfg->spool_dir, GREY_FILE);
    if (grey_open(&w->grey, path) < 0) {
        log_err("greylist: %s; greylisting is off in this worker",
            grey_errstr(w->grey));
        grey_close(w->grey);
        w->grey = NULL;
    }
}
