/*
 * api_argv.h - the shapes of mtactl command lines the API process may
 *              have the master run (api_run.c).  Pure (no I/O, no master
 *              state), apart from api_run.c so that a unit test drives
 *              it.  Only master/ and the tests include it.
 *
 * CONTRACT  api_argv_check() says whether argv[0..argc) (mtactl's words
 *           after "mtactl -c CONFIG": "route", "add", KEY, ROUTE) is one
 *           of the table's shapes: the command's words, then its operands
 *           in order, and only the options the shape names, each at most
 *           once, an option's value checked by its kind.  Nothing else
 *           passes: no mtactl global option (-c, -s: the verb word comes
 *           first and mtactl stops at it), no file name (route import
 *           reads "-", stdin, only), no operand that starts with '-', no
 *           control byte, no maildir: route (a path the workers would
 *           write), no abbreviated option (getopt_long would take one).
 *           stdin bytes are allowed only where the shape takes them
 *           (route import), and for route import no line may name a
 *           maildir: route either.
 * RETURNS   0, or -1 with *why a constant sentence.
 */
#ifndef MTAD_MASTER_API_ARGV_H
#define MTAD_MASTER_API_ARGV_H

#include <stddef.h>

int     api_argv_check(int argc, char *const argv[], const char *in,
            size_t in_len, const char **why);

#endif /* MTAD_MASTER_API_ARGV_H */
