/*
 * bclass.c - bounce classes: the rules file's parser, the loader (the
 * operator's file, then the built-in rules) and the classifier.  The
 * format and the matching are described in bclass.h.
 */
#include <ctype.h>
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bclass/bclass.h"
#include "common/util.h"

#define BCLASS_FILE_MAX   (1024 * 1024)  /* a rules file, bytes */
#define BCLASS_RULES_MAX  10000          /* rules per file */
#define BCLASS_RE_MAX     1024           /* one text= pattern, bytes */

struct bclass_rule {
    int      cls;
    char     code[3];               /* digits or 'x'; code[0] 0: any */
    int      enh[3];                /* -1 any; enh[0] 0: no enh= given */
    int      has_re;
    regex_t  re;
};

struct bclass_rules {
    struct bclass_rule *r;
    size_t              n, cap;
};

static const char *const bclass_names[BCLASS_MAX] = {
    [BCLASS_OTHER] = "other",
    [BCLASS_INVALID_RECIPIENT] = "invalid_recipient",
    [BCLASS_BAD_DOMAIN] = "bad_domain",
    [BCLASS_MAILBOX_FULL] = "mailbox_full",
    [BCLASS_SPAM_BLOCK] = "spam_block",
    [BCLASS_POLICY] = "policy",
    [BCLASS_RATE_LIMITED] = "rate_limited",
    [BCLASS_CONTENT] = "content",
    [BCLASS_PROTOCOL] = "protocol",
    [BCLASS_DNS_FAILURE] = "dns_failure",
    [BCLASS_TLS_FAILURE] = "tls_failure",
    [BCLASS_NO_ANSWER] = "no_answer",
};


const char *
bclass_name(int cls)
{
    return cls > 0 && cls < BCLASS_MAX ? bclass_names[cls] : "other";
}


int
bclass_lookup(const char *name, size_t len)
{
    int i;

    for (i = 0; i < BCLASS_MAX; i++)
        if (strlen(bclass_names[i]) == len &&
            memcmp(bclass_names[i], name, len) == 0)
            return i;
    return -1;
}


/* ---- parsing ---------------------------------------------------------- */

/* One file being parsed: where we are, for messages. */
struct bclass_parse {
    const char *name;
    const char *line;               /* start of the current line */
    unsigned    lineno;
    char       *err;
    size_t      errsz;
};

static int bclass_err(struct bclass_parse *p, const char *at,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* bclass_err - "FILE:LINE:COL: what" into err; always -1. */
static int
bclass_err(struct bclass_parse *p, const char *at, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (p->errsz == 0)
        return -1;
    n = snprintf(p->err, p->errsz, "%s:%u:%u: ", p->name, p->lineno,
        (unsigned)(at - p->line) + 1);
    if (n < 0 || (size_t)n >= p->errsz)
        return -1;
    va_start(ap, fmt);
    (void)vsnprintf(p->err + n, p->errsz - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}


static int
bclass_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}


/* bclass_code - "code=" value at s (3 bytes of digit or 'x', then the end
 * of the token). */
static int
bclass_code(struct bclass_parse *p, const char *tok, const char *s,
    const char *end, struct bclass_rule *r)
{
    int i;

    if (end - s != 3)
        goto bad;
    for (i = 0; i < 3; i++) {
        if (!(isdigit((unsigned char)s[i]) || s[i] == 'x' || s[i] == 'X'))
            goto bad;
        r->code[i] = (char)tolower((unsigned char)s[i]);
    }
    if (r->code[0] != 'x' && (r->code[0] < '2' || r->code[0] > '5'))
        goto bad;
    return 0;
bad:
    return bclass_err(p, tok, "code=: expected a reply code of three digits, "
        "an x for any digit (5xx, 55x, 421)");
}


/* bclass_enh_part - one part of "enh=": '*' (-1) or 1..3 digits (part 0:
 * one digit 2, 4 or 5).  Advances *s; -2 when bad. */
static int
bclass_enh_part(const char **s, const char *end, int part)
{
    int v = 0, nd = 0;

    if (*s < end && **s == '*') {
        (*s)++;
        return -1;
    }
    while (*s < end && isdigit((unsigned char)**s) && nd < 3) {
        v = v * 10 + (**s - '0');
        (*s)++;
        nd++;
    }
    if (nd == 0 || (part == 0 && (nd != 1 || (v != 2 && v != 4 && v != 5))))
        return -2;
    return v;
}


static int
bclass_enh(struct bclass_parse *p, const char *tok, const char *s,
    const char *end, struct bclass_rule *r)
{
    int i;

    for (i = 0; i < 3; i++) {
        if (i > 0 && (s >= end || *s++ != '.'))
            goto bad;
        if ((r->enh[i] = bclass_enh_part(&s, end, i)) == -2)
            goto bad;
    }
    if (s == end) {
        if (r->enh[0] == 0)
            r->enh[0] = -1;         /* never 0: 0 means "not given" */
        return 0;
    }
bad:
    r->enh[0] = 0;
    return bclass_err(p, tok, "enh=: expected an enhanced status code "
        "class.subject.detail, a * for any part (5.1.1, 4.7.*, *.2.2)");
}


/*
 * bclass_re_check - refuse what would make regcomp() or regexec() cost
 * without bound: glibc builds a repeated part once per repetition, so
 * nested counts multiply ("((a{100}){100}){100}") and stacked
 * quantifiers ("a+++++") grow without end; back-references make regexec()
 * exponential.  So: no back-reference, no quantifier right after another,
 * counts at most BCLASS_RE_REPEAT, and the product of the counts a part is
 * nested in at most BCLASS_RE_COPIES.  NULL, or what is wrong.
 */
#define BCLASS_RE_REPEAT  100
#define BCLASS_RE_COPIES  1000
#define BCLASS_RE_DEPTH   16
static const char *
bclass_re_check(const char *re, size_t n)
{
    unsigned long cur[BCLASS_RE_DEPTH + 1], last = 0;
    size_t        i = 0, depth = 0;
    int           quant = 1;        /* nothing to repeat at the start */

    cur[0] = 1;
    while (i < n) {
        char          c = re[i];
        unsigned long mult = 0;

        if (c == '*' || c == '+' || c == '?')
            mult = 2, i++;
        else if (c == '{') {
            unsigned long v[2] = { 0, 0 };
            size_t        j = i + 1;
            int           k = 0;

            for (; j < n && ((re[j] >= '0' && re[j] <= '9') ||
                (re[j] == ',' && k == 0)); j++) {
                if (re[j] == ',')
                    k = 1;
                else if ((v[k] = v[k] * 10 + (unsigned long)(re[j] - '0')) >
                    BCLASS_RE_REPEAT)
                    return "a repeat count above 100";
            }
            if (j < n && re[j] == '}') {    /* else a '{' regcomp judges */
                mult = (v[0] > v[1] ? v[0] : v[1]) + 1;
                i = j + 1;
            }
        }
        if (mult != 0) {
            if (quant)
                return "a quantifier right after another (or at the start)";
            quant = 1;
            if ((last *= mult) > BCLASS_RE_COPIES)
                return "repeats nested too deep (more than 1000 copies)";
            if (last > cur[depth])
                cur[depth] = last;
            continue;
        }
        quant = 0;
        if (c == '\\') {
            if (i + 1 < n && re[i + 1] >= '1' && re[i + 1] <= '9')
                return "a back-reference";
            i += 2;
            last = 1;
        } else if (c == '[') {
            size_t j = i + 1;

            if (j < n && re[j] == '^')
                j++;
            if (j < n && re[j] == ']')
                j++;
            for (; j < n && re[j] != ']'; j++)
                if (re[j] == '[' && j + 1 < n && (re[j + 1] == ':' ||
                    re[j + 1] == '.' || re[j + 1] == '=')) {
                    const char *e = memchr(re + j + 2, re[j + 1], n - j - 2);

                    if (e == NULL)
                        break;
                    j = (size_t)(e - re) + 1;   /* at the ']' of ":]" */
                }
            i = j + 1;
            last = 1;
        } else if (c == '(') {
            if (depth == BCLASS_RE_DEPTH)
                return "groups nested more than 16 deep";
            cur[++depth] = 1;
            i++;
            quant = 1;              /* "(*" is refused by regcomp anyway */
            continue;
        } else if (c == ')' && depth > 0) {
            last = cur[depth--];
            i++;
        } else {
            if (c == '|')
                quant = 1;
            i++;
            last = 1;
        }
        if (last > cur[depth])
            cur[depth] = last;
    }
    return NULL;
}


/* bclass_text - text="..." at *sp (after "text="): the pattern up to the
 * closing quote (\" a quote), compiled; *sp set past the quote. */
static int
bclass_text(struct bclass_parse *p, const char *tok, const char **sp,
    const char *eol, struct bclass_rule *r)
{
    const char *s = *sp;
    char        pat[BCLASS_RE_MAX + 1], msg[160];
    const char *why;
    size_t      n = 0;
    int         rc;

    if (s >= eol || *s != '"')
        return bclass_err(p, tok, "text=: expected a regular expression in "
            "double quotes (text=\"quota exceeded\")");
    for (s++; s < eol && *s != '"'; s++) {
        if (*s == '\\' && s + 1 < eol && s[1] == '"')
            s++;
        if (n == BCLASS_RE_MAX)
            return bclass_err(p, tok, "text=: longer than %d bytes",
                BCLASS_RE_MAX);
        pat[n++] = *s;
    }
    if (s >= eol)
        return bclass_err(p, tok, "text=: no closing double quote");
    if (n == 0)
        return bclass_err(p, tok, "text=: empty regular expression");
    pat[n] = '\0';
    if ((why = bclass_re_check(pat, n)) != NULL)
        return bclass_err(p, tok, "text=: not accepted: %s", why);
    rc = regcomp(&r->re, pat, REG_EXTENDED | REG_ICASE | REG_NOSUB);
    if (rc != 0) {
        (void)regerror(rc, &r->re, msg, sizeof(msg));
        regfree(&r->re);
        return bclass_err(p, tok, "text=: bad regular expression: %s", msg);
    }
    r->has_re = 1;
    *sp = s + 1;
    return 0;
}


/* bclass_cond - the condition at *sp; *sp past it. */
static int
bclass_cond(struct bclass_parse *p, const char **sp, const char *eol,
    struct bclass_rule *r)
{
    const char *tok = *sp, *end;

    if (eol - tok >= 5 && memcmp(tok, "text=", 5) == 0) {
        if (r->has_re)
            return bclass_err(p, tok, "text= given twice in one rule");
        *sp = tok + 5;
        return bclass_text(p, tok, sp, eol, r);
    }
    for (end = tok; end < eol && !bclass_is_space(*end); end++)
        ;
    *sp = end;
    if (end - tok >= 5 && memcmp(tok, "code=", 5) == 0) {
        if (r->code[0] != '\0')
            return bclass_err(p, tok, "code= given twice in one rule");
        return bclass_code(p, tok, tok + 5, end, r);
    }
    if (end - tok >= 4 && memcmp(tok, "enh=", 4) == 0) {
        if (r->enh[0] != 0)
            return bclass_err(p, tok, "enh= given twice in one rule");
        return bclass_enh(p, tok, tok + 4, end, r);
    }
    return bclass_err(p, tok, "expected code=, enh= or text=");
}


static void
bclass_rule_free(struct bclass_rule *r)
{
    if (r->has_re)
        regfree(&r->re);
    r->has_re = 0;
}


/* bclass_line - one line [s, eol): nothing (blank, comment) or a rule
 * appended to rules. */
static int
bclass_line(struct bclass_parse *p, const char *s, const char *eol,
    struct bclass_rules *rules)
{
    struct bclass_rule r;
    const char        *tok;
    int                ncond = 0;

    while (s < eol && bclass_is_space(*s))
        s++;
    if (s == eol || *s == '#')
        return 0;
    memset(&r, 0, sizeof(r));
    for (tok = s; s < eol && !bclass_is_space(*s); s++)
        ;
    if ((r.cls = bclass_lookup(tok, (size_t)(s - tok))) < 0) {
        char shown[UTIL_ESC_ROOM(40)];  /* the file's bytes, for a terminal */

        (void)util_escape(shown, sizeof(shown), tok, (size_t)(s - tok) > 40 ?
            40 : (size_t)(s - tok), 0, NULL);
        return bclass_err(p, tok, "unknown class %s (expected one of: "
            "invalid_recipient, bad_domain, mailbox_full, spam_block, "
            "policy, rate_limited, content, protocol, dns_failure, "
            "tls_failure, no_answer, other)", shown);
    }
    for (;;) {
        const char *at = s;

        while (s < eol && bclass_is_space(*s))
            s++;
        if (s == eol || *s == '#')
            break;
        if (s == at) {
            bclass_rule_free(&r);
            return bclass_err(p, s, "expected a space before the next "
                "condition");
        }
        if (bclass_cond(p, &s, eol, &r) < 0) {
            bclass_rule_free(&r);
            return -1;
        }
        ncond++;
    }
    if (ncond == 0)
        return bclass_err(p, tok, "a rule needs at least one condition "
            "(code=, enh= or text=)");
    if (rules->n == rules->cap) {
        rules->cap = rules->cap ? rules->cap * 2 : 64;
        rules->r = xrealloc(rules->r, rules->cap * sizeof(*rules->r));
    }
    rules->r[rules->n++] = r;
    return 0;
}


/* bclass_parse_into - append text's rules to rules; 0 or -1 (err set). */
static int
bclass_parse_into(struct bclass_rules *rules, const char *name,
    const char *text, size_t len, char *err, size_t errsz)
{
    struct bclass_parse p = { name, text, 0, err, errsz };
    const char         *s = text, *end = text + len;
    size_t              before = rules->n;

    while (s < end) {
        const char *eol = memchr(s, '\n', (size_t)(end - s)), *nul;

        if (eol == NULL)
            eol = end;
        p.line = s;
        p.lineno++;
        if ((nul = memchr(s, '\0', (size_t)(eol - s))) != NULL)
            return bclass_err(&p, nul, "a NUL byte");
        if (bclass_line(&p, s, eol, rules) < 0)
            return -1;
        if (rules->n - before > BCLASS_RULES_MAX)
            return bclass_err(&p, s, "more than %d rules", BCLASS_RULES_MAX);
        s = eol + 1;
    }
    return 0;
}


void
bclass_free(struct bclass_rules *rules)
{
    size_t i;

    if (rules == NULL)
        return;
    for (i = 0; i < rules->n; i++)
        bclass_rule_free(&rules->r[i]);
    free(rules->r);
    free(rules);
}


struct bclass_rules *
bclass_parse(const char *name, const char *text, size_t len, char *err,
    size_t errsz)
{
    struct bclass_rules *rules = xcalloc(1, sizeof(*rules));

    if (errsz > 0)
        err[0] = '\0';
    if (bclass_parse_into(rules, name, text, len, err, errsz) < 0) {
        bclass_free(rules);
        return NULL;
    }
    return rules;
}


/* bclass_read - path's contents (at most BCLASS_FILE_MAX), malloc'd. */
static char *
bclass_read(const char *path, size_t *len, char *err, size_t errsz)
{
    struct stat st;
    FILE       *fp = fopen(path, "rb");
    char       *buf;
    const char *why = NULL;

    if (fp == NULL)
        why = strerror(errno);
    else if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (st.st_size > BCLASS_FILE_MAX)
        why = "larger than 1 MiB";
    if (why != NULL) {
        snprintf(err, errsz, "%s: cannot read: %s", path, why);
        if (fp != NULL)
            fclose(fp);
        return NULL;
    }
    buf = xmalloc((size_t)st.st_size + 1);
    *len = fread(buf, 1, (size_t)st.st_size, fp);
    if (ferror(fp)) {
        snprintf(err, errsz, "%s: cannot read: %s", path, strerror(errno));
        free(buf);
        fclose(fp);
        return NULL;
    }
    fclose(fp);
    buf[*len] = '\0';
    return buf;
}


struct bclass_rules *
bclass_load(const char *path, char *err, size_t errsz)
{
    struct bclass_rules *rules = xcalloc(1, sizeof(*rules));
    const char          *b = bclass_builtin_text();

    if (errsz > 0)
        err[0] = '\0';
    if (path != NULL) {
        size_t len = 0;
        char  *text = bclass_read(path, &len, err, errsz);
        int    rc = text == NULL ? -1 :
            bclass_parse_into(rules, path, text, len, err, errsz);

        free(text);
        if (rc < 0) {
            bclass_free(rules);
            return NULL;
        }
    }
    if (bclass_parse_into(rules, "(built-in bounce classes)", b, strlen(b),
        err, errsz) < 0) {
        bclass_free(rules);
        return NULL;
    }
    return rules;
}


size_t
bclass_count(const struct bclass_rules *rules)
{
    return rules != NULL ? rules->n : 0;
}


/* ---- classifying ------------------------------------------------------ */

/* The codes of one reply (code[0] 0: none; enh[0] 0: none) and the text
 * the text= rules search: what follows the codes. */
struct bclass_codes {
    char        code[3];
    int         enh[3];
    const char *text;
};

/* bclass_enh_at - an enhanced code at s ("5.1.1" then space, end, ';' or
 * ','): its end (c->enh set), or NULL. */
static const char *
bclass_enh_at(const char *s, struct bclass_codes *c)
{
    int v[3], i;

    for (i = 0; i < 3; i++) {
        int nd = 0;

        if (i > 0 && *s++ != '.')
            return NULL;
        v[i] = 0;
        while (isdigit((unsigned char)*s) && nd < 3) {
            v[i] = v[i] * 10 + (*s++ - '0');
            nd++;
        }
        if (nd == 0 || (i == 0 && (nd != 1 || (v[0] != 2 && v[0] != 4 &&
            v[0] != 5))))
            return NULL;
    }
    if (*s != '\0' && *s != ' ' && *s != ';' && *s != ',')
        return NULL;
    memcpy(c->enh, v, sizeof(v));
    return s;
}


/* bclass_codes_at - a reply starting at s: "NNN[ -]X.Y.Z", "NNN", or
 * "X.Y.Z"; 1 when something was found (c->text set past it). */
static int
bclass_codes_at(const char *s, struct bclass_codes *c)
{
    const char *e;

    if (s[0] >= '2' && s[0] <= '5' && isdigit((unsigned char)s[1]) &&
        isdigit((unsigned char)s[2]) && (s[3] == ' ' || s[3] == '-' ||
        s[3] == '\0')) {
        memcpy(c->code, s, 3);
        s += s[3] != '\0' ? 4 : 3;
        if ((e = bclass_enh_at(s, c)) != NULL)
            s = e;
    } else if ((e = bclass_enh_at(s, c)) != NULL)
        s = e;
    else
        return 0;
    while (*s == ' ' || *s == ';' || *s == ',')
        s++;
    c->text = s;
    return 1;
}


static void
bclass_codes(const char *reply, struct bclass_codes *c)
{
    const char *s;

    memset(c, 0, sizeof(*c));
    c->text = reply;
    if (bclass_codes_at(reply, c))
        return;
    /* mtad's wording: "host X said: 421 4.7.0 ...", "... refused to
     * talk to me: 554 ..." */
    for (s = strstr(reply, ": "); s != NULL; s = strstr(s + 1, ": "))
        if (bclass_codes_at(s + 2, c))
            return;
}


static int
bclass_match(const struct bclass_rule *r, const struct bclass_codes *c)
{
    int i;

    if (r->code[0] != '\0') {
        if (c->code[0] == '\0')
            return 0;
        for (i = 0; i < 3; i++)
            if (r->code[i] != 'x' && r->code[i] != c->code[i])
                return 0;
    }
    if (r->enh[0] != 0) {
        if (c->enh[0] == 0)
            return 0;
        for (i = 0; i < 3; i++)
            if (r->enh[i] != -1 && r->enh[i] != c->enh[i])
                return 0;
    }
    return !r->has_re || regexec(&r->re, c->text, 0, NULL, 0) == 0;
}


int
bclass_of(const struct bclass_rules *rules, const char *reply)
{
    static struct bclass_rules *builtin;
    struct bclass_codes         c;
    size_t                      i;

    if (reply == NULL)
        return BCLASS_OTHER;
    if (rules == NULL) {
        char err[256];

        if (builtin == NULL && (builtin = bclass_load(NULL, err,
            sizeof(err))) == NULL)
            return BCLASS_OTHER;    /* cannot happen: a unit test loads it */
        rules = builtin;
    }
    bclass_codes(reply, &c);
    for (i = 0; i < rules->n; i++)
        if (bclass_match(&rules->r[i], &c))
            return rules->r[i].cls;
    return BCLASS_OTHER;
}
