/*
 * chan.h - the typed channel between the master and each of its children
 * (the workers and the log process).
 *
 * TRANSPORT One SOCK_SEQPACKET socketpair per child, made by the master
 *           before the fork: one packet is one message, so a message is
 *           never split or merged, and EOF (the peer is gone) is a read of
 *           0.  Both ends are the same binary on the same host, so the
 *           header is in host byte order.
 * MESSAGE   struct chan_hdr (type, payload length), then exactly len
 *           payload bytes (the packet is sizeof(hdr) + len long), and at
 *           most one descriptor (SCM_RIGHTS), only where the table says.
 * COMMANDS  dir: M master, W worker, L log process; fd: a descriptor
 *           travels with it (and must).
 *             type              dir    payload                       fd
 *             CHAN_STOP         M->W   -  graceful: close listeners,
 *                                      finish sessions and deliveries,
 *                                      exit 0
 *                               M->L   -  write what is held, exit 0
 *             CHAN_PING         M->W,L -  the watchdog: answer CHAN_PONG
 *             CHAN_PONG         W,L->M -
 *             CHAN_READY        W->M   -  the worker's loop runs
 *             CHAN_DRAIN        M->W   -  close the listeners for good,
 *                                      deliver the whole queue now
 *             CHAN_KICK         M->W   a queue id (deliver it now if
 *                                      ours), or empty: every message
 *                                      we own
 *             CHAN_QSTREAM      M->W   -  write the queue listing to the  yes
 *                                      socket passed (mtactl queue)
 *             CHAN_TLSRPT_ADD   W->M   TLS-RPT policy blocks (the wire
 *                                      form of delivery/tlsrpt.h)
 *             CHAN_TLSRPT_SEND  M->W   "<start_s> <end_s>\n" then the
 *                                      blocks of one (day, domain): the
 *                                      report to send
 *             CHAN_SANDBOX_TEST M->W   -  make a forbidden system call
 *                                      (MTAD_SANDBOX_TEST only)
 *             CHAN_LOG_REOPEN   M->L   -  write to the file passed from   yes
 *                                      now on
 *             CHAN_LOG_INTERVAL M->L   uint64_t: the flush interval, ms
 *             CHAN_ROUTES       M->W   -  a new routes snapshot is
 *                                      published: reopen it before the
 *                                      next lookup
 *             CHAN_AUTH_CONNECT W->M   -  connect auth.dovecot_socket (a
 *                                      unix socket) for me: the worker's
 *                                      sandbox may not make unix sockets
 *             CHAN_AUTH_SOCKET  M->W   -  the connected socket            yes
 *             CHAN_AUTH_REFUSED M->W   why the connect failed (text)
 *             CHAN_SHAPE_EVENT  M->W   "TYPE\tSITE\tSOURCE\tMODE\tUNTIL_MS\t
 *                                      REASON": a shaping episode the
 *                                      master began or ended (mtactl, the
 *                                      tick), for the worker's events
 *           The receiver trusts nothing of the payload beyond its length
 *           (a worker is less trusted than the master): each handler
 *           parses its own payload strictly.
 * DISPATCH  Each side has one struct chan_side: its role and one handler
 *           per command it takes.  chan_serve() receives and dispatches
 *           at most a given number of messages per call, so a child that
 *           floods its channel gets a bounded share of a loop turn; the
 *           loop is level-triggered, so what is left brings it back on the
 *           next turn.
 * FAILURE   Never logs.  chan_send(): 0, or -1 with errno (EAGAIN when the
 *           channel is full, EINVAL for a message the table forbids).
 *           chan_decode() and chan_recv(): CHAN_EBAD for a packet the
 *           table forbids (unknown type, wrong direction, a length that is
 *           not the packet's or beyond the command's limit, a descriptor
 *           missing or where none belongs); a descriptor that came with it
 *           is closed, the reason is in why.
 */
#ifndef MTAD_CHAN_H
#define MTAD_CHAN_H

#include <stddef.h>
#include <stdint.h>

enum chan_cmd {
    CHAN_NONE = 0,
    CHAN_STOP,
    CHAN_PING,
    CHAN_PONG,
    CHAN_READY,
    CHAN_DRAIN,
    CHAN_KICK,
    CHAN_QSTREAM,
    CHAN_TLSRPT_ADD,
    CHAN_TLSRPT_SEND,
    CHAN_SANDBOX_TEST,
    CHAN_LOG_REOPEN,
    CHAN_LOG_INTERVAL,
    CHAN_ROUTES,
    CHAN_AUTH_CONNECT,
    CHAN_AUTH_SOCKET,
    CHAN_AUTH_REFUSED,
    CHAN_SHAPE_EVENT,
    CHAN_NCMD
};

/* The three ends; a command's table entry says which may receive it. */
enum chan_role { CHAN_MASTER = 0, CHAN_WORKER, CHAN_LOGD };

enum chan_rc {
    CHAN_OK = 0, CHAN_ESYS = -1, CHAN_AGAIN = -2, CHAN_EBAD = -3,
    CHAN_EOF = -4
};

struct chan_hdr {
    uint32_t type;                  /* enum chan_cmd */
    uint32_t len;                   /* payload bytes that follow */
};

#define CHAN_MSG_MAX      65536u    /* bytes of one packet, header included */
#define CHAN_PAYLOAD_MAX  (CHAN_MSG_MAX - sizeof(struct chan_hdr))

/* One message received.  data points into the caller's buffer and is
 * NUL-terminated after len bytes; valid until the next receive into it.
 * fd is the descriptor that came with it (-1: none); the handler owns it
 * (closes it, or keeps it). */
struct chan_msg {
    enum chan_cmd cmd;
    const char   *data;
    size_t        len;
    int           fd;
};

/* The name of a command ("stop", "tlsrpt-add", ...), for log lines. */
const char *chan_name(enum chan_cmd cmd);

/* Sends one message (MSG_DONTWAIT: never blocks); pass_fd < 0: none. */
int     chan_send(int fd, enum chan_cmd cmd, const void *p, size_t n,
            int pass_fd);

/* Checks the packet pkt[0..n) for receiver me; have_fd: a descriptor came
 * with it.  CHAN_OK with *out set (out->fd is -1: the caller adds its
 * descriptor), or CHAN_EBAD with a constant sentence in *why.  The
 * payload is not copied: out->data points into pkt (NUL-terminated only
 * if the caller's buffer is; chan_recv() makes sure). */
int     chan_decode(const void *pkt, size_t n, int have_fd, enum chan_role me,
            struct chan_msg *out, const char **why);

/* Receives one packet (MSG_DONTWAIT) into buf[0..cap), cap at least
 * CHAN_MSG_MAX + 1, and decodes it.  CHAN_OK, CHAN_AGAIN (nothing there),
 * CHAN_EOF, CHAN_ESYS (errno), or CHAN_EBAD (dropped; *why). */
int     chan_recv(int fd, enum chan_role me, char *buf, size_t cap,
            struct chan_msg *out, const char **why);

typedef void chan_handler_fn(const struct chan_msg *m, void *arg);
typedef void chan_bad_fn(const char *why, void *arg);

/* One side of the channel: its role, one handler per command it takes
 * (NULL: a command of the other sides; a message of one counts as bad),
 * and what to do with a bad message. */
struct chan_side {
    enum chan_role   me;
    chan_handler_fn *on[CHAN_NCMD];
    chan_bad_fn     *bad;
};

/* Receives and dispatches up to max messages from fd into buf (as
 * chan_recv); stops early when the channel is empty.  Returns the number
 * of messages taken (bad ones included; less than max: it was emptied),
 * CHAN_EOF when the peer closed, or CHAN_ESYS (errno).  Handlers must
 * not close fd. */
int     chan_serve(int fd, const struct chan_side *side, unsigned max,
            char *buf, size_t cap, void *arg);

#endif /* MTAD_CHAN_H */
