#!/usr/bin/env python3
"""Mixed abuse against shoal-kv while a correct client checks every value byte for byte.

For a bounded time (40 s by default) several hostile or careless clients run at once against one
`shoal-kv --smp 2 -m 32`: connections reset mid-request (SO_LINGER 0) at random points of a
request, senders that announce large values and stall, clients that pipeline gets and never
read, binary-protocol and HTTP requests, half-closes, and bursts of connections up to the
connection limit. Meanwhile a correct client sets and reads keys of mixed sizes and compares
every value it reads with what it stored (a miss is allowed: the cache may evict; a wrong value
is not). Afterwards the server must be back at its baseline: curr_connections, its open fds and
incomplete_value_bytes, and must still serve.

usage: abuse_test.py SHOAL_KV_BINARY [SECONDS]
"""
import os
import random
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_process import client, fd_count, server  # noqa: E402

MAX_CONNECTIONS = 300


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def value_of(key, version, size):
    seed = f"{key}:{version}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


def correct_client(port, stop, stats, errors):
    rng = random.Random(1)
    c = client(port)
    stored = {}
    while not stop.is_set():
        key = b"good%d" % rng.randrange(200)
        if rng.random() < 0.4 or key not in stored:
            version = stored.get(key, (0, 0))[0] + 1
            size = rng.choice([10, 500, 3000, 20000, 150000])
            v = value_of(key, version, size)
            reply = c.call(b"set %s 0 0 %d\r\n" % (key, size) + v + b"\r\n")
            if reply == b"STORED\r\n":
                stored[key] = (version, size)
                stats["sets"] += 1
            elif reply.startswith(b"SERVER_ERROR out of memory"):
                stored.pop(key, None)  # memcached's rule: the old value is gone
                stats["refused"] += 1
            else:
                errors.append(f"set {key!r}: {reply[:100]!r}")
        else:
            version, size = stored[key]
            got = c.call(b"get %s\r\n" % key, b"END\r\n")
            want = b"VALUE %s 0 %d\r\n" % (key, size) + value_of(key, version, size) + b"\r\nEND\r\n"
            if got == b"END\r\n":
                stats["misses"] += 1
                stored.pop(key)
            elif got != want:
                errors.append(f"get {key!r}: wrong value ({len(got)} bytes)")
            else:
                stats["hits"] += 1
    c.sock.close()


def resetters(port, stop, rng, counts):
    reqs = [b"set x 0 0 100\r\nabc", b"set x 0 0 100000\r\n" + b"y" * 5000, b"get x y z", b"mg x v",
            b"get " + b"k" * 200 + b"\r\n" * 3, b"set x 0 0 5\r\nhello\r\nget x\r\n"]
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(rng.choice(reqs))
            if rng.random() < 0.3:
                s.shutdown(socket.SHUT_WR)
            reset(s)
            counts["resets"] += 1
        except OSError:
            counts["refused_connects"] += 1


def stallers(port, stop, counts):
    held = []
    while not stop.is_set() and len(held) < 40:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"set stall%d 0 0 1000000\r\n" % len(held) + b"s" * 900000)
            held.append(s)
            counts["stalled"] += 1
        except OSError:
            counts["refused_connects"] += 1
        time.sleep(0.2)
    stop.wait()
    for s in held:
        reset(s)


def non_readers(port, stop, counts):
    held = []
    while not stop.is_set() and len(held) < 10:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.setblocking(False)
            try:
                s.send(b"get good1 good2 good3 good4\r\n" * 20000)
            except BlockingIOError:
                pass
            held.append(s)
            counts["non_readers"] += 1
        except OSError:
            counts["refused_connects"] += 1
        time.sleep(0.5)
    stop.wait()
    for s in held:
        s.close()


def strangers(port, stop, rng, counts, errors):
    binary_get = struct.pack(">BBHBBHIIQ", 0x80, 0, 1, 0, 0, 0, 1, 0, 0) + b"k"
    while not stop.is_set():
        data = rng.choice([binary_get, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"POST /x HTTP/1.0\r\n"])
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.sendall(data)
            # The server closes; it must not leave the client hanging.
            while s.recv(4096):
                pass
            s.close()
            counts["closed_strangers"] += 1
        except socket.timeout:
            errors.append(f"the server left a {data[:12]!r} client hanging")
        except OSError:
            counts["refused_connects"] += 1
        time.sleep(0.01)


def bursts(port, stop, counts, errors):
    while not stop.is_set():
        socks = []
        for _ in range(MAX_CONNECTIONS + 20):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            except OSError:
                counts["refused_connects"] += 1
        # Past -c the server answers memcached's refusal and closes; a connection it took answers
        # the version request, so no read waits on a server that has nothing to say.
        refused = 0
        for s in socks[-10:]:
            try:
                s.settimeout(60)
                s.sendall(b"version\r\n")
            except OSError:
                pass  # refused and closed already: the refusal is still queued to read
            try:
                if s.recv(100).startswith(b"ERROR Too many open connections"):
                    refused += 1
            except OSError:
                pass
        counts["burst_refusals"] += refused
        for s in socks:
            reset(s)
        stop.wait(3)


def main():
    binary = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 40
    errors = []
    srv = server(binary, ["--smp", "2", "-m", "32", "-c", str(MAX_CONNECTIONS)])
    port = srv.port
    try:
        probe = srv.first
        # Every shard serves once before the baseline: what a shard sets up on first use is in it.
        for i in range(8):
            client(port).call(b"version\r\n")
        time.sleep(0.5)
        base = probe.stats()
        base_fds = fd_count(srv.pid)

        stop = threading.Event()
        counts = {k: 0 for k in ["sets", "hits", "misses", "refused", "resets", "stalled", "non_readers",
                                 "closed_strangers", "burst_refusals", "refused_connects"]}
        rng = random.Random(7)
        threads = [threading.Thread(target=correct_client, args=(port, stop, counts, errors)),
                   threading.Thread(target=resetters, args=(port, stop, random.Random(2), counts)),
                   threading.Thread(target=resetters, args=(port, stop, random.Random(3), counts)),
                   threading.Thread(target=stallers, args=(port, stop, counts)),
                   threading.Thread(target=non_readers, args=(port, stop, counts)),
                   threading.Thread(target=strangers, args=(port, stop, rng, counts, errors)),
                   threading.Thread(target=bursts, args=(port, stop, counts, errors))]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(300)
            if t.is_alive():
                errors.append(f"{t.name} did not finish")
        print("counts:", counts)
        if counts["hits"] == 0 or counts["sets"] == 0:
            errors.append("the correct client got no work done")

        def settled():
            st = probe.stats()
            return (st["curr_connections"] == base["curr_connections"] and st["incomplete_value_bytes"] == "0"
                    and fd_count(srv.pid) <= base_fds)

        deadline = time.monotonic() + 120
        while not settled():
            if time.monotonic() > deadline:
                st = probe.stats()
                errors.append(f"not back at baseline: curr_connections {st['curr_connections']} "
                              f"(was {base['curr_connections']}), fds {fd_count(srv.pid)} (was {base_fds}), "
                              f"incomplete_value_bytes {st['incomplete_value_bytes']}")
                break
            time.sleep(0.1)
        if probe.call(b"set after 0 0 2\r\nok\r\nget after\r\n", b"END\r\n") != \
                b"STORED\r\nVALUE after 0 2\r\nok\r\nEND\r\n":
            errors.append("the server does not serve after the abuse")
        if srv.proc.poll() is not None:
            errors.append(f"shoal-kv exited with {srv.proc.returncode}")
        if errors:
            sys.stdout.write(srv.output())
    finally:
        srv.stop()
    for e in errors[:20]:
        print("FAIL:", e)
    print("1 passed, 0 failed" if not errors else "0 passed, 1 failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
