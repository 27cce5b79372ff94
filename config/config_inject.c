/*
 * config_inject.c - the internal injection listener: a unix socket beside
 * server.control_socket that the HTTP API process submits messages to
 * (api/api_submit.h).  It is not a relay.yaml key of its own: it exists
 * when the API does (api.listen).
 *
 * PURPOSE   One description of that listener for the master (which binds
 *           it) and the workers (which serve it): the path, and a
 *           config_listen that says what a session on it is: a PROXY v1
 *           header first (the HTTP client's address), role submission,
 *           trusted to relay as the authenticated user "api", no screen,
 *           DNSBL or greylisting, and the milters of the local submission
 *           listener (config_submit_listen, else the first listener), so
 *           injected mail is filtered like mail that mtad-sendmail gives.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/util.h"
#include "proxy/proxy.h"
#include "config/config.h"
#include "config/config_int.h"

int
config_inject_on(const struct config *cfg)
{
    return cfg->api_listen != NULL;
}


int
config_inject_path(const struct config *cfg, char *buf, size_t bufsz)
{
    const char *cs = cfg->control_socket;
    const char *slash = strrchr(cs, '/');
    size_t      dl = slash != NULL ? (size_t)(slash - cs) : 0;
    int         n;

    if (slash == NULL)
        n = snprintf(buf, bufsz, "%s", CONFIG_INJECT_NAME);
    else if (dl == 0)
        n = snprintf(buf, bufsz, "/%s", CONFIG_INJECT_NAME);
    else
        n = snprintf(buf, bufsz, "%.*s/%s", (int)dl, cs, CONFIG_INJECT_NAME);
    return n < 0 || (size_t)n >= bufsz ? -1 : 0;
}


int
config_inject_listen(const struct config *cfg, struct config_listen *l,
    char *spec, size_t specsz)
{
    const struct config_listen *like;
    struct sockaddr_un         *sun = (struct sockaddr_un *)&l->addr;

    memset(l, 0, sizeof(*l));
    if (config_inject_path(cfg, spec, specsz) < 0 ||
        strlen(spec) >= sizeof(sun->sun_path))
        return -1;
    l->spec = spec;
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path, spec, strlen(spec) + 1);
    l->addrlen = (socklen_t)sizeof(*sun);
    l->proxy = PROXY_V1;
    l->role = CONFIG_ROLE_SUBMISSION;
    l->no_dnsbl = 1;
    l->no_greylist = 1;
    l->inject = 1;
    like = config_submit_listen(cfg);
    if (like == NULL && cfg->nlisten > 0)
        like = &cfg->listen[0];
    if (like != NULL) {             /* shared, not owned: never freed here */
        l->milters = like->milters;
        l->nmilters = like->nmilters;
    }
    return 0;
}


/* config_check_inject - mtad -t: with the API on, the injection socket's
 * path must fit a unix socket address (it is derived from
 * server.control_socket, so that key is named). */
void
config_check_inject(struct config_parse *p)
{
    struct config_listen l;
    char                 spec[sizeof(((struct sockaddr_un *)0)->sun_path)];

    if (!config_inject_on(p->cfg))
        return;
    if (config_inject_listen(p->cfg, &l, spec, sizeof(spec)) < 0)
        config_addf(p, p->have_api_listen_mark ? &p->api_listen_mark : NULL,
            "api.listen: the injection socket %s next to "
            "server.control_socket would be longer than %zu bytes",
            CONFIG_INJECT_NAME, sizeof(spec) - 1);
}
