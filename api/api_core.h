/*
 * api_core.h - the API process's state, for its core files only (api.c,
 * api_route.c); handlers use the functions of api_int.h.
 *
 * CONTRACT  A client lives on a list of the process while its socket is
 *           open; closing it (api_client_close) takes it off, marks it
 *           dead and drops the list's reference: the struct is freed at
 *           the last api_client_unref.  One request at a time per client:
 *           bytes of a next (pipelined) request wait in the buffer until
 *           the current one is answered and written.
 */
#ifndef MTAD_API_CORE_H
#define MTAD_API_CORE_H

#include <stdint.h>
#include <sys/socket.h>

#include "api/api_int.h"
#include "common/buf.h"
#include "common/chan.h"
#include "common/ev.h"
#include "common/net.h"

struct api_tokens;
struct ssl_ctx_st;

enum api_cstate {
    API_C_TLS = 1,              /* handshake */
    API_C_HEAD,                 /* reading a request head */
    API_C_BODY,                 /* reading its body */
    API_C_HANDLER,              /* a handler has the request */
    API_C_WRITE,                /* writing the answer */
    API_C_LINGER,               /* answered and closing: reading what the
                                   client still sends, so that our close
                                   does not reset the answer away */
};

struct api_client {
    struct api             *a;
    struct api_client      *prev, *next;
    struct net_conn         conn;
    unsigned                refs;
    int                     dead;
    enum api_cstate         state;
    struct sockaddr_storage peer;
    char                    peer_str[64];   /* "[::1]:4711" */
    struct buf              in, out;
    struct ev_timer         timer;
    struct ev_timer         wait;           /* /v1/status's answer */
    int                     head_timer;     /* the head's deadline runs */
    struct api_http_head    head;
    int                     keep_alive;     /* after this answer */
    int                     answered;
    /* a handler runs: an answer it gives is sent when it returns, so
     * the request (r, its body, its token) stays whole until then */
    int                     in_handler, send_pending;
    unsigned                nreq;           /* requests answered */
    size_t                  drained;        /* API_C_LINGER: bytes dropped */
    uint64_t                status_id;      /* awaited CHAN_API_STATUS_REPLY */
    unsigned                watched;        /* events asked of the loop */
    /* the request handed out */
    struct api_req          req;
    char                    path[API_MAX_TARGET + 1];
    char                    pseg[API_MAX_TARGET + 1];   /* params' storage */
    const char             *pname[API_MAX_PARAMS];
    size_t                  pname_len[API_MAX_PARAMS];
    const char             *pval[API_MAX_PARAMS];
    size_t                  nparams;
    uint64_t                started_ms;
};

struct api {
    struct ev_loop     *loop;
    const struct config *cfg;
    struct api_tokens  *tokens;
    struct ssl_ctx_st  *tls;
    int                 lfd;
    int                 chan;
    int                 stopping;
    struct api_client  *clients;
    unsigned            nclients;
    struct api_route    routes[API_MAX_ROUTES];
    size_t              nroutes;
    uint64_t            status_seq;
    uint64_t            refused_sec;    /* 401/403 log lines: this second */
    unsigned            refused_n, refused_skipped;
    struct ev_timer     stop_timer;
    char                chanbuf[CHAN_MSG_MAX + 1];
};

void    api_client_close(struct api_client *c);
/* a complete answer is in c->out: write it (api.c) */
void    api_client_send(struct api_client *c);
/* the request is complete in c->in: hand it to the routes (api.c) */
void    api_route_request(struct api *a, struct api_client *c);
/* the bearer token of c's head: 0, or -1 after answering 401 */
int     api_precheck(struct api *a, struct api_client *c);
/* the client pointer of a request (api_route.c needs it back) */
struct api_client *api_req_client(const struct api_req *r);

#endif /* MTAD_API_CORE_H */
