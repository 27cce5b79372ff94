/*
 * session_hash.c - password checks off the event loop: a few threads run
 * crypt_rn() (a yescrypt check costs a tenth of a second) while the
 * worker's loop goes on serving every other session.
 *
 * PURPOSE   session_auth.c hands a (password, hash) pair over with
 *           smtpd_hash_submit() and gets a job id; the loop watches
 *           smtpd_hash_fd() and takes finished jobs with smtpd_hash_reap(),
 *           each with the owner pointer it was given.  A session that
 *           closes while its job runs calls smtpd_hash_cancel(): the job's
 *           owner becomes NULL, and its result is reaped and dropped, so
 *           nothing touches the freed session.
 * THREADS   SMTPD_HASH_THREADS, made at the first job, after the worker's
 *           sandbox is on (the spool's sync thread does the same: they
 *           inherit the seccomp filter and Landlock, and run only futex,
 *           the hash's memory calls and write() on the eventfd).  Where
 *           they cannot be made, the hash runs inline and the eventfd is
 *           signalled all the same: one path for the caller.
 * SHARING   The jobs live in a fixed array.  A job's owner and busy mark
 *           are the loop's alone; state, queue and done list are under one mutex; the
 *           pass and the result are written by whoever holds the job
 *           (the loop before queueing it, a thread while it runs it).  A
 *           slot is free again only once the loop reaped it, so a
 *           cancelled job's slot cannot be reused under a running thread.
 * MEMORY    Each thread has its own crypt_data (32 KiB); passwords are
 *           cleansed once hashed.
 */
#include <crypt.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include <openssl/crypto.h>

#include "common/util.h"
#include "spool/spool.h"
#include "smtpd/smtpd_int.h"

#define SMTPD_HASH_THREADS 2

enum { HJ_FREE = 0, HJ_QUEUED, HJ_DONE };

struct smtpd_hash_job {
    int         state;              /* HJ_*, under mu */
    int         busy;               /* the loop's: submitted, not reaped */
    int         match;              /* the result: crypt(pass) == hash */
    const char *hash;               /* the password file's, outlives us */
    void       *owner;              /* the loop's; NULL: cancelled */
    char        pass[512];
};

struct smtpd_hash {
    pthread_mutex_t       mu;
    pthread_cond_t        cv;       /* a job queued, or quit */
    struct smtpd_hash_job job[SMTPD_HASH_JOBS];
    unsigned              queue[SMTPD_HASH_JOBS], qhead, nq;
    unsigned              done[SMTPD_HASH_JOBS], ndone;
    int                   quit;     /* under mu */
    int                   donefd;   /* eventfd, non-blocking: a job done */
    int                   tried;    /* the threads were asked for */
    unsigned              nthreads; /* running */
    pthread_t             tid[SMTPD_HASH_THREADS];
};


/* smtpd_hash_run - one check, on whatever thread holds the job. */
static void
smtpd_hash_run(struct smtpd_hash_job *j, struct crypt_data *cd)
{
    const char *out = crypt_rn(j->pass, j->hash, cd, (int)sizeof(*cd));
    size_t      n = strlen(j->hash);

    j->match = out != NULL && out[0] != '*' && strlen(out) == n &&
        CRYPTO_memcmp(out, j->hash, n) == 0;
    OPENSSL_cleanse(j->pass, sizeof(j->pass));
    OPENSSL_cleanse(cd, sizeof(*cd));
}


/* smtpd_hash_finish - the job is done: on the list, the loop told. */
static void
smtpd_hash_finish(struct smtpd_hash *h, unsigned id)
{
    uint64_t one = 1;

    pthread_mutex_lock(&h->mu);
    h->job[id].state = HJ_DONE;
    h->done[h->ndone++] = id;
    pthread_mutex_unlock(&h->mu);
    /* an eventfd write fails only on counter overflow: never here */
    while (write(h->donefd, &one, sizeof(one)) == -1 && errno == EINTR)
        ;
}


static void *
smtpd_hash_main(void *arg)
{
    struct smtpd_hash *h = arg;
    struct crypt_data *cd = calloc(1, sizeof(*cd));
    unsigned           id;

    if (cd == NULL)
        return NULL;                /* the others (or inline) go on */
    for (;;) {
        pthread_mutex_lock(&h->mu);
        while (h->nq == 0 && !h->quit)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->quit) {
            pthread_mutex_unlock(&h->mu);
            break;
        }
        id = h->queue[h->qhead];
        h->qhead = (h->qhead + 1) % SMTPD_HASH_JOBS;
        h->nq--;
        pthread_mutex_unlock(&h->mu);
        smtpd_hash_run(&h->job[id], cd);
        smtpd_hash_finish(h, id);
    }
    free(cd);
    return NULL;
}


struct smtpd_hash *
smtpd_hash_new(void)
{
    struct smtpd_hash *h = xcalloc(1, sizeof(*h));

    h->donefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->donefd < 0 || pthread_mutex_init(&h->mu, NULL) != 0) {
        if (h->donefd >= 0)
            close(h->donefd);
        free(h);
        return NULL;
    }
    if (pthread_cond_init(&h->cv, NULL) != 0) {
        pthread_mutex_destroy(&h->mu);
        close(h->donefd);
        free(h);
        return NULL;
    }
    return h;
}


int
smtpd_hash_fd(const struct smtpd_hash *h)
{
    return h->donefd;
}


/* smtpd_hash_start - the threads, once; inside the sandbox (see above). */
static void
smtpd_hash_start(struct smtpd_hash *h)
{
    unsigned i;

    h->tried = 1;
    for (i = 0; i < SMTPD_HASH_THREADS; i++)
        if (spool_thread_start(&h->tid[h->nthreads], smtpd_hash_main,
            h) == 0)
            h->nthreads++;
}


int
smtpd_hash_submit(struct smtpd_hash *h, const char *pass, const char *hash,
    void *owner)
{
    struct crypt_data *cd;
    unsigned           id;

    if (strlen(pass) >= sizeof(h->job[0].pass))
        return -1;
    if (!h->tried)
        smtpd_hash_start(h);
    for (id = 0; id < SMTPD_HASH_JOBS; id++)
        if (!h->job[id].busy)
            break;
    if (id == SMTPD_HASH_JOBS)
        return -1;
    h->job[id].busy = 1;
    h->job[id].hash = hash;
    h->job[id].owner = owner;
    memcpy(h->job[id].pass, pass, strlen(pass) + 1);
    if (h->nthreads == 0) {
        cd = xcalloc(1, sizeof(*cd));
        smtpd_hash_run(&h->job[id], cd);    /* inline */
        free(cd);
        smtpd_hash_finish(h, id);
        return (int)id;
    }
    pthread_mutex_lock(&h->mu);
    h->job[id].state = HJ_QUEUED;
    h->queue[(h->qhead + h->nq) % SMTPD_HASH_JOBS] = id;
    h->nq++;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return (int)id;
}


void
smtpd_hash_cancel(struct smtpd_hash *h, int id)
{
    if (id >= 0 && id < SMTPD_HASH_JOBS)
        h->job[id].owner = NULL;
}


int
smtpd_hash_reap(struct smtpd_hash *h, void **owner, int *match)
{
    uint64_t n;
    unsigned id;
    ssize_t  r = read(h->donefd, &n, sizeof(n));

    (void)r;                        /* EAGAIN: nothing new; the list says */
    pthread_mutex_lock(&h->mu);
    if (h->ndone == 0) {
        pthread_mutex_unlock(&h->mu);
        return 0;
    }
    id = h->done[--h->ndone];
    h->job[id].state = HJ_FREE;
    pthread_mutex_unlock(&h->mu);
    *owner = h->job[id].owner;
    *match = h->job[id].match;
    h->job[id].owner = NULL;
    h->job[id].busy = 0;
    return 1;
}


void
smtpd_hash_free(struct smtpd_hash *h)
{
    unsigned i;

    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    h->quit = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    for (i = 0; i < h->nthreads; i++)
        pthread_join(h->tid[i], NULL);
    OPENSSL_cleanse(h->job, sizeof(h->job));
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    close(h->donefd);
    free(h);
}
