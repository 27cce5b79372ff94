/*
 * dkim.h - DKIM signing (RFC 6376) with rsa-sha256 and ed25519-sha256
 * (RFC 8463), relaxed/relaxed, streaming: the message is fed once, in
 * any split, as the DATA path emits it; nothing is read back.
 *
 * CONTRACT  Keys: dkim_keys_add() loads a PEM private key and checks that
 *           its type is the algorithm's (RSA of at least 1024 bits, or
 *           Ed25519).  dkim_keys_find() picks the signing domain for a
 *           From: domain: the configured domain equal to it, else its
 *           nearest configured parent; every key of that domain signs
 *           (dual signing with RSA and Ed25519 is RFC 8463's advice).
 *           Signer: dkim_sign_begin() -> dkim_sign_feed() (any split;
 *           content as smtp_data_feed() emits it: dot-stuffing removed,
 *           CRLF line ends) -> dkim_sign_prepare() -> dkim_sign_end().
 *           The header section (up to DKIM_HEADER_MAX bytes) is kept while
 *           it streams by; the body is canonicalised and hashed as it
 *           arrives and never kept.  dkim_sign_prepare() may be called as
 *           soon as dkim_sign_header_done() says the header section is
 *           complete (or at the end, when the message has no body): it
 *           chooses the domain and tells the exact length of the header
 *           block dkim_sign_end() will write, so the caller can reserve
 *           room for it in front of the message before the body is
 *           complete.  The block is one DKIM-Signature field per key,
 *           folded at 78 columns, CRLF line ends: h= lists every present
 *           instance of the signed fields plus one more From (over-
 *           signing: a From: added later breaks the signature); t= is the
 *           time given to dkim_sign_begin(); no l=, no x=.
 *           Line ends: a bare LF counts as a line end (CRLF), as receivers
 *           that normalise line ends see it; a bare CR is an ordinary
 *           byte.  (smtp_data rejects both unless limits.bare_newline is
 *           accept; BDAT content is raw.)
 *           Canonicalisers: dkim_body_*() and dkim_header_relaxed() are the
 *           pure relaxed algorithms (RFC 6376 3.4.2, 3.4.4), exposed for
 *           the tests and the fuzzer.
 * FAILURE   Never logs, never aborts on input.  DKIM_OK (0) or a negative
 *           DKIM_E*; err texts name the file and the reason.  Allocation
 *           failure aborts (xmalloc), as everywhere in mtad.
 */
#ifndef MTAD_DKIM_H
#define MTAD_DKIM_H

#include <stddef.h>
#include <stdint.h>

enum dkim_alg { DKIM_RSA_SHA256 = 1, DKIM_ED25519_SHA256 = 2 };

enum dkim_rc {
    DKIM_OK = 0,
    DKIM_ECRYPTO = -1,          /* an OpenSSL call failed */
    DKIM_ENOFROM = -2,          /* no single From: with an address domain */
    DKIM_ENOKEY = -3,           /* no key for the From: domain */
    DKIM_EHEADER = -4,          /* header section over DKIM_HEADER_MAX */
    DKIM_EKEY = -5,             /* key file unreadable or of the wrong type */
    DKIM_ESTATE = -6            /* call out of order */
};

#define DKIM_HEADER_MAX   (128 * 1024)  /* header section kept to sign */
#define DKIM_MAX_KEYS     64            /* keys in one set */

/* "rsa-sha256" -> DKIM_RSA_SHA256; -1 for anything else. */
int         dkim_alg_parse(const char *s);
const char *dkim_alg_name(int alg);          /* "rsa-sha256", ... */
const char *dkim_strerror(int rc);

/* ---- keys ---- */

struct dkim_keys;

struct dkim_keys *dkim_keys_new(void);
void    dkim_keys_free(struct dkim_keys *ks);          /* NULL ok */
/* Load key_file (PEM, any of PKCS#8 / traditional) for domain and
 * selector; DKIM_EKEY with err set when unreadable, not a private key, of
 * another type than alg, or RSA below 1024 bits.  Domain is stored lower
 * case without a trailing dot. */
int     dkim_keys_add(struct dkim_keys *ks, const char *domain,
            const char *selector, const char *key_file, int alg,
            char *err, size_t errsz);
size_t  dkim_keys_count(const struct dkim_keys *ks);
/* Check a key file without keeping it (config load). */
int     dkim_key_check(const char *key_file, int alg, char *err,
            size_t errsz);
/* The signing domain for a From: domain (n bytes, any case): the equal
 * configured domain, else the nearest configured parent; NULL if none. */
const char *dkim_keys_find(const struct dkim_keys *ks, const char *domain,
            size_t n);

/* ---- key generation (mtactl dkim keygen) ---- */

/* A new private key as PEM (PKCS#8) in *pem (malloc'd) and the DNS TXT
 * record value "v=DKIM1; k=rsa; p=..." in *txt (malloc'd).  bits: RSA
 * modulus size (1024..8192), ignored for Ed25519. */
int     dkim_keygen(int alg, int bits, char **pem, char **txt, char *err,
            size_t errsz);

/* ---- the streaming signer ---- */

struct dkim_sign;

/* NULL when ks has no key.  now: the t= tag (seconds since the epoch). */
struct dkim_sign *dkim_sign_begin(const struct dkim_keys *ks, int64_t now);
void    dkim_sign_free(struct dkim_sign *c);            /* NULL ok */
/* Content bytes, any split.  After DKIM_EHEADER (header section too big)
 * or after prepare for a message without a body, further bytes are
 * ignored. */
void    dkim_sign_feed(struct dkim_sign *c, const void *p, size_t n);
/* 1 once the empty line ending the header section went by. */
int     dkim_sign_header_done(const struct dkim_sign *c);
/* Choose the signing domain from the From: field and compute *len, the
 * exact size of the block dkim_sign_end() will write.  Called before the
 * header section ended, it ends it here (a message of headers only).
 * DKIM_ENOFROM, DKIM_ENOKEY, DKIM_EHEADER: this message is not signed. */
int     dkim_sign_prepare(struct dkim_sign *c, size_t *len);
/* The signing domain chosen by prepare ("" before). */
const char *dkim_sign_domain(const struct dkim_sign *c);
/* Finish the body hash and sign: writes exactly the *len bytes prepare
 * announced into out (outsz >= that).  DKIM_ECRYPTO on an OpenSSL
 * failure; prepare's failure again after a failed prepare; DKIM_ESTATE
 * before prepare, with a short out, or a second time. */
int     dkim_sign_end(struct dkim_sign *c, char *out, size_t outsz);

/* ---- pure canonicalisers ---- */

typedef void dkim_out_fn(void *arg, const char *p, size_t n);

/* Relaxed body canonicalisation, streaming: output goes to out() in
 * pieces; pending empty lines are held until a non-empty line shows they
 * are not trailing.  Any split of the input gives the same output. */
struct dkim_body {
    dkim_out_fn *out;
    void        *arg;
    uint64_t     crlf;          /* line ends not yet written */
    int          wsp;           /* whitespace seen since the last byte */
    int          cr;            /* the last byte was a CR */
    int          any;           /* some content was written */
    size_t       blen;
    char         buf[4096];
};
void    dkim_body_init(struct dkim_body *b, dkim_out_fn *out, void *arg);
void    dkim_body_feed(struct dkim_body *b, const char *p, size_t n);
void    dkim_body_end(struct dkim_body *b);     /* final CRLF, flush */

/* Relaxed canonical form of one header field p[0..n) (name, colon, value,
 * continuation lines, with or without its final line end), with CRLF
 * appended when crlf is set.  out has room for n + 2 bytes; returns the
 * bytes written, or 0 when p holds no colon. */
size_t  dkim_header_relaxed(const char *p, size_t n, int crlf, char *out);

#endif /* MTAD_DKIM_H */
