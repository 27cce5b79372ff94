/*
 * session_dkim.c - DKIM signing of an inbound message while it streams to
 * the spool (dkim/ does the signing, the spool keeps room for the
 * signature in front of the message).
 *
 * PURPOSE   The session feeds each content span here just before it goes to
 *           spool_write().  When the header section is complete the signer
 *           knows the From: domain and the exact size of its DKIM-Signature
 *           block: spool_head_reserve() then makes that much room in front
 *           of the Received: header (the start of the message is still in
 *           the spool's write buffer), and the body goes on streaming and
 *           being hashed.  At the final dot, before the commit,
 *           smtpd_dkim_end() signs and spool_head_fill() writes the block
 *           into the room: the queued message is the signed one, 250 still
 *           comes only after the rename, and nothing is read back.
 * POLICY    A message is signed when its session may sign (SF_SIGN:
 *           dkim.sign_networks; AUTH later) and its one From: domain, or a
 *           parent, has keys.  Not signed, and accepted as it is, when the
 *           From: is missing or ambiguous, no key matches, the header
 *           section is over DKIM_HEADER_MAX, or the message start already
 *           left the spool buffer (a header section over ~256 KiB): each
 *           logged once.  A signing failure at the end (OpenSSL) refuses
 *           the message with a 4xx: a stored message never carries a
 *           placeholder (spool_finish() refuses one anyway).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "dkim/dkim.h"
#include "spool/spool.h"
#include "smtpd/smtpd_int.h"

enum { SD_HEAD = 0, SD_BODY, SD_OFF };

struct smtpd_dkim {
    struct dkim_sign *c;
    size_t            len;          /* bytes reserved in the spool */
    int               state;        /* SD_* */
};


struct smtpd_dkim *
smtpd_dkim_begin(const struct dkim_keys *ks)
{
    struct smtpd_dkim *sd;
    struct dkim_sign  *c = dkim_sign_begin(ks, (int64_t)time(NULL));

    if (c == NULL)
        return NULL;
    sd = xcalloc(1, sizeof(*sd));
    sd->c = c;
    return sd;
}


void
smtpd_dkim_free(struct smtpd_dkim *sd)
{
    if (sd == NULL)
        return;
    dkim_sign_free(sd->c);
    free(sd);
}


/* smtpd_dkim_off - this message goes unsigned (logged once). */
static void
smtpd_dkim_off(struct smtpd_dkim *sd, const char *id, const char *why)
{
    log_info("%s: dkim: not signed: %s", id, why);
    dkim_sign_free(sd->c);
    sd->c = NULL;
    sd->state = SD_OFF;
}


/* smtpd_dkim_reserve - the header section is known: pick the domain and
 * make room for the signature.  A negative SPOOL_E* on a spool failure. */
static int
smtpd_dkim_reserve(struct smtpd_dkim *sd, struct spool_msg *m,
    const char *id)
{
    int rc = dkim_sign_prepare(sd->c, &sd->len);

    if (rc != DKIM_OK) {
        smtpd_dkim_off(sd, id, dkim_strerror(rc));
        return SPOOL_OK;
    }
    rc = spool_head_reserve(m, sd->len);
    if (rc == SPOOL_ELATE) {
        smtpd_dkim_off(sd, id, "header section larger than the spool's "
            "write buffer");
        return SPOOL_OK;
    }
    if (rc != SPOOL_OK)
        return rc;
    sd->state = SD_BODY;
    return SPOOL_OK;
}


int
smtpd_dkim_feed(struct smtpd_dkim *sd, struct spool_msg *m, const char *p,
    size_t n, const char *id)
{
    if (sd->state == SD_OFF)
        return SPOOL_OK;
    dkim_sign_feed(sd->c, p, n);
    if (sd->state == SD_HEAD && dkim_sign_header_done(sd->c))
        return smtpd_dkim_reserve(sd, m, id);
    return SPOOL_OK;
}


int
smtpd_dkim_end(struct smtpd_dkim *sd, struct spool_msg *m, const char *id,
    const char **domain)
{
    char *hdr;
    int   rc;

    *domain = NULL;
    if (sd->state == SD_HEAD &&             /* headers only, no empty line */
        (rc = smtpd_dkim_reserve(sd, m, id)) != SPOOL_OK)
        return rc;
    if (sd->state == SD_OFF)
        return SPOOL_OK;
    hdr = xmalloc(sd->len);
    rc = dkim_sign_end(sd->c, hdr, sd->len);
    if (rc != DKIM_OK) {
        log_err("%s: dkim: signing failed: %s", id, dkim_strerror(rc));
        free(hdr);
        return SMTPD_DKIM_EFAIL;
    }
    rc = spool_head_fill(m, hdr, sd->len);
    free(hdr);
    if (rc == SPOOL_OK)
        *domain = dkim_sign_domain(sd->c);
    return rc;
}
