/*
 * shape_int.h - the rules' representation, shared by shape_rules.c (the
 * parser) and shape_site.c (matching).  Private to shape/.
 */
#ifndef MTAD_SHAPE_INT_H
#define MTAD_SHAPE_INT_H

#include <regex.h>

#include "shape/shape.h"

#define SR_MAX_PAT 32
#define SR_MAX_SRC 16

/* which limit keys a block set */
enum { L_CONNS = 1, L_MPC = 2, L_RPM = 4, L_BURST = 8, L_SEC = 16,
       L_MIN = 32, L_HOUR = 64, L_NCONN = 128, L_NCONN_IV = 256 };

struct sr_lim {
    struct shape_limits l;
    unsigned            set;
};

struct sr_backoff {
    int         code;               /* 0 any; 4 or 42 for "4xx", "42x" */
    int         code_digits;        /* digits given: 1..3 */
    char        enhanced[32];       /* glob, "" any */
    char       *text;               /* the source of re */
    regex_t     re;
    int         has_re;
    char        cls[32];            /* "" any */
    int         kind;               /* -1 any */
    struct shape_action a;
};

struct sr_source {
    char          name[SHAPE_NAME_MAX];
    struct sr_lim lim;
};

struct sr_block {
    char              name[SHAPE_NAME_MAX];
    char             *mx[SR_MAX_PAT];
    size_t            nmx;
    char             *dom[SR_MAX_PAT];
    size_t            ndom;
    struct sr_lim     lim;
    struct sr_source  src[SR_MAX_SRC];
    size_t            nsrc;
    struct sr_backoff *bo;
    size_t            nbo;
};

struct shape_rules {
    struct sr_lim      defaults;
    struct sr_block   *blocks;
    size_t             nblocks;
    struct sr_backoff *bo;           /* global back-off rules */
    size_t             nbo;
    char               origin[512];
};

/* to's limits replaced by those from set. */
void    sr_lim_over_pub(struct shape_limits *to, const struct sr_lim *from);

#endif /* MTAD_SHAPE_INT_H */
