#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""link-relay LISTEN_PORT TARGET_PORT DELAY_MS: a TCP relay on 127.0.0.1 that
holds every chunk DELAY_MS in each direction before passing it on, so a
round trip through it costs 2 x DELAY_MS more (a slow link in front of a
loopback server).  Order is kept per direction.

The link is cut by SIGSTOP of this process (nothing is forwarded, nothing is
refused: connections stay open and silent, as when a network drops packets)
and comes back with SIGCONT; killing it cuts with resets.  Prints "ready"
on stdout once it listens."""
import asyncio
import sys


async def pipe(reader, writer, delay):
    """Forwards reader to writer, each chunk delay seconds after it arrived."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0, None))
    try:
        await sender
    except ConnectionError:
        pass


async def main(listen, target, delay):
    async def client(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, swriter, delay), pipe(sreader, cwriter, delay))

    server = await asyncio.start_server(client, "127.0.0.1", listen, reuse_address=True)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: link-relay LISTEN_PORT TARGET_PORT DELAY_MS")
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000))
