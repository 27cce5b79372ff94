/*
 * user.c - mtactl user add|del|list: the SMTP AUTH users of
 * auth.password_file ("user:hash" lines, yescrypt hashes made with
 * crypt(3)).
 *
 * PURPOSE   The file is rewritten whole and safely: a temporary file in the
 *           same directory (created O_EXCL|O_NOFOLLOW), written, fsync'd,
 *           renamed over the old one, then the directory fsync'd; a reader
 *           sees the old file or the new one.  The directory must be one
 *           only root (or us) can change (safefs), and the file itself is
 *           never reached through a symbolic link.
 * MODE      A new file is 0640 root:server.admin_group when that is set,
 *           else 0600 root; an existing file keeps its group and mode
 *           (without bits for others).  The workers read it as root before
 *           they drop privileges, so it never has to be readable by mtad.
 *           Changes reach a running mtad at the next `mtactl reload`.
 */
#include <crypt.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "common/safefs.h"
#include "common/util.h"
#include "config/config.h"
#include "mtactl/mtactl.h"

#define USER_FILE_MAX  (16 * 1024 * 1024)
#define USER_NAME_MAX  255
#define USER_PASS_MAX  512

void
mtactl_user_help(void)
{
    printf("usage: mtactl user [-f FILE] add USER   add USER or change the "
        "password (read from\n"
        "                                    stdin, or asked twice without "
        "echo on a terminal)\n"
        "       mtactl user [-f FILE] del USER   remove USER\n"
        "       mtactl user [-f FILE] list       the user names\n"
        "FILE: auth.password_file of the configuration unless given.  "
        "Run `mtactl reload`\nto apply the change to a running mtad.\n");
}


static int
user_name_ok(const char *u)
{
    size_t i, n = strlen(u);

    if (n == 0 || n > USER_NAME_MAX)
        return 0;
    for (i = 0; i < n; i++)
        if ((unsigned char)u[i] <= ' ' || u[i] == ':' || u[i] == 0x7f)
            return 0;
    return 1;
}


/* user_read - the file's text (NUL-terminated) and its stat; *text NULL
 * and 0 when it does not exist. */
static int
user_read(int dfd, const char *name, const char *path, char **text,
    struct stat *st)
{
    ssize_t got;
    size_t  len = 0;
    int     fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
                 O_NONBLOCK);

    *text = NULL;
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0 || fstat(fd, st) != 0) {
        fprintf(stderr, "mtactl: %s: %s\n", path, errno == ELOOP ?
            "is a symbolic link" : strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode) || st->st_size > USER_FILE_MAX) {
        fprintf(stderr, "mtactl: %s: not a regular file of at most 16 MiB\n",
            path);
        close(fd);
        return -1;
    }
    *text = xmalloc((size_t)st->st_size + 1);
    while (len < (size_t)st->st_size &&
        (got = read(fd, *text + len, (size_t)st->st_size - len)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            fprintf(stderr, "mtactl: %s: %s\n", path, strerror(errno));
            free(*text);
            *text = NULL;
            close(fd);
            return -1;
        }
        len += (size_t)got;
    }
    (*text)[len] = '\0';
    close(fd);
    return 0;
}


/* user_write - replace dfd/name with text: temp file, fsync, rename. */
static int
user_write(int dfd, const char *name, const char *path, const char *text,
    mode_t mode, gid_t gid)
{
    char   tmp[512];
    size_t n = strlen(text);
    int    fd, i;

    for (i = 0; i < 100; i++) {
        snprintf(tmp, sizeof(tmp), ".%s.%ld.%d", name, (long)getpid(), i);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
            O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0) {
        fprintf(stderr, "mtactl: %s: cannot create a temporary file: %s\n",
            path, strerror(errno));
        return -1;
    }
    if (util_write_all(fd, text, n) != 0 ||
        (gid != (gid_t)-1 && fchown(fd, (uid_t)-1, gid) != 0) ||
        fchmod(fd, mode) != 0 || fsync(fd) != 0) {
        fprintf(stderr, "mtactl: %s: %s\n", path, strerror(errno));
        close(fd);
        unlinkat(dfd, tmp, 0);
        return -1;
    }
    close(fd);
    if (renameat(dfd, tmp, dfd, name) != 0) {
        fprintf(stderr, "mtactl: %s: rename: %s\n", path, strerror(errno));
        unlinkat(dfd, tmp, 0);
        return -1;
    }
    (void)fsync(dfd);
    return 0;
}


/* user_find - the line of user in text: *start, *end (past its LF). */
static int
user_find(const char *text, const char *user, const char **start,
    const char **end)
{
    const char *p = text, *nl;
    size_t      ulen = strlen(user);

    while (p != NULL && *p != '\0') {
        nl = strchr(p, '\n');
        if (strncmp(p, user, ulen) == 0 && p[ulen] == ':') {
            *start = p;
            *end = nl != NULL ? nl + 1 : p + strlen(p);
            return 1;
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
    return 0;
}


static int
user_getline(FILE *in, char *buf, size_t bufsz)
{
    if (fgets(buf, (int)bufsz, in) == NULL)
        return -1;
    if (strchr(buf, '\n') == NULL && !feof(in))
        return -1;                  /* too long */
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}


/* user_password - from stdin; twice without echo on a terminal. */
static int
user_password(char *pw, size_t pwsz)
{
    struct termios old, noecho;
    char           again[USER_PASS_MAX];
    int            tty = isatty(STDIN_FILENO), rc = 0;

    if (!tty) {
        if (user_getline(stdin, pw, pwsz) < 0) {
            fprintf(stderr, "mtactl: user add: no password on stdin (or "
                "over %d bytes)\n", USER_PASS_MAX - 1);
            return -1;
        }
    } else {
        if (tcgetattr(STDIN_FILENO, &old) != 0)
            return -1;
        noecho = old;
        noecho.c_lflag &= ~(tcflag_t)ECHO;
        if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &noecho) != 0)
            return -1;
        fprintf(stderr, "Password: ");
        if (user_getline(stdin, pw, pwsz) < 0)
            rc = -1;
        fprintf(stderr, "\nAgain: ");
        if (rc == 0 && (user_getline(stdin, again, sizeof(again)) < 0 ||
            strcmp(pw, again) != 0)) {
            fprintf(stderr, "\nmtactl: user add: the passwords differ");
            rc = -1;
        }
        fprintf(stderr, "\n");
        (void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
        explicit_bzero(again, sizeof(again));
        if (rc < 0)
            return -1;
    }
    if (pw[0] == '\0') {
        fprintf(stderr, "mtactl: user add: empty password\n");
        return -1;
    }
    return 0;
}


/* user_hash - yescrypt (libxcrypt's default cost) of pw; malloc'd. */
static char *
user_hash(const char *pw)
{
    char *salt = crypt_gensalt_ra("$y$", 0, NULL, 0), *h, *out = NULL;
    void *data = NULL;
    int   size = 0;

    if (salt == NULL) {
        fprintf(stderr, "mtactl: user add: crypt_gensalt: %s\n",
            strerror(errno));
        return NULL;
    }
    h = crypt_ra(pw, salt, &data, &size);
    if (h != NULL && h[0] != '*')
        out = xstrdup(h);
    else
        fprintf(stderr, "mtactl: user add: crypt: %s\n", strerror(errno));
    if (data != NULL) {
        explicit_bzero(data, (size_t)size);
        free(data);
    }
    free(salt);
    return out;
}


/* user_new_text - text with user's line replaced, removed (hash NULL) or
 * added at the end. */
static char *
user_new_text(const char *text, const char *user, const char *hash)
{
    const char *start, *end;
    size_t      n = text != NULL ? strlen(text) : 0;
    char       *out;

    out = xmalloc(n + strlen(user) + (hash ? strlen(hash) : 0) + 4);
    if (text != NULL && user_find(text, user, &start, &end)) {
        memcpy(out, text, (size_t)(start - text));
        out[start - text] = '\0';
        if (hash != NULL)
            sprintf(out + strlen(out), "%s:%s\n", user, hash);
        strcat(out, end);
        return out;
    }
    if (text != NULL)
        memcpy(out, text, n);
    out[n] = '\0';
    if (n > 0 && out[n - 1] != '\n')
        strcat(out, "\n");
    sprintf(out + strlen(out), "%s:%s\n", user, hash);
    return out;
}


static int
user_list(const char *text)
{
    const char *p = text;

    while (p != NULL && *p != '\0') {
        const char *nl = strchr(p, '\n'), *colon = strchr(p, ':');

        if (*p != '#' && *p != '\n' && colon != NULL &&
            (nl == NULL || colon < nl))
            printf("%.*s\n", (int)(colon - p), p);
        p = nl != NULL ? nl + 1 : NULL;
    }
    return MTACTL_OK;
}


int
mtactl_user(int argc, char **argv, const struct config *cfg,
    const char *cfg_err)
{
    const char *path = NULL, *name, *op, *user = NULL;
    char        err[512], pw[USER_PASS_MAX], *text = NULL, *hash = NULL;
    char       *out;
    struct stat st;
    struct group *gr;
    mode_t      mode = 0600;
    gid_t       gid = (gid_t)-1;
    int         dfd, rc = MTACTL_FAIL, exists;
    const char *s, *e;

    argc--, argv++;
    if (argc >= 2 && strcmp(argv[0], "-f") == 0) {
        path = argv[1];
        argc -= 2, argv += 2;
    }
    if (argc < 1 || (strcmp(argv[0], "list") == 0 && argc != 1) ||
        ((strcmp(argv[0], "add") == 0 || strcmp(argv[0], "del") == 0) &&
        argc != 2) || (strcmp(argv[0], "list") != 0 &&
        strcmp(argv[0], "add") != 0 && strcmp(argv[0], "del") != 0)) {
        mtactl_user_help();
        return MTACTL_USAGE;
    }
    op = argv[0];
    if (argc == 2)
        user = argv[1];
    if (path == NULL && cfg == NULL) {
        fprintf(stderr, "mtactl: user: the configuration did not load (give "
            "the file with -f):\n%s\n", cfg_err);
        return MTACTL_FAIL;
    }
    if (path == NULL && (path = cfg->auth_password_file) == NULL) {
        fprintf(stderr, "mtactl: user: auth.password_file is not set in "
            "the configuration (or give -f FILE)\n");
        return MTACTL_FAIL;
    }
    if (user != NULL && !user_name_ok(user)) {
        fprintf(stderr, "mtactl: user %s: the name must be 1 to %d bytes "
            "without ':', spaces or control characters\n", op,
            USER_NAME_MAX);
        return MTACTL_USAGE;
    }
    if ((dfd = safefs_open_parent(path, &name, err, sizeof(err))) < 0) {
        fprintf(stderr, "mtactl: %s\n", err);
        return MTACTL_FAIL;
    }
    if (strcmp(op, "list") != 0 &&
        safefs_dir_trusted(dfd, path, err, sizeof(err)) < 0) {
        fprintf(stderr, "mtactl: %s\n", err);
        goto done;
    }
    if (user_read(dfd, name, path, &text, &st) < 0)
        goto done;
    if (strcmp(op, "list") == 0) {
        rc = user_list(text);
        goto done;
    }
    exists = text != NULL && user_find(text, user, &s, &e);
    if (text != NULL) {
        mode = st.st_mode & 0660;
        gid = st.st_gid;
    } else if (cfg != NULL && cfg->admin_group != NULL &&
        (gr = getgrnam(cfg->admin_group)) != NULL) {
        mode = 0640;
        gid = gr->gr_gid;
    }
    if (strcmp(op, "del") == 0 && !exists) {
        fprintf(stderr, "mtactl: user del: no user %s in %s\n", user, path);
        goto done;
    }
    if (strcmp(op, "add") == 0) {
        if (user_password(pw, sizeof(pw)) < 0)
            goto done;
        hash = user_hash(pw);
        explicit_bzero(pw, sizeof(pw));
        if (hash == NULL)
            goto done;
    }
    out = user_new_text(text, user, hash);
    if (user_write(dfd, name, path, out, mode, gid) == 0) {
        printf("%s %s in %s (mtactl reload to apply)\n", user,
            hash == NULL ? "removed" : exists ? "updated" : "added", path);
        if (cfg != NULL) {
            mtactl_audit_init(cfg);
            mtactl_audit("user %s %s", hash == NULL ? "del" : "add", user);
            mtactl_audit_flush();
        }
        rc = MTACTL_OK;
    }
    free(out);
done:
    free(hash);
    free(text);
    close(dfd);
    return rc;
}
