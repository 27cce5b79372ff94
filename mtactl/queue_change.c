/*
 * queue_change.c - mtactl delete, hold, release, flush and bounce: take
 * the delivery lock, change the state file, then ask the master to kick
 * the owning worker (see the CONTRACT in queue.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "common/ctl.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "mtactl/mtactl.h"
#include "mtactl/queue_int.h"

/* ---- changes ---------------------------------------------------------- */


/*
 * queue_lock - open id with the delivery lock, waiting out an attempt in
 * progress for up to wait_ms.  SPOOL_OK, SPOOL_ENOENT (also when the lock
 * was won on a file its last holder had unlinked: delivered meanwhile),
 * SPOOL_ELOCKED (still busy after the wait) or another SPOOL_E*.
 */
static int
queue_lock(struct spool *sp, const char *cmd, const char *id,
    uint64_t wait_ms, struct spool_env **envp, int *fd)
{
    uint64_t    deadline = util_now_ms() + wait_ms;
    struct stat st;
    off_t       off;
    int         rc, told = 0;

    for (;;) {
        rc = spool_msg_open(sp, id, 1, envp, fd, &off);
        if (rc != SPOOL_ELOCKED || util_now_ms() >= deadline)
            break;
        if (!told) {
            fprintf(stderr, "mtactl: %s: %s: being delivered; waiting for "
                "the attempt to end\n", cmd, id);
            told = 1;
        }
        usleep(QUEUE_LOCK_POLL_US);
    }
    if (rc != SPOOL_OK)
        return rc;
    if (fstat(*fd, &st) == 0 && st.st_nlink == 0) {
        close(*fd);
        *fd = -1;
        spool_env_free(*envp);
        *envp = NULL;
        return SPOOL_ENOENT;
    }
    return SPOOL_OK;
}


/* queue_bounce_all - mark every pending recipient as failed, keeping the
 * last error in the reason the DSN shows. */
static void
queue_bounce_all(struct spool_env *env)
{
    char   why[2048];
    size_t i;

    for (i = 0; i < env->nrcpt; i++) {
        struct spool_rcpt *r = &env->rcpt[i];

        if (r->status != SPOOL_RCPT_PENDING)
            continue;
        if (r->last_reply != NULL)
            snprintf(why, sizeof(why), "%s; last error: %s",
                QUEUE_BOUNCE_TEXT, r->last_reply);
        else
            snprintf(why, sizeof(why), "%s", QUEUE_BOUNCE_TEXT);
        free(r->last_reply);
        r->last_reply = xstrdup(why);
        r->status = SPOOL_RCPT_BOUNCED;
    }
}


/* queue_apply - one operation on one locked message; *what is set to the
 * words that say what was done, *kick when the daemon should act now. */
static int
queue_apply(struct spool *sp, enum queue_op op, struct spool_env *env,
    const char **what, int *kick)
{
    /* hold and delete: the daemon only hears of it (its index lists the
     * message as held, or no more: delivery/qindex.c) */
    *kick = op == QO_RELEASE || op == QO_BOUNCE || op == QO_HOLD ||
        op == QO_DELETE || (op == QO_FLUSH && !env->held);
    switch (op) {
    case QO_DELETE:
        *what = "deleted";
        return spool_remove(sp, env->id);
    case QO_HOLD:
        *what = env->held ? "already on hold" : "on hold";
        if (env->held)
            return SPOOL_OK;
        env->held = 1;
        break;
    case QO_RELEASE:
        *what = env->held ? "released; delivery now" :
            "was not on hold; delivery now";
        env->held = 0;
        env->next_retry_ms = 0;
        break;
    case QO_FLUSH:
        *what = env->held ? "on hold: not delivered until released" :
            "delivery now";
        env->next_retry_ms = 0;
        break;
    case QO_BOUNCE:
        *what = env->sender[0] == '\0' ? "bounced; null sender: removed "
            "without a DSN" : "returned to sender (DSN sent, then removed)";
        queue_bounce_all(env);
        env->held = 0;
        env->next_retry_ms = 0;
        break;
    }
    return spool_state_save(sp, env);
}


/* queue_one - lock id, change it, unlock; id gets the canonical id.
 * 1 done and the daemon should act now, 0 done, -1 failed (said why). */
static int
queue_one(struct spool *sp, enum queue_op op, const char *cmd,
    const char *arg, char id[SPOOL_ID_SIZE])
{
    struct spool_env *env = NULL;
    const char       *what = "";
    int               fd = -1, rc, kick = 0;

    if (!queue_norm_id(arg, id)) {
        fprintf(stderr, "mtactl: %s: '%s' is not a queue id (16 hex "
            "digits)\n", cmd, arg);
        return -1;
    }
    /* flush need not wait: the message is being tried right now */
    rc = queue_lock(sp, cmd, id, op == QO_FLUSH ? 0 : QUEUE_LOCK_WAIT_MS,
        &env, &fd);
    if (rc == SPOOL_ELOCKED && op == QO_FLUSH) {
        printf("%s: being delivered right now\n", id);
        return 0;
    }
    if (rc == SPOOL_ENOENT) {
        fprintf(stderr, "mtactl: %s: %s: no such message in the queue\n",
            cmd, id);
        return -1;
    }
    if (rc == SPOOL_ELOCKED) {
        fprintf(stderr, "mtactl: %s: %s: still being delivered after %ds; "
            "nothing changed, try again\n", cmd, id,
            QUEUE_LOCK_WAIT_MS / 1000);
        return -1;
    }
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: %s: %s: %s\n", cmd, id, spool_errstr(sp));
        return -1;
    }
    rc = queue_apply(sp, op, env, &what, &kick);
    close(fd);                              /* releases the lock */
    spool_env_free(env);
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: %s: %s: %s\n", cmd, id, spool_errstr(sp));
        return -1;
    }
    printf("%s: %s\n", id, what);
    mtactl_audit("%s %s (%s)", cmd, id, what);
    return kick;
}


/* queue_kick - ask the running daemon to act on id ("*": every message)
 * now.  1 sent, 0 mtad is not running (the change is picked up at start),
 * -1 another failure (said why). */
static int
queue_kick(const struct config *cfg, const char *cmd, const char *id)
{
    char        req[64];
    char       *reply = NULL;
    const char *why;
    int         rc, e;

    snprintf(req, sizeof(req), "index %s", id);   /* kick, unrecorded */
    rc = ctl_request(cfg->control_socket, req, QUEUE_KICK_MS, &reply);
    e = errno;
    if (rc == CTL_OK || (rc == CTL_ESYS && (e == ENOENT ||
        e == ECONNREFUSED))) {
        free(reply);
        return rc == CTL_OK;
    }
    /* the change is in the spool all the same: say what did not happen */
    why = rc == CTL_ESYS ? strerror(e) : reply != NULL ? reply : "no reply";
    fprintf(stderr, "mtactl: %s: changed, but could not tell mtad (%s): "
        "%.*s%s\n", cmd, cfg->control_socket, (int)strcspn(why, "\n"), why,
        (rc == CTL_ESYS && e == EACCES) || (why != NULL &&
        strstr(why, "permission denied") != NULL) ? " (run as root or as a "
        "member of server.admin_group)" : "");
    free(reply);
    return -1;
}


/* queue_kick_all - the kicks after the changes; one "kick *" when every
 * message was flushed. */
static int
queue_kick_all(const struct config *cfg, const char *cmd,
    char (*ids)[SPOOL_ID_SIZE], size_t n, int everything, int quiet)
{
    size_t i;
    int    rc = 1;
    char   req[64], *reply;

    if (n == 0)
        return 0;
    if (quiet) {
        /* hold, delete: nothing to act on, only the index to update;
         * mtad not running (or not reachable) changes nothing */
        for (i = 0; i < n; i++) {
            snprintf(req, sizeof(req), "index %s", ids[i]);
            reply = NULL;
            if (ctl_request(cfg->control_socket, req, QUEUE_KICK_MS,
                &reply) != CTL_OK) {
                free(reply);
                break;
            }
            free(reply);
        }
        return 0;
    }
    if (everything)
        rc = queue_kick(cfg, cmd, "*");
    else
        for (i = 0; i < n && rc == 1; i++)
            rc = queue_kick(cfg, cmd, ids[i]);
    if (rc == 0)
        printf("-- mtad is not running: the change%s take%s effect when it "
            "starts\n", n == 1 ? "" : "s", n == 1 ? "s" : "");
    return rc < 0 ? -1 : 0;
}


/* queue_select - the ids the command acts on: the operands, or the
 * messages that pass the filter.  NULL after an error message. */
static char **
queue_select(struct spool *sp, const struct queue_opts *o, const char *cmd,
    size_t *np)
{
    struct queue_item *items;
    char             **v;
    size_t             n, i;

    if (o->nops > 0) {
        v = xcalloc((size_t)o->nops + 1, sizeof(*v));
        for (i = 0; i < (size_t)o->nops; i++)
            v[i] = xstrdup(o->ops[i]);
        *np = (size_t)o->nops;
        return v;
    }
    if (queue_load(sp, &o->f, &items, &n) != 0) {
        fprintf(stderr, "mtactl: %s: %s\n", cmd, spool_errstr(sp));
        return NULL;
    }
    v = xcalloc(n + 1, sizeof(*v));
    for (i = 0; i < n; i++)
        v[i] = xstrdup(items[i].env->id);
    queue_items_free(items, n);
    *np = n;
    return v;
}


/* queue_flush_everything - `mtactl flush` with nothing named, while mtad
 * runs: one "kick *" is the whole job.  Every worker then rebuilds its
 * schedule from the spool with each message not on hold due now (see
 * deliver_kick), which is what rewriting every message's state to "now"
 * and kicking achieves, without a state write per message.  The files
 * are only counted.  Returns the exit
 * code, or -1 when mtad is not running: then the state of each message
 * must say "now", so that the flush stands until it starts. */
static int
queue_flush_everything(const struct config *cfg)
{
    struct spool *sp;
    char        (*ids)[SPOOL_ID_SIZE] = NULL;
    size_t        n = 0;
    int           rc;

    if ((sp = queue_open_spool(cfg, "flush")) == NULL)
        return MTACTL_FAIL;
    rc = spool_list(sp, &ids, &n);
    if (rc != SPOOL_OK)
        fprintf(stderr, "mtactl: flush: %s\n", spool_errstr(sp));
    spool_close(sp);
    free(ids);
    if (rc != SPOOL_OK)
        return MTACTL_FAIL;
    if (n == 0) {
        printf("-- flush: 0 messages\n");
        return MTACTL_OK;
    }
    rc = queue_kick(cfg, "flush", "*");
    if (rc == 0)
        return -1;                      /* not running: the slow way */
    if (rc < 0)
        return MTACTL_FAIL;
    printf("-- flush: %zu message%s: mtad delivers every one now, but for "
        "those on hold and those being delivered\n", n, n == 1 ? "" : "s");
    mtactl_audit("flush * (%zu messages)", n);
    return MTACTL_OK;
}


/* mtactl delete|hold|release|flush|bounce ID... | --all [filters] */
int
queue_cmd_change(int argc, char **argv, const struct config *cfg,
    enum queue_op op)
{
    struct queue_opts   o;
    struct queue_creds  cr;
    struct spool       *sp = NULL;
    char              **sel = NULL, (*kick)[SPOOL_ID_SIZE] = NULL;
    size_t              n = 0, nkick = 0, i;
    int                 rc = MTACTL_FAIL, filtered, everything, r;

    if (queue_parse_opts(argc, argv, "ftsoa", &o) < 0) {
        free(o.ops);
        return MTACTL_USAGE;
    }
    filtered = queue_filtered(&o.f);
    /* flush with nothing named flushes everything, as postqueue -f does */
    if (op == QO_FLUSH && o.nops == 0 && !filtered)
        o.all = 1;
    /* ids, or --all with optional filters: never both, never neither (a
     * filter alone is not enough for a bulk change) */
    if ((o.nops > 0) == (o.all != 0) || (o.nops > 0 && filtered)) {
        fprintf(stderr, "usage: mtactl %s ID... | mtactl %s --all [--from S] "
            "[--to S] [--state S] [--older-than D]\n", argv[0], argv[0]);
        free(o.ops);
        return MTACTL_USAGE;
    }
    everything = op == QO_FLUSH && o.all && !filtered;
    if (everything && (r = queue_flush_everything(cfg)) >= 0) {
        free(o.ops);
        return r;
    }
    if (queue_become_owner(cfg, &cr) < 0) {
        free(o.ops);
        return MTACTL_FAIL;
    }
    if ((sp = queue_open_spool(cfg, argv[0])) == NULL ||
        (sel = queue_select(sp, &o, argv[0], &n)) == NULL)
        goto fail;
    rc = MTACTL_OK;
    kick = xcalloc(n + 1, sizeof(*kick));
    for (i = 0; i < n; i++) {
        if ((r = queue_one(sp, op, argv[0], sel[i], kick[nkick])) < 0)
            rc = MTACTL_FAIL;
        else if (r > 0)
            nkick++;
    }
    if (o.all)
        printf("-- %s: %zu message%s\n", argv[0], n, n == 1 ? "" : "s");
fail:
    spool_close(sp);
    queue_become_self(&cr);
    /* the kicks go out as ourselves, who may reach the control socket */
    if (kick != NULL && queue_kick_all(cfg, argv[0], kick, nkick,
        everything, op == QO_HOLD || op == QO_DELETE) != 0)
        rc = MTACTL_FAIL;
    for (i = 0; sel != NULL && i < n; i++)
        free(sel[i]);
    free(sel);
    free(kick);
    free(o.ops);
    return rc;
}
