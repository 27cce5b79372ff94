/*
 * audit.c - admin actions in mtad's log, with who did them.
 *
 * PURPOSE   Every state-changing control request (reload, stop, kick, ban,
 *           and the "audit" reports mtactl sends after queue and route
 *           changes it made itself) and every stop/reload signal becomes
 *           one "admin" record: event=admin, uid, pid, via, action, args.
 * CONTRACT  The uid comes from the kernel (SO_PEERCRED on the control
 *           socket; ssi_uid of a signal), never from what a client says.
 *           Read-only requests (status, check, queue-stream) and the
 *           "index" that follows a reported queue change are logged at
 *           debug only.
 * FAILURE   A peer whose credentials cannot be read is logged with
 *           uid -1.
 */
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "master/ops.h"

int
audit_peer(int fd, uid_t *uid, pid_t *pid)
{
    struct ucred cr;
    socklen_t    len = sizeof(cr);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
        len != sizeof(cr)) {
        *uid = (uid_t)-1;
        *pid = 0;
        return -1;
    }
    *uid = cr.uid;
    *pid = cr.pid;
    return 0;
}

void
audit_log(uid_t uid, pid_t pid, const char *via, const char *action,
    const char *args)
{
    long long u = uid == (uid_t)-1 ? -1 : (long long)uid;

    log_event(LOGL_NOTICE, "admin", LOG_KVS(LKV_I("uid", u),
        LKV_I("peer_pid", pid), LKV_S("via", via), LKV_S("action", action),
        LKV_S("args", args[0] ? args : NULL)),
        "admin: uid=%lld pid=%d via=%s: %s%s%.400s", u, (int)pid, via,
        action, args[0] ? " " : "", args);
}

void
audit_request(int fd, const char *line)
{
    char        action[32];
    const char *args;
    size_t      n;
    uid_t       uid;
    pid_t       pid;

    if (strcmp(line, "status") == 0 || strncmp(line, "status ", 7) == 0 ||
        strcmp(line, "check") == 0 || strcmp(line, "tls report") == 0 ||
        strncmp(line, "tls report ", 11) == 0 ||
        strcmp(line, "queue-stream") == 0 || strncmp(line, "index ", 6) == 0 ||
        strcmp(line, "ban list") == 0 || strcmp(line, "shaping list") == 0 ||
        strcmp(line, "shaping json") == 0 || strcmp(line, "hosts") == 0 ||
        strncmp(line, "greylist list", 13) == 0 ||
        strncmp(line, "quota list", 10) == 0 ||
        strcmp(line, "cluster status") == 0 ||
        strcmp(line, "cluster json") == 0) {
        /* read-only, often polled; or ("index") the daemon's half of a
         * queue change whose "audit" record mtactl sent already */
        log_debug("control: %s", line);
        return;
    }
    (void)audit_peer(fd, &uid, &pid);
    if (strncmp(line, "audit ", 6) == 0)    /* mtactl reports a change */
        line += 6;
    n = strcspn(line, " ");
    if (n >= sizeof(action))
        n = sizeof(action) - 1;
    memcpy(action, line, n);
    action[n] = '\0';
    args = line + n + (line[n] == ' ');
    audit_log(uid, pid, "mtactl", action, args);
}
