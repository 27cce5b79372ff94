/*
 * fuzz_chan.c - libFuzzer target over the channel decoder (common/chan.c):
 * what a compromised worker can put in a packet to the master, and the
 * other directions alike.  `make fuzz` builds and runs it; seeds in
 * tests/fuzz/corpus/chan/.
 *
 * The first byte picks the receiving end (low two bits) and whether a
 * descriptor came with the packet (bit 2); the rest is the packet.  On
 * CHAN_OK the message must be one the table allows: a known type, the
 * payload inside the packet and exactly as long as the header says; on
 * CHAN_EBAD a reason must be given.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/chan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct chan_msg m;
    const char     *why = NULL;
    enum chan_role  me;
    int             have_fd, rc;
    uint8_t        *pkt;

    if (size < 1)
        return 0;
    me = (enum chan_role)(data[0] & 3u);
    if (me > CHAN_API)
        return 0;
    have_fd = (data[0] >> 2) & 1;
    /* a copy of its own size, so ASan sees any read past the packet */
    pkt = malloc(size - 1 > 0 ? size - 1 : 1);
    memcpy(pkt, data + 1, size - 1);
    rc = chan_decode(pkt, size - 1, have_fd, me, &m, &why);
    if (rc == CHAN_OK) {
        if (m.cmd <= CHAN_NONE || m.cmd >= CHAN_NCMD || m.fd != -1 ||
            m.data != (const char *)pkt + sizeof(struct chan_hdr) ||
            m.len != size - 1 - sizeof(struct chan_hdr) ||
            m.len > CHAN_PAYLOAD_MAX || strcmp(chan_name(m.cmd), "?") == 0)
            abort();
        if (m.cmd == CHAN_LOG_INTERVAL && m.len != sizeof(uint64_t))
            abort();
        if ((m.cmd == CHAN_QSTREAM || m.cmd == CHAN_LOG_REOPEN ||
            m.cmd == CHAN_AUTH_SOCKET || m.cmd == CHAN_API_PIPE) != have_fd)
            abort();                /* the commands that carry a socket */
        if (me == CHAN_MASTER && m.cmd != CHAN_PONG && m.cmd != CHAN_READY &&
            m.cmd != CHAN_TLSRPT_ADD && m.cmd != CHAN_AUTH_CONNECT &&
            m.cmd != CHAN_API_STATUS && m.cmd != CHAN_API_RUN)
            abort();                /* a child may send only these */
        if (me == CHAN_API && m.cmd != CHAN_STOP && m.cmd != CHAN_PING &&
            m.cmd != CHAN_API_STATUS_REPLY && m.cmd != CHAN_API_PIPE &&
            m.cmd != CHAN_API_EXIT)
            abort();                /* what the master sends the API */
    } else if (rc != CHAN_EBAD || why == NULL || why[0] == '\0') {
        abort();
    }
    free(pkt);
    return 0;
}
