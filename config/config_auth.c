/*
 * config_auth.c - auth.backend and auth.dovecot_socket: which backend
 * answers AUTH, and where Dovecot's auth service listens.
 *
 * CHECKS    auth.backend is "file" (the default: auth.password_file) or
 *           "dovecot"; dovecot needs auth.dovecot_socket and excludes
 *           auth.password_file (one answer to who may log in).  The socket
 *           is an absolute path that fits a sockaddr_un, or
 *           "inet:ADDRESS:PORT" with an address literal (no name: nothing
 *           is resolved when a worker connects).  Errors name the value's
 *           file:line:col.  The socket is not connected here: Dovecot may
 *           start after mtad (AUTH answers 454 meanwhile).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "config/config.h"
#include "config/config_int.h"

void
config_auth_mark(struct config_parse *p, int backend, const yaml_node_t *vn)
{
    if (backend) {
        p->backend_mark = vn->start_mark;
        p->have_backend_mark = 1;
    } else {
        p->dcsock_mark = vn->start_mark;
        p->have_dcsock_mark = 1;
    }
}


bool
config_auth_dovecot(const struct config *cfg)
{
    return cfg->auth_backend != NULL &&
        strcmp(cfg->auth_backend, "dovecot") == 0;
}


/* config_dovecot_inet - "ADDRESS:PORT" (ADDRESS an IPv4 or [IPv6]). */
static int
config_dovecot_inet(const char *s, struct sockaddr_storage *ss,
    unsigned *sslen, const char **why)
{
    char        host[64];
    const char *colon;
    size_t      n;
    int         port;

    if (s[0] == '[') {
        const char *end = strchr(s, ']');

        if (end == NULL || end[1] != ':') {
            *why = "expected inet:[IPV6]:PORT";
            return -1;
        }
        n = (size_t)(end - s - 1);
        s++;
        colon = end + 1;
    } else {
        if ((colon = strrchr(s, ':')) == NULL) {
            *why = "expected inet:ADDRESS:PORT";
            return -1;
        }
        n = (size_t)(colon - s);
    }
    if (n == 0 || n >= sizeof(host)) {
        *why = "the address is empty or too long";
        return -1;
    }
    memcpy(host, s, n);
    host[n] = '\0';
    if (config_parse_int(colon + 1, 1, 65535, &port) != 0) {
        *why = "the port is not a number from 1 to 65535";
        return -1;
    }
    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
        ((struct sockaddr_in *)ss)->sin_family = AF_INET;
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
        *sslen = sizeof(struct sockaddr_in);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) ==
        1) {
        ((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
        *sslen = sizeof(struct sockaddr_in6);
        return 0;
    }
    *why = "the address is not an IPv4 or IPv6 literal";
    return -1;
}


int
config_dovecot_addr(const char *spec, struct sockaddr_storage *ss,
    unsigned *sslen, const char **why)
{
    struct sockaddr_un *sun = (struct sockaddr_un *)ss;

    if (strncmp(spec, "inet:", 5) == 0)
        return config_dovecot_inet(spec + 5, ss, sslen, why);
    if (spec[0] != '/') {
        *why = "expected an absolute path of a unix socket, or "
            "inet:ADDRESS:PORT";
        return -1;
    }
    if (strlen(spec) >= sizeof(sun->sun_path)) {
        *why = "the path is longer than a unix socket's 107 bytes";
        return -1;
    }
    memset(ss, 0, sizeof(*ss));
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path, spec, strlen(spec) + 1);
    *sslen = (unsigned)sizeof(*sun);
    return 0;
}


void
config_check_dovecot(struct config_parse *p)
{
    const struct config *cfg = p->cfg;
    const yaml_mark_t   *bat = p->have_backend_mark ? &p->backend_mark : NULL;
    const yaml_mark_t   *sat = p->have_dcsock_mark ? &p->dcsock_mark : NULL;
    struct sockaddr_storage ss;
    unsigned            sslen;
    const char         *why;

    if (cfg->auth_backend != NULL && strcmp(cfg->auth_backend, "file") != 0 &&
        strcmp(cfg->auth_backend, "dovecot") != 0) {
        config_addf(p, bat, "auth.backend: unknown backend \"%s\" (expected "
            "file or dovecot)", cfg->auth_backend);
        return;
    }
    if (!config_auth_dovecot(cfg)) {
        if (cfg->auth_dovecot_socket != NULL)
            config_addf(p, sat, "auth.dovecot_socket: needs auth.backend: "
                "dovecot");
        return;
    }
    if (cfg->auth_password_file != NULL)
        config_addf(p, bat, "auth.backend: dovecot: auth.password_file "
            "is set too (one backend answers AUTH)");
    if (cfg->auth_dovecot_socket == NULL) {
        config_addf(p, bat, "auth.backend: dovecot needs "
            "auth.dovecot_socket (a unix socket path or inet:ADDRESS:PORT)");
        return;
    }
    if (config_dovecot_addr(cfg->auth_dovecot_socket, &ss, &sslen, &why) < 0)
        config_addf(p, sat, "auth.dovecot_socket: %s: %s",
            cfg->auth_dovecot_socket, why);
}
