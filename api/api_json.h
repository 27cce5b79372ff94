/*
 * api_json.h - the HTTP API's JSON: a strict parser into a read-only tree
 * (DOM) and a writer onto a struct buf.
 *
 * CONTRACT  Parser: api_json_parse() accepts exactly RFC 8259 JSON text:
 *           one value (any type) with optional whitespace (space, tab,
 *           CR, LF) around it and nothing after it.  Refused: comments,
 *           trailing commas, single quotes, leading zeros, "+1", ".5",
 *           "1.", NaN/Infinity, control bytes in strings, bytes that are
 *           not valid UTF-8 (overlong forms and surrogates included),
 *           \u escapes naming a lone surrogate, "\u0000" in a key (keys
 *           are C strings), duplicate keys in one
 *           object, nesting deeper than API_JSON_MAX_DEPTH, more than
 *           API_JSON_MAX_NODES values, and texts longer than
 *           API_JSON_MAX_TEXT bytes.  Numbers are kept as a double, and
 *           as an exact int64 too when written without fraction or
 *           exponent and in range (api_json_int()).
 *           The tree is one allocation chain owned by the root: only the
 *           value api_json_parse() returned may be given to
 *           api_json_free(); every pointer into the tree (values, keys,
 *           strings) is valid until then.  Strings are NUL-terminated
 *           copies, decoded; a string may hold "\u0000", so a caller that
 *           must refuse NUL compares the length it was given with strlen.
 *           Getters are NULL-safe: a NULL or wrong-typed value gives the
 *           empty answer (NULL, 0, API_JSON_NONE), so a handler can write
 *           api_json_str(api_json_get(root, "from"), &n) and check once.
 *           Objects keep their members in document order (api_json_key(),
 *           api_json_at()); api_json_get() is a binary search.
 *           Writer: api_jw_* append to a struct buf, placing the commas
 *           themselves; strings are escaped as logfmt does (quote,
 *           backslash, control bytes, and each byte that is not part of
 *           valid UTF-8 as \u00XX, the byte read as Latin-1), so the
 *           output is valid JSON in valid UTF-8 whatever the input bytes.
 *           Nesting is at most API_JSON_MAX_DEPTH; past it the writer sets
 *           w->bad and writes nothing more (a caller bug, never input).
 * FAILURE   api_json_parse() returns NULL and writes a short message
 *           ("line 1 col 7: expected ':'") into err; the message never
 *           echoes input bytes.  Allocation never fails (xmalloc).
 */
#ifndef MTAD_API_JSON_H
#define MTAD_API_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define API_JSON_MAX_DEPTH  32
#define API_JSON_MAX_NODES  (256 * 1024)
#define API_JSON_MAX_TEXT   ((size_t)64 * 1024 * 1024)

enum api_json_type {
    API_JSON_NONE = 0,              /* no value: a NULL pointer */
    API_JSON_NULL,
    API_JSON_FALSE,
    API_JSON_TRUE,
    API_JSON_NUM,
    API_JSON_STR,
    API_JSON_ARR,
    API_JSON_OBJ
};

struct api_json;

struct api_json *api_json_parse(const char *s, size_t n, char *err,
                    size_t errsz);
void        api_json_free(struct api_json *root);      /* NULL-safe */

int         api_json_type(const struct api_json *v);
/* object member by key (NULL when absent or v is not an object) */
const struct api_json *api_json_get(const struct api_json *obj,
                    const char *key);
/* string value; *len (if len) gets its length; NULL when not a string */
const char *api_json_str(const struct api_json *v, size_t *len);
double      api_json_num(const struct api_json *v);    /* 0 when not a number */
/* 0 and *out set when v is a number written as an integer within int64 */
int         api_json_int(const struct api_json *v, int64_t *out);
/* 1 true, 0 false, -1 not a boolean */
int         api_json_bool(const struct api_json *v);
/* members of an object or elements of an array (0 for anything else) */
size_t      api_json_len(const struct api_json *v);
const struct api_json *api_json_at(const struct api_json *v, size_t i);
/* the key of an object's i-th member, in document order */
const char *api_json_key(const struct api_json *obj, size_t i);

/* writer */
struct api_jw {
    struct buf *b;
    unsigned    depth;
    int         bad;                /* nesting overflow or close underflow */
    uint64_t    more;               /* bit d: level d has a member already */
    int         after_key;          /* a key was written: no comma next */
};

void    api_jw_init(struct api_jw *w, struct buf *b);
void    api_jw_obj(struct api_jw *w);                  /* { */
void    api_jw_obj_end(struct api_jw *w);              /* } */
void    api_jw_arr(struct api_jw *w);                  /* [ */
void    api_jw_arr_end(struct api_jw *w);              /* ] */
void    api_jw_key(struct api_jw *w, const char *key);
void    api_jw_str(struct api_jw *w, const char *s);   /* NULL writes null */
void    api_jw_strn(struct api_jw *w, const char *s, size_t n);
void    api_jw_int(struct api_jw *w, int64_t v);
void    api_jw_uint(struct api_jw *w, uint64_t v);
void    api_jw_num(struct api_jw *w, double v);        /* non-finite: null */
void    api_jw_bool(struct api_jw *w, int v);
void    api_jw_null(struct api_jw *w);
/* a value that is already JSON text (trusted: the caller made it) */
void    api_jw_raw(struct api_jw *w, const char *json, size_t n);
/* key + value in one call */
void    api_jw_kstr(struct api_jw *w, const char *key, const char *s);
void    api_jw_kint(struct api_jw *w, const char *key, int64_t v);
void    api_jw_kbool(struct api_jw *w, const char *key, int v);

#endif /* MTAD_API_JSON_H */
