#!/usr/bin/env python3
"""Clients that reset or half-close at every point of a request leak nothing in shoal-kv.

Thousands of connections break off mid-header, mid-value, after a whole request before
reading its reply, and during a large multi-get reply, each either with a reset (SO_LINGER 0)
or with a half-close (shutdown(SHUT_WR)) followed by a close, while a correct client stores
and reads values and checks every byte of every reply. Afterwards the server must be back at
its baseline: `curr_connections` from `stats`, the open descriptors in /proc/PID/fd, and the
io_uring requests in flight (`shoal_io_uring_in_flight` on the Prometheus endpoint, summed
over the shards). Each is polled with a generous deadline; nothing asserts a time.

usage: connection_abuse_test.py SHOAL_KV_BINARY [ROUNDS]
"""
import os, random, socket, struct, subprocess, sys, threading, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv_process  # noqa: E402

DEADLINE = 60.0  # seconds to wait for the baseline (the server is back in milliseconds)


def free_port():
    return kv_process.free_port()  # below the ephemeral range: no concurrent client takes it


def recv_until(sock, end, limit=1 << 24):
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise EOFError("closed after %d bytes: %r" % (len(data), data[-80:]))
        data += chunk
        if len(data) > limit:
            raise ValueError("reply too long")
    return data


class server:
    def __init__(self, binary):
        self.port, self.mport = free_port(), free_port()
        self.proc = subprocess.Popen(
            [binary, "-p", str(self.port), "-l", "127.0.0.1", "--smp", "2", "-c", "4096",
             "--prometheus-port", str(self.mport), "--prometheus-address", "127.0.0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        line = self.proc.stdout.readline().decode()
        if "listening" not in line:
            while "listening" not in line:
                if self.proc.poll() is not None:
                    raise RuntimeError("shoal-kv did not start: " + line)
                line = self.proc.stdout.readline().decode()
        # Drain the rest of the output so the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def curr_connections(self):
        # This connection counts itself: the value reported minus one.
        with self.connect() as s:
            s.sendall(b"stats\r\n")
            for line in recv_until(s, b"END\r\n").split(b"\r\n"):
                if line.startswith(b"STAT curr_connections "):
                    return int(line.split()[2]) - 1
        raise RuntimeError("no curr_connections in stats")

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def in_flight(self):
        url = "http://127.0.0.1:%d/metrics" % self.mport
        text = urllib.request.urlopen(url, timeout=30).read().decode()
        total = 0
        for line in text.splitlines():
            if line.startswith("shoal_io_uring_in_flight"):
                total += int(float(line.split()[-1]))
        return total

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def reset(sock):
    """Closes with a reset: SO_LINGER 0 drops unsent bytes and sends RST."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def half_close(sock):
    """Ends the request stream (FIN), reads a little of what comes back, then closes."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(0.05)
        try:
            sock.recv(100)
        except (socket.timeout, OSError):
            pass
    finally:
        sock.close()


BIG_VALUE = 60000
BIG_KEYS = [b"big%d" % i for i in range(40)]


def value_of(key, n):
    seed = sum(key) * 131 + n
    return bytes((seed + i * 7) % 251 for i in range(n))


def prefixes():
    """Requests cut short at points across header and value; a full request; a big multi-get."""
    header = b"set x%d 0 0 100\r\n"
    return [
        lambda i: (header % i)[:5],                         # mid-header
        lambda i: header % i,                               # header, no value
        lambda i: (header % i) + b"abc",                    # mid-value
        lambda i: (header % i) + b"v" * 100 + b"\r\nget x%d\r\n" % i,  # whole: reply unread
        lambda i: b"get " + b" ".join(BIG_KEYS) + b"\r\n",  # large multi-get reply unread
        lambda i: b"get " + b" ".join(BIG_KEYS) + b"\r\n" * 3,  # several large replies
        lambda i: b"set y%d 0 0 1000000\r\n" % i + b"z" * 5000,  # mid-value, large value
    ]


def abuser(srv, rounds, seed, errors):
    rng = random.Random(seed)
    cuts = prefixes()
    try:
        for i in range(rounds):
            s = srv.connect()
            try:
                s.sendall(cuts[i % len(cuts)](i))
                if rng.random() < 0.3:
                    time.sleep(0.0005)  # let the server start on it (read, reply in flight)
            except OSError:
                pass
            if (i // len(cuts)) % 2 == 0:
                reset(s)
            else:
                half_close(s)
    except Exception as e:  # pragma: no cover - reported by the main thread
        errors.append("abuser: %r" % e)


def correct_client(srv, stop, errors, checked):
    rng = random.Random(7)
    try:
        with srv.connect() as s:
            n = 0
            while not stop.is_set() or n < 50:
                key = b"good%d" % rng.randrange(200)
                size = rng.choice([0, 1, 100, 5000, 70000])
                value = value_of(key, size)
                s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, size, value))
                if recv_until(s, b"\r\n") != b"STORED\r\n":
                    errors.append("set %r not stored" % key)
                    return
                s.sendall(b"get %s\r\n" % key)
                want = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, size, value)
                got = recv_until(s, b"END\r\n")
                while len(got) < len(want):
                    got += recv_until(s, b"END\r\n")
                if got != want:
                    errors.append("get %r: %d bytes, want %d" % (key, len(got), len(want)))
                    return
                n += 1
            checked.append(n)
    except Exception as e:
        errors.append("correct client: %r" % e)


def steady(read):
    """A value read three times in a row 0.2 s apart (connections of the warm-up are still
    closing for a moment): bounded, and the baseline is only a starting point to come back to."""
    values = [read()]
    deadline = time.monotonic() + DEADLINE
    while (len(values) < 3 or len(set(values[-3:])) > 1) and time.monotonic() < deadline:
        time.sleep(0.2)
        values.append(read())
    return values[-1]


def wait_for(what, read, want):
    deadline = time.monotonic() + DEADLINE
    value = read()
    while value != want and time.monotonic() < deadline:
        time.sleep(0.1)
        value = read()
    if value != want:
        raise AssertionError("%s is %d after the abuse, %d before" % (what, value, want))
    print("%s back at %d" % (what, want))


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1400
    srv = server(binary)
    try:
        with srv.connect() as s:
            for k in BIG_KEYS:
                s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (k, BIG_VALUE, value_of(k, BIG_VALUE)))
                assert recv_until(s, b"\r\n") == b"STORED\r\n"
        for _ in range(16):  # every shard has set up its receive ring before the baseline
            with srv.connect() as s:
                s.sendall(b"version\r\n")
                recv_until(s, b"\r\n")
        base = (steady(srv.curr_connections), steady(srv.fds), steady(srv.in_flight))
        print("baseline: connections %d, fds %d, io_uring in flight %d" % base)
        errors, checked = [], []
        stop = threading.Event()
        good = threading.Thread(target=correct_client, args=(srv, stop, errors, checked))
        good.start()
        abusers = [threading.Thread(target=abuser, args=(srv, rounds, seed, errors)) for seed in range(4)]
        for t in abusers:
            t.start()
        for t in abusers:
            t.join()
        stop.set()
        good.join()
        assert not errors, errors
        print("%d abusive connections, %d checked set+get rounds" % (4 * rounds, checked[0]))
        wait_for("curr_connections", srv.curr_connections, base[0])
        wait_for("open fds", srv.fds, base[1])
        wait_for("io_uring requests in flight", srv.in_flight, base[2])
    finally:
        srv.stop()
    print("PASS")


if __name__ == "__main__":
    main()
