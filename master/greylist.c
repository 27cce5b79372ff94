/*
 * greylist.c - "greylist list [PREFIX]", "greylist del NET [SENDER
 * [RCPT]]", "greylist flush" on the control socket (mtactl greylist), and
 * the prune of expired triplets on the master's tick.
 *
 * CONTRACT  greylist.mdb (<spool.dir>/greylist.mdb, grey/grey.h) is
 *           opened for each call and closed after it: the master forks
 *           workers, and an LMDB environment must not cross a fork (its
 *           fcntl locks would be dropped by the child's close).  The
 *           workers write the same file meanwhile; LMDB serialises.
 *           NET is a network as the list shows it, or a bare address,
 *           which names its greylist.ipv4_prefix / ipv6_prefix network.
 *           list answers one line per triplet: "NET SENDER RCPT
 *           state=waiting|passed age=Ns [last_pass=Ns] deferred=N" (at
 *           most GREYLIST_LIST_MAX lines).  del and flush are admin
 *           records (audit_request()); list is read-only.
 * FAILURE   "error: ..." and nothing changed.  A prune that fails is
 *           logged and tried again at the next period.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "grey/grey.h"
#include "master/master_int.h"
#include "master/ops.h"

#define GREYLIST_LIST_MAX 10000

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


void
ctl_greylist(struct master *m, const char *arg, char **out)
{
    const struct config *cfg = m->cur->cfg;
    struct greylist_out  o;
    struct grey         *g;
    struct buf           t;
    char                 err[512], prefix[GREY_KEY_MAX + 1];
    long                 n;

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
    if ((g = greylist_open(cfg, err, sizeof(err))) == NULL) {
        buf_printf(&t, "error: greylist: %s\n", err);
        goto done;
    }
    if (arg[0] == 'l') {
        buf_printf(&t, "ok\n");
        o = (struct greylist_out){ &t, util_wall_ms(), 0 };
        if (grey_each(g, prefix, greylist_line, &o) < 0)
            buf_printf(&t, "error: greylist: %s\n", grey_errstr(g));
    } else if ((n = grey_del(g, prefix)) < 0) {
        buf_printf(&t, "error: greylist: %s\n", grey_errstr(g));
    } else {
        buf_printf(&t, "ok\n%ld triplets removed\n", n);
    }
    grey_close(g);
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
    if ((g = greylist_open(cfg, err, sizeof(err))) == NULL) {
        log_warn("greylist: prune: %s", err);
        return;
    }
    greylist_params(cfg, &p);
    if ((n = grey_prune(g, util_wall_ms(), &p)) < 0)
        log_warn("greylist: prune: %s", grey_errstr(g));
    else if (n > 0)
        log_info("greylist: %ld expired triplets pruned", n);
    grey_close(g);
}
