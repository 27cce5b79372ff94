/*
 * api_submit.h - injection over HTTP: the API process's SMTP client to the
 * workers' injection socket (config_inject_path), and the handler of
 * POST /v1/messages built on it (api_submit_http.c).
 *
 * CONTRACT  api_submit_new() makes a pool of SMTP connections on loop to
 *           the unix socket path.  A connection begins with a PROXY v1
 *           header naming the HTTP client, so the worker's limits, logs,
 *           Received: field and events see that client; connections are
 *           kept idle per client address (API_SUBMIT_IDLE_PER_ADDR, for
 *           API_SUBMIT_IDLE_MS) and reused, and one is never shared by two
 *           messages at once.  api_submit_send() copies what it needs of
 *           the message (the envelope into the pipelined MAIL, RCPTs and
 *           DATA; the content dot-stuffed, a lone LF made CRLF, in one
 *           pass) and calls done exactly once, later, from the loop (never
 *           from inside api_submit_send):
 *             API_SUBMIT_OK    the worker answered 250 to the final dot:
 *                              the message is in the spool (same
 *                              guarantee as a 250 to any client);
 *                              queue_id is its id.
 *             API_SUBMIT_REFUSED  the worker refused it (MAIL, a RCPT, DATA
 *                              or the content): reply holds its answer,
 *                              stage and rcpt say where.  All or nothing:
 *                              a message with a recipient refused is not
 *                              sent (RSET, or the connection is closed
 *                              inside DATA before the final dot).
 *             API_SUBMIT_FAILED   no answer (no worker, connection lost,
 *                              timeout): the message was not accepted, or
 *                              (connection lost after the final dot:
 *                              stage API_STAGE_CONTENT) its fate is
 *                              unknown; never reported as OK.
 *           A connection that was idle and fails before any reply of the
 *           new message is retried once on a fresh one (the worker closed
 *           it meanwhile: limits.command_timeout, a restart).
 *           api_submit_free() ends every connection; pending messages get
 *           done(API_SUBMIT_FAILED) first.
 * FAILURE   api_submit_new: NULL only when the path does not fit a unix
 *           socket address.  api_submit_send: -1 and why when the message
 *           cannot be put in SMTP (an address with a '>' or a line break,
 *           no recipient), nothing called; else 0.
 */
#ifndef MTAD_API_SUBMIT_H
#define MTAD_API_SUBMIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "smtp/smtp.h"

struct ev_loop;
struct api;
struct api_submit;

#define API_SUBMIT_IDLE_PER_ADDR  8
#define API_SUBMIT_IDLE_MAX       64        /* idle connections in all */
#define API_SUBMIT_IDLE_MS        20000     /* below command_timeout */
#define API_SUBMIT_TIMEOUT_MS     120000    /* for any one reply */

/* DSN NOTIFY= (RFC 3461); 0: not given */
#define API_NOTIFY_NEVER    0x1u
#define API_NOTIFY_SUCCESS  0x2u
#define API_NOTIFY_FAILURE  0x4u
#define API_NOTIFY_DELAY    0x8u

struct api_submit_rcpt {
    const char *addr;               /* local@domain */
    unsigned    notify;             /* API_NOTIFY_*, 0 none */
    const char *orcpt;              /* "rfc822;addr" as given, or NULL */
};

struct api_submit_msg {
    const char *from;               /* "" for the null sender */
    const struct api_submit_rcpt *rcpt;
    size_t      nrcpt;
    const char *ret;                /* "FULL", "HDRS" or NULL */
    const char *envid;              /* NULL: none */
    const unsigned char *body;      /* RFC 5322 text, as the client gave it */
    size_t      body_len;
    const struct sockaddr_storage *client;  /* the HTTP client */
};

enum api_submit_status {
    API_SUBMIT_OK = 0,
    API_SUBMIT_REFUSED = 1,
    API_SUBMIT_FAILED = 2
};

enum api_submit_stage {
    API_STAGE_CONNECT = 0, API_STAGE_MAIL, API_STAGE_RCPT, API_STAGE_DATA,
    API_STAGE_CONTENT
};

struct api_submit_result {
    int         status;             /* enum api_submit_status */
    int         stage;              /* enum api_submit_stage */
    size_t      rcpt;               /* API_STAGE_RCPT: its index */
    struct smtp_reply reply;        /* REFUSED: the worker's (code, text) */
    char        enhanced[16];       /* from the reply: "5.1.1" */
    const char *why;                /* FAILED: a static sentence */
    char        queue_id[32];       /* OK */
};

typedef void api_submit_done_fn(void *arg, const struct api_submit_result *r);

struct api_submit *api_submit_new(struct ev_loop *loop, const char *path);
int         api_submit_send(struct api_submit *p,
                const struct api_submit_msg *m, api_submit_done_fn *done,
                void *arg, const char **why);
void        api_submit_free(struct api_submit *p);      /* NULL ok */
/* connections open / idle, for /v1/status */
void        api_submit_counts(const struct api_submit *p, size_t *open,
                size_t *idle);

/* The HTTP side (api_submit_http.c).  init: the process's one pool on the
 * API's loop, to the injection socket path (config_inject_path); 0, or -1
 * (path too long).  routes: POST /v1/messages (role inject).  shutdown:
 * api_submit_free of that pool. */
int         api_submit_init(struct ev_loop *loop, const char *path);
int         api_submit_routes(struct api *a);
void        api_submit_shutdown(void);

#endif /* MTAD_API_SUBMIT_H */
