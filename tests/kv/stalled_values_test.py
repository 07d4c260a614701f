#!/usr/bin/env python3
"""Senders that announce large values and stall cost shoal-kv no memory beyond -m.

200 connections each announce a 1 MB set, send 999,000 bytes of it and stall. The values land
in store memory as they arrive (at most half of each shard's store; the rest are refused at once
with memcached's out-of-memory error), so the server's RSS stays within -m plus its fixed costs,
while another client keeps storing and reading values byte for byte. When the stalled senders
go, every reserved byte and every connection is given back. With `-o idle_timeout=2`, a stalled
sender is closed and its reservation returns by itself.

usage: stalled_values_test.py SHOAL_KV_BINARY
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

MEMORY_MB = 64
STALLED = 200
VALUE = 1_000_000
SENT = 999_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.rx = b""

    def until(self, suffix):
        while not self.rx.endswith(suffix):
            data = self.sock.recv(1 << 20)
            if not data:
                raise RuntimeError(f"connection closed; got {self.rx[:200]!r}")
            self.rx += data
        out, self.rx = self.rx, b""
        return out

    def call(self, req, suffix=b"\r\n"):
        self.sock.sendall(req)
        return self.until(suffix)

    def stats(self):
        out = {}
        for line in self.call(b"stats\r\n", b"END\r\n").split(b"\r\n"):
            parts = line.split(b" ")
            if len(parts) == 3 and parts[0] == b"STAT":
                out[parts[1].decode()] = parts[2].decode()
        return out


def wait_for(what, check, seconds=120):
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def idle_timeout_frees_a_stalled_sender(binary):
    """memcached's `-o idle_timeout=N`: a sender stalled mid-value is closed and its memory
    returns; a connection that keeps talking is not."""
    port = free_port()
    server = subprocess.Popen([binary, "-l", "127.0.0.1", "-p", str(port), "--smp", "2", "-m", "16",
                               "-o", "idle_timeout=2"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    failures = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                c = client(port)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        stalled = socket.create_connection(("127.0.0.1", port), timeout=120)
        stalled.sendall(b"set idle 0 0 100000\r\n" + b"i" * 50000)
        wait_for("the stalled sender to be closed", lambda: c.stats()["idle_kicks"] == "1")
        try:
            if stalled.recv(100) != b"":
                failures.append("the stalled sender got bytes instead of a close")
        except ConnectionResetError:
            pass  # a reset is a close too
        wait_for("its reservation to return", lambda: c.stats()["incomplete_value_bytes"] == "0")
        if c.call(b"get idle\r\n", b"END\r\n") != b"END\r\n":
            failures.append("half a value was stored")
    except (ConnectionResetError, AssertionError) as e:
        failures.append(f"idle timeout: {e}")
    finally:
        server.kill()
        server.wait()
    return failures


def main():
    binary = sys.argv[1]
    port = free_port()
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([binary, "-l", "127.0.0.1", "-p", str(port), "--smp", "2", "-m", str(MEMORY_MB),
                               "-c", "1024"], stdout=log, stderr=subprocess.STDOUT)
    failures = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                c = client(port)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        for i in range(20):
            assert c.call(b"set warm%d 0 0 5\r\nhello\r\n" % i) == b"STORED\r\n"
        before = rss_kb(server.pid)

        stalled = []
        for i in range(STALLED):
            s = socket.create_connection(("127.0.0.1", port), timeout=120)
            s.sendall(b"set stalled%d 0 0 %d\r\n" % (i, VALUE) + b"s" * SENT)
            stalled.append(s)

        def settled():
            st = c.stats()
            return int(st["store_no_memory"]) + int(st["incomplete_value_bytes"]) // VALUE == STALLED

        wait_for("every stalled set to land or be refused", settled)
        st = c.stats()
        landing = int(st["incomplete_value_bytes"])
        if landing > MEMORY_MB * 1024 * 1024 // 2:
            failures.append(f"{landing} bytes of values in flight, over half of -m")
        grew_mb = (rss_kb(server.pid) - before) / 1024
        print(f"RSS grew {grew_mb:.1f} MB with {STALLED} stalled 1 MB senders "
              f"({landing // VALUE} landing, {st['store_no_memory']} refused) at -m {MEMORY_MB}")
        if grew_mb > MEMORY_MB + 16:
            failures.append(f"RSS grew {grew_mb:.1f} MB, more than -m {MEMORY_MB} plus 16 MB")

        # Another client is served meanwhile, byte for byte.
        for i in range(100):
            value = bytes([97 + i % 26]) * (100 if i % 2 else 100_000)
            if c.call(b"set other%d 0 0 %d\r\n" % (i, len(value)) + value + b"\r\n") != b"STORED\r\n":
                failures.append(f"set other{i} failed while senders stalled")
                continue
            got = c.call(b"get other%d\r\n" % i, b"END\r\n")
            if got != b"VALUE other%d 0 %d\r\n" % (i, len(value)) + value + b"\r\nEND\r\n":
                failures.append(f"other{i} read back wrong")

        for s in stalled:
            s.close()
        wait_for("reserved bytes to return", lambda: c.stats()["incomplete_value_bytes"] == "0")
        wait_for("the stalled connections to go", lambda: c.stats()["curr_connections"] == "1")
        if server.poll() is not None:
            failures.append("shoal-kv exited")
        failures += idle_timeout_frees_a_stalled_sender(binary)
    finally:
        server.kill()
        server.wait()
        if failures:
            log.seek(0)
            sys.stdout.write(log.read().decode(errors="replace")[-4000:])
    for f in failures:
        print("FAIL:", f)
    print("1 passed, 0 failed" if not failures else "0 passed, 1 failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
