/*
 * queue.c - mtactl's queue commands: queue, show, delete, hold, release,
 * flush, bounce.
 *
 * PURPOSE   Inspect the spool and steer single messages, safely while mtad
 *           runs, and also while it does not (everything here works on the
 *           spool files; the daemon is only told to look again).
 * CONTRACT  Reading (queue, show) never takes a message away from a worker:
 *           it opens queue/<id> without the delivery lock and tells
 *           "active" messages apart by the flocks listed in /proc/locks
 *           (only when that cannot be read, by a LOCK_SH|LOCK_NB probe
 *           dropped at once).
 *           Changing (delete, hold, release, flush, bounce) takes the same
 *           flock(LOCK_EX) the delivering worker holds for a whole attempt,
 *           waiting up to QUEUE_LOCK_WAIT_MS for an attempt in progress to
 *           end, so a change always falls between two attempts: a message
 *           that the attempt finished is gone (the command says "no such
 *           message"), one it deferred gets the change.  A lock won on a
 *           file already unlinked by its last holder counts as gone too.
 *           flush alone does not wait: a message being tried is left to
 *           that attempt.
 *           After the change the lock is released and release, flush and
 *           bounce ask the master to "kick" the ids, so the owning worker
 *           acts at once; when mtad is not running the change stands and
 *           is acted on when it starts (deliver_recover()).  bounce only
 *           marks the pending recipients BOUNCED: the worker's next attempt
 *           finds none pending, sends the DSN and removes the message.
 *           When run as root on a spool owned by another user (mtad drops
 *           to it), changes are made with that user's effective ids, so the
 *           state files stay readable by the workers.
 * FAILURE   Messages to stderr as "mtactl: <cmd>: <id>: <why>"; exit codes
 *           0 (every id done), 1 (some failed: unknown or malformed id,
 *           spool error), 2 (usage).
 *
 * This file holds what every command shares (opening the spool as its
 * owner, loading and filtering messages, the options) and the dispatch;
 * queue_format.c, queue_list.c, queue_show.c and queue_change.c the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "common/ctl.h"
#include "common/safefs.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "mtactl/mtactl.h"
#include "mtactl/queue_int.h"

const char *const queue_state_names[] = {
    "queued", "active", "deferred", "held"
};

const char *const queue_rcpt_status_names[] = {
    "pending", "sent", "bounced"
};

/* ---- the spool and its owner ------------------------------------------ */

/* queue_spool_owner - as root: the spool directory's own stat (not of
 * what a link leads to) in *st, and 0 when root may act on it: a spool of
 * another user's must sit in a directory that user cannot change
 * (spool_parent_trusted), else it could swap spool.dir for a link
 * between our look and our open.  1 when there is nothing to look at
 * (spool_open says what is missing); -1 after saying why. */
static int
queue_spool_owner(const struct config *cfg, const char *cmd,
    struct stat *st)
{
    char        err[PATH_MAX + 160];
    const char *name;
    int         pfd, rc;

    pfd = safefs_open_parent(cfg->spool_dir, &name, err, sizeof(err));
    if (pfd < 0)
        return 1;
    rc = fstatat(pfd, name, st, AT_SYMLINK_NOFOLLOW) == -1 ? 1 : 0;
    if (rc == 0 && st->st_uid != 0 &&
        spool_parent_trusted(pfd, cfg->spool_dir, err, sizeof(err)) != 0) {
        fprintf(stderr, "mtactl: %s: %s\n", cmd, err);
        rc = -1;
    }
    close(pfd);
    return rc;
}


/* queue_open_spool - the spool named by the config (as root: see
 * queue_spool_owner). */
int
queue_dirs_plain(const struct config *cfg, const char *cmd)
{
    static const char *const sub[] = { "tmp", "queue", "state" };
    char        path[PATH_MAX];
    struct stat st;

    for (size_t i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", cfg->spool_dir, sub[i]);
        if (lstat(path, &st) == -1 || S_ISDIR(st.st_mode))
            continue;               /* missing: spool_open() says so */
        fprintf(stderr, "mtactl: %s: spool %s: %s; refusing it\n", cmd, path,
            S_ISLNK(st.st_mode) ? "is a symbolic link" : "not a directory");
        return -1;
    }
    return 0;
}


struct spool *
queue_open_spool(const struct config *cfg, const char *cmd)
{
    struct spool *sp = NULL;
    struct stat   st;
    int           e;

    if (geteuid() == 0 && queue_spool_owner(cfg, cmd, &st) < 0)
        return NULL;
    if (queue_dirs_plain(cfg, cmd) < 0)
        return NULL;
    if (spool_open(&sp, cfg->spool_dir, cfg->spool_fsync, 0) != SPOOL_OK) {
        e = errno;
        fprintf(stderr, "mtactl: %s: spool %s: %s%s\n", cmd, cfg->spool_dir,
            spool_errstr(sp), e == EACCES ? " (run as root or as the user "
            "mtad runs as)" : e == ENOENT ? " (has mtad ever started with "
            "this config?)" : "");
        spool_close(sp);
        return NULL;
    }
    return sp;
}


/*
 * queue_become_owner - as root, act with the effective ids of the spool's
 * owner: a state file written by root with mode 0600 would lock the
 * unprivileged workers out of their own message.
 */
int
queue_become_owner(const struct config *cfg, struct queue_creds *c)
{
    struct stat st;
    int         rc;

    c->dropped = 0;
    c->uid = geteuid();
    c->gid = getegid();
    c->groups = NULL;
    c->ngroups = 0;
    if (c->uid != 0)
        return 0;
    /* the owner of the directory itself, not of what a link leads to */
    if ((rc = queue_spool_owner(cfg, "spool", &st)) != 0)
        return rc < 0 ? -1 : 0;
    if (st.st_uid == 0)
        return 0;
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mtactl: spool %s: not a directory\n",
            cfg->spool_dir);
        return -1;
    }
    /* root's supplementary groups go too: with them a file writable by
     * group root would still be ours to write */
    c->ngroups = getgroups(0, NULL);
    if (c->ngroups > 0) {
        c->groups = xcalloc((size_t)c->ngroups, sizeof(gid_t));
        c->ngroups = getgroups(c->ngroups, c->groups);
    }
    if (c->ngroups < 0 || setgroups(1, &st.st_gid) == -1 ||
        setegid(st.st_gid) == -1 || seteuid(st.st_uid) == -1) {
        fprintf(stderr, "mtactl: cannot act as the spool's owner (uid %lu): "
            "%s\n", (unsigned long)st.st_uid, strerror(errno));
        (void)setegid(c->gid);
        if (c->ngroups >= 0)
            (void)setgroups((size_t)c->ngroups, c->groups);
        free(c->groups);
        c->groups = NULL;
        return -1;
    }
    c->dropped = 1;
    return 0;
}


void
queue_become_self(struct queue_creds *c)
{
    if (!c->dropped)
        return;
    /* uid first: only root may set the groups back */
    if (seteuid(c->uid) == -1 || setegid(c->gid) == -1 ||
        setgroups((size_t)c->ngroups, c->groups) == -1) {
        fprintf(stderr, "mtactl: cannot restore the effective ids: %s\n",
            strerror(errno));
        exit(MTACTL_FAIL);              /* fatal: would run with wrong ids */
    }
    free(c->groups);
    c->groups = NULL;
    c->dropped = 0;
}


/*
 * queue_norm_id - copy a user-given id into out in canonical form (upper
 * case: people retype ids from logs).  0 when it cannot be a queue id,
 * which also keeps "../etc" and friends away from the spool paths.
 */
int
queue_norm_id(const char *in, char out[SPOOL_ID_SIZE])
{
    size_t i;

    if (strlen(in) != SPOOL_ID_LEN)
        return 0;
    for (i = 0; i < SPOOL_ID_LEN; i++)
        out[i] = in[i] >= 'a' && in[i] <= 'f' ? (char)(in[i] - 'a' + 'A') :
            in[i];
    out[SPOOL_ID_LEN] = '\0';
    return spool_id_valid(out);
}


/* ---- loading ---------------------------------------------------------- */

static int
queue_fileid_cmp(const void *a, const void *b)
{
    const struct queue_fileid *x = a, *y = b;

    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return x->ino < y->ino ? -1 : x->ino > y->ino;
}


/*
 * queue_locks_load - the files that hold a flock right now, from
 * /proc/locks ("1: FLOCK  ADVISORY  WRITE 4242 00:1a:2133387 0 EOF";
 * device numbers in hex, "->" lines are waiters).  Looking there instead
 * of probing with flock() never makes a starting attempt find the lock
 * taken.  When /proc/locks cannot be read, lk->ok stays 0 and
 * queue_state_of() probes instead.
 */
void
queue_locks_load(struct queue_locks *lk)
{
    FILE              *f;
    char              *line = NULL, kind[16];
    size_t             cap = 0, alloc = 0;
    unsigned long      maj, min;
    unsigned long long ino;

    memset(lk, 0, sizeof(*lk));
    if ((f = fopen("/proc/locks", "re")) == NULL)
        return;
    while (getline(&line, &cap, f) != -1) {
        if (strstr(line, "->") != NULL || sscanf(line,
            "%*d: %15s %*s %*s %*d %lx:%lx:%llu", kind, &maj, &min,
            &ino) != 4 || strcmp(kind, "FLOCK") != 0)
            continue;
        if (lk->n == alloc) {
            alloc = alloc ? alloc * 2 : 64;
            lk->v = xrealloc(lk->v, alloc * sizeof(*lk->v));
        }
        lk->v[lk->n].dev = makedev(maj, min);
        lk->v[lk->n].ino = (ino_t)ino;
        lk->n++;
    }
    free(line);
    lk->ok = !ferror(f);
    fclose(f);
    if (lk->n > 0)
        qsort(lk->v, lk->n, sizeof(*lk->v), queue_fileid_cmp);
}


void
queue_locks_free(struct queue_locks *lk)
{
    free(lk->v);
    lk->v = NULL;
    lk->n = 0;
}


/* queue_locked - does some process hold a flock on fd's file?  From the
 * /proc/locks snapshot; else a probe, dropped at once (a worker meeting
 * it retries a little later). */
static int
queue_locked(const struct queue_locks *lk, int fd)
{
    struct queue_fileid key;
    struct stat         st;

    if (lk != NULL && lk->ok && lk->n == 0)
        return 0;                   /* nothing locked at all: no fstat() */
    if (lk != NULL && lk->ok && fstat(fd, &st) == 0) {
        key.dev = st.st_dev;
        key.ino = st.st_ino;
        return lk->n > 0 && bsearch(&key, lk->v, lk->n, sizeof(*lk->v),
            queue_fileid_cmp) != NULL;
    }
    if (flock(fd, LOCK_SH | LOCK_NB) == -1)
        return errno == EWOULDBLOCK;
    (void)flock(fd, LOCK_UN);
    return 0;
}


/* queue_state_of - what the message is doing. */
enum queue_state
queue_state_of(const struct spool_env *env, int fd,
    const struct queue_locks *lk)
{
    if (queue_locked(lk, fd))
        return QS_ACTIVE;
    if (env->held)
        return QS_HELD;
    if (env->attempts > 0)
        return QS_DEFERRED;
    return QS_QUEUED;
}


uint64_t
queue_since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}


int
queue_match(const struct queue_item *it, const struct queue_filter *f,
    uint64_t now)
{
    const struct spool_env *env = it->env;
    size_t                  i;

    if (f->state >= 0 && (int)it->state != f->state)
        return 0;
    if (f->from != NULL && strcasestr(env->sender, f->from) == NULL)
        return 0;
    if (f->older_ms > 0 && queue_since(now, env->arrival_ms) < f->older_ms)
        return 0;
    if (f->to != NULL) {
        for (i = 0; i < env->nrcpt; i++)
            if (strcasestr(env->rcpt[i].addr, f->to) != NULL)
                break;
        if (i == env->nrcpt)
            return 0;
    }
    return 1;
}


/* queue_load - every message in the queue that passes the filter, sorted
 * by id (that is, by arrival). */
int
queue_load(struct spool *sp, const struct queue_filter *f,
    struct queue_item **itemsp, size_t *np)
{
    char              (*ids)[SPOOL_ID_SIZE] = NULL;
    struct queue_item *items;
    struct queue_locks lk;
    size_t             nids = 0, i, n = 0;
    uint64_t           now = util_wall_ms();

    if (spool_list(sp, &ids, &nids) != SPOOL_OK)
        return -1;
    queue_locks_load(&lk);
    items = xcalloc(nids + 1, sizeof(*items));
    for (i = 0; i < nids; i++) {
        struct spool_env *env = NULL;
        int               fd = -1;
        off_t             off;
        int               rc;

        /* A message delivered since the listing is simply gone. */
        rc = spool_msg_open(sp, ids[i], 0, &env, &fd, &off);
        if (rc == SPOOL_ENOENT)
            continue;
        if (rc != SPOOL_OK) {
            fprintf(stderr, "mtactl: %s: %s (skipped)\n", ids[i],
                spool_errstr(sp));
            continue;
        }
        items[n].env = env;
        items[n].state = queue_state_of(env, fd, &lk);
        close(fd);
        if (queue_match(&items[n], f, now))
            n++;
        else
            spool_env_free(env);
    }
    free(ids);
    queue_locks_free(&lk);
    *itemsp = items;
    *np = n;
    return 0;
}


int
queue_scan(struct spool *sp, const struct queue_filter *f,
    void (*fn)(const struct queue_item *it, void *arg), void *arg)
{
    char              (*ids)[SPOOL_ID_SIZE] = NULL;
    struct queue_locks lk;
    struct queue_item  it;
    size_t             nids = 0, i;
    uint64_t           now = util_wall_ms();

    if (spool_list(sp, &ids, &nids) != SPOOL_OK)
        return -1;
    queue_locks_load(&lk);
    for (i = 0; i < nids; i++) {
        int   fd = -1, rc;
        off_t off;

        it.env = NULL;
        rc = spool_msg_open(sp, ids[i], 0, &it.env, &fd, &off);
        if (rc == SPOOL_ENOENT)
            continue;               /* delivered since the listing */
        if (rc != SPOOL_OK) {
            fprintf(stderr, "mtactl: %s: %s (skipped)\n", ids[i],
                spool_errstr(sp));
            continue;
        }
        it.state = queue_state_of(it.env, fd, &lk);
        close(fd);
        if (queue_match(&it, f, now))
            fn(&it, arg);
        spool_env_free(it.env);
    }
    free(ids);
    queue_locks_free(&lk);
    return 0;
}


void
queue_items_free(struct queue_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        spool_env_free(items[i].env);
    free(items);
}


/* ---- options ---------------------------------------------------------- */

static int
queue_parse_state(const char *s)
{
    for (size_t i = 0; i < ARRAY_LEN(queue_state_names); i++)
        if (strcmp(s, queue_state_names[i]) == 0)
            return (int)i;
    return -1;
}


/*
 * queue_parse_opts - the options of every queue command; allowed is the
 * set of option letters this command takes ("ftsodjabr").  Operands may
 * stand anywhere ("show --body ID"); they are collected, in order, into
 * o->ops.  Returns 0, or -1 after a usage message.
 */
int
queue_parse_opts(int argc, char **argv, const char *allowed,
    struct queue_opts *o)
{
    static const struct option opts[] = {
        { "from", required_argument, NULL, 'f' },
        { "to", required_argument, NULL, 't' },
        { "state", required_argument, NULL, 's' },
        { "older-than", required_argument, NULL, 'o' },
        { "by-domain", no_argument, NULL, 'd' },
        { "summary", no_argument, NULL, 'S' },
        { "json", no_argument, NULL, 'j' },
        { "all", no_argument, NULL, 'a' },
        { "body", no_argument, NULL, 'b' },
        { "raw", no_argument, NULL, 'r' },
        { "files", no_argument, NULL, 'F' },
        { "daemon", no_argument, NULL, 'D' },
        { "top", required_argument, NULL, 'n' },
        { "after", required_argument, NULL, 'A' },
        { "limit", required_argument, NULL, 'L' },
        { NULL, 0, NULL, 0 }
    };
    int ch;

    memset(o, 0, sizeof(*o));
    o->f.state = -1;
    o->ops = xcalloc((size_t)argc + 1, sizeof(*o->ops));
    optind = 0;                         /* full reset: a fresh argv */
    opterr = 0;
    /* "-": operands come back in order as option 1, nothing is permuted */
    while ((ch = getopt_long(argc, argv, "-", opts, NULL)) != -1) {
        if (ch == 1) {
            o->ops[o->nops++] = optarg;
            continue;
        }
        if (ch == '?' || strchr(allowed, ch) == NULL) {
            fprintf(stderr, "mtactl: %s: unknown option or missing value: "
                "'%s' (mtactl help %s)\n", argv[0], argv[optind - 1],
                argv[0]);
            return -1;
        }
        switch (ch) {
        case 'f': o->f.from = optarg; break;
        case 't': o->f.to = optarg; break;
        case 'd': o->by_domain = 1; break;
        case 'S': o->summary = o->by_domain = 1; break;
        case 'j': o->json = 1; break;
        case 'a': o->all = 1; break;
        case 'b': o->body = 1; break;
        case 'r': o->raw = 1; break;
        case 'F': o->source = QUEUE_SRC_FILES; break;
        case 'D': o->source = QUEUE_SRC_DAEMON; break;
        case 'n':
        case 'L': {
            char *end;
            unsigned long n = strtoul(optarg, &end, 10);

            if (optarg[0] < '0' || optarg[0] > '9' || *end != '\0' ||
                n == 0 || n > 1000000) {
                fprintf(stderr, "mtactl: %s: %s: expected a number of "
                    "%s, got '%s'\n", argv[0], ch == 'n' ? "--top" :
                    "--limit", ch == 'n' ? "domains" : "messages", optarg);
                return -1;
            }
            if (ch == 'n')
                o->top = (size_t)n;
            else
                o->limit = (size_t)n;
            break;
        }
        case 'A':
            if (!queue_norm_id(optarg, o->after)) {
                fprintf(stderr, "mtactl: %s: --after: not a queue id: "
                    "'%s'\n", argv[0], optarg);
                return -1;
            }
            break;
        case 's':
            if ((o->f.state = queue_parse_state(optarg)) < 0) {
                fprintf(stderr, "mtactl: %s: --state: expected queued, "
                    "active, deferred or held, got '%s'\n", argv[0], optarg);
                return -1;
            }
            break;
        case 'o':
            if (util_parse_duration(optarg, &o->f.older_ms) != 0 ||
                o->f.older_ms == 0) {
                fprintf(stderr, "mtactl: %s: --older-than: expected a "
                    "duration like 30m or 2d, got '%s'\n", argv[0], optarg);
                return -1;
            }
            break;
        }
    }
    return 0;
}


int
queue_filtered(const struct queue_filter *f)
{
    return f->from != NULL || f->to != NULL || f->state >= 0 ||
        f->older_ms > 0;
}



int
mtactl_queue(int argc, char **argv, const struct config *cfg)
{
    static const struct { const char *name; enum queue_op op; } ops[] = {
        { "delete", QO_DELETE }, { "hold", QO_HOLD },
        { "release", QO_RELEASE }, { "flush", QO_FLUSH },
        { "bounce", QO_BOUNCE }
    };

    if (strcmp(argv[0], "queue") == 0)
        return queue_cmd_list(argc, argv, cfg);
    if (strcmp(argv[0], "show") == 0)
        return queue_cmd_show(argc, argv, cfg);
    for (size_t i = 0; i < ARRAY_LEN(ops); i++)
        if (strcmp(argv[0], ops[i].name) == 0)
            return queue_cmd_change(argc, argv, cfg, ops[i].op);
    fprintf(stderr, "mtactl: unknown queue command '%s'\n", argv[0]);
    return MTACTL_USAGE;
}


void
mtactl_queue_help(void)
{
    printf(
"Queue commands (they read the spool directly, so queue and show work while\n"
"mtad is stopped; changes take the same lock as a delivery attempt and so\n"
"happen between attempts, waiting for one in progress to end):\n"
"  queue [--from S] [--to S] [--state queued|active|deferred|held]\n"
"        [--older-than DUR] [--by-domain] [--summary [--top N]] [--json]\n"
"        [--daemon | --files] [--after ID] [--limit N]\n"
"                     one line per message: id, size, arrival, age, state,\n"
"                     sender -> pending recipients; then next retry,\n"
"                     attempts and last error; a summary line.  --from/--to\n"
"                     match a substring (any case) of the sender / of any\n"
"                     recipient; --by-domain adds pending recipients per\n"
"                     destination domain; --summary only the counts: by\n"
"                     state, then per destination domain the messages by\n"
"                     age, like Postfix's qshape: T (total), then under 5,\n"
"                     10, 20 ... 1280 minutes, and 1280+; domains by total,\n"
"                     TOTAL first (the sum of the rows: a message to two\n"
"                     domains counts in both); --top N the first N\n"
"                     domains; --json one JSON object (--summary: the\n"
"                     domains' counts by state and by age too).  Lines\n"
"                     stream out by id, that is by arrival.  While mtad\n"
"                     runs its\n"
"                     workers answer from the records they keep; else the\n"
"                     files are read (same output); --daemon / --files\n"
"                     insist on one source; --after ID only the ids\n"
"                     after ID, --limit N at most N (the summary counts\n"
"                     every match; --json adds \"next\": the id to pass\n"
"                     as --after for the next page, or null)\n"
"  show ID [--body | --raw]\n"
"                     envelope, each recipient's status, relay and last\n"
"                     reply, the log lines about the message (history),\n"
"                     then the headers; --body the whole message; --raw\n"
"                     only the message, byte for byte\n"
"  delete ID... | --all [filters]    remove from the queue, no DSN\n"
"  hold ID... | --all [filters]      keep, but do not deliver\n"
"  release ID... | --all [filters]   undo hold and deliver now\n"
"  flush [ID... | --all [filters]]   deliver now (nothing named: every\n"
"                                    message); held ones stay held, one\n"
"                                    being delivered is left to it\n"
"  bounce ID... | --all [filters]    give up now: a DSN to the sender for\n"
"                                    the pending recipients, then removed\n"
"  IDs may be given in lower case.  Exit: 0 all done, 1 some id failed\n"
"  (unknown, malformed, spool error), 2 usage.\n");
}
