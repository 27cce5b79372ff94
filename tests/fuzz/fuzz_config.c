/*
 * fuzz_config.c - libFuzzer target over relay.yaml (config/config.c):
 * the input is written to a temporary file and loaded as a whole.
 *
 * Checks: config_load() either gives a config (freed again) or NULL and
 * an error text in which every line starts with "FILE:LINE:COL: " or
 * "FILE: " (the file named), never a crash, a leak or a read past a
 * buffer.  TLS and route paths in the input are only read, never
 * written.  Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_path[64];

static void
fuzz_cleanup(void)
{
    if (fuzz_path[0] != '\0')
        unlink(fuzz_path);
}

static void
fuzz_check_err(const char *err)
{
    size_t      plen = strlen(fuzz_path);
    const char *line = err, *nl;

    if (err[0] == '\0')
        abort();
    while (*line != '\0') {
        if (strncmp(line, fuzz_path, plen) != 0 || line[plen] != ':')
            abort();
        nl = strchr(line, '\n');
        if (nl == NULL)
            break;
        line = nl + 1;
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char    err[8192];
    struct config *cfg;
    FILE          *fp;
    int            fd;

    if (fuzz_path[0] == '\0') {
        snprintf(fuzz_path, sizeof(fuzz_path), "/tmp/fuzz-relay-XXXXXX");
        fd = mkstemp(fuzz_path);
        if (fd < 0)
            abort();
        close(fd);
        atexit(fuzz_cleanup);
    }
    fp = fopen(fuzz_path, "w");
    if (fp == NULL || fwrite(data, 1, size, fp) != size || fclose(fp) != 0)
        abort();
    err[0] = '\0';
    cfg = config_load(fuzz_path, err, sizeof(err));
    if (cfg != NULL)
        config_free(cfg);
    else
        fuzz_check_err(err);
    return 0;
}
