#!/usr/bin/env python3
"""shoal-kv's memory under pressure, black box, beside memcached when it is installed.

1. A small memory limit stores every size: with one shard and -m 3 (two pages), `set a` of
   10 bytes, `set c` of 5,000 and `set a` of 2,000 are all stored (memcached -m 2 stores them).
2. A full cache stores small values: at -m 64 -I 2m with two shards, after filling the memory
   with values of 64 B..1 MB, 500 sets of 0..1,000 bytes are all stored and read back.
3. A nearly empty cache evicts nothing: at the default -m 64 with two shards, ~2.9 MB of live
   data in values of 32 B..16 KB, overwritten with new sizes by a client pipelining 24 sets and
   then reading the 24 keys: every key is found, `evictions` stays 0 (as memcached's does).

Asserts outcomes only (replies and counters), never timings.

usage: memory_pressure_test.py SHOAL_KV_BINARY
"""
import math, os, random, shutil, socket, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conformance import free_port  # noqa: E402


class conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l

    def exact(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def get_reply(self):
        """One get's reply: the value or None."""
        l = self.line()
        if l == b"END":
            return None
        parts = l.split()
        assert parts[0] == b"VALUE", l
        v = self.exact(int(parts[3]) + 2)[:-2]
        assert self.line() == b"END"
        return v

    def stats(self):
        self.send(b"stats\r\n")
        out = {}
        while True:
            l = self.line()
            if l == b"END":
                return out
            _, k, v = l.decode().split(" ", 2)
            out[k] = v


def set_cmd(key, value):
    return b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value)


def value_of(key, version, n):
    v = b"%s#%d#" % (key, version)
    return (v * (n // len(v) + 1))[:n]


def start(args, what):
    port = free_port()
    p = subprocess.Popen(args(port), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        if p.poll() is not None:
            sys.exit(f"{what} exited early with {p.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit(f"{what} did not listen on {port} within 30 s")


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def three_sets(port):
    c = conn(port)
    c.send(set_cmd(b"a", b"x" * 10) + set_cmd(b"c", b"c" * 5000) + set_cmd(b"a", b"y" * 2000))
    replies = [c.line() for _ in range(3)]
    c.send(b"get a\r\n")
    a = c.get_reply()
    return replies, a


def fill_then_small_sets(port):
    c = conn(port)
    rng = random.Random(42)
    written = 0
    i = 0
    while written < 200 << 20:
        n = int(math.exp(rng.uniform(math.log(64), math.log((2 << 20) - 100))))
        c.send(set_cmd(b"fill%d" % i, value_of(b"fill%d" % i, 0, n)))
        r = c.line()
        assert r == b"STORED", (i, n, r)
        written += n
        i += 1
    failed = []
    for j in range(500):
        k = b"small%d" % j
        v = value_of(k, 1, rng.randrange(0, 1001))
        c.send(set_cmd(k, v) + b"get %s\r\n" % k)
        r = c.line()
        got = c.get_reply()
        if r != b"STORED" or got != v:
            failed.append((j, len(v), r))
    return failed, c.stats()


def nearly_empty(port):
    """A cache client over a key space that fits the memory easily: each key has its own size
    (32 B..16 KB); a get that misses is followed by a set, then some keys are pipelined (24 sets,
    then 24 gets of them). Returns the keys lost right after their pipelined set, the live
    bytes and the stats."""
    c = conn(port)
    rng = random.Random(7)
    keys = 4000  # ~33 MB in all, half a shard's -m per shard
    size = [rng.randrange(32, 16 << 10) for _ in range(keys)]
    lost = []
    for rnd in range(400):
        # 24 gets, each miss then set (a cache client's read path), pipelined by round.
        ks = [rng.randrange(keys) for _ in range(24)]
        c.send(b"".join(b"get key%d\r\n" % k for k in ks))
        missed = [k for k in ks if c.get_reply() is None]
        if missed:
            c.send(b"".join(set_cmd(b"key%d" % k, value_of(b"key%d" % k, 0, size[k])) for k in missed))
            for _ in missed:
                assert c.line() == b"STORED"
        # 24 pipelined sets, then the 24 keys read back.
        first = rng.randrange(keys)
        batch = [(b"key%d" % ((first + j) % keys), size[(first + j) % keys]) for j in range(24)]
        c.send(b"".join(set_cmd(key, value_of(key, 0, n)) for key, n in batch) +
               b"".join(b"get %s\r\n" % key for key, _ in batch))
        for _ in batch:
            assert c.line() == b"STORED"
        for key, n in batch:
            got = c.get_reply()
            if got != value_of(key, 0, n):
                lost.append((rnd, key, None if got is None else len(got)))
    st = c.stats()
    return lost, int(st["bytes"]), st


def main():
    shoal = sys.argv[1]
    memcached = shutil.which("memcached") or ("/usr/bin/memcached" if os.path.exists("/usr/bin/memcached") else None)
    root = ["-u", "root"] if os.geteuid() == 0 else []
    failures = 0

    def check(ok, what):
        nonlocal failures
        print(("ok: " if ok else "FAIL: ") + what)
        failures += 0 if ok else 1

    # 1. Three sets on two pages.
    p, port = start(lambda port: [shoal, "-l", "127.0.0.1", "-p", str(port), "--smp", "1", "-m", "3"], "shoal-kv")
    try:
        replies, a = three_sets(port)
    finally:
        stop(p)
    check(replies == [b"STORED"] * 3 and a == b"y" * 2000, f"shoal-kv --smp 1 -m 3: {replies}, a is {len(a or b'')} bytes")
    if memcached:
        p, port = start(lambda port: [memcached, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1", "-m", "2"] + root,
                        "memcached")
        try:
            replies, a = three_sets(port)
        finally:
            stop(p)
        print(f"memcached -m 2: {replies}")

    # 2. Small sets on a cache filled with mixed sizes.
    p, port = start(lambda port: [shoal, "-l", "127.0.0.1", "-p", str(port), "--smp", "2", "-m", "64", "-I", "2m"],
                    "shoal-kv")
    try:
        failed, st = fill_then_small_sets(port)
    finally:
        stop(p)
    check(not failed and int(st["evictions"]) > 0,
          f"shoal-kv -m 64 -I 2m --smp 2, full ({st['evictions']} evictions, {st['slabs_moved']} pages moved): "
          f"{len(failed)} of 500 small sets failed {failed[:5]}")

    # 3. A nearly empty cache.
    results = {}
    servers = [("shoal-kv", lambda port: [shoal, "-l", "127.0.0.1", "-p", str(port), "--smp", "2", "-m", "64"])]
    if memcached:
        servers.append(("memcached", lambda port: [memcached, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "2",
                                                   "-m", "64"] + root))
    for name, args in servers:
        p, port = start(args, name)
        try:
            results[name] = nearly_empty(port)
        finally:
            stop(p)
        lost, live, st = results[name]
        print(f"{name} -m 64, {live} bytes live: {len(lost)} keys missing after their pipelined set, "
              f"{st['evictions']} evictions, {st.get('slabs_moved')} pages moved, "
              f"hits {st['get_hits']} misses {st['get_misses']}")
    lost, live, st = results["shoal-kv"]
    check(not lost and st["evictions"] == "0",
          f"shoal-kv, {live} bytes live of 64 MB: no key lost ({lost[:5]}), no eviction ({st['evictions']})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
