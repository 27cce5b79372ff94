/*
 * cluster_redis.c - the agent's connection to Redis: the address (found
 * through Sentinel when configured, else the first of cluster.redis whose
 * ROLE is master), AUTH, the Lua scripts, and the pipeline of a cycle.
 *
 * PURPOSE   The agent is a process of its own that does nothing but sync,
 *           so it uses hiredis's plain context with socket timeouts
 *           (cluster.timeout) rather than an event loop: a cycle appends
 *           every command (redisAppendCommandArgv), then reads every reply
 *           (redisGetReply): one write, one round trip.  No worker waits
 *           for it; a slow Redis only delays the next grants.
 * SCRIPTS   All times come from Redis (TIME), so the nodes' clocks do not
 *           matter: HELLO (the node registry, a ZSET by last-seen time),
 *           LEASE (a hash of node -> "a:b:expiry": write this node's
 *           field, drop expired ones, answer the others' sums and the
 *           grant under a maximum), RESERVE (one GCRA per rate of a pair,
 *           its theoretical arrival time in a key: reserve up to K events
 *           of all of them at once, no further ahead than a horizon, and
 *           answer their times: the first and the spacing),
 *           SET (bans and counts in one hash with expiries).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "common/util.h"
#include "config/config.h"
#include "cluster/cluster_int.h"

#define CL_NOW "local t = redis.call('TIME') " \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "

static const char *const cl_scripts[CL_NSCRIPTS] = {
    /* HELLO KEYS[1] nodes; ARGV id: {now, id, age, id, age...} */
    CL_NOW
    "redis.call('ZADD', KEYS[1], now, ARGV[1]) "
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3600000) "
    "local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES') "
    "local out = {now} "
    "for i = 1, #r, 2 do out[#out + 1] = r[i] "
    "out[#out + 1] = now - tonumber(r[i + 1]) end "
    "return out",
    /* LEASE KEYS[1] hash; ARGV node want_a hold_a b max ttl:
     * {grant, others_a, others_b} */
    CL_NOW
    "local all = redis.call('HGETALL', KEYS[1]) "
    "local oa, ob = 0, 0 "
    "for i = 1, #all, 2 do if all[i] ~= ARGV[1] then "
    "local a, b, e = string.match(all[i + 1], '^(%d+):(%d+):(%d+)$') "
    "if e == nil or tonumber(e) <= now then "
    "redis.call('HDEL', KEYS[1], all[i]) "
    "else oa = oa + tonumber(a) ob = ob + tonumber(b) end end end "
    "local want, hold = tonumber(ARGV[2]), tonumber(ARGV[3]) "
    "local max, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]) "
    "local grant = want "
    "if max > 0 and grant > max - oa then grant = math.max(max - oa, 0) end "
    "local keep = math.max(grant, hold) "
    "if keep > 0 or tonumber(ARGV[4]) > 0 then "
    "redis.call('HSET', KEYS[1], ARGV[1], keep .. ':' .. ARGV[4] .. ':' .. "
    "(now + ttl)) "
    "redis.call('PEXPIRE', KEYS[1], ttl) "
    "else redis.call('HDEL', KEYS[1], ARGV[1]) end "
    "return {grant, oa, ob}",
    /* RESERVE KEYS rates (a GCRA's TAT each, ms); ARGV want, horizon_ms,
     * then n per_ms tolerance (events) per key: {K, first - now (us),
     * spacing (us)}: K events at first, first + spacing, ... */
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 "
    "local want, hz = tonumber(ARGV[1]), tonumber(ARGV[2]) "
    "local K, first, ivmax, st, ivs = want, nil, 0, {}, {} "
    "for i = 1, #KEYS do "
    "local n, per, tol = tonumber(ARGV[i * 3]), tonumber(ARGV[i * 3 + 1]), "
    "tonumber(ARGV[i * 3 + 2]) "
    "local iv = per / n "
    "local s = tonumber(redis.call('GET', KEYS[i])) or 0 "
    "if s < now - tol * iv then s = now - tol * iv end "
    "local k = 0 "
    "if s <= now + hz then k = math.floor((now + hz - s) / iv) + 1 end "
    "if k < K then K = k end "
    "if first == nil or s > first then first = s end "
    "if iv > ivmax then ivmax = iv end "
    "st[i] = s ivs[i] = iv end "
    "if K < 0 then K = 0 end "
    "if K > 0 then for i = 1, #KEYS do "
    "local tat = st[i] + K * ivs[i] "
    "local b = first + (K - 1) * ivmax + ivs[i] "
    "if b > tat then tat = b end "
    "redis.call('SET', KEYS[i], tostring(tat), 'PX', "
    "math.floor(tonumber(ARGV[i * 3 + 1]) * 2 + 60000)) end end "
    "return {K, math.floor((first - now) * 1000), math.floor(ivmax * 1000)}",
    /* SET KEYS[1] hash (KEYS[2]: tombstones, fields never set while
     * theirs lives); ARGV mode (ban|count) window_ms, then field value
     * pairs (ban: ms left; count: a delta): {field, left|count, ...},
     * then each live tombstone's {field, -1} */
    CL_NOW
    "local ban = ARGV[1] == 'ban' local win = tonumber(ARGV[2]) "
    "local function dead(f) if not KEYS[2] then return false end "
    "local v = redis.call('HGET', KEYS[2], f) if not v then return false end "
    "local a, b = string.match(v, '^(%d+):(%d+)$') "
    "return b ~= nil and tonumber(b) > now end "
    "for i = 3, #ARGV, 2 do if not dead(ARGV[i]) then "
    "local cur = redis.call('HGET', KEYS[1], ARGV[i]) "
    "local c, e = 0, 0 "
    "if cur then local a, b = string.match(cur, '^(%d+):(%d+)$') "
    "if b and tonumber(b) > now then c, e = tonumber(a), tonumber(b) end end "
    "local v = tonumber(ARGV[i + 1]) "
    "if ban then if now + v > e then e = now + v end c = 1 "
    "else c = c + v e = now + win end "
    "if c > 0 then redis.call('HSET', KEYS[1], ARGV[i], c .. ':' .. e) "
    "else redis.call('HDEL', KEYS[1], ARGV[i]) end end end "
    "local all = redis.call('HGETALL', KEYS[1]) local out = {} "
    "for i = 1, #all, 2 do "
    "local a, b = string.match(all[i + 1], '^(%d+):(%d+)$') "
    "if b == nil or tonumber(b) <= now or dead(all[i]) then "
    "redis.call('HDEL', KEYS[1], all[i]) else out[#out + 1] = all[i] "
    "if ban then out[#out + 1] = tonumber(b) - now "
    "else out[#out + 1] = tonumber(a) end end end "
    "if KEYS[2] then local d = redis.call('HGETALL', KEYS[2]) "
    "for i = 1, #d, 2 do local a, b = string.match(d[i + 1], "
    "'^(%d+):(%d+)$') if b and tonumber(b) > now then "
    "out[#out + 1] = d[i] out[#out + 1] = -1 "
    "else redis.call('HDEL', KEYS[2], d[i]) end end end "
    "if #all > 0 then redis.call('PEXPIRE', KEYS[1], 86400000) end "
    "return out",
};


static void
cl_timeouts(struct cl_agent *g, redisContext *c)
{
    struct timeval tv;

    tv.tv_sec = (time_t)(g->cfg->cluster_timeout_ms / 1000);
    tv.tv_usec = (suseconds_t)(g->cfg->cluster_timeout_ms % 1000 * 1000);
    (void)redisSetTimeout(c, tv);
}


/* cl_open - a context to one "host:port" or "/path": NULL with g->why */
static redisContext *
cl_open(struct cl_agent *g, const char *spec)
{
    struct timeval tv;
    redisContext  *c;
    char           host[128];
    const char    *colon;
    int            port;

    tv.tv_sec = (time_t)(g->cfg->cluster_timeout_ms / 1000);
    tv.tv_usec = (suseconds_t)(g->cfg->cluster_timeout_ms % 1000 * 1000);
    if (spec[0] == '/') {
        c = redisConnectUnixWithTimeout(spec, tv);
    } else {
        colon = strrchr(spec, ':');
        if (colon == NULL || (size_t)(colon - spec) >= sizeof(host)) {
            snprintf(g->why, sizeof(g->why), "%s: not host:port", spec);
            return NULL;
        }
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = '\0';
        if (host[0] == '[') {           /* [v6]:port */
            memmove(host, host + 1, strlen(host));
            host[strcspn(host, "]")] = '\0';
        }
        port = atoi(colon + 1);
        c = redisConnectWithTimeout(host, port, tv);
    }
    if (c == NULL || c->err) {
        snprintf(g->why, sizeof(g->why), "%.80s: %.160s", spec,
            c ? c->errstr : "out of memory");
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    cl_timeouts(g, c);
    return c;
}


/* cl_call - one command now (not pipelined): the reply, NULL with why */
static redisReply *
cl_call(struct cl_agent *g, redisContext *c, const char *what, int argc,
    const char **argv)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);

    if (r == NULL) {
        snprintf(g->why, sizeof(g->why), "%.80s: %.160s", what, c->errstr[0] ?
            c->errstr : "no answer");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        char esc[UTIL_ESC_ROOM(160)];

        util_escape(esc, sizeof(esc), r->str, strnlen(r->str, 160), 0, NULL);
        snprintf(g->why, sizeof(g->why), "%.80s: %.160s", what, esc);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}


/* cl_auth - AUTH [user] password, when one is set */
static int
cl_auth(struct cl_agent *g, redisContext *c, const char *what)
{
    const char *argv[3] = { "AUTH", NULL, NULL };
    redisReply *r;
    int         argc = 1;

    if (g->pass == NULL || g->pass[0] == '\0')
        return 0;
    if (g->cfg->cluster_user != NULL)
        argv[argc++] = g->cfg->cluster_user;
    argv[argc++] = g->pass;
    if ((r = cl_call(g, c, what, argc, argv)) == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}


/* cl_role - ROLE of c's server: CLUSTER_ROLE_* (NONE: no answer) */
static int
cl_role(struct cl_agent *g, redisContext *c, const char *what)
{
    const char *argv[1] = { "ROLE" };
    redisReply *r = cl_call(g, c, what, 1, argv);
    int         role = CLUSTER_ROLE_NONE;

    if (r == NULL)
        return role;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        r->element[0]->type == REDIS_REPLY_STRING)
        role = strcmp(r->element[0]->str, "master") == 0 ?
            CLUSTER_ROLE_MASTER : CLUSTER_ROLE_REPLICA;
    freeReplyObject(r);
    return role;
}


/* cl_sentinel - the primary's "host:port" from the first Sentinel that
 * knows master_name, into out: 0, or -1 (why) */
static int
cl_sentinel(struct cl_agent *g, char *out, size_t outsz)
{
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
        g->cfg->cluster_sentinel_master };
    char        list[1024], *s, *save = NULL;
    redisReply *r;

    util_strlcpy(list, g->cfg->cluster_sentinel, sizeof(list));
    for (s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        redisContext *c = cl_open(g, s);

        if (c == NULL)
            continue;
        r = cl_call(g, c, s, 3, argv);
        redisFree(c);
        if (r == NULL)
            continue;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            snprintf(out, outsz, strchr(r->element[0]->str, ':') ?
                "[%s]:%s" : "%s:%s", r->element[0]->str, r->element[1]->str);
            freeReplyObject(r);
            return 0;
        }
        snprintf(g->why, sizeof(g->why), "sentinel %s: no primary named %s",
            s, g->cfg->cluster_sentinel_master);
        freeReplyObject(r);
    }
    return -1;
}


/* cl_load - SCRIPT LOAD every script: 0 or -1 */
static int
cl_load(struct cl_agent *g, redisContext *c)
{
    const char *argv[3] = { "SCRIPT", "LOAD", NULL };
    redisReply *r;
    int         i;

    for (i = 0; i < CL_NSCRIPTS; i++) {
        argv[2] = cl_scripts[i];
        if ((r = cl_call(g, c, "SCRIPT LOAD", 3, argv)) == NULL)
            return -1;
        if (r->type == REDIS_REPLY_STRING)
            util_strlcpy(g->sha[i], r->str, sizeof(g->sha[i]));
        freeReplyObject(r);
    }
    return 0;
}


/* cl_try - connect to spec and check it is a primary */
static int
cl_try(struct cl_agent *g, const char *spec, int need_master)
{
    redisContext *c = cl_open(g, spec);
    int           role;

    if (c == NULL)
        return -1;
    if (cl_auth(g, c, spec) < 0 ||
        (role = cl_role(g, c, spec)) == CLUSTER_ROLE_NONE ||
        (need_master && role != CLUSTER_ROLE_MASTER &&
        (snprintf(g->why, sizeof(g->why), "%s: a replica", spec), 1)) ||
        cl_load(g, c) < 0) {
        redisFree(c);
        return -1;
    }
    g->rc = c;
    util_strlcpy(g->addr, spec, sizeof(g->addr));
    __atomic_store_n(&g->page->role, (uint32_t)role, __ATOMIC_RELAXED);
    return 0;
}

int
cl_connect(struct cl_agent *g)
{
    char  list[1024], primary[160], *s, *save = NULL, first[160] = "";
    int   pass;

    cl_disconnect(g);
    if (g->cfg->cluster_sentinel != NULL) {
        if (cl_sentinel(g, primary, sizeof(primary)) < 0)
            return -1;
        return cl_try(g, primary, 1);
    }
    /* the first primary of the list; a lone replica only as a last try
     * (a list of one server that is a replica: its writes fail loudly) */
    for (pass = 0; pass < 2; pass++) {
        util_strlcpy(list, g->cfg->cluster_redis, sizeof(list));
        for (s = strtok_r(list, ",", &save); s;
            s = strtok_r(NULL, ",", &save)) {
            if (first[0] == '\0')
                util_strlcpy(first, s, sizeof(first));
            if (cl_try(g, s, pass == 0 && strchr(g->cfg->cluster_redis, ',')
                != NULL) == 0)
                return 0;
        }
        if (strchr(g->cfg->cluster_redis, ',') == NULL)
            break;
    }
    return -1;
}

void
cl_disconnect(struct cl_agent *g)
{
    if (g->rc != NULL)
        redisFree(g->rc);
    g->rc = NULL;
    g->addr[0] = '\0';
    __atomic_store_n(&g->page->role, CLUSTER_ROLE_NONE, __ATOMIC_RELAXED);
}


/* ---- the pipeline ---- */

void
cl_args(struct cl_agent *g)
{
    g->argc = 0;
    g->arglen = 0;
}

void
cl_argb(struct cl_agent *g, const char *s, size_t n)
{
    if (g->argc >= CL_ARGS || g->arglen + n + 1 > sizeof(g->argbuf)) {
        g->argc = CL_ARGS + 1;          /* too long: cl_send drops it */
        return;
    }
    memcpy(g->argbuf + g->arglen, s, n);
    g->argbuf[g->arglen + n] = '\0';
    g->argv[g->argc] = g->argbuf + g->arglen;
    g->argl[g->argc++] = n;
    g->arglen += n + 1;
}

void
cl_arg(struct cl_agent *g, const char *fmt, ...)
{
    char    one[1024];
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(one, sizeof(one), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(one)) {
        g->argc = CL_ARGS + 1;
        return;
    }
    cl_argb(g, one, (size_t)n);
}

void
cl_eval(struct cl_agent *g, int s, int nkeys)
{
    cl_args(g);
    cl_arg(g, "EVALSHA");
    cl_arg(g, "%s", g->sha[s]);
    cl_arg(g, "%d", nkeys);
}

void
cl_send(struct cl_agent *g, const struct cl_pend *p)
{
    if (g->rc == NULL || g->argc > CL_ARGS || g->argc == 0) {
        free(p->key);
        return;
    }
    if (g->npend == g->cappend) {
        g->cappend = g->cappend ? g->cappend * 2 : 64;
        g->pend = xrealloc(g->pend, g->cappend * sizeof(*g->pend));
    }
    if (redisAppendCommandArgv(g->rc, g->argc, g->argv, g->argl) !=
        REDIS_OK) {
        free(p->key);
        return;
    }
    g->pend[g->npend++] = *p;
}

int
cl_flush(struct cl_agent *g, cl_reply_fn *fn)
{
    size_t i, n = g->npend;
    int    rc = 0;
    void  *rp;

    for (i = 0; i < n; i++) {
        redisReply *r;

        if (rc == 0 && redisGetReply(g->rc, &rp) != REDIS_OK) {
            snprintf(g->why, sizeof(g->why), "%.80s: %.160s", g->addr,
                g->rc->errstr[0] ? g->rc->errstr : "no answer in time");
            rc = -1;
        }
        if (rc == 0) {
            r = rp;
            if (r->type == REDIS_REPLY_ERROR) {
                char esc[UTIL_ESC_ROOM(160)];

                util_escape(esc, sizeof(esc), r->str, strnlen(r->str, 160),
                    0, NULL);
                snprintf(g->why, sizeof(g->why), "%.80s: %.160s", g->addr, esc);
                __atomic_add_fetch(&g->page->errors, 1, __ATOMIC_RELAXED);
                /* a lost script cache or a read-only replica: reconnect */
                if (strncmp(r->str, "NOSCRIPT", 8) == 0 ||
                    strncmp(r->str, "READONLY", 8) == 0)
                    rc = -1;
            } else
                fn(g, &g->pend[i], r);
            freeReplyObject(r);
        }
        free(g->pend[i].key);
    }
    g->npend = 0;
    if (n > 0 && rc == 0) {
        __atomic_add_fetch(&g->page->round_trips, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&g->page->commands, n, __ATOMIC_RELAXED);
    }
    return rc;
}
