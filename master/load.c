/*
 * load.c - the master's load policy (limits.load).
 *
 * PURPOSE   Every 2 s the master reads the 1-minute load average (from
 *           limits.load.file, /proc/loadavg by default: a container may
 *           point it at its own, e.g. lxcfs's) into the status page, and
 *           decides two states, like Exim's queue_only_load and
 *           deliver_queue_load_max:
 *             hold    load >= limits.load.queue_only: accept mail, start
 *                     no delivery attempt (STATUS_THROTTLE_HOLD);
 *             refuse  load >= limits.load.refuse: 421 4.3.2 to every new
 *                     connection (STATUS_THROTTLE_REFUSE).
 *           A state ends when the load is below its threshold again.
 * CONTRACT  Workers only read status->throttle (relaxed loads: one per
 *           accepted connection, one per delivery timer run); no worker
 *           reads /proc.  Each change is logged once, as a "load" record
 *           (load, queue_only, refuse, hold, refuse state).
 * FAILURE   An unreadable or malformed file is logged once per failure
 *           streak; the last sampled value stays in force.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "config/config.h"
#include "master/master_int.h"
#include "master/ops.h"

/* load_read - the first field of path as load * 100; -1 on failure. */
static long
load_read(const char *path)
{
    char    buf[128], *end;
    ssize_t n;
    double  d;
    int     fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    errno = 0;
    d = strtod(buf, &end);
    if (end == buf || errno != 0 || !(d >= 0) || d > 1e6) {
        errno = EINVAL;
        return -1;
    }
    return (long)(d * 100 + 0.5);
}

static void
load_log_change(uint32_t load, const struct config *cfg, uint32_t was,
    uint32_t now_state)
{
    uint32_t changed = was ^ now_state;
    char     text[256];
    size_t   o = 0;

    if (changed & STATUS_THROTTLE_HOLD)
        o += (size_t)snprintf(text + o, sizeof(text) - o, "%s",
            (now_state & STATUS_THROTTLE_HOLD) ?
            "holding deliveries (limits.load.queue_only " :
            "delivering again (limits.load.queue_only ");
    if (changed & STATUS_THROTTLE_HOLD)
        o += (size_t)snprintf(text + o, sizeof(text) - o, "%u.%02u)%s",
            cfg->load_queue_only_x100 / 100, cfg->load_queue_only_x100 % 100,
            (changed & STATUS_THROTTLE_REFUSE) ? "; " : "");
    if (changed & STATUS_THROTTLE_REFUSE)
        (void)snprintf(text + o, sizeof(text) - o, "%s%u.%02u)",
            (now_state & STATUS_THROTTLE_REFUSE) ?
            "refusing new connections (limits.load.refuse " :
            "accepting connections again (limits.load.refuse ",
            cfg->load_refuse_x100 / 100, cfg->load_refuse_x100 % 100);
    log_event(LOGL_NOTICE, "load", LOG_KVS(LKV_D("load", load / 100.0),
        LKV_D("queue_only", cfg->load_queue_only_x100 / 100.0),
        LKV_D("refuse", cfg->load_refuse_x100 / 100.0),
        LKV_S("hold", (now_state & STATUS_THROTTLE_HOLD) ? "on" : "off"),
        LKV_S("refusing", (now_state & STATUS_THROTTLE_REFUSE) ? "on" :
            "off")),
        "load %u.%02u: %s", load / 100, load % 100, text);
}

void
load_sample(struct master *m)
{
    const struct config *cfg = m->cur->cfg;
    struct status_page  *st = m->status;
    long                 v = load_read(cfg->load_file);
    uint32_t             load, was, state = 0;

    if (v < 0) {
        if (!m->load_failing)
            log_warn("limits.load.file: cannot read a load average from %s:"
                " %s; keeping the last value", cfg->load_file,
                strerror(errno));
        m->load_failing = 1;
        load = __atomic_load_n(&st->load_x100, __ATOMIC_RELAXED);
    } else {
        if (m->load_failing)
            log_notice("limits.load.file: %s readable again",
                cfg->load_file);
        m->load_failing = 0;
        load = v > (long)UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        __atomic_store_n(&st->load_x100, load, __ATOMIC_RELAXED);
    }
    if (cfg->load_queue_only_x100 > 0 && load >= cfg->load_queue_only_x100)
        state |= STATUS_THROTTLE_HOLD;
    if (cfg->load_refuse_x100 > 0 && load >= cfg->load_refuse_x100)
        state |= STATUS_THROTTLE_REFUSE;
    was = __atomic_load_n(&st->throttle, __ATOMIC_RELAXED);
    if (was == state)
        return;
    __atomic_store_n(&st->throttle, state, __ATOMIC_RELAXED);
    load_log_change(load, cfg, was, state);
}
