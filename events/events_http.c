/*
 * events_http.c - the HTTP(S) target: each batch is one POST of JSON lines
 * (Content-Type application/x-ndjson) with libcurl's multi-socket API on
 * the worker's loop (as the MTA-STS fetch, tlspol/sts_fetch.c), one easy
 * handle kept so the connection stays open between batches.
 *
 * SIGNATURE With events.http.secret_file, "X-Mtad-Signature: sha256=<hex>"
 *           is HMAC-SHA256 of the body under the file's first line (the
 *           receiver checks it as GitHub's webhooks do).
 * SANDBOX   Everything that needs a file or DNS happens in events_http_new()
 *           (before the worker's sandbox): the secret and the CA bundle are
 *           read into memory, the URL's host resolved once into
 *           CURLOPT_RESOLVE (libcurl's resolver is never used).
 * FAILURE   A transfer error, a timeout or a status other than 2xx fails the
 *           batch (events_offered(e, 0, why)); the reader backs off.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/stat.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "events/events.h"
#include "events/events_int.h"

#define EVH_SECRET_MAX 4096
#define EVH_CA_MAX     (8u << 20)
#define EVH_SYSTEM_CA  "/etc/ssl/certs/ca-certificates.crt"

struct evh {
    struct events_target base;
    CURLM              *multi;
    CURL               *easy;
    struct ev_timer     ctimer;
    struct curl_slist  *resolve;
    struct curl_slist  *hdrs;
    char               *ca;
    size_t              calen;
    unsigned char       secret[EVH_SECRET_MAX];
    size_t              secretlen;
    int                 busy;
    char                err[CURL_ERROR_SIZE];
};


/* evh_read_file - the whole file (at most max bytes) into *out. */
static int
evh_read_file(const char *path, size_t max, char **out, size_t *len,
    char *why, size_t whysz)
{
    struct stat st;
    int         fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t      got = 0;
    ssize_t     n;

    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size <= 0 || (uint64_t)st.st_size > max) {
        snprintf(why, whysz, "events: %s: %s", path, fd < 0 ?
            strerror(errno) : "not a regular file of a sensible size");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *out = xmalloc((size_t)st.st_size + 1);
    while (got < (size_t)st.st_size &&
        (n = read(fd, *out + got, (size_t)st.st_size - got)) > 0)
        got += (size_t)n;
    close(fd);
    (*out)[got] = '\0';
    *len = got;
    return 0;
}


/* evh_resolve - "host:port:addr" for CURLOPT_RESOLVE, from the URL. */
static int
evh_resolve(struct evh *h, const char *url, char *why, size_t whysz)
{
    CURLU          *u = curl_url();
    char           *host = NULL, *port = NULL, line[512], addr[64];
    struct addrinfo hints, *ai = NULL;
    int             rc = -1;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (u == NULL || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) !=
        CURLUE_OK) {
        snprintf(why, whysz, "events.http.url: cannot parse the URL");
        goto out;
    }
    {
        /* [::1] comes with its brackets */
        char   bare[256];
        size_t hl = strlen(host);

        if (hl >= 2 && host[0] == '[' && hl < sizeof(bare)) {
            memcpy(bare, host + 1, hl - 2);
            bare[hl - 2] = '\0';
        } else
            util_strlcpy(bare, host, sizeof(bare));
        if (getaddrinfo(bare, port, &hints, &ai) != 0 || ai == NULL) {
            snprintf(why, whysz, "events.http.url: cannot resolve %.200s",
                bare);
            goto out;
        }
    }
    (void)util_sockaddr_ip(ai->ai_addr, addr, sizeof(addr));
    snprintf(line, sizeof(line), ai->ai_family == AF_INET6 ? "%s:%s:[%s]" :
        "%s:%s:%s", host, port, addr);
    h->resolve = curl_slist_append(NULL, line);
    rc = 0;
out:
    if (ai != NULL)
        freeaddrinfo(ai);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}


/* ---- libcurl on the loop ---- */

static void
evh_check(struct evh *h)
{
    CURLMsg *m;
    int      left;

    while ((m = curl_multi_info_read(h->multi, &left)) != NULL) {
        long status = 0;
        char why[300];

        if (m->msg != CURLMSG_DONE)
            continue;
        (void)curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_multi_remove_handle(h->multi, h->easy);
        h->busy = 0;
        if (m->data.result != CURLE_OK) {
            char esc[UTIL_ESC_ROOM(200)];
            const char *msg = h->err[0] ? h->err :
                curl_easy_strerror(m->data.result);

            util_escape(esc, sizeof(esc), msg, strnlen(msg, 200), 0, NULL);
            events_offered(h->base.e, 0, esc);
        } else if (status < 200 || status > 299) {
            snprintf(why, sizeof(why), "HTTP status %ld", status);
            events_offered(h->base.e, 0, why);
        } else {
            events_offered(h->base.e, 1, NULL);
        }
        return;                     /* one transfer at a time */
    }
}


static void
evh_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct evh *h = arg;
    int         flags = 0, running;

    (void)loop;
    flags |= (ev & EV_READ) ? CURL_CSELECT_IN : 0;
    flags |= (ev & EV_WRITE) ? CURL_CSELECT_OUT : 0;
    flags |= (ev & EV_ERROR) ? CURL_CSELECT_ERR : 0;
    (void)curl_multi_socket_action(h->multi, fd, flags, &running);
    evh_check(h);
}


static void
evh_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct evh *h = arg;
    int         running;

    (void)loop;
    (void)t;
    (void)curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0,
        &running);
    evh_check(h);
}


static int
evh_sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *sockp)
{
    struct evh *h = userp;
    unsigned    mask = 0;

    (void)easy;
    (void)sockp;
    if (what == CURL_POLL_REMOVE) {
        ev_unwatch(h->base.e->loop, fd);
        return 0;
    }
    mask |= (what & CURL_POLL_IN) ? EV_READ : 0;
    mask |= (what & CURL_POLL_OUT) ? EV_WRITE : 0;
    return ev_watch(h->base.e->loop, fd, mask, evh_io, h) < 0 ? -1 : 0;
}


static int
evh_timer_cb(CURLM *multi, long ms, void *userp)
{
    struct evh *h = userp;

    (void)multi;
    if (ms < 0)
        ev_timer_stop(h->base.e->loop, &h->ctimer);
    else
        ev_timer_start(h->base.e->loop, &h->ctimer, (uint64_t)ms);
    return 0;
}


static size_t
evh_discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;                /* the reply's body is not read */
}


/* ---- the target ---- */

static int
evh_offer(struct events_target *t, const char *b, size_t len, size_t n,
    char *why, size_t whysz)
{
    struct evh        *h = (struct evh *)t;
    struct curl_slist *hdrs = NULL;
    char               line[64 + 2 * EVP_MAX_MD_SIZE];

    curl_slist_free_all(h->hdrs);
    hdrs = curl_slist_append(hdrs, "Content-Type: application/x-ndjson");
    snprintf(line, sizeof(line), "X-Mtad-Events: %zu", n);
    hdrs = curl_slist_append(hdrs, line);
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (h->secretlen > 0) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int  ml = 0;
        char          hex[2 * EVP_MAX_MD_SIZE + 1];

        (void)HMAC(EVP_sha256(), h->secret, (int)h->secretlen,
            (const unsigned char *)b, len, mac, &ml);
        for (unsigned i = 0; i < ml; i++)
            snprintf(hex + 2 * i, 3, "%02x", mac[i]);
        snprintf(line, sizeof(line), "X-Mtad-Signature: sha256=%s", hex);
        hdrs = curl_slist_append(hdrs, line);
    }
    h->hdrs = hdrs;
    h->err[0] = '\0';
    (void)curl_easy_setopt(h->easy, CURLOPT_HTTPHEADER, hdrs);
    (void)curl_easy_setopt(h->easy, CURLOPT_POSTFIELDS, b);
    (void)curl_easy_setopt(h->easy, CURLOPT_POSTFIELDSIZE_LARGE,
        (curl_off_t)len);
    if (curl_multi_add_handle(h->multi, h->easy) != CURLM_OK) {
        snprintf(why, whysz, "cannot start the POST");
        return -1;
    }
    h->busy = 1;
    return 0;
}


static void
evh_free(struct events_target *t)
{
    struct evh *h = (struct evh *)t;

    ev_timer_stop(h->base.e->loop, &h->ctimer);
    if (h->busy)
        curl_multi_remove_handle(h->multi, h->easy);
    if (h->easy != NULL)
        curl_easy_cleanup(h->easy);
    if (h->multi != NULL)
        curl_multi_cleanup(h->multi);
    curl_slist_free_all(h->resolve);
    curl_slist_free_all(h->hdrs);
    OPENSSL_cleanse(h->secret, sizeof(h->secret));
    free(h->ca);
    free(h);
}


static const struct events_target_ops evh_ops = { evh_offer, evh_free };


static int
evh_secret(struct evh *h, const char *path, char *why, size_t whysz)
{
    char  *s = NULL;
    size_t len = 0;

    if (evh_read_file(path, EVH_SECRET_MAX - 1, &s, &len, why, whysz) != 0)
        return -1;
    len = strcspn(s, "\r\n");       /* the first line is the key */
    if (len == 0) {
        snprintf(why, whysz, "events.http.secret_file %s: empty first line",
            path);
        free(s);
        return -1;
    }
    memcpy(h->secret, s, len);
    h->secretlen = len;
    OPENSSL_cleanse(s, strlen(s));
    free(s);
    return 0;
}


/* evh_easy - the one easy handle, set up once. */
static int
evh_easy(struct evh *h, const struct config *cfg)
{
    struct curl_blob ca = { h->ca, h->calen, CURL_BLOB_NOCOPY };
    CURLcode         rc = CURLE_OK;

    if ((h->easy = curl_easy_init()) == NULL)
        return -1;
#define SET(o, v) if (rc == CURLE_OK) rc = curl_easy_setopt(h->easy, o, v)
    SET(CURLOPT_URL, cfg->events_http_url);
    SET(CURLOPT_ERRORBUFFER, h->err);
    SET(CURLOPT_RESOLVE, h->resolve);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_PROXY, "");                 /* never *_proxy from the env */
    SET(CURLOPT_NOSIGNAL, 1L);              /* no sigaction: seccomp */
    SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SET(CURLOPT_TIMEOUT_MS, (long)cfg->events_http_timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->events_http_timeout_ms);
    SET(CURLOPT_WRITEFUNCTION, evh_discard);
    SET(CURLOPT_USERAGENT, "mtad (events)");
    SET(CURLOPT_POST, 1L);
    if (h->ca != NULL) {
        SET(CURLOPT_SSL_VERIFYPEER, 1L);
        SET(CURLOPT_SSL_VERIFYHOST, 2L);
        SET(CURLOPT_CAINFO, NULL);          /* only the bundle in memory */
        SET(CURLOPT_CAPATH, NULL);
        SET(CURLOPT_CAINFO_BLOB, &ca);
    }
#undef SET
    return rc == CURLE_OK ? 0 : -1;
}


struct events_target *
events_http_new(struct events *e, char *why, size_t whysz)
{
    const struct config *cfg = e->cfg;
    struct evh          *h = xcalloc(1, sizeof(*h));

    h->base.ops = &evh_ops;
    h->base.e = e;
    ev_timer_init(&h->ctimer, evh_timer, h);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(why, whysz, "events: curl_global_init failed");
        goto fail;
    }
    if (evh_resolve(h, cfg->events_http_url, why, whysz) != 0)
        goto fail;
    if (cfg->events_http_secret_file != NULL &&
        evh_secret(h, cfg->events_http_secret_file, why, whysz) != 0)
        goto fail;
    if (strncasecmp(cfg->events_http_url, "https:", 6) == 0 &&
        evh_read_file(cfg->tls_ca_file ? cfg->tls_ca_file : EVH_SYSTEM_CA,
        EVH_CA_MAX, &h->ca, &h->calen, why, whysz) != 0)
        goto fail;
    if ((h->multi = curl_multi_init()) == NULL || evh_easy(h, cfg) != 0) {
        snprintf(why, whysz, "events: cannot set up libcurl");
        goto fail;
    }
    (void)curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, evh_sock_cb);
    (void)curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    (void)curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, evh_timer_cb);
    (void)curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    return &h->base;
fail:
    evh_free(&h->base);
    return NULL;
}
