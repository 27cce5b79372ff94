"""The soak's next hop: an SMTP sink on one or more loopback ports that
records what it accepts, and can be switched to misbehave.

Run by soak.py as a child process (python3 soaksink.py PORT... --record F).
Commands arrive on stdin, one per line:
    mode PORT ok|4xx|stall|drop|down
        ok     normal
        4xx    451 to the end of data (nothing kept)
        stall  answers nothing after the data (nothing kept; the client
               times out)
        drop   closes the connection after the data, no reply (nothing kept)
        down   the listener is closed (connection refused); "ok" reopens it
Each end of data answered 250 is first written to the record file as one
JSON line per recipient:
    {"t": time, "port": listening port, "peer": client port, "from": sender,
     "rcpt": recipient, "id": X-Soak-Id or null, "sha": sha256 of the
     message without the leading Received: block, "dsn": {...} or null}
A null sender's message (a DSN) has "dsn": {"orig": the original's
X-Soak-Id, "final": [Final-Recipient addresses]}.
Recipients whose local part starts with "rej" get 550 at RCPT.
Standard library only (Debian python3).
"""
import asyncio
import hashlib
import json
import re
import sys
import time

RECEIVED_END = re.compile(rb"\r\n(?![ \t])")


def strip_received(data):
    """The message without the Received: field mtad put on top."""
    if not data.startswith(b"Received:"):
        return data
    m = RECEIVED_END.search(data)
    return data[m.end():] if m else data


def dsn_info(data):
    orig = re.search(rb"X-Soak-Id: *([0-9a-z-]+)", data)
    finals = re.findall(rb"Final-Recipient: *rfc822; *([^\s]+)", data,
                        re.IGNORECASE)
    return {"orig": orig.group(1).decode() if orig else None,
            "final": [f.decode().lower() for f in finals]}


class Sink:
    def __init__(self, ports, record):
        self.ports = ports
        self.mode = {p: "ok" for p in ports}
        self.servers = {}
        self.rec = open(record, "a", buffering=1)

    async def open_port(self, port):
        if port in self.servers:
            return
        for _ in range(100):
            try:
                self.servers[port] = await asyncio.start_server(
                    lambda r, w, p=port: self.session(r, w, p),
                    "127.0.0.1", port, limit=1 << 24, reuse_address=True)
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise SystemExit("soaksink: cannot listen on %d" % port)

    async def close_port(self, port):
        srv = self.servers.pop(port, None)
        if srv is not None:
            srv.close()
            await srv.wait_closed()

    async def control(self):
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                return
            parts = line.decode().split()
            if len(parts) == 3 and parts[0] == "mode":
                port, mode = int(parts[1]), parts[2]
                self.mode[port] = mode
                if mode == "down":
                    await self.close_port(port)
                else:
                    await self.open_port(port)
            sys.stdout.write("ok\n")
            sys.stdout.flush()

    def record(self, port, peer, sender, rcpts, data):
        body = strip_received(data)
        sha = hashlib.sha256(body).hexdigest()
        m = re.search(rb"X-Soak-Id: *([0-9a-z-]+)", body[:4096])
        sid = m.group(1).decode() if m else None
        dsn = dsn_info(body) if sender == "" else None
        now = time.time()
        for r in rcpts:
            self.rec.write(json.dumps({
                "t": now, "port": port, "peer": peer, "from": sender,
                "rcpt": r.lower(), "id": sid, "sha": sha, "dsn": dsn}) + "\n")

    async def session(self, reader, writer, port):
        peer = writer.get_extra_info("peername")[1]
        sender, rcpts = None, []

        async def reply(line):
            writer.write(line.encode() + b"\r\n")
            await writer.drain()

        try:
            await reply("220 sink.soak ESMTP")
            while True:
                line = await reader.readline()
                if not line:
                    return
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                verb, _, arg = text.partition(" ")
                verb = verb.upper()
                if verb in ("EHLO", "HELO"):
                    await reply("250-sink.soak\r\n250-PIPELINING\r\n"
                                "250-8BITMIME\r\n250-SIZE 104857600\r\n"
                                "250 ENHANCEDSTATUSCODES")
                elif verb == "MAIL":
                    sender = arg.partition("<")[2].partition(">")[0]
                    rcpts = []
                    await reply("250 2.1.0 Ok")
                elif verb == "RCPT":
                    addr = arg.partition("<")[2].partition(">")[0]
                    if addr.lower().startswith("rej"):
                        await reply("550 5.1.1 <%s>: no such user" % addr)
                    else:
                        rcpts.append(addr)
                        await reply("250 2.1.5 Ok")
                elif verb == "DATA":
                    if not rcpts:
                        await reply("554 5.5.1 no valid recipients")
                        continue
                    await reply("354 go ahead")
                    data = await self.read_data(reader)
                    if data is None:
                        return
                    mode = self.mode.get(port, "ok")
                    if mode == "stall":
                        await reader.read()
                        return
                    if mode == "drop":
                        return
                    if mode == "4xx":
                        await reply("451 4.3.0 soak: try again later")
                        continue
                    self.record(port, peer, sender, rcpts, data)
                    await reply("250 2.0.0 Ok")
                elif verb == "RSET":
                    sender, rcpts = None, []
                    await reply("250 2.0.0 Ok")
                elif verb == "NOOP":
                    await reply("250 2.0.0 Ok")
                elif verb == "QUIT":
                    await reply("221 2.0.0 Bye")
                    return
                else:
                    await reply("502 5.5.2 not recognized")
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    @staticmethod
    async def read_data(reader):
        out = bytearray()
        while True:
            line = await reader.readline()
            if not line:
                return None
            if line == b".\r\n":
                return bytes(out)
            if line.startswith(b"."):
                line = line[1:]
            out += line

    async def main(self):
        for p in self.ports:
            await self.open_port(p)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await self.control()


def main():
    ports, record = [], None
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--record":
            record = args.pop(0)
        else:
            ports.append(int(a))
    asyncio.run(Sink(ports, record).main())


if __name__ == "__main__":
    main()
