/*
 * tlsrpt_send.c - a worker sends one TLS-RPT report the master handed it.
 *
 * PURPOSE   The master keeps the day's counts but never touches the
 *           network or the spool (it is root; the spool is the workers'):
 *           it gives one (day, domain) to a worker, which looks up
 *           _smtp._tls.<domain> TXT with its own resolver and queues the
 *           report like a bounce: a new message in its spool, delivered
 *           by the normal path (routes, retries, DSNs to tlsrpt.sender).
 * CONTRACT  A CHAN_TLSRPT_SEND payload (common/chan.h): "<start_s>
 *           <end_s>\n" then the policy blocks of one domain (tlsrpt.h WIRE).  At most one report per message;
 *           recipients are the rua= mailto: addresses (at most
 *           TLS_RPT_RUA_MAX); https: ones are left out and logged.
 * FAILURE   Logged once, and the report dropped: no record, a bad record,
 *           a DNS failure, a spool error.  Reports are at most once: the
 *           master has already forgotten the counts it handed over.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "dns/dns.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"
#include "delivery/resolve.h"
#include "tlspol/tlspol.h"

struct tlsrpt_job {
    struct deliver    *d;
    struct tls_rpt_tab *tab;
    char               domain[TLS_RPT_DOMAIN_MAX];
    uint64_t           start_s, end_s;
};


static void
tlsrpt_job_free(struct tlsrpt_job *j)
{
    tls_rpt_tab_free(j->tab);
    free(j);
}


/* tlsrpt_ldh - a domain we may put in a header and a DNS query. */
static int
tlsrpt_ldh(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 253 || s[0] == '.' || s[0] == '-' || s[n - 1] == '.' ||
        strstr(s, "..") != NULL || strchr(s, '.') == NULL)
        return 0;
    for (; *s != '\0'; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.')
            return 0;
    return 1;
}


/* tlsrpt_queue - the report into the spool, for every rua address. */
static int
tlsrpt_queue(struct tlsrpt_job *j, char rua[][256], size_t nrua,
    char *newid, size_t idsz)
{
    const struct config *cfg = j->d->cfg;
    struct spool_rcpt    rc[TLS_RPT_RUA_MAX];
    const char          *to[TLS_RPT_RUA_MAX];
    struct spool_env     env;
    struct spool_msg    *m = NULL;
    struct tls_rpt_info   in;
    struct buf           out;
    char                 day[16], rid[512];
    int                  rcode;

    memset(rc, 0, sizeof(rc));
    for (size_t i = 0; i < nrua; i++) {
        rc[i].addr = rua[i];
        to[i] = rua[i];
    }
    memset(&in, 0, sizeof(in));
    in.organization = cfg->tlsrpt_organization;
    in.contact = cfg->tlsrpt_contact;
    in.submitter = cfg->hostname;
    in.sender = cfg->tlsrpt_sender;
    in.domain = j->domain;
    in.start_s = j->start_s;
    in.end_s = j->end_s;
    in.now_ms = util_wall_ms();
    tls_rpt_day_str(tls_rpt_day(j->start_s), day, sizeof(day));
    /* unique per domain and range; a dot-atom, so it is a Message-ID */
    snprintf(rid, sizeof(rid), "%s.%" PRIu64 ".%" PRIx64 ".%s@%s", day,
        j->end_s, in.now_ms, j->domain, cfg->hostname);
    in.report_id = rid;
    in.rua = to;
    in.nrua = nrua;

    buf_init(&out);
    if (tls_rpt_mail(j->tab, &in, &out) < 0) {
        buf_free(&out);
        snprintf(newid, idsz, "gzip failed");
        return -1;
    }
    memset(&env, 0, sizeof(env));
    env.sender = cfg->tlsrpt_sender;
    env.arrival_ms = in.now_ms;
    env.body = SMTP_BODY_7BIT;
    env.client_ip = "127.0.0.1";
    env.helo = cfg->hostname;
    env.rcpt = rc;
    env.nrcpt = nrua;
    rcode = spool_create(j->d->sp, &env, &m);
    if (rcode == SPOOL_OK)
        rcode = spool_write(m, buf_head(&out), buf_avail(&out));
    if (rcode == SPOOL_OK)
        rcode = spool_finish(m);
    if (rcode == SPOOL_OK) {
        util_strlcpy(newid, spool_msg_id(m), idsz);
        if ((rcode = spool_commit(m)) == SPOOL_OK)
            m = NULL;
    }
    buf_free(&out);
    if (rcode != SPOOL_OK) {
        snprintf(newid, idsz, "%s", spool_errstr(j->d->sp));
        spool_abort(m);
        return -1;
    }
    return 0;
}


/* tlsrpt_txt_done - the _smtp._tls TXT answer: parse rua=, queue. */
static void
tlsrpt_txt_done(struct dns_rrset *set, void *arg)
{
    struct tlsrpt_job *j = arg;
    char               rua[TLS_RPT_RUA_MAX][256], err[256], id[256];
    char               txt[16][512];
    const char        *tv[16];
    size_t             ntxt = 0, nrua, nhttps;

    if (set->status != DNS_OK) {
        log_info("tlsrpt: %s: no report sent: _smtp._tls.%s TXT: %s",
            j->domain, j->domain, set->status == DNS_NXDOMAIN ||
            set->status == DNS_NODATA ? "no record" :
            dns_status_name(set->status));
        goto done;
    }
    for (size_t i = 0; i < set->n && ntxt < 16; i++) {
        if (set->rr[i].type != DNS_T_TXT ||
            dns_txt_join(&set->rr[i], txt[ntxt], sizeof(txt[0])) < 0)
            continue;
        tv[ntxt] = txt[ntxt];
        ntxt++;
    }
    if (tls_rpt_rua_parse(tv, ntxt, rua, &nrua, &nhttps, err,
        sizeof(err)) < 0) {
        log_info("tlsrpt: %s: no report sent: _smtp._tls.%s: %s", j->domain,
            j->domain, err);
        goto done;
    }
    if (tlsrpt_queue(j, rua, nrua, id, sizeof(id)) < 0) {
        log_warn("tlsrpt: %s: cannot queue the report: %s", j->domain, id);
        goto done;
    }
    log_ev(LOGL_INFO, "tlsrpt", LOG_KVS(LKV_S("queue_id", id),
        LKV_S("domain", j->domain), LKV_I("rcpts", nrua),
        LKV_I("https_left_out", nhttps)),
        "%s: TLS report for %s to <%s>%s (%zu https: reporting URI%s left "
        "out)", id, j->domain, rua[0], nrua > 1 ? " and more" : "", nhttps,
        nhttps == 1 ? "" : "s");
    deliver_submit(j->d, id);
done:
    dns_rrset_free(set);
    tlsrpt_job_free(j);
}


void
deliver_tlsrpt_send(struct deliver *d, const char *msg, size_t n)
{
    struct tlsrpt_job *j = xcalloc(1, sizeof(*j));
    const char        *nl = memchr(msg, '\n', n);
    char               err[160], name[DNS_NAME_MAX + 16];
    struct dns        *dns = resolve_dns(d->resolve);
    size_t             np;
    int                got;

    j->d = d;
    j->tab = tls_rpt_tab_new();
    if (nl == NULL || sscanf(msg, "%" SCNu64 " %" SCNu64 "%n",
        &j->start_s, &j->end_s, &got) != 2 || msg + got != nl ||
        j->end_s < j->start_s) {
        log_warn("tlsrpt: bad request from the master");
        goto fail;
    }
    if (tls_rpt_tab_merge(j->tab, nl + 1, n - (size_t)(nl + 1 - msg), err,
        sizeof(err)) < 0) {
        log_warn("tlsrpt: bad request from the master: %s", err);
        goto fail;
    }
    np = tls_rpt_tab_count(j->tab);
    if (np > 0 && tls_rpt_tab_domain(j->tab, j->domain,
        sizeof(j->domain)) < 0)
        np = 0;                     /* one domain per request */
    if (np == 0) {
        log_warn("tlsrpt: bad request from the master: not one domain");
        goto fail;
    }
    if (!tlsrpt_ldh(j->domain)) {
        char e[UTIL_ESC_ROOM(64)];

        util_escape(e, sizeof(e), j->domain, strnlen(j->domain, 64), 0, NULL);
        log_info("tlsrpt: %s: no report sent: not a DNS name", e);
        goto fail;
    }
    if (dns == NULL) {
        log_warn("tlsrpt: %s: no report sent: no resolver", j->domain);
        goto fail;
    }
    snprintf(name, sizeof(name), "_smtp._tls.%s", j->domain);
    if (dns_query(dns, name, DNS_T_TXT, tlsrpt_txt_done, j, NULL) != 0) {
        log_warn("tlsrpt: %s: no report sent: cannot ask for %s", j->domain,
            name);
        goto fail;
    }
    return;
fail:
    tlsrpt_job_free(j);
}
