/*
 * greylist.c - "greylist list [PREFIX]", "greylist del NET [SENDER
 * [RCPT]]", "greylist flush" on the control socket (mtactl greylist), and
 * the prune of expired triplets on the master's tick.
 *
 * CONTRACT  greylist.mdb (<spool.dir>/greylist.mdb, grey/grey.h) is never
 *           opened by the master itself: each call forks a child that
 *           drops to the workers' user first (the spool is that user's,
 *           who could have put a link there: root must not follow it, nor
 *           make the file root's), opens the file, answers through a
 *           pipe and exits.  So no LMDB environment lives in the master
 *           across the fork of a worker either.  The workers write the
 *           same file meanwhile; LMDB serialises.  The master waits for
 *           the answer (at most GREYLIST_CHILD_MS); the prune's child is
 *           not waited for (master_reap() takes it).
 *           NET is a network as the list shows it, or a bare address,
 *           which names its greylist.ipv4_prefix / ipv6_prefix network.
 *           list answers one line per triplet: "NET SENDER RCPT
 *           state=waiting|passed age=Ns [last_pass=Ns] deferred=N" (at
 *           most GREYLIST_LIST_MAX lines).  del and flush are admin
 *           records (audit_request()); list is read-only.
 * FAILURE   "error: ..." and nothing changed.  A prune that fails is
 *           logged and tried again at the next period.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "grey/grey.h"
#include "master/master_int.h"
#include "master/ops.h"

#define GREYLIST_LIST_MAX 10000
#define GREYLIST_CHILD_MS 10000
#define GREYLIST_ANSWER_MAX (8u << 20)  /* bytes of a list kept */

struct greylist_out {
    struct buf *t;
    uint64_t    now_ms;
    long        n;
};

static void
greylist_params(const struct config *cfg, struct grey_params *p)
{
    p->delay_ms = cfg->grey_delay_ms;
    p->expiry_ms = cfg->grey_expiry_ms;
    p->pass_lifetime_ms = cfg->grey_pass_lifetime_ms;
}


static struct grey *
greylist_open(const struct config *cfg, char *err, size_t errsz)
{
    struct grey *g;
    char         path[4096];

    snprintf(path, sizeof(path), "%s/%s", cfg->spool_dir, GREY_FILE);
    if (grey_open(&g, path) == 0)
        return g;
    snprintf(err, errsz, "%s", grey_errstr(g));
    grey_close(g);
    return NULL;
}


static uint64_t
greylist_ago_s(uint64_t now_ms, uint64_t t_ms)
{
    return now_ms > t_ms ? (now_ms - t_ms) / 1000 : 0;
}


/* greylist_line - one triplet; the key was cleaned by grey_key() (no
 * control bytes), escaped again all the same: it is client text. */
static int
greylist_line(const char *key, size_t klen, const struct grey_rec *rec,
    void *arg)
{
    struct greylist_out *o = arg;
    char                 esc[UTIL_ESC_ROOM(GREY_KEY_MAX)];

    if (o->n++ >= GREYLIST_LIST_MAX)
        return 1;
    util_escape(esc, sizeof(esc), key, klen, 0, NULL);
    buf_printf(o->t, "%s state=%s age=%llus", esc, rec->pass_ms ? "passed" :
        "waiting", (unsigned long long)greylist_ago_s(o->now_ms,
        rec->first_ms));
    if (rec->pass_ms)
        buf_printf(o->t, " last_pass=%llus", (unsigned long long)
            greylist_ago_s(o->now_ms, rec->pass_ms));
    buf_printf(o->t, " deferred=%llu\n", (unsigned long long)rec->deferred);
    return 0;
}


/* greylist_prefix - "NET [SENDER [RCPT]]" as a key prefix: a bare
 * address becomes its network; -1 when NET is neither. */
static int
greylist_prefix(const struct config *cfg, const char *arg, char *out,
    size_t outsz)
{
    struct sockaddr_storage ss;
    struct sockaddr_in     *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6    *s6 = (struct sockaddr_in6 *)&ss;
    struct cidr             c;
    char                    net[64];
    size_t                  len = strcspn(arg, " "), n;

    if (len == 0 || len >= sizeof(net))
        return -1;
    memcpy(net, arg, len);
    net[len] = '\0';
    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, net, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
    } else if (inet_pton(AF_INET6, net, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
    } else {
        if (strchr(net, '/') == NULL || util_parse_cidr(net, &c) != 0)
            return -1;
        snprintf(out, outsz, "%s", arg);    /* a network as listed */
        return 0;
    }
    n = grey_net((struct sockaddr *)&ss, (unsigned)cfg->grey_ipv4_prefix,
        (unsigned)cfg->grey_ipv6_prefix, out, outsz);
    if (n == 0)
        return -1;
    snprintf(out + n, outsz - n, "%s", arg + len);
    return 0;
}


/* greylist_op - in the child, as the workers' user: the answer to op
 * ('l' list, 'd' del or flush) for prefix into t. */
static void
greylist_op(const struct config *cfg, int op, const char *prefix,
    struct buf *t)
{
    struct greylist_out o;
    struct grey        *g;
    char                err[512];
    long                n;

    if ((g = greylist_open(cfg, err, sizeof(err))) == NULL) {
        buf_printf(t, "error: greylist: %s\n", err);
        return;
    }
    if (op == 'l') {
        buf_printf(t, "ok\n");
        o = (struct greylist_out){ t, util_wall_ms(), 0 };
        if (grey_each(g, prefix, greylist_line, &o) < 0)
            buf_printf(t, "error: greylist: %s\n", grey_errstr(g));
    } else if ((n = grey_del(g, prefix)) < 0) {
        buf_printf(t, "error: greylist: %s\n", grey_errstr(g));
    } else {
        buf_printf(t, "ok\n%ld triplets removed\n", n);
    }
    grey_close(g);
}


/* greylist_fork - a child as the workers' user (privs_drop), its write
 * end of a pipe in *wfd when rfd is not NULL; 0 in the child, its pid in
 * the master, -1 (logged) when it could not start. */
static pid_t
greylist_fork(struct master *m, int *rfd, int *wfd)
{
    int   p[2] = { -1, -1 };
    pid_t pid;

    if (rfd != NULL && pipe2(p, O_CLOEXEC) < 0) {
        log_warn("greylist: pipe: %s", strerror(errno));
        return -1;
    }
    if ((pid = fork()) < 0) {
        log_warn("greylist: fork: %s", strerror(errno));
        if (rfd != NULL) {
            close(p[0]);
            close(p[1]);
        }
        return -1;
    }
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != m->pid)
            _exit(1);
        proctitle_set(&m->title, "mtad: greylist", "mtad: master: greylist");
        privs_drop(&m->cur->privs);
        if (rfd != NULL) {
            close(p[0]);
            *wfd = p[1];
        }
        return 0;
    }
    if (rfd != NULL) {
        close(p[1]);
        *rfd = p[0];
    }
    return pid;
}


/* greylist_wait - the child's answer from fd into t (bounded in time),
 * then the child reaped. */
static void
greylist_wait(pid_t pid, int fd, struct buf *t)
{
    struct pollfd pfd = { fd, POLLIN, 0 };
    uint64_t      end = util_now_ms() + GREYLIST_CHILD_MS, now;
    char          chunk[4096];
    ssize_t       n;
    size_t        before = t->len;

    for (;;) {
        now = util_now_ms();
        if (now >= end || poll(&pfd, 1, (int)(end - now)) == 0) {
            (void)kill(pid, SIGKILL);
            t->len = before;
            buf_printf(t, "error: greylist: no answer in %ds\n",
                GREYLIST_CHILD_MS / 1000);
            break;
        }
        n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (t->len - before < GREYLIST_ANSWER_MAX)
            buf_append(t, chunk, (size_t)n);
    }
    close(fd);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (t->len == before)
        buf_printf(t, "error: greylist: the helper failed\n");
    buf_append(t, "", 1);           /* a C string for the reply */
    t->len--;
}


void
ctl_greylist(struct master *m, const char *arg, char **out)
{
    const struct config *cfg = m->cur->cfg;
    struct buf           t, a;
    char                 prefix[GREY_KEY_MAX + 1];
    pid_t                pid;
    int                  rfd = -1, wfd = -1;

    buf_init(&t);
    if (strcmp(arg, "list") != 0 && strncmp(arg, "list ", 5) != 0 &&
        strncmp(arg, "del ", 4) != 0 && strcmp(arg, "flush") != 0) {
        buf_printf(&t, "error: greylist: expected list [NET], del NET "
            "[SENDER [RCPT]] or flush\n");
        goto done;
    }
    prefix[0] = '\0';
    if ((arg[0] == 'l' && arg[4] == ' ') || arg[0] == 'd') {
        if (strlen(arg) > GREY_KEY_MAX || greylist_prefix(cfg,
            arg + (arg[0] == 'l' ? 5 : 4), prefix, sizeof(prefix)) < 0) {
            buf_printf(&t, "error: greylist: expected a client address or "
                "network like 192.0.2.0/24 first\n");
            goto done;
        }
    }
    if (!cfg->grey_enabled) {
        buf_printf(&t, "error: greylisting is off (greylist.enabled)\n");
        goto done;
    }
    if ((pid = greylist_fork(m, &rfd, &wfd)) < 0) {
        buf_printf(&t, "error: greylist: cannot start its helper\n");
        goto done;
    }
    if (pid == 0) {                 /* the child */
        buf_init(&a);
        greylist_op(cfg, arg[0] == 'l' ? 'l' : 'd', prefix, &a);
        _exit(util_write_all(wfd, a.data, a.len) == 0 ? 0 : 1);
    }
    greylist_wait(pid, rfd, &t);
done:
    *out = t.data;
}


void
greylist_tick(struct master *m, uint64_t now_ms)
{
    const struct config *cfg = m->cur->cfg;
    struct grey_params   p;
    struct grey         *g;
    char                 err[512];
    long                 n;

    if (!cfg->grey_enabled || now_ms < m->grey_prune_ms)
        return;
    m->grey_prune_ms = now_ms + GREYLIST_PRUNE_MS;
    if (greylist_fork(m, NULL, NULL) != 0)
        return;                     /* the master; master_reap() reaps */
    if ((g = greylist_open(cfg, err, sizeof(err))) == NULL) {
        log_warn("greylist: prune: %s", err);
        _exit(1);
    }
    greylist_params(cfg, &p);
    if ((n = grey_prune(g, util_wall_ms(), &p)) < 0)
        log_warn("greylist: prune: %s", grey_errstr(g));
    else if (n > 0)
        log_info("greylist: %ld expired triplets pruned", n);
    grey_close(g);
    log_flush();
    _exit(0);
}
