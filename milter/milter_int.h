/*
 * milter_int.h - what the files of milter/ share (milter.c: connections
 * and stages; milter_msg.c: the message phase).  Nothing outside milter/
 * includes it.
 */
#ifndef MTAD_MILTER_INT_H
#define MTAD_MILTER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/ev.h"
#include "milter/milter.h"

enum { MC_CONNECTING = 0, MC_NEG, MC_READY, MC_DEAD };
/* the stage in progress; the order matters (from MS_MAIL on, a dead
 * milter's tempfail holds) */
enum { MS_NONE = 0, MS_CONNECT, MS_HELO, MS_MAIL, MS_RCPT, MS_DATA, MS_MSG };
/* one milter's progress through the message */
enum { MM_DATA = 0, MM_HDR, MM_EOH, MM_BODY, MM_EOM, MM_DONE };

struct milter_chain;

struct mconn {
    struct milter_chain      *c;
    const struct milter_spec *sp;
    int             fd;
    int             st;             /* MC_* */
    unsigned        watched;
    uint32_t        actions, proto; /* negotiated */
    int             waiting;        /* a reply to expect is due */
    char            expect;         /* the SMFIC_* it answers */
    int             conn_accepted;  /* SMFIR_ACCEPT at connect or HELO */
    int             msg_accepted;   /* SMFIR_ACCEPT for this message */
    int             in_msg;         /* MAIL sent: SMFIC_ABORT owed */
    int             data_sent;      /* SMFIC_DATA sent at the DATA command */
    int             mstep;          /* MM_* */
    size_t          hidx;           /* next header to send */
    uint64_t        bpos;           /* body bytes sent */
    uint64_t        deadline;       /* ev_now() past which PROGRESS no
                                       longer extends the wait */
    struct buf      out, in;
    struct ev_timer timer;
};

struct milter_chain {
    struct ev_loop *loop;
    struct mconn   *m;
    size_t          n;
    char            sid[32];
    milter_done_fn *done;
    void           *arg;
    struct ev_timer done_timer;     /* done() runs from the loop */
    int             stage;          /* MS_* */
    size_t          cur;            /* the milter being asked */
    int             pending;        /* done() is owed */
    struct buf      cmd;            /* the stage's packets, for each */
    char            cmdc;
    struct milter_result res;
    /* the message (milter_msg.c) */
    int             fd;
    uint64_t        body_off, body_len;
    char          **hname, **hvalue;  /* its header fields */
    size_t          nh;
    struct buf      mac_data, mac_eom;  /* macro packets */
    struct milter_edits edits;
    size_t          edits_mark;     /* the current milter's first edit */
    /* the current milter's say, kept apart until its final reply: a
     * milter that fails half way leaves nothing behind */
    struct buf      nbody;          /* its REPLBODY chunks */
    int             nbody_set;
    int             nbody_cr;       /* its last byte was a CR */
    uint64_t        nbody_size;     /* as stored: bare LFs made CRLF */
    size_t          edit_bytes;     /* its header edits, bytes */
    uint64_t        body_max;       /* limits.max_message_size */
};

void    mc_on_io(struct ev_loop *loop, int fd, unsigned events, void *arg);
void    mc_dead(struct mconn *m, const char *why);
int     mc_flush(struct mconn *m);                   /* -1: m died */
void    mc_expect(struct mconn *m, char cmd, uint64_t ms);
void    mc_finish(struct milter_chain *c);
void    mc_verdict(struct milter_chain *c, struct mconn *m,
            enum milter_act act, const char *text);
int     mc_common(struct milter_chain *c, struct mconn *m,
            const struct milter_reply *r);
void    mc_step(struct milter_chain *c);
int     mc_stage(struct milter_chain *c, int stage, char cmdc);
/* milter_msg.c */
void    mc_msg_start(struct mconn *m);
void    mc_msg_pump(struct mconn *m);
void    mc_msg_reply(struct mconn *m, const struct milter_reply *r);
void    mc_msg_free(struct milter_chain *c);
void    mc_msg_drop(struct milter_chain *c);     /* the current milter's
                                                  * edits undone */

#endif /* MTAD_MILTER_INT_H */
