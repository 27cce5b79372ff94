/*
 * api.h - the HTTP API process (docs/API.md, docs/openapi.yaml): an
 * unprivileged child of the master serving JSON over HTTP/1.1 (TLS
 * optional) on the api.listen socket the master bound, with bearer
 * tokens and roles (api.tokens_file).
 *
 * CONTRACT  In the child the master forked (master/api_child.c):
 *           api_init() while still privileged (it reads the tokens file
 *           and the TLS key, which may be root's), then the privilege
 *           drop and the sandbox, then api_main(), which returns the exit
 *           status once told to stop (CHAN_STOP, or the master's end of
 *           the channel closed).  A reload starts a new API process: the
 *           tokens file is read again there.  api_check() loads what
 *           api_init() loads and frees it (mtad -t, the start's checks).
 * FAILURE   api_init()/api_check(): NULL or -1 with "file:line:col: why"
 *           (the tokens file) or the TLS error in err.
 */
#ifndef MTAD_API_H
#define MTAD_API_H

#include <stddef.h>

struct config;
struct api;

struct api_args {
    const struct config *cfg;
    int                  listen_fd;     /* bound and listening, non-blocking */
    int                  chan_fd;       /* the master's channel (CHAN_API) */
};

struct api *api_init(const struct api_args *args, char *err, size_t errsz);
int         api_main(struct api *a);
int         api_check(const struct config *cfg, char *err, size_t errsz);

#endif /* MTAD_API_H */
