/*
 * dkim.c - DKIM keys and the streaming signer (RFC 6376, RFC 8463) on
 * OpenSSL 3 EVP.
 *
 * CONTRACT  See dkim.h.  One pass: the header section is copied (it is
 *           needed twice, to find From: and to sign) while the body goes
 *           through the relaxed canonicaliser straight into SHA-256.  The
 *           header block's length is known at prepare: bh= and b= have
 *           fixed lengths (44; the key's signature size in base64) and the
 *           folding depends only on lengths, so prepare formats the block
 *           with placeholders and end() formats it again with the values.
 *           rsa-sha256 signs the SHA-256 of the header data with PKCS#1
 *           v1.5; ed25519-sha256 signs that same 32-byte hash with
 *           PureEdDSA (RFC 8463 3).
 * FAILURE   See dkim.h.  OpenSSL's error queue is cleared after a failure.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include "common/util.h"
#include "dkim/dkim.h"

#define DKIM_COLS        78         /* fold before this column */
#define DKIM_BH_B64      44         /* base64 of a SHA-256 */
#define DKIM_SIG_MAX     1024       /* RSA 8192 */
#define DKIM_RSA_MIN     1024       /* RFC 8301 */
#define DKIM_RSA_MAX     8192

struct dkim_key {
    char       *domain;             /* lower case, no trailing dot */
    char       *selector;
    int         alg;
    EVP_PKEY   *pkey;
    EVP_PKEY_CTX *rsa;              /* RSA: set up once (PKCS#1, SHA-256),
                                     * not per message */
    EVP_MD_CTX *ed;                 /* Ed25519: initialised once; each
                                     * message signs with a copy (an init
                                     * per message fetches the algorithm
                                     * again, a large share of an Ed25519
                                     * signature; OpenSSL 3.2 and
                                     * later refuse to reuse one without
                                     * it, openssl/openssl#23075) */
    size_t      siglen;             /* signature bytes */
};

struct dkim_keys {
    struct dkim_key k[DKIM_MAX_KEYS];
    size_t      n;
    EVP_MD     *sha256;             /* fetched once, not per message */
};

/* The fields signed when present (RFC 6376 5.4.1's list, with the list
 * headers RFC 8058 wants covered); From is signed once more than present. */
static const char *const dkim_signed[] = {
    "from", "sender", "reply-to", "subject", "date", "message-id", "to",
    "cc", "in-reply-to", "references", "mime-version", "content-type",
    "content-transfer-encoding", "content-id", "content-description",
    "resent-date", "resent-from", "resent-sender", "resent-to", "resent-cc",
    "resent-message-id", "list-id", "list-help", "list-unsubscribe",
    "list-unsubscribe-post", "list-subscribe", "list-post", "list-owner",
    "list-archive"
};

enum { H_START = 0, H_CR, H_MID };

struct dkim_field {
    size_t      off, len;           /* in hdr, with its line end */
    size_t      nlen;               /* name length (trailing WSP cut) */
    int         used;
};

struct dkim_sign {
    const struct dkim_keys *ks;
    int64_t     t;
    int         rc;                 /* sticky failure, DKIM_OK when none */
    int         hst;                /* H_* */
    int         hdone;              /* the header section is complete */
    int         prepared;
    char       *hdr;                /* header section, as fed */
    size_t      hlen, hcap;
    EVP_MD_CTX *bh;                 /* body hash */
    struct dkim_body body;
    char        domain[256];
    size_t      kidx[DKIM_MAX_KEYS];
    size_t      nk;
    char       *hlist;              /* h= value */
    char       *sdata;              /* canonical signed fields */
    size_t      sdlen;
    size_t      total;              /* bytes end() writes */
};


/* ---- names ---------------------------------------------------------- */

int
dkim_alg_parse(const char *s)
{
    if (strcmp(s, "rsa-sha256") == 0)
        return DKIM_RSA_SHA256;
    if (strcmp(s, "ed25519-sha256") == 0)
        return DKIM_ED25519_SHA256;
    return -1;
}


const char *
dkim_alg_name(int alg)
{
    return alg == DKIM_ED25519_SHA256 ? "ed25519-sha256" : "rsa-sha256";
}


const char *
dkim_strerror(int rc)
{
    switch (rc) {
    case DKIM_OK:       return "ok";
    case DKIM_ECRYPTO:  return "OpenSSL failure";
    case DKIM_ENOFROM:  return "no single From: domain";
    case DKIM_ENOKEY:   return "no key for the From: domain";
    case DKIM_EHEADER:  return "header section too large to sign";
    case DKIM_EKEY:     return "bad key";
    case DKIM_ESTATE:   return "signer used out of order";
    default:            return "unknown error";
    }
}


/* The first queued OpenSSL error as text; the queue is cleared. */
static const char *
dkim_ssl_err(char *buf, size_t bufsz)
{
    unsigned long e = ERR_peek_last_error();

    if (e == 0)
        util_strlcpy(buf, "unknown OpenSSL error", bufsz);
    else
        ERR_error_string_n(e, buf, bufsz);
    ERR_clear_error();
    return buf;
}


/* ---- keys ----------------------------------------------------------- */

/* No passphrase prompt, ever: an encrypted key is refused. */
static int
dkim_no_pass(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}


/* dkim_key_read - load and check one key file; the key or NULL + err. */
static EVP_PKEY *
dkim_key_read(const char *file, int alg, char *err, size_t errsz)
{
    char      why[256];
    EVP_PKEY *pk;
    FILE     *fp;
    int       id, bits;

    if ((fp = fopen(file, "r")) == NULL) {
        snprintf(err, errsz, "cannot read '%s': %s", file, strerror(errno));
        return NULL;
    }
    pk = PEM_read_PrivateKey(fp, NULL, dkim_no_pass, NULL);
    fclose(fp);
    if (pk == NULL) {
        snprintf(err, errsz, "no usable PEM private key in '%s': %s", file,
            dkim_ssl_err(why, sizeof(why)));
        return NULL;
    }
    id = EVP_PKEY_get_base_id(pk);
    bits = EVP_PKEY_get_bits(pk);
    if (alg == DKIM_RSA_SHA256 && id != EVP_PKEY_RSA) {
        snprintf(err, errsz, "'%s' is not an RSA key (algorithm is "
            "rsa-sha256)", file);
    } else if (alg == DKIM_ED25519_SHA256 && id != EVP_PKEY_ED25519) {
        snprintf(err, errsz, "'%s' is not an Ed25519 key (algorithm is "
            "ed25519-sha256)", file);
    } else if (alg == DKIM_RSA_SHA256 &&
        (bits < DKIM_RSA_MIN || bits > DKIM_RSA_MAX)) {
        snprintf(err, errsz, "'%s' is a %d-bit RSA key (DKIM needs %d to "
            "%d bits)", file, bits, DKIM_RSA_MIN, DKIM_RSA_MAX);
    } else {
        return pk;
    }
    EVP_PKEY_free(pk);
    return NULL;
}


int
dkim_key_check(const char *key_file, int alg, char *err, size_t errsz)
{
    EVP_PKEY *pk = dkim_key_read(key_file, alg, err, errsz);

    if (pk == NULL)
        return DKIM_EKEY;
    EVP_PKEY_free(pk);
    return DKIM_OK;
}


struct dkim_keys *
dkim_keys_new(void)
{
    struct dkim_keys *ks = xcalloc(1, sizeof(*ks));

    ks->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (ks->sha256 == NULL) {
        free(ks);
        return NULL;
    }
    return ks;
}


void
dkim_keys_free(struct dkim_keys *ks)
{
    size_t i;

    if (ks == NULL)
        return;
    for (i = 0; i < ks->n; i++) {
        free(ks->k[i].domain);
        free(ks->k[i].selector);
        EVP_PKEY_CTX_free(ks->k[i].rsa);
        EVP_MD_CTX_free(ks->k[i].ed);
        EVP_PKEY_free(ks->k[i].pkey);
    }
    EVP_MD_free(ks->sha256);
    free(ks);
}


int
dkim_keys_add(struct dkim_keys *ks, const char *domain, const char *selector,
    const char *key_file, int alg, char *err, size_t errsz)
{
    struct dkim_key *k;
    EVP_PKEY        *pk;
    char             why[256];
    size_t           i, n;

    if (ks->n == DKIM_MAX_KEYS) {
        snprintf(err, errsz, "more than %d keys", DKIM_MAX_KEYS);
        return DKIM_EKEY;
    }
    if ((pk = dkim_key_read(key_file, alg, err, errsz)) == NULL)
        return DKIM_EKEY;
    k = &ks->k[ks->n++];
    if (alg == DKIM_RSA_SHA256 &&
        ((k->rsa = EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL)) == NULL ||
        EVP_PKEY_sign_init(k->rsa) != 1 ||
        EVP_PKEY_CTX_set_rsa_padding(k->rsa, RSA_PKCS1_PADDING) != 1 ||
        EVP_PKEY_CTX_set_signature_md(k->rsa, ks->sha256) != 1)) {
        snprintf(err, errsz, "cannot set up RSA signing with '%s': %s",
            key_file, dkim_ssl_err(why, sizeof(why)));
        EVP_PKEY_CTX_free(k->rsa);
        EVP_PKEY_free(pk);
        memset(k, 0, sizeof(*k));
        ks->n--;
        return DKIM_EKEY;
    }
    if (alg == DKIM_ED25519_SHA256 &&
        ((k->ed = EVP_MD_CTX_new()) == NULL ||
        EVP_DigestSignInit(k->ed, NULL, NULL, NULL, pk) != 1)) {
        snprintf(err, errsz, "cannot set up Ed25519 signing with '%s': %s",
            key_file, dkim_ssl_err(why, sizeof(why)));
        EVP_MD_CTX_free(k->ed);
        EVP_PKEY_free(pk);
        memset(k, 0, sizeof(*k));
        ks->n--;
        return DKIM_EKEY;
    }
    k->domain = xstrdup(domain);
    for (i = 0; k->domain[i] != '\0'; i++)
        k->domain[i] = (char)tolower((unsigned char)k->domain[i]);
    n = strlen(k->domain);
    if (n > 0 && k->domain[n - 1] == '.')
        k->domain[n - 1] = '\0';
    k->selector = xstrdup(selector);
    k->alg = alg;
    k->pkey = pk;
    k->siglen = alg == DKIM_ED25519_SHA256 ? 64 :
        (size_t)EVP_PKEY_get_size(pk);
    return DKIM_OK;
}


size_t
dkim_keys_count(const struct dkim_keys *ks)
{
    return ks == NULL ? 0 : ks->n;
}


/* dkim_keys_match - the configured domain equal to d[0..n), any case. */
static const char *
dkim_keys_match(const struct dkim_keys *ks, const char *d, size_t n)
{
    size_t i;

    for (i = 0; i < ks->n; i++)
        if (strlen(ks->k[i].domain) == n &&
            strncasecmp(ks->k[i].domain, d, n) == 0)
            return ks->k[i].domain;
    return NULL;
}


const char *
dkim_keys_find(const struct dkim_keys *ks, const char *domain, size_t n)
{
    const char *dom, *dot;

    while (n > 0) {
        if ((dom = dkim_keys_match(ks, domain, n)) != NULL)
            return dom;
        if ((dot = memchr(domain, '.', n)) == NULL)
            break;
        n -= (size_t)(dot + 1 - domain);    /* the parent */
        domain = dot + 1;
    }
    return NULL;
}


/* ---- key generation ------------------------------------------------- */

static char *
dkim_b64(const unsigned char *p, size_t n)
{
    char *out = xmalloc(4 * ((n + 2) / 3) + 1);

    EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}


int
dkim_keygen(int alg, int bits, char **pem, char **txt, char *err,
    size_t errsz)
{
    unsigned char raw[64], *der = NULL;
    char          why[256], *pub = NULL, *mem;
    EVP_PKEY     *pk;
    BIO          *bio = NULL;
    size_t        rawlen = sizeof(raw);
    long          memlen;
    int           derlen, rc = DKIM_ECRYPTO;

    *pem = *txt = NULL;
    if (alg == DKIM_RSA_SHA256 && (bits < DKIM_RSA_MIN || bits > DKIM_RSA_MAX)) {
        snprintf(err, errsz, "RSA keys for DKIM have %d to %d bits",
            DKIM_RSA_MIN, DKIM_RSA_MAX);
        return DKIM_EKEY;
    }
    if (alg == DKIM_RSA_SHA256)
        pk = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)bits);
    else
        pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (pk == NULL)
        goto fail;
    if ((bio = BIO_new(BIO_s_mem())) == NULL ||
        PEM_write_bio_PrivateKey(bio, pk, NULL, NULL, 0, NULL, NULL) != 1)
        goto fail;
    memlen = BIO_get_mem_data(bio, &mem);
    *pem = xmalloc((size_t)memlen + 1);
    memcpy(*pem, mem, (size_t)memlen);
    (*pem)[memlen] = '\0';
    /* RFC 6376 3.6.1: p= is the SubjectPublicKeyInfo for RSA; RFC 8463
     * 4.2: the bare 32-byte public key for Ed25519. */
    if (alg == DKIM_RSA_SHA256) {
        if ((derlen = i2d_PUBKEY(pk, &der)) <= 0)
            goto fail;
        pub = dkim_b64(der, (size_t)derlen);
    } else {
        if (EVP_PKEY_get_raw_public_key(pk, raw, &rawlen) != 1)
            goto fail;
        pub = dkim_b64(raw, rawlen);
    }
    *txt = xmalloc(strlen(pub) + 32);
    sprintf(*txt, "v=DKIM1; k=%s; p=%s",
        alg == DKIM_RSA_SHA256 ? "rsa" : "ed25519", pub);
    rc = DKIM_OK;
fail:
    if (rc != DKIM_OK) {
        snprintf(err, errsz, "key generation failed: %s",
            dkim_ssl_err(why, sizeof(why)));
        free(*pem);
        *pem = NULL;
    }
    free(pub);
    OPENSSL_free(der);
    BIO_free(bio);
    EVP_PKEY_free(pk);
    return rc;
}


/* ---- the signer: header section ------------------------------------- */

static void
dkim_body_out(void *arg, const char *p, size_t n)
{
    struct dkim_sign *c = arg;

    if (c->rc == DKIM_OK && EVP_DigestUpdate(c->bh, p, n) != 1)
        c->rc = DKIM_ECRYPTO;
}


struct dkim_sign *
dkim_sign_begin(const struct dkim_keys *ks, int64_t now)
{
    struct dkim_sign *c;

    if (ks == NULL || ks->n == 0)
        return NULL;
    c = xcalloc(1, sizeof(*c));
    c->ks = ks;
    c->t = now;
    c->bh = EVP_MD_CTX_new();
    if (c->bh == NULL || EVP_DigestInit_ex(c->bh, ks->sha256, NULL) != 1)
        c->rc = DKIM_ECRYPTO;
    dkim_body_init(&c->body, dkim_body_out, c);
    return c;
}


void
dkim_sign_free(struct dkim_sign *c)
{
    if (c == NULL)
        return;
    EVP_MD_CTX_free(c->bh);
    free(c->hdr);
    free(c->hlist);
    free(c->sdata);
    free(c);
}


/* dkim_hdr_put - keep header bytes; past DKIM_HEADER_MAX the message is
 * not signed (and nothing more is kept). */
static void
dkim_hdr_put(struct dkim_sign *c, const char *p, size_t n)
{
    if (c->rc != DKIM_OK)
        return;
    if (n > DKIM_HEADER_MAX - c->hlen) {
        c->rc = DKIM_EHEADER;
        return;
    }
    if (c->hlen + n > c->hcap) {
        c->hcap = c->hcap ? c->hcap : 2048;
        while (c->hcap < c->hlen + n)
            c->hcap *= 2;
        c->hdr = xrealloc(c->hdr, c->hcap);
    }
    memcpy(c->hdr + c->hlen, p, n);
    c->hlen += n;
}


void
dkim_sign_feed(struct dkim_sign *c, const void *vp, size_t n)
{
    const char *p = vp, *e = p + n, *nl;

    if (c == NULL || c->rc != DKIM_OK || (c->prepared && !c->hdone))
        return;
    while (p < e && !c->hdone) {
        switch (c->hst) {
        case H_START:                       /* an empty line ends it */
            if (*p == '\n')
                c->hdone = 1;
            else if (*p == '\r')
                c->hst = H_CR;
            else
                c->hst = H_MID;
            if (*p == '\n' || *p == '\r')
                p++;
            break;
        case H_CR:
            if (*p == '\n') {
                c->hdone = 1;
                p++;
            } else {
                dkim_hdr_put(c, "\r", 1);   /* a line that starts with CR */
                c->hst = H_MID;
            }
            break;
        default:
            if ((nl = memchr(p, '\n', (size_t)(e - p))) == NULL) {
                dkim_hdr_put(c, p, (size_t)(e - p));
                p = e;
            } else {
                dkim_hdr_put(c, p, (size_t)(nl + 1 - p));
                p = nl + 1;
                c->hst = H_START;
            }
            break;
        }
        if (c->rc != DKIM_OK)
            return;
    }
    if (p < e)
        dkim_body_feed(&c->body, p, (size_t)(e - p));
}


int
dkim_sign_header_done(const struct dkim_sign *c)
{
    return c != NULL && c->hdone;
}


const char *
dkim_sign_domain(const struct dkim_sign *c)
{
    return c == NULL ? "" : c->domain;
}


/* dkim_fields - split the header section into fields (a line not starting
 * with whitespace opens one); *nf of them, malloc'd. */
static struct dkim_field *
dkim_fields(const struct dkim_sign *c, size_t *nf)
{
    struct dkim_field *f = xcalloc(c->hlen / 2 + 1, sizeof(*f));
    const char        *h = c->hdr, *nl, *colon;
    size_t             off = 0, n = 0, end;

    while (off < c->hlen) {
        nl = memchr(h + off, '\n', c->hlen - off);
        end = nl ? (size_t)(nl - h) + 1 : c->hlen;
        if ((h[off] == ' ' || h[off] == '\t') && n > 0) {
            f[n - 1].len = end - f[n - 1].off;     /* continuation */
        } else if (h[off] != ' ' && h[off] != '\t') {
            f[n].off = off;
            f[n].len = end - off;
            colon = memchr(h + off, ':', end - off);
            f[n].nlen = colon ? (size_t)(colon - (h + off)) : 0;
            while (f[n].nlen > 0 && (h[off + f[n].nlen - 1] == ' ' ||
                h[off + f[n].nlen - 1] == '\t'))
                f[n].nlen--;
            n++;
        }
        off = end;
    }
    *nf = n;
    return f;
}


static int
dkim_field_is(const struct dkim_sign *c, const struct dkim_field *f,
    const char *name)
{
    size_t n = strlen(name);

    return f->nlen == n && strncasecmp(c->hdr + f->off, name, n) == 0;
}


/*
 * dkim_from_domain - the domain of the addresses in a From: value (RFC
 * 5322 mailbox-list, group syntax tolerated): inside <...> when there is
 * an angle address, else after the last '@'; quoted strings and comments
 * skipped.  Every mailbox must have the same domain; -1 when none does,
 * when they differ, or for an address literal.
 */
static int
dkim_from_domain(const char *v, size_t n, char *dom, size_t domsz)
{
    char   cur[256];
    size_t i, clen = 0;
    int    quote = 0, esc = 0, depth = 0, angle = 0, at = 0, have = 0;
    int    angled = 0, bad = 0;

    dom[0] = '\0';
    for (i = 0; i <= n; i++) {
        char ch = i < n ? v[i] : ',';

        if (esc) {
            esc = 0;
            continue;
        }
        if (quote) {
            if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                quote = 0;
            continue;
        }
        if (depth > 0) {
            if (ch == '\\')
                esc = 1;
            else if (ch == '(')
                depth++;
            else if (ch == ')')
                depth--;
            continue;
        }
        switch (ch) {
        case '"':
            quote = 1;
            break;
        case '(':
            depth = 1;
            break;
        case '<':
            angle = 1;
            angled = 1;
            at = 0;
            clen = 0;
            break;
        case '>':
            angle = 0;
            break;
        case '@':
            at = 1;
            clen = 0;
            break;
        case ' ': case '\t': case '\r': case '\n':
            break;
        case ',': case ':': case ';':
            if (angle)
                break;
            if (ch != ':' && at && clen > 0) {
                cur[clen] = '\0';
                while (clen > 0 && cur[clen - 1] == '.')
                    cur[--clen] = '\0';
                if (cur[0] == '[' || clen == 0)
                    bad = 1;
                else if (!have) {
                    util_strlcpy(dom, cur, domsz);
                    have = 1;
                } else if (strcasecmp(dom, cur) != 0)
                    bad = 1;
            }
            at = angled = 0;
            clen = 0;
            break;
        default:
            /* a control byte is in no domain name (a NUL would end the
             * copy early: d= of a prefix of what the From: says) */
            if (at && (angle || !angled) &&
                ((unsigned char)ch < 0x20 || ch == 0x7f))
                bad = 1;
            else if (at && (angle || !angled) && clen < sizeof(cur) - 1)
                cur[clen++] = ch;
            break;
        }
    }
    if (!have || bad || strlen(dom) > 253)
        return -1;
    for (i = 0; dom[i] != '\0'; i++)
        dom[i] = (char)tolower((unsigned char)dom[i]);
    return 0;
}


/* dkim_choose - the signing domain and its keys from the one From:. */
static int
dkim_choose(struct dkim_sign *c, const struct dkim_field *f, size_t nf)
{
    const struct dkim_field *from = NULL;
    const char              *colon, *d;
    char                     fd[256];
    size_t                   i;

    for (i = 0; i < nf; i++) {
        if (!dkim_field_is(c, &f[i], "from"))
            continue;
        if (from != NULL)
            return DKIM_ENOFROM;            /* RFC 5322: exactly one */
        from = &f[i];
    }
    if (from == NULL)
        return DKIM_ENOFROM;
    colon = memchr(c->hdr + from->off, ':', from->len);
    if (dkim_from_domain(colon + 1, from->len - (size_t)(colon + 1 -
        (c->hdr + from->off)), fd, sizeof(fd)) != 0)
        return DKIM_ENOFROM;
    if ((d = dkim_keys_find(c->ks, fd, strlen(fd))) == NULL)
        return DKIM_ENOKEY;
    util_strlcpy(c->domain, d, sizeof(c->domain));
    for (i = 0; i < c->ks->n; i++)
        if (strcmp(c->ks->k[i].domain, d) == 0)
            c->kidx[c->nk++] = i;
    return DKIM_OK;
}


/* dkim_select - h= and the canonical data of the signed fields: for each
 * name, every instance from the bottom up (RFC 6376 5.4.2), From once
 * more (an instance that does not exist signs nothing). */
static void
dkim_select(struct dkim_sign *c, struct dkim_field *f, size_t nf)
{
    size_t i, j, hcap = 64, hl = 0, sdcap = c->hlen + 2 * nf + 2;
    const char *name;
    size_t nlen, cnt;
    long k;

    c->hlist = xmalloc(hcap);
    c->hlist[0] = '\0';
    c->sdata = xmalloc(sdcap);
    c->sdlen = 0;
    for (i = 0; i < ARRAY_LEN(dkim_signed); i++) {
        name = dkim_signed[i];
        nlen = strlen(name);
        cnt = 0;
        for (k = (long)nf - 1; k >= 0; k--) {
            if (!dkim_field_is(c, &f[k], name))
                continue;
            c->sdlen += dkim_header_relaxed(c->hdr + f[k].off, f[k].len, 1,
                c->sdata + c->sdlen);
            cnt++;
        }
        if (strcmp(name, "from") == 0)
            cnt++;                          /* over-signing */
        for (j = 0; j < cnt; j++) {
            if (hl + nlen + 2 > hcap) {
                hcap = (hl + nlen + 2) * 2;
                c->hlist = xrealloc(c->hlist, hcap);
            }
            if (hl > 0)
                c->hlist[hl++] = ':';
            memcpy(c->hlist + hl, name, nlen + 1);
            hl += nlen;
        }
    }
}


/* ---- the signer: formatting ----------------------------------------- */

struct dkim_fmt {
    char       *out;                /* NULL: count only */
    size_t      len;
    size_t      col;
};


static void
dkim_put(struct dkim_fmt *f, const char *p, size_t n)
{
    if (f->out != NULL)
        memcpy(f->out + f->len, p, n);
    f->len += n;
    f->col += n;
}


static void
dkim_fold(struct dkim_fmt *f)
{
    dkim_put(f, "\r\n\t", 3);
    f->col = 1;
}


/* dkim_tag - " tag" on this line, or folded onto the next when it would
 * pass DKIM_COLS. */
static void
dkim_tag(struct dkim_fmt *f, const char *p, size_t n)
{
    if (f->col + 1 + n > DKIM_COLS)
        dkim_fold(f);
    else
        dkim_put(f, " ", 1);
    dkim_put(f, p, n);
}


/*
 * dkim_format - one DKIM-Signature field for key k.  b is the signature
 * in base64 (blen bytes; b NULL with blen > 0 writes placeholders, blen 0
 * writes "b=" alone, the form that is hashed).  Returns its length.
 */
static size_t
dkim_format(const struct dkim_sign *c, const struct dkim_key *k,
    const char *bh, const char *b, size_t blen, char *out)
{
    struct dkim_fmt f = { out, 0, 0 };
    char            tag[300];
    const char     *h, *colon;
    size_t          n, room;
    int             w;

    dkim_put(&f, "DKIM-Signature: v=1;", 20);
    w = snprintf(tag, sizeof(tag), "a=%s;", dkim_alg_name(k->alg));
    dkim_tag(&f, tag, (size_t)w);
    dkim_tag(&f, "c=relaxed/relaxed;", 18);
    w = snprintf(tag, sizeof(tag), "d=%s;", c->domain);
    dkim_tag(&f, tag, (size_t)w);
    w = snprintf(tag, sizeof(tag), "s=%s;", k->selector);
    dkim_tag(&f, tag, (size_t)w);
    w = snprintf(tag, sizeof(tag), "t=%lld;", (long long)c->t);
    dkim_tag(&f, tag, (size_t)w);
    /* h= folds between names (FWS is allowed around its colons). */
    h = c->hlist;
    colon = strchr(h, ':');
    n = colon ? (size_t)(colon - h) + 1 : strlen(h);
    w = snprintf(tag, sizeof(tag), "h=%.*s", (int)n, h);
    if (colon == NULL)
        tag[w++] = ';';
    dkim_tag(&f, tag, (size_t)w);
    for (h += n; *h != '\0'; h += n) {
        colon = strchr(h, ':');
        n = colon ? (size_t)(colon - h) + 1 : strlen(h);
        if (f.col + n + (colon ? 0 : 1) > DKIM_COLS)
            dkim_fold(&f);
        dkim_put(&f, h, n);
        if (colon == NULL)
            dkim_put(&f, ";", 1);
    }
    memcpy(tag, "bh=", 3);
    if (bh != NULL)
        memcpy(tag + 3, bh, DKIM_BH_B64);
    else
        memset(tag + 3, 'A', DKIM_BH_B64);
    tag[3 + DKIM_BH_B64] = ';';
    dkim_tag(&f, tag, 4 + DKIM_BH_B64);
    dkim_tag(&f, "b=", 2);
    /* b= folds inside the base64 (FWS is allowed there too). */
    while (blen > 0) {
        room = f.col < DKIM_COLS ? DKIM_COLS - f.col : 0;
        if (room < 8) {
            dkim_fold(&f);
            continue;
        }
        n = blen < room ? blen : room;
        if (f.out != NULL && b != NULL)
            memcpy(f.out + f.len, b, n);
        else if (f.out != NULL)
            memset(f.out + f.len, 'A', n);
        f.len += n;
        f.col += n;
        if (b != NULL)
            b += n;
        blen -= n;
    }
    dkim_put(&f, "\r\n", 2);
    return f.len;
}


static size_t
dkim_b64len(size_t n)
{
    return 4 * ((n + 2) / 3);
}


int
dkim_sign_prepare(struct dkim_sign *c, size_t *len)
{
    struct dkim_field *f;
    size_t             nf, i;
    int                rc;

    *len = 0;
    if (c == NULL)
        return DKIM_ESTATE;
    if (c->rc != DKIM_OK || c->prepared)
        return c->rc != DKIM_OK ? c->rc : DKIM_ESTATE;
    c->prepared = 1;
    if (!c->hdone && c->hst == H_CR)
        dkim_hdr_put(c, "\r", 1);           /* a lone CR at the very end */
    f = dkim_fields(c, &nf);
    rc = dkim_choose(c, f, nf);
    if (rc == DKIM_OK) {
        dkim_select(c, f, nf);
        for (i = 0; i < c->nk; i++) {
            const struct dkim_key *k = &c->ks->k[c->kidx[i]];

            c->total += dkim_format(c, k, NULL, NULL,
                dkim_b64len(k->siglen), NULL);
        }
        *len = c->total;
    }
    free(f);
    if (rc != DKIM_OK)
        c->rc = rc;
    return rc;
}


/* dkim_sign_one - hash the signed fields and this key's own field with an
 * empty b=, sign the hash, and write the field with the signature. */
static int
dkim_sign_one(struct dkim_sign *c, const struct dkim_key *k, const char *bh,
    char *out, size_t *outlen)
{
    unsigned char  md[EVP_MAX_MD_SIZE], sig[DKIM_SIG_MAX];
    char          *self, *canon, b64[2 * DKIM_SIG_MAX];
    size_t         slen, clen, siglen = sizeof(sig);
    unsigned int   mdlen;
    EVP_MD_CTX    *m = EVP_MD_CTX_new();
    int            ok;

    if (m == NULL)
        return DKIM_ECRYPTO;
    slen = dkim_format(c, k, bh, NULL, 0, NULL);
    self = xmalloc(2 * slen + 2);
    canon = self + slen;
    slen = dkim_format(c, k, bh, NULL, 0, self);
    clen = dkim_header_relaxed(self, slen, 0, canon);
    ok = EVP_DigestInit_ex(m, c->ks->sha256, NULL) == 1 &&
        EVP_DigestUpdate(m, c->sdata, c->sdlen) == 1 &&
        EVP_DigestUpdate(m, canon, clen) == 1 &&
        EVP_DigestFinal_ex(m, md, &mdlen) == 1;
    free(self);
    if (ok && k->alg == DKIM_RSA_SHA256) {
        ok = EVP_PKEY_sign(k->rsa, sig, &siglen, md, mdlen) == 1;
    } else if (ok) {
        ok = EVP_MD_CTX_copy_ex(m, k->ed) == 1 &&
            EVP_DigestSign(m, sig, &siglen, md, mdlen) == 1;
    }
    EVP_MD_CTX_free(m);
    if (!ok || siglen != k->siglen) {
        ERR_clear_error();
        return DKIM_ECRYPTO;
    }
    EVP_EncodeBlock((unsigned char *)b64, sig, (int)siglen);
    *outlen = dkim_format(c, k, bh, b64, dkim_b64len(siglen), out);
    return DKIM_OK;
}


int
dkim_sign_end(struct dkim_sign *c, char *out, size_t outsz)
{
    unsigned char bhash[EVP_MAX_MD_SIZE];
    char          bh[DKIM_BH_B64 + 4];
    unsigned int  bhlen;
    size_t        i, o = 0, n;
    int           rc;

    if (c == NULL)
        return DKIM_ESTATE;
    if (c->rc != DKIM_OK)
        return c->rc;                       /* why it is not signed */
    if (!c->prepared || outsz < c->total)
        return DKIM_ESTATE;
    dkim_body_end(&c->body);
    if (c->rc != DKIM_OK || EVP_DigestFinal_ex(c->bh, bhash, &bhlen) != 1 ||
        bhlen != 32) {
        ERR_clear_error();
        return c->rc = DKIM_ECRYPTO;
    }
    EVP_EncodeBlock((unsigned char *)bh, bhash, 32);
    for (i = 0; i < c->nk; i++) {
        rc = dkim_sign_one(c, &c->ks->k[c->kidx[i]], bh, out + o, &n);
        if (rc != DKIM_OK)
            return c->rc = rc;
        o += n;
    }
    if (o != c->total)
        return c->rc = DKIM_ESTATE;         /* prepare promised otherwise */
    c->rc = DKIM_ESTATE;                    /* done: no second end() */
    return DKIM_OK;
}
