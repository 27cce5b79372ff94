/*
 * api.h - the HTTP API process (issue-free summary: docs/API.md): an
 * unprivileged child of the master serving JSON over HTTP/1.1 on the
 * api.listen socket, with bearer tokens and roles.
 *
 * CONTRACT  api_main() is the process's entry, called in the child the
 *           master forked (master/child.c); it never returns.
 * FAILURE   Fatal setup errors exit the process; the master restarts it
 *           with back-off.
 */
#ifndef MTAD_API_H
#define MTAD_API_H

#endif /* MTAD_API_H */
