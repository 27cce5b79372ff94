/*
 * config_check.c - what config_load() checks and fills in after the walk
 * of the keys: the host name and TLS-RPT defaults, the AUTH listeners and
 * password file, the log file's directory, the bounce classes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/un.h>
#include <yaml.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include "common/log.h"
#include "common/safefs.h"
#include "common/status.h"
#include "common/util.h"
#include "proxy/proxy.h"
#include "router/route.h"
#include "bclass/bclass.h"
#include "dkim/dkim.h"
#include "config/config.h"
#include "config/config_int.h"


void
config_default_hostname(struct config *cfg)
{
    char host[256];

    if (cfg->hostname != NULL)
        return;
    if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
        util_strlcpy(host, "localhost", sizeof(host));
    host[sizeof(host) - 1] = '\0';
    cfg->hostname = xstrdup(host);
}


/*
 * config_check_tlsrpt - tlsrpt.sender must be a plain address: it goes
 * into From: and MAIL FROM unquoted.
 */
void
config_check_tlsrpt(struct config_parse *p)
{
    const char *s = p->cfg->tlsrpt_sender, *at;

    if (s == NULL)
        return;
    at = strchr(s, '@');
    for (const char *c = s; *c != '\0'; c++)
        if (*c <= 0x20 || *c >= 0x7f || strchr("<>()[]\\,;:\"", *c) != NULL)
            at = NULL;
    if (at == NULL || at == s || at[1] == '\0' || strchr(at + 1, '@') ||
        strlen(s) > 254)
        config_addf(p, NULL, "tlsrpt.sender: not a plain address "
            "(local@domain): %.64s", s);
}


/* config_tlsrpt_defaults - organization, contact and sender default to
 * the host name and postmaster@ it. */
void
config_tlsrpt_defaults(struct config *cfg)
{
    char pm[300];

    snprintf(pm, sizeof(pm), "postmaster@%s", cfg->hostname);
    if (cfg->tlsrpt_organization == NULL)
        cfg->tlsrpt_organization = xstrdup(cfg->hostname);
    if (cfg->tlsrpt_contact == NULL)
        cfg->tlsrpt_contact = xstrdup(pm);
    if (cfg->tlsrpt_sender == NULL)
        cfg->tlsrpt_sender = xstrdup(pm);
}


/* config_check_pwfile - auth.password_file can be read (by root: the
 * workers read it again before they drop privileges) and each line is
 * user:$hash; errors name the file and line. */
void
config_check_pwfile(struct config_parse *p, const char *path)
{
    const yaml_mark_t *at = p->have_pwfile_mark ? &p->pwfile_mark : NULL;
    char     line[4096];
    unsigned lineno = 0;
    FILE    *fp;
    char     err[PATH_MAX + 160];
    int      fd;
    struct stat st;

    if (safefs_check_read(path, "auth.password_file", err, sizeof(err)) != 0) {
        config_addf(p, at, "%s", err);
        return;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        config_addf(p, at, "auth.password_file: %s: %s", path,
            fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return;
    }
    if ((fp = fdopen(fd, "r")) == NULL) {
        close(fd);
        config_addf(p, at, "auth.password_file: %s: %s", path,
            strerror(errno));
        return;
    }
    while (fgets(line, sizeof(line), fp) != NULL) {
        char *colon;

        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#')
            continue;
        colon = strchr(line, ':');
        if (colon == NULL || colon == line || colon[1] != '$') {
            config_addf(p, at, "auth.password_file: %s:%u: expected "
                "user:hash (a crypt(3) hash like $y$... or $6$...)", path,
                lineno);
            break;
        }
    }
    explicit_bzero(line, sizeof(line));
    fclose(fp);
}


/* config_check_logfile - log.file's directory exists: else mtad -t and
 * mtactl check said "ok" and the start then failed without a place. */
void
config_check_logfile(struct config_parse *p)
{
    const char *f = p->cfg->log_file;
    const char *slash, *why = NULL;
    char        dir[PATH_MAX];
    struct stat st;
    size_t      n;

    if (f == NULL || strcmp(f, "-") == 0 || (slash = strrchr(f, '/')) == NULL)
        return;
    n = slash == f ? 1 : (size_t)(slash - f);
    if (n >= sizeof(dir))
        return;                     /* the open says what is wrong */
    memcpy(dir, f, n);
    dir[n] = '\0';
    if (stat(dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    if (why != NULL)
        config_addf(p, p->have_logfile_mark ? &p->logfile_mark : NULL,
            "log.file: %s: %s", dir, why);
}


/* config_load_bclass - the bounce classes: delivery.bounce_classes's
 * rules (errors name that file's line and column), then the built-in ones.
 * A reload with a bad file fails as a whole: the old rules stay. */
void
config_load_bclass(struct config_parse *p)
{
    char err[PATH_MAX + 300];

    p->cfg->bclass = bclass_load(p->cfg->bounce_classes, err, sizeof(err));
    if (p->cfg->bclass == NULL)
        config_addf(p, p->have_bclass_mark ? &p->bclass_mark : NULL,
            "delivery.bounce_classes: %s", err);
}


/* config_check_auth - listeners that need TLS or AUTH have them. */
void
config_check_auth(struct config_parse *p)
{
    struct config *cfg = p->cfg;
    size_t i;

    if (cfg->auth_password_file != NULL)
        config_check_pwfile(p, cfg->auth_password_file);
    config_check_dovecot(p);
    /* A client waits 5 minutes for a reply (RFC 5321 4.5.3.2). */
    if (cfg->auth_failure_delay_max_ms > CONFIG_AUTH_DELAY_LIMIT_MS)
        config_addf(p, NULL, "auth.failure_delay_max: at most 5m (clients "
            "give up on a reply after 5 minutes)");
    if (cfg->auth_failure_delay_ms > cfg->auth_failure_delay_max_ms)
        config_addf(p, NULL, "auth.failure_delay: greater than "
            "auth.failure_delay_max");
    for (i = 0; i < cfg->nlisten; i++) {
        const struct config_listen *l = &cfg->listen[i];

        const yaml_mark_t *at = i < CONFIG_LISTEN_MARKS &&
            p->listen_marks[i].line + p->listen_marks[i].column > 0 ?
            &p->listen_marks[i] : NULL;

        if (l->tls_implicit && cfg->ntls_certs == 0)
            config_addf(p, at, "server.listen %s: tls: implicit needs "
                "tls.cert_file and tls.key_file", l->spec);
        if (l->role == CONFIG_ROLE_SUBMISSION &&
            cfg->auth_password_file == NULL && !config_auth_dovecot(cfg))
            config_addf(p, at, "server.listen %s: role: submission needs "
                "auth.password_file (or auth.backend: dovecot)", l->spec);
    }
}
