/*
 * quota.c - "quota list", "quota set KIND KEY|* [messages=N] [bytes=S]",
 * "quota del KIND KEY|*" on the control socket (mtactl quota): the queue
 * quotas' usage and limits on the shared status page (common/status.h),
 * and the reclaim of idle rows on the master's tick.
 *
 * CONTRACT  KIND is sender_domain, recipient_domain, user or network; KEY
 *           as the workers count it (a domain lower-cased, a network like
 *           192.0.2.0/24; a bare address names its network), * the kind's
 *           limit for every key.  set overrides relay.yaml's limit at once
 *           on every worker (0: no quota) until del, or until mtad stops:
 *           a reload keeps it, nothing is written to relay.yaml.  list
 *           answers one line per kind with a limit ("KIND * messages=L
 *           bytes=L [override]") and one per key counted ("KIND KEY
 *           messages=N/L bytes=N/L [override] [over]", L "-" for none).
 *           set and del are admin records (audit_request()); list is not.
 * FAILURE   "error: ..." and nothing changed; with no quota in relay.yaml
 *           nothing is counted, so the requests say so.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "common/buf.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "delivery/delivery.h"
#include "master/master_int.h"
#include "master/ops.h"

static int
quota_on(const struct config *cfg)
{
    int i;

    for (i = 0; i < CONFIG_QUOTA_KINDS; i++)
        if (cfg->quota_msgs[i] != 0 || cfg->quota_bytes[i] != 0)
            return 1;
    return 0;
}


static void
quota_lim(struct buf *t, uint64_t lim)
{
    if (lim == 0)
        buf_printf(t, "-");
    else
        buf_printf(t, "%" PRIu64, lim);
}


static void
quota_list(struct master *m, struct buf *t)
{
    const struct config *cfg = m->cur->cfg;
    struct status_page  *sp = m->status;
    struct status_quota_use u;
    uint64_t             lm, lb;
    char                 esc[UTIL_ESC_ROOM(STATUS_QUOTA_KEY_MAX)];
    unsigned             k;
    size_t               i;
    int                  first;

    buf_printf(t, "ok\n");
    for (k = 0; k < STATUS_QK_MAX; k++) {
        lm = deliver_quota_limit(cfg, sp, k, 0, 0);
        lb = deliver_quota_limit(cfg, sp, k, 0, 1);
        if (lm == 0 && lb == 0 && sp->quota_def_msgs[k] == 0 &&
            sp->quota_def_bytes[k] == 0)
            continue;
        buf_printf(t, "%s * messages=", status_quota_kind_name(k));
        quota_lim(t, lm);
        buf_printf(t, " bytes=");
        quota_lim(t, lb);
        buf_printf(t, "%s\n", sp->quota_def_msgs[k] || sp->quota_def_bytes[k]
            ? " override" : "");
    }
    for (i = 0; i < STATUS_QUOTA_SLOTS; i++) {
        const struct status_quota_row *r = &sp->quota[i];
        uint64_t tag = __atomic_load_n(&r->tag, __ATOMIC_ACQUIRE);

        if (tag == 0 || tag == STATUS_QUOTA_FREEING ||
            __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE) != tag)
            continue;
        status_quota_sum(sp, r->kind, r->key, r->klen, &u, &first);
        if (first != (int)i)
            continue;               /* a second row of the key: summed */
        if (u.msgs == 0 && u.bytes == 0 && u.lim_msgs == 0 &&
            u.lim_bytes == 0)
            continue;
        util_escape(esc, sizeof(esc), r->key, r->klen, 0, NULL);
        buf_printf(t, "%s %s messages=%" PRId64 "/",
            status_quota_kind_name(r->kind), esc, u.msgs);
        quota_lim(t, deliver_quota_limit(cfg, sp, r->kind, u.lim_msgs, 0));
        buf_printf(t, " bytes=%" PRId64 "/", u.bytes);
        quota_lim(t, deliver_quota_limit(cfg, sp, r->kind, u.lim_bytes, 1));
        buf_printf(t, "%s%s\n", u.lim_msgs || u.lim_bytes ? " override" : "",
            r->over ? " over" : "");
    }
}


/* quota_key - KEY of kind as the workers count it into out; 0 bad. */
static size_t
quota_key(const struct config *cfg, unsigned kind, const char *v, char *out)
{
    struct cidr c;
    char        ip[INET6_ADDRSTRLEN + 8], addr[STATUS_QUOTA_KEY_MAX + 3];
    const char *slash;

    if (kind == STATUS_QK_SENDER || kind == STATUS_QK_RCPT) {
        if (strlen(v) > STATUS_QUOTA_KEY_MAX || strchr(v, '@') != NULL)
            return 0;
        snprintf(addr, sizeof(addr), "x@%s", v);    /* as an address's */
        return deliver_quota_key(cfg, kind, addr, out);
    }
    if (kind == STATUS_QK_NET && (slash = strchr(v, '/')) != NULL) {
        if (util_parse_cidr(v, &c) != 0 ||
            (size_t)(slash - v) >= sizeof(ip))
            return 0;
        memcpy(ip, v, (size_t)(slash - v));
        ip[slash - v] = '\0';
        return deliver_quota_key(cfg, kind, ip, out);   /* its network */
    }
    return deliver_quota_key(cfg, kind, v, out);
}


/* quota_parse_lims - "messages=N" / "bytes=S" words into *lm1 / *lb1
 * (limit + 1; untouched when absent); -1 on anything else. */
static int
quota_parse_lims(const char *p, uint64_t *lm1, uint64_t *lb1)
{
    char     word[64], *end;
    size_t   n;
    uint64_t v;

    while (*p == ' ')
        p++;
    while (*p != '\0') {
        n = strcspn(p, " ");
        if (n >= sizeof(word))
            return -1;
        memcpy(word, p, n);
        word[n] = '\0';
        p += n;
        while (*p == ' ')
            p++;
        if (strncmp(word, "messages=", 9) == 0) {
            v = strtoull(word + 9, &end, 10);
            if (word[9] < '0' || word[9] > '9' || *end != '\0' ||
                v > 2147483647)
                return -1;
            *lm1 = v + 1;
        } else if (strncmp(word, "bytes=", 6) == 0) {
            if (util_parse_size(word + 6, &v) != 0 || v == UINT64_MAX)
                return -1;
            *lb1 = v + 1;
        } else {
            return -1;
        }
    }
    return 0;
}


void
ctl_quota(struct master *m, const char *arg, char **out)
{
    const struct config *cfg = m->cur->cfg;
    struct status_page  *sp = m->status;
    struct buf           t;
    char                 kind_s[32], key_s[STATUS_QUOTA_KEY_MAX + 1];
    char                 key[STATUS_QUOTA_KEY_MAX + 1];
    uint64_t             lm1 = 0, lb1 = 0;
    size_t               n, klen = 0;
    int                  set, kind, row;

    buf_init(&t);
    if (!quota_on(cfg)) {
        buf_printf(&t, "error: no quota in relay.yaml (quotas): the queue "
            "is not counted\n");
        goto done;
    }
    if (strcmp(arg, "list") == 0) {
        quota_list(m, &t);
        goto done;
    }
    set = strncmp(arg, "set ", 4) == 0;
    if (!set && strncmp(arg, "del ", 4) != 0)
        goto bad;
    arg += 4;
    if ((n = strcspn(arg, " ")) == 0 || n >= sizeof(kind_s))
        goto bad;
    memcpy(kind_s, arg, n);
    kind_s[n] = '\0';
    arg += n + (arg[n] == ' ');
    if ((kind = status_quota_kind(kind_s)) < 0 ||
        (n = strcspn(arg, " ")) == 0 || n >= sizeof(key_s))
        goto bad;
    memcpy(key_s, arg, n);
    key_s[n] = '\0';
    arg += n;
    if (set && (quota_parse_lims(arg, &lm1, &lb1) < 0 ||
        (lm1 == 0 && lb1 == 0)))
        goto bad;
    if (!set && *arg != '\0')
        goto bad;
    if (strcmp(key_s, "*") != 0 &&
        (klen = quota_key(cfg, (unsigned)kind, key_s, key)) == 0) {
        buf_printf(&t, "error: quota: %s is not a %s key\n", key_s, kind_s);
        goto done;
    }
    if (klen == 0) {                        /* the kind's limits */
        if (!set || lm1)
            sp->quota_def_msgs[kind] = lm1;
        if (!set || lb1)
            sp->quota_def_bytes[kind] = lb1;
        buf_printf(&t, "ok\n%s *: %s\n", kind_s, set ? "limit set" :
            "back to relay.yaml's limit");
        goto done;
    }
    row = status_quota_row(sp, (unsigned)kind, key, klen, set,
        (uint32_t)(util_now_ms() / 1000));
    if (row < 0) {
        buf_printf(&t, set ? "error: quota: the table is full there\n" :
            "ok\n%s %s: no override\n", kind_s, key);
        goto done;
    }
    if (!set || lm1)
        __atomic_store_n(&sp->quota[row].lim_msgs, lm1, __ATOMIC_RELEASE);
    if (!set || lb1)
        __atomic_store_n(&sp->quota[row].lim_bytes, lb1, __ATOMIC_RELEASE);
    buf_printf(&t, "ok\n%s %s: %s\n", kind_s, key, set ? "limit set" :
        "back to the kind's limit");
    deliver_quota_end(cfg, sp, row);        /* a raised limit ends it */
    goto done;
bad:
    buf_printf(&t, "error: quota: expected list, set KIND KEY|* "
        "[messages=N] [bytes=SIZE] or del KIND KEY|* (KIND: sender_domain, "
        "recipient_domain, user, network)\n");
done:
    *out = t.data;
}


void
quota_tick(struct master *m, uint64_t now_ms)
{
    if (m->ticks % 30 != 0 || !quota_on(m->cur->cfg))
        return;
    (void)status_quota_reclaim(m->status, (uint32_t)(now_ms / 1000), 60);
}
