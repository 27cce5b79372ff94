/*
 * reqtls.c - REQUIRETLS (RFC 8689) at delivery: the decisions of
 * tlspol.h.  Pure: no I/O, no logging.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "smtp/smtp.h"
#include "spool/spool.h"
#include "tlspol/tlspol.h"


enum tls_reqtls_mode
tls_reqtls_mode(const struct spool_env *env)
{
    if (env->requiretls)
        return TLS_REQTLS_REQUIRE;
    return env->tls_optional ? TLS_REQTLS_OPTIONAL : TLS_REQTLS_NONE;
}


void
tls_reqtls_raise(struct tls_req *r)
{
    if (r->tlsa != NULL) {
        r->level = TLS_DANE_ONLY;       /* the records must match */
        return;
    }
    if (r->level == TLS_DANE_ONLY)
        return;                         /* defers for want of TLSA */
    if (r->sts_enforce)
        return;                         /* CA-verified under MTA-STS */
    /* none, may, encrypt and dane without records: the CA chain and the
     * host name (RFC 8689 4.2.1 step 4) */
    r->level = TLS_VERIFY;
}


int
tls_reqtls_hop(struct tls_req *r, int mx, int mx_secure, const char *host,
    char *why, size_t whysz)
{
    /* RFC 8689 4.2.1 step 2: the MX answer must be DNSSEC-validated or
     * the MX host covered by an MTA-STS policy, or a forged MX record
     * could lead the message to a host with a valid certificate of its
     * own */
    if (mx && !mx_secure && !r->sts_enforce) {
        snprintf(why, whysz, "550 5.7.10 REQUIRETLS: the MX record that "
            "names %s is neither DNSSEC-secure nor covered by an MTA-STS "
            "policy", host);
        return -1;
    }
    tls_reqtls_raise(r);
    return 0;
}


void
tls_reqtls_optional(struct tls_req *r)
{
    if (r->level == TLS_DANE)           /* DANE on the domain's word only */
        r->level = TLS_MAY;
    r->tlsa = NULL;
    r->sts_enforce = 0;
}


int
tls_reqtls_session(const struct tls_outcome *o, unsigned caps, int null_sender,
    const char *host, char *why, size_t whysz)
{
    if (!o->used || o->auth == TLS_AUTH_NONE) {
        snprintf(why, whysz, "550 5.7.10 REQUIRETLS: %s %s", host,
            !o->used ? "was not reached over TLS" :
            "did not authenticate (certificate not verified)");
        return -1;
    }
    if (!(caps & SMTP_CAP_REQUIRETLS) && !null_sender) {
        snprintf(why, whysz, "550 5.7.30 REQUIRETLS support required, but "
            "host %s does not offer it", host);
        return -1;
    }
    return 0;
}


/* tls_reqtls_skip_code - detail without a leading "451 " and "4.7.5 ". */
static const char *
tls_reqtls_skip_code(const char *s)
{
    if (isdigit((unsigned char)s[0]) && isdigit((unsigned char)s[1]) &&
        isdigit((unsigned char)s[2]) && (s[3] == ' ' || s[3] == '-'))
        s += 4;
    if (isdigit((unsigned char)s[0]) && s[1] == '.') {
        const char *sp = strchr(s, ' ');

        if (sp != NULL && strspn(s, "0123456789.") == (size_t)(sp - s))
            s = sp + 1;
    }
    return s;
}


void
tls_reqtls_tls_failed(const char *host, const char *detail, char *why,
    size_t whysz)
{
    snprintf(why, whysz, "550 5.7.10 REQUIRETLS: no authenticated TLS "
        "session with %s: %s", host, tls_reqtls_skip_code(detail));
}


const char *
tls_reqtls_mail_param(const struct spool_env *env, unsigned caps)
{
    return env->requiretls && (caps & SMTP_CAP_REQUIRETLS) ?
        " REQUIRETLS" : "";
}
