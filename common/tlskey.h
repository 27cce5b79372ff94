/*
 * tlskey.h - the TLS session-ticket keys of the whole daemon: one
 * MAP_SHARED page (a memfd, "mtad-tlskeys" in /proc/PID/maps) made by the
 * master before its first fork, so a ticket issued by one worker is
 * accepted by every other worker, of this generation and of the next (a
 * reload keeps the page).
 *
 * CONTRACT  tlskey_create() maps the page and makes the first key.  Only
 *           its creator writes it: tlskey_rotate(r, now) makes a new key
 *           once the current one has encrypted tickets for a whole
 *           period; the one it replaces is kept for decryption for one
 *           more period, the key before that is overwritten (nginx's
 *           ssl_session_ticket_key files, Postfix's tlsmgr).  Readers copy
 *           a key out under a sequence lock, so never a torn key, and call
 *           tlskey_readonly() once after fork: a stray write faults (a
 *           compromised worker could map it writable again, but it holds
 *           the keys and the private key anyway).  tlskey_current() is
 *           the key for new tickets; tlskey_find() looks a ticket's key
 *           up by name.
 *           Times are CLOCK_MONOTONIC ms (the same in every process).
 *           The keys are never written to disk: a restart (not a reload)
 *           makes new ones, and clients do one full handshake.
 * OUTBOUND  The outbound client's session cache (per destination, issue
 *           20) needs no key: it keeps the SSL_SESSIONs the servers hand
 *           out.  What it shares with this module is the lifetime rule:
 *           TLSKEY_PERIOD_MS is the session lifetime offered here.
 * FAILURE   tlskey_create() returns NULL with errno (memfd, mmap) or EIO (no
 *           randomness); tlskey_rotate() returns -1 when no random bytes
 *           could be had (the current key stays in use).
 */
#ifndef MTAD_TLSKEY_H
#define MTAD_TLSKEY_H

#include <stdint.h>

#define TLSKEY_NAME_LEN   16        /* RFC 5077 key_name */
#define TLSKEY_AES_LEN    32        /* AES-256-CBC */
#define TLSKEY_HMAC_LEN   32        /* HMAC-SHA256 */
#define TLSKEY_PERIOD_MS  (12ULL * 3600 * 1000)

struct tlskey {
    unsigned char name[TLSKEY_NAME_LEN];
    unsigned char aes[TLSKEY_AES_LEN];
    unsigned char hmac[TLSKEY_HMAC_LEN];
};

struct tlskey_ring;

struct tlskey_ring *tlskey_create(uint64_t period_ms, uint64_t now_ms);
/* 1 when a new key was made, 0 when none is due yet, -1 on failure. */
int     tlskey_rotate(struct tlskey_ring *r, uint64_t now_ms);
void    tlskey_readonly(struct tlskey_ring *r);
/* A process that needs no keys (the log process) unmaps them. */
void    tlskey_forget(struct tlskey_ring *r);
/* The key to encrypt new tickets with. */
void    tlskey_current(const struct tlskey_ring *r, struct tlskey *out);
/* The key named name: 0 the current one, 1 the previous one (still
 * valid; the caller should issue a fresh ticket), -1 none (expired or
 * never ours: a full handshake). */
int     tlskey_find(const struct tlskey_ring *r,
            const unsigned char name[TLSKEY_NAME_LEN], struct tlskey *out);
uint64_t tlskey_period_ms(const struct tlskey_ring *r);
/* How many keys were made so far (1 after create); for logs and tests. */
uint64_t tlskey_made(const struct tlskey_ring *r);
void    tlskey_wipe(struct tlskey *k);          /* a copy, after use */

#endif /* MTAD_TLSKEY_H */
