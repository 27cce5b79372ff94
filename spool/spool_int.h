/*
 * spool_int.h - declarations shared by spool.c (files) and spool_env.c
 * (the pure text formats).  Nothing outside spool/ includes this.
 *
 * CONTRACT  The envelope always starts with SPOOL_MAGIC followed by the
 *           "size" line, so the body length sits at the fixed offset
 *           SPOOL_SIZE_OFF as SPOOL_SIZE_WIDTH decimal digits; the writer
 *           pwrite()s it there once the body is complete.
 */
#ifndef MTAD_SPOOL_INT_H
#define MTAD_SPOOL_INT_H

#include <stddef.h>

#include "spool/spool.h"

#define SPOOL_MAGIC        "MTAD-SPOOL 1\n"
#define SPOOL_STATE_MAGIC  "MTAD-STATE 1\n"
/* Version 2 adds the recipient status NOTIFIED; it is written only when a
 * recipient has it, so files a version-1 reader can read stay version 1. */
#define SPOOL_STATE_MAGIC2 "MTAD-STATE 2\n"
#define SPOOL_SIZE_OFF     (sizeof(SPOOL_MAGIC) - 1 + sizeof("size ") - 1)
#define SPOOL_SIZE_WIDTH   20

/* Render the envelope (env->body_size as the size field) into dst, which
 * must hold the returned length; dst NULL only measures. */
size_t  spool_env_render(const struct spool_env *env, char *dst);

/* Render the delivery state of env; same dst convention.  Statuses outside
 * enum spool_rcpt_status, and notified on a recipient that is not BOUNCED,
 * must be refused by the caller beforehand. */
size_t  spool_state_render(const struct spool_env *env, char *dst);

/* Parse a whole state file into env's delivery fields (strict: the id and
 * the recipient count must match env).  SPOOL_OK or SPOOL_EFORMAT; on
 * failure env may hold part of the state and is only fit for freeing. */
int     spool_state_parse(const char *p, size_t n, struct spool_env *env);

/* Fill dst[SPOOL_SIZE_WIDTH] with v as zero-padded decimal digits. */
void    spool_size_digits(char *dst, uint64_t v);

#endif /* MTAD_SPOOL_INT_H */
