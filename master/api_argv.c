/*
 * api_argv.c - the mtactl command lines the API process may have run
 * (api_argv.h).
 *
 * PURPOSE   The API process is less trusted than the master, which runs
 *           mtactl as root for it: whatever the API sends, only the
 *           command lines of this table run.  A shape is the command's
 *           words, its operands (one kind letter each, in order; a '+'
 *           after the last: one or more of it) and its options: "--x=K"
 *           takes a value of kind K, "--x" is a flag, "!--x" a flag the
 *           shape needs (the by-filter form of hold, release...: --all).
 *           Kinds: i queue id, k route key or domain, v route value, l TLS
 *           level, d duration, n count, t filter text, s queue state,
 *           w site or source name, - the word "-" (stdin).
 * WHY       The table repeats what mtactl itself checks, on purpose: it
 *           is the master's own fence, so a bug in one of mtactl's
 *           parsers, or a new mtactl option that takes a file, is not
 *           reachable over HTTP until a shape names it.
 */
#include <string.h>
#include <strings.h>

#include "master/api_argv.h"

#define QFILT "--from=t --to=t --state=s --older-than=d"
#define QCHANGE(verb) \
    { verb, "i+", "", 0 }, \
    { verb, "", "!--all " QFILT, 0 }

struct api_shape {
    const char *words;              /* the command's words */
    const char *ops;                /* operand kinds */
    const char *opts;               /* options, space-separated */
    int         in;                 /* takes stdin bytes */
};

static const struct api_shape api_shapes[] = {
    { "queue", "", QFILT " --after=i --limit=n --json", 0 },
    { "show", "i", "--json", 0 },
    QCHANGE("hold"), QCHANGE("release"), QCHANGE("flush"),
    QCHANGE("bounce"), QCHANGE("delete"),
    { "route list", "", "--json", 0 },
    { "route get", "k", "--json", 0 },
    { "route add", "kv", "", 0 },
    { "route del", "k", "", 0 },
    { "route import", "-", "--replace", 1 },
    { "tls policy list", "", "--json", 0 },
    { "tls policy get", "k", "--json", 0 },
    { "tls policy set", "kl", "", 0 },
    { "tls policy del", "k", "", 0 },
    { "shaping", "", "--json", 0 },
    { "suspend", "w", "--source=w --for=d", 0 },
    { "resume", "w", "--source=w", 0 },
};

#define API_SHAPES (sizeof(api_shapes) / sizeof(api_shapes[0]))


/* api_bytes_ok - s is lo..hi bytes long and every byte printable ASCII
 * (space too when space), or any byte from 0x80 when high. */
static int
api_bytes_ok(const char *s, size_t lo, size_t hi, int space, int high)
{
    size_t n = strlen(s);

    if (n < lo || n > hi)
        return 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c >= 0x80 ? !high : c < 0x20 || c == 0x7f || (c == ' ' &&
            !space))
            return 0;
    }
    return 1;
}


static int
api_in_list(const char *s, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strcmp(s, *list) == 0)
            return 1;
    return 0;
}


static int
api_kind_ok(char kind, const char *s)
{
    static const char *const levels[] = {
        "none", "may", "encrypt", "verify", "dane", "dane-only", NULL
    };
    static const char *const states[] = {
        "queued", "active", "deferred", "held", NULL
    };

    switch (kind) {
    case 'i':
        return api_bytes_ok(s, 1, 32, 0, 0) &&
            strspn(s, "0123456789ABCDEFabcdef"
            "GHIJKLMNOPQRSTUVWXYZghijklmnopqrstuvwxyz") == strlen(s);
    case 'k':
        return s[0] != '-' && api_bytes_ok(s, 1, 255, 0, 0);
    case 'v':
        return s[0] != '-' && api_bytes_ok(s, 1, 1024, 1, 0) &&
            strncasecmp(s, "maildir:", 8) != 0;
    case 'l':
        return api_in_list(s, levels);
    case 'd':
        return api_bytes_ok(s, 1, 16, 0, 0) && s[0] >= '0' && s[0] <= '9' &&
            strspn(s, "0123456789smhdw") == strlen(s);
    case 'n':
        return api_bytes_ok(s, 1, 7, 0, 0) &&
            strspn(s, "0123456789") == strlen(s);
    case 't':                       /* never read as an option either */
        return s[0] != '-' && api_bytes_ok(s, 1, 255, 1, 1);
    case 's':
        return api_in_list(s, states);
    case 'w':
        return s[0] != '-' && api_bytes_ok(s, 1, 63, 0, 0);
    case '-':
        return strcmp(s, "-") == 0;
    }
    return 0;
}


/* api_opt_find - the index of option a among opts' tokens, its value
 * kind in *kind (0: a flag) and whether it is required; -1: not there. */
static int
api_opt_find(const char *opts, const char *a, char *kind, int *req)
{
    const char *p = opts;
    int         k = 0;

    while (*p != '\0') {
        size_t      n = strcspn(p, " ");
        const char *t = p, *eq;
        size_t      name;
        int         r = 0;

        if (*t == '!') {
            r = 1;
            t++;
        }
        eq = memchr(t, '=', (size_t)(p + n - t));
        name = eq != NULL ? (size_t)(eq - t) : (size_t)(p + n - t);
        if (strlen(a) == name && memcmp(a, t, name) == 0) {
            *kind = eq != NULL ? eq[1] : 0;
            *req = r;
            return k;
        }
        k++;
        p += n;
        p += *p == ' ';
    }
    return -1;
}


/* api_opts_required - every "!" flag of opts is in seen. */
static int
api_opts_required(const char *opts, unsigned seen)
{
    const char *p = opts;
    int         k = 0;

    while (*p != '\0') {
        size_t n = strcspn(p, " ");

        if (*p == '!' && !(seen & (1u << k)))
            return 0;
        k++;
        p += n;
        p += *p == ' ';
    }
    return 1;
}


/* api_words - how many of argv the shape's words take (0: not this
 * shape). */
static int
api_words(const struct api_shape *sh, int argc, char *const argv[])
{
    const char *w = sh->words;
    int         i = 0;

    while (*w != '\0') {
        size_t n = strcspn(w, " ");

        if (i >= argc || strlen(argv[i]) != n || memcmp(argv[i], w, n) != 0)
            return 0;
        i++;
        w += n;
        w += *w == ' ';
    }
    return i;
}


/* api_shape_args - the operands and options after the words; 0 or -1
 * with why. */
static int
api_shape_args(const struct api_shape *sh, int i, int argc,
    char *const argv[], const char **why)
{
    const char *op = sh->ops;
    unsigned    seen = 0;
    int         rep = 0, k, req;
    char        kind;

    for (; i < argc; i++) {
        const char *a = argv[i];

        if (a[0] == '-' && a[1] != '\0') {
            if ((k = api_opt_find(sh->opts, a, &kind, &req)) < 0) {
                *why = "an option this command does not take";
                return -1;
            }
            if (seen & (1u << k)) {
                *why = "an option given twice";
                return -1;
            }
            seen |= 1u << k;
            if (kind != 0 && (++i >= argc || !api_kind_ok(kind, argv[i]))) {
                *why = "an option's value is missing or malformed";
                return -1;
            }
            continue;
        }
        if (*op == '\0' || (rep && op[1] != '+')) {
            *why = "more operands than the command takes";
            return -1;
        }
        if (!api_kind_ok(*op, a)) {
            *why = *op == 'v' && strncasecmp(a, "maildir:", 8) == 0 ?
                "a maildir: route names a path: not over the API" :
                "an operand is malformed";
            return -1;
        }
        if (op[1] == '+')
            rep = 1;
        else
            op++;
    }
    if (*op != '\0' && !(op[1] == '+' && rep)) {
        *why = "an operand is missing";
        return -1;
    }
    if (!api_opts_required(sh->opts, seen)) {
        *why = "an option the command needs is missing";
        return -1;
    }
    return 0;
}


/* api_import_ok - no line of a routes import names a maildir: route
 * ("KEY ROUTE" lines, '#' comments: router's own reader decides the
 * rest). */
static int
api_import_ok(const char *in, size_t n)
{
    const char *p = in, *end;

    if (n == 0)
        return 1;
    end = in + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl != NULL ? nl : end;

        while (p < e && (*p == ' ' || *p == '\t'))
            p++;
        while (p < e && *p != ' ' && *p != '\t')      /* the key */
            p++;
        while (p < e && (*p == ' ' || *p == '\t'))
            p++;
        if (e - p >= 8 && strncasecmp(p, "maildir:", 8) == 0)
            return 0;
        if (memchr(p, '\0', (size_t)(e - p)) != NULL)
            return 0;
        p = e + (nl != NULL);
    }
    return 1;
}


int
api_argv_check(int argc, char *const argv[], const char *in, size_t in_len,
    const char **why)
{
    const char *first = NULL;
    size_t      s;
    int         i;

    if (argc < 1 || argv == NULL) {
        *why = "no command";
        return -1;
    }
    for (s = 0; s < API_SHAPES; s++) {
        const struct api_shape *sh = &api_shapes[s];

        if ((i = api_words(sh, argc, argv)) == 0)
            continue;
        if (api_shape_args(sh, i, argc, argv, why) != 0) {
            if (first == NULL)
                first = *why;
            continue;
        }
        if (in_len > 0 && !sh->in) {
            *why = "input for a command that reads none";
            return -1;
        }
        if (sh->in && !api_import_ok(in, in_len)) {
            *why = "the routes name a maildir: path or hold a NUL byte: "
                "not over the API";
            return -1;
        }
        return 0;
    }
    *why = first != NULL ? first : "not a command the API may run";
    return -1;
}
