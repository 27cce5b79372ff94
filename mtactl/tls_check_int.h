/*
 * tls_check_int.h - between tls_check.c (what mtad would apply to a
 * domain) and tls_probe.c (the live STARTTLS probe of one host).
 * Nothing outside mtactl/ includes this.
 */
#ifndef MTAD_MTACTL_TLS_CHECK_INT_H
#define MTAD_MTACTL_TLS_CHECK_INT_H

struct config;
struct mta_hop;

/* tc_probe - connect to hp, EHLO, STARTTLS, the handshake prepared for
 * hp->tls, and print what came of it and the certificate's names.
 * would_try: mtad would deliver to hp (else the probe only informs).
 * 0 when the server meets hp->tls as delivery would judge it, -1 when
 * not (or it could not be reached). */
int tc_probe(const struct config *cfg, const struct mta_hop *hp,
    int would_try);

#endif
