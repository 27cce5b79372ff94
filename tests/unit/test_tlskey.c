/*
 * test_tlskey.c - the shared session-ticket keys: the first key, rotation
 * by the clock given, the previous key kept for one period, older ones
 * gone, and the page shared across fork().
 */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "common/tlskey.h"

#define P 1000u                     /* a short period, in fake ms */

static const unsigned char zero_name[TLSKEY_NAME_LEN];

Test(tlskey, first_key_is_current_and_found_by_name)
{
    struct tlskey_ring *r = tlskey_create(P, 5000);
    struct tlskey       cur, k;

    cr_assert_not_null(r);
    tlskey_current(r, &cur);
    cr_assert_neq(memcmp(cur.name, zero_name, TLSKEY_NAME_LEN), 0);
    cr_assert_eq(tlskey_find(r, cur.name, &k), 0);
    cr_assert_eq(memcmp(&k, &cur, sizeof(k)), 0);
    cr_assert_eq(tlskey_made(r), 1);
    cr_assert_eq(tlskey_period_ms(r), P);
}

Test(tlskey, the_empty_slot_opens_nothing)
{
    struct tlskey_ring *r = tlskey_create(P, 0);
    struct tlskey       k;

    /* Before the first rotation the other slot is all zero: a ticket
     * naming 16 zero bytes must not be opened with a zero key. */
    cr_assert_eq(tlskey_find(r, zero_name, &k), -1);
}

Test(tlskey, rotation_keeps_the_previous_key_one_period)
{
    struct tlskey_ring *r = tlskey_create(P, 1000);
    struct tlskey       k1, k2, k3, k;

    tlskey_current(r, &k1);
    cr_assert_eq(tlskey_rotate(r, 1000 + P - 1), 0, "not due yet");
    cr_assert_eq(tlskey_rotate(r, 1000 + P), 1);
    tlskey_current(r, &k2);
    cr_assert_neq(memcmp(k1.name, k2.name, TLSKEY_NAME_LEN), 0);
    cr_assert_neq(memcmp(k1.aes, k2.aes, TLSKEY_AES_LEN), 0);
    cr_assert_eq(tlskey_find(r, k2.name, &k), 0);
    cr_assert_eq(tlskey_find(r, k1.name, &k), 1, "previous: renew");
    cr_assert_eq(memcmp(&k, &k1, sizeof(k)), 0);
    cr_assert_eq(tlskey_rotate(r, 1000 + 2 * P - 1), 0);
    cr_assert_eq(tlskey_rotate(r, 1000 + 2 * P), 1);
    tlskey_current(r, &k3);
    cr_assert_eq(tlskey_find(r, k1.name, &k), -1, "two periods: gone");
    cr_assert_eq(tlskey_find(r, k2.name, &k), 1);
    cr_assert_eq(tlskey_find(r, k3.name, &k), 0);
    cr_assert_eq(tlskey_made(r), 3);
}

Test(tlskey, a_child_sees_the_parents_rotation)
{
    struct tlskey_ring *r = tlskey_create(P, 0);
    struct tlskey       before, after, k;
    int                 fds[2], st;
    pid_t               pid;
    char                c;

    tlskey_current(r, &before);
    cr_assert_eq(pipe(fds), 0);
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        /* The worker's side: read-only, then wait for the rotation. */
        tlskey_readonly(r);
        if (read(fds[0], &c, 1) != 1)
            _exit(2);
        tlskey_current(r, &k);
        if (memcmp(k.name, before.name, TLSKEY_NAME_LEN) == 0)
            _exit(3);
        if (tlskey_find(r, before.name, &k) != 1)
            _exit(4);
        _exit(0);
    }
    cr_assert_eq(tlskey_rotate(r, P), 1);
    tlskey_current(r, &after);
    cr_assert_eq(write(fds[1], "x", 1), 1);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

/* The page's protection is checked through the kernel: read() into a
 * read-only page and write() from an unmapped one fail with EFAULT, where
 * a direct access would fault (and ASan would turn the fault into a
 * report of its own). */
Test(tlskey, a_reader_cannot_write_the_page)
{
    struct tlskey_ring *r = tlskey_create(P, 0);
    int                 fds[2];

    cr_assert_eq(pipe(fds), 0);
    tlskey_readonly(r);
    cr_assert_eq(write(fds[1], r, 1), 1, "still readable");
    errno = 0;
    cr_assert_eq(read(fds[0], (void *)r, 1), -1, "written into a read-only "
        "page");
    cr_assert_eq(errno, EFAULT);
}

Test(tlskey, a_forgotten_page_is_gone)
{
    struct tlskey_ring *r = tlskey_create(P, 0);
    int                 fds[2];

    cr_assert_eq(pipe(fds), 0);
    tlskey_forget(r);
    errno = 0;
    cr_assert_eq(write(fds[1], r, 1), -1, "the page is still mapped");
    cr_assert_eq(errno, EFAULT);
}
