/*
 * maildir.h - local delivery of one recipient into a Maildir.
 *
 * CONTRACT  maildir_deliver() creates <path>/{tmp,new,cur} when missing,
 *           writes tmp/<unique> with "Return-Path: <sender>" and
 *           "Delivered-To: <rcpt>" in front of the body (line ends turned
 *           from CRLF into LF, as Postfix's local and qmail-local store
 *           them), fsyncs when asked, and renames it into new/: the rename
 *           is the delivery.  Reads the body from the queue file in 128 KiB
 *           chunks with pread; no allocation per line.
 * FAILURE   0, or -1 with a reason in why ("create maildir file
 *           /x/tmp/...: Permission denied"); the caller defers.  A failed
 *           delivery leaves no file behind.
 */
#ifndef MTAD_MAILDIR_H
#define MTAD_MAILDIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

int     maildir_deliver(const char *path, const char *sender,
            const char *rcpt, int fd, off_t body_off, uint64_t body_size,
            int do_fsync, const char *hostname, char *why, size_t whysz);
/* CRLF -> LF in one pass; *cr carries a CR left at the end of the previous
 * chunk.  out has room for n + 1 bytes; returns bytes written. */
size_t  maildir_unix_lines(const char *in, size_t n, int *cr, char *out);

#endif /* MTAD_MAILDIR_H */
