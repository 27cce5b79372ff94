/*
 * config_api.c - the api section (the HTTP API process, api/): the
 * listen address, and the checks after the walk (a listener needs a
 * tokens file; TLS needs both files).  The tokens file itself is read by
 * the API's own loader (api_tokens_load(), from master_check() for
 * mtad -t and the start), which names file:line:col in it.
 */
#include <sys/socket.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "common/util.h"
#include "config/config.h"
#include "config/config_int.h"

void
config_set_api(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    void       *f = config_field(p, k);
    const char *v;

    p->api_listen_mark = n->start_mark;
    p->have_api_listen_mark = 1;
    v = config_scalar(p, n, path, "an address like \"127.0.0.1:8025\"");
    if (v != NULL && util_parse_hostport(v, &p->cfg->api_addr,
        &p->cfg->api_addrlen) != 0)
        config_expected(p, n, path,
            "an address like \"127.0.0.1:8025\" or \"[::1]:8025\"");
    else if (v != NULL)
        config_set_str(f, v);
}

void
config_check_api(struct config_parse *p)
{
    struct config     *cfg = p->cfg;
    const yaml_mark_t *at = p->have_api_listen_mark ? &p->api_listen_mark :
                            NULL;

    if ((cfg->api_tls_cert_file == NULL) != (cfg->api_tls_key_file == NULL))
        config_addf(p, at, "api.tls: give both cert_file and key_file, or "
            "neither");
    if (cfg->api_listen != NULL && cfg->api_tokens_file == NULL)
        config_addf(p, at, "api.listen is set but api.tokens_file is not: "
            "every API request needs a token");
}
