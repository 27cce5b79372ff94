/*
 * sts_fetch.c - the HTTPS fetch of MTA-STS policies (RFC 8461 3.3) with
 * libcurl's multi-socket API driven by the worker's ev loop: libcurl's
 * socket callback becomes ev_watch(), its timer one ev_timer, readiness
 * goes back through curl_multi_socket_action(); no thread, no blocking
 * call.  Private to tlspol/sts*.c (tlspol_int.h).
 *
 * SANDBOX   tls_sts_curl_init() runs in worker_init(), before Landlock and
 *           seccomp: it reads the CA bundle into memory (CURLOPT_CAINFO_BLOB;
 *           no CA file or directory is opened later) and makes the multi
 *           handle (its wake-up socketpair).  A fetch then needs only what
 *           the worker's filter allows already (socket, connect, poll,
 *           getsockopt, setsockopt, send/recv); libcurl's resolver is never
 *           used (CURLOPT_RESOLVE fills its DNS cache), so it starts no
 *           thread and reads no resolv.conf.
 * FAILURE   A failed fetch ends in tls_sts_failed() (sts.c), which logs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "tlspol/tlspol_int.h"

static size_t
tls_sts_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct tls_sts_fetch *f = arg;
    size_t             n = size * nmemb;

    if (f->len + n > STS_POLICY_MAX) {
        f->too_big = 1;
        return 0;                   /* libcurl stops: CURLE_WRITE_ERROR */
    }
    f->body = xrealloc(f->body, f->len + n + 1);
    memcpy(f->body + f->len, ptr, n);
    f->len += n;
    return n;
}


void
tls_sts_fetch_free(struct tls_sts_fetch *f)
{
    if (f == NULL)
        return;
    if (f->easy != NULL) {
        curl_multi_remove_handle(f->e->s->multi, f->easy);
        curl_easy_cleanup(f->easy);
    }
    curl_slist_free_all(f->resolve);
    free(f->body);
    free(f);
}


/* tls_sts_fetched - the transfer ended with rc: check and parse, then
 * complete the entry's waiters. */
static void
tls_sts_fetched(struct tls_sts_fetch *f, CURLcode rc)
{
    struct tls_sts_entry *e = f->e;
    struct sts_policy *p = &e->s->scratch;
    char               why[300], esc[UTIL_ESC_ROOM(200)];
    long               code = 0;
    char              *ct = NULL;

    e->f = NULL;
    (void)curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &code);
    (void)curl_easy_getinfo(f->easy, CURLINFO_CONTENT_TYPE, &ct);
    if (rc != CURLE_OK) {
        const char *m = f->too_big ? "policy larger than 64 KiB" :
            f->err[0] ? f->err : curl_easy_strerror(rc);

        util_escape(esc, sizeof(esc), m, strnlen(m, 200), 0, NULL);
        snprintf(why, sizeof(why), "fetch failed: %.250s", esc);
    } else if (code != 200) {
        snprintf(why, sizeof(why), "fetch failed: HTTP status %ld", code);
    } else if (!tls_sts_content_type_ok(ct)) {
        util_escape(esc, sizeof(esc), ct ? ct : "none",
            strnlen(ct ? ct : "none", 100), 0, NULL);
        snprintf(why, sizeof(why), "fetch failed: Content-Type %.200s, not "
            "text/plain", esc);
    } else if (sts_policy_parse(f->body ? f->body : "", f->len, p, esc,
        sizeof(esc)) != 0) {
        snprintf(why, sizeof(why), "invalid policy: %.250s", esc);
    } else {
        tls_sts_store(e, p, ev_now(e->s->loop));
        e->use = 1;
        snprintf(e->why, sizeof(e->why), "fetched policy id=%s mode=%s "
            "max_age=%u", e->id, sts_mode_name(e->mode), e->max_age);
        if (p->mx_ignored > 0)
            log_warn("mta-sts: %s: %s; %zu mx patterns past the first %d "
                "ignored (an MX only they allow is refused)", e->domain,
                e->why, p->mx_ignored, STS_MX_MAX);
        else
            log_info("mta-sts: %s: %s", e->domain, e->why);
        tls_sts_fetch_free(f);
        tls_sts_complete(e);
        return;
    }
    tls_sts_fetch_free(f);
    tls_sts_failed(e, why);
    tls_sts_complete(e);
}


/* tls_sts_resolve_list - "mta-sts.<domain>:port:addr,addr" for
 * CURLOPT_RESOLVE (IPv6 in brackets). */
static void
tls_sts_resolve_list(const struct tls_sts_entry *e, const struct dns_host *h,
    char *out, size_t outsz)
{
    size_t o, i;

    o = (size_t)snprintf(out, outsz, "mta-sts.%s:%u:", e->domain,
        e->s->port);
    for (i = 0; i < h->naddr && o + 50 < outsz; i++) {
        char a[64];

        dns_addr_str(&h->addr[i], a, sizeof(a));
        o += (size_t)snprintf(out + o, outsz - o, h->addr[i].family ==
            AF_INET6 ? "%s[%s]" : "%s%s", i ? "," : "", a);
    }
}


int
tls_sts_fetch_start(struct tls_sts_entry *e, const struct dns_host *h)
{
    struct tls_sts       *s = e->s;
    struct tls_sts_fetch *f = xcalloc(1, sizeof(*f));
    struct curl_blob   ca = { s->ca, s->calen, CURL_BLOB_NOCOPY };
    char               url[DNS_NAME_MAX + 80], res[DNS_NAME_MAX + 600];
    CURL              *c;
    CURLcode           rc = CURLE_OK;

    f->e = e;
    if (s->port == 443)
        snprintf(url, sizeof(url), "https://mta-sts.%s/.well-known/"
            "mta-sts.txt", e->domain);
    else
        snprintf(url, sizeof(url), "https://mta-sts.%s:%u/.well-known/"
            "mta-sts.txt", e->domain, s->port);
    tls_sts_resolve_list(e, h, res, sizeof(res));
    if ((f->resolve = curl_slist_append(NULL, res)) == NULL ||
        (f->easy = c = curl_easy_init()) == NULL) {
        tls_sts_fetch_free(f);
        return -1;
    }
#define SET(o, v) do { if (rc == CURLE_OK) rc = curl_easy_setopt(c, o, v); } \
    while (0)
    SET(CURLOPT_URL, url);
    SET(CURLOPT_PRIVATE, f);
    SET(CURLOPT_ERRORBUFFER, f->err);
    SET(CURLOPT_RESOLVE, f->resolve);
    SET(CURLOPT_PROTOCOLS_STR, "https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);        /* RFC 8461 3.3 */
    SET(CURLOPT_PROXY, "");                 /* never *_proxy from the env */
    SET(CURLOPT_NOSIGNAL, 1L);              /* no sigaction: seccomp */
    SET(CURLOPT_FORBID_REUSE, 1L);          /* no idle socket left open */
    SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SET(CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    SET(CURLOPT_SSL_VERIFYPEER, 1L);
    SET(CURLOPT_SSL_VERIFYHOST, 2L);
    SET(CURLOPT_CAINFO, NULL);              /* only the bundle below */
    SET(CURLOPT_CAPATH, NULL);
    SET(CURLOPT_CAINFO_BLOB, &ca);
    SET(CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)s->timeout_ms);
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)STS_POLICY_MAX);
    SET(CURLOPT_WRITEFUNCTION, tls_sts_body);
    SET(CURLOPT_WRITEDATA, f);
    SET(CURLOPT_USERAGENT, "mtad (MTA-STS)");
#undef SET
    if (rc != CURLE_OK ||
        curl_multi_add_handle(s->multi, c) != CURLM_OK) {
        log_warn("mta-sts: %s: cannot set up the fetch: %s", e->domain,
            curl_easy_strerror(rc));
        tls_sts_fetch_free(f);
        return -1;
    }
    e->f = f;
    e->state = E_FETCH;
    return 0;
}


/* ---- libcurl on the ev loop ---- */

static void
tls_sts_check(struct tls_sts *s)
{
    CURLMsg *m;
    int      left;

    while ((m = curl_multi_info_read(s->multi, &left)) != NULL) {
        struct tls_sts_fetch *f = NULL;

        if (m->msg != CURLMSG_DONE)
            continue;
        (void)curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &f);
        if (f != NULL)
            tls_sts_fetched(f, m->data.result);
    }
}


static void
tls_sts_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct tls_sts *s = arg;
    int          flags = 0, running;

    (void)loop;
    if (ev & EV_READ)
        flags |= CURL_CSELECT_IN;
    if (ev & EV_WRITE)
        flags |= CURL_CSELECT_OUT;
    if (ev & EV_ERROR)
        flags |= CURL_CSELECT_ERR;
    (void)curl_multi_socket_action(s->multi, fd, flags, &running);
    tls_sts_check(s);
}


static void
tls_sts_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct tls_sts *s = arg;
    int          running;

    (void)loop;
    (void)t;
    (void)curl_multi_socket_action(s->multi, CURL_SOCKET_TIMEOUT, 0,
        &running);
    tls_sts_check(s);
}


static int
tls_sts_sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
    void *socketp)
{
    struct tls_sts *s = userp;
    unsigned     mask = 0;

    (void)easy;
    (void)socketp;
    if (what == CURL_POLL_REMOVE) {
        ev_unwatch(s->loop, fd);
        return 0;
    }
    if (what & CURL_POLL_IN)
        mask |= EV_READ;
    if (what & CURL_POLL_OUT)
        mask |= EV_WRITE;
    if (ev_watch(s->loop, fd, mask, tls_sts_io, s) < 0) {
        log_warn("mta-sts: epoll_ctl: %s", strerror(errno));
        return -1;                  /* libcurl fails the transfer */
    }
    return 0;
}


static int
tls_sts_timer_cb(CURLM *multi, long ms, void *userp)
{
    struct tls_sts *s = userp;

    (void)multi;
    if (ms < 0)
        ev_timer_stop(s->loop, &s->ctimer);
    else
        ev_timer_start(s->loop, &s->ctimer, (uint64_t)ms);
    return 0;
}


/* tls_sts_ca_read - the whole CA bundle into memory (before the sandbox). */
static int
tls_sts_ca_read(struct tls_sts *s, const char *path, char *why, size_t whysz)
{
    struct stat st;
    ssize_t     n;
    size_t      got = 0;
    int         fd;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(why, whysz, "CA bundle %s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        st.st_size > TLS_STS_CA_MAX) {
        snprintf(why, whysz, "CA bundle %s: not a regular file of 1 byte "
            "to 8 MiB", path);
        close(fd);
        return -1;
    }
    s->ca = xmalloc((size_t)st.st_size);
    while (got < (size_t)st.st_size &&
        (n = read(fd, s->ca + got, (size_t)st.st_size - got)) > 0)
        got += (size_t)n;
    close(fd);
    s->calen = got;
    return 0;
}

int
tls_sts_curl_init(struct tls_sts *s, const char *ca_file, char *why,
    size_t whysz)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(why, whysz, "curl_global_init failed");
        return -1;
    }
    if (tls_sts_ca_read(s, ca_file != NULL ? ca_file : TLS_STS_SYSTEM_CA, why,
        whysz) < 0)
        return -1;
    if ((s->multi = curl_multi_init()) == NULL) {
        snprintf(why, whysz, "curl_multi_init failed");
        free(s->ca);
        s->ca = NULL;
        return -1;
    }
    ev_timer_init(&s->ctimer, tls_sts_timer, s);
    (void)curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, tls_sts_sock_cb);
    (void)curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s);
    (void)curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, tls_sts_timer_cb);
    (void)curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s);
    return 0;
}


void
tls_sts_curl_free(struct tls_sts *s)
{
    ev_timer_stop(s->loop, &s->ctimer);
    curl_multi_cleanup(s->multi);
    free(s->ca);
}
