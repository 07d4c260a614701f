#!/usr/bin/env python3
"""shoal-kv under a low open-files limit, against the real binary on loopback.

1. Started with a soft RLIMIT_NOFILE below what -c needs (the hard limit above it), shoal-kv
   raises the limit at start; more connections than -c get memcached's
   "ERROR Too many open connections" and the end of the stream, the others are served; once
   they close, curr_connections and the server's descriptor count return to their baseline and
   fresh connections work on every shard (--smp 2): set/get round trips.
2. 1,030 connections to the Prometheus port (loopback by default, its own small connection
   limit) stop neither the KV service meanwhile nor later scrapes; no descriptor is left behind.
3. A hard limit too low for -c: shoal-kv exits non-zero at start with memcached's message.

usage: fd_exhaustion_test.py SHOAL_KV_BINARY
"""
import os, re, resource, socket, subprocess, sys, time

MESSAGE = b"ERROR Too many open connections\r\n"
DEADLINE = 60  # seconds for anything the server does on its own (busy machines)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def limit_nofile(soft, hard):
    def pre():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return pre


def start(binary, soft, hard, args):
    p = subprocess.Popen([binary, "-p", "0", "-l", "127.0.0.1", "--smp", "2", "--prometheus-port", "0"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=limit_nofile(soft, hard))
    kv = metrics = None
    end = time.time() + DEADLINE
    lines = []
    while time.time() < end and (kv is None or metrics is None):
        line = p.stdout.readline().decode(errors="replace")
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            kv = int(m.group(1))
        m = re.search(r"Prometheus metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
        if m:
            metrics = int(m.group(1))
    if kv is None or metrics is None:
        p.kill()
        fail("shoal-kv did not start: " + "".join(lines))
    return p, kv, metrics


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    return s


def read_until(s, ends):
    data = b""
    while not any(data.endswith(e) for e in ends):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def stats(port):
    s = connect(port)
    s.sendall(b"stats\r\n")
    text = read_until(s, [b"END\r\n"]).decode()
    s.close()
    return {k: v for k, v in re.findall(r"STAT (\S+) (\S+)", text)}


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def wait_for(what, cond):
    end = time.time() + DEADLINE
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    fail(what)


def round_trips(port, n, tag):
    """n fresh connections (spread by the kernel over the shards), each a set and a get."""
    for i in range(n):
        s = connect(port)
        key, value = ("%s-%d" % (tag, i)).encode(), os.urandom(8).hex().encode()
        s.sendall(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (key, len(value), value, key))
        got = read_until(s, [b"END\r\n"])
        want = b"STORED\r\nVALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(value), value)
        if got != want:
            fail("round trip on a fresh connection: %r, want %r" % (got, want))
        s.close()


def scrape(port):
    s = connect(port)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def baseline(p, kv):
    """curr_connections (without the asking connection) and the server's descriptors."""
    return int(stats(kv)["curr_connections"]) - 1, fd_count(p.pid)


def check_baseline(p, kv, base, what):
    conns, fds = base
    # At most the baseline: it may have counted a connection that was still closing.
    wait_for("%s: curr_connections back to %d (is %s)" % (what, conns, stats(kv)["curr_connections"]),
             lambda: int(stats(kv)["curr_connections"]) - 1 <= conns)
    wait_for("%s: the server's descriptors back to %d (are %d)" % (what, fds, fd_count(p.pid)),
             lambda: fd_count(p.pid) <= fds)


def over_the_limit(binary):
    max_conns, extra = 100, 60
    # The soft limit would not even hold -c: shoal-kv must raise it (the hard limit allows it).
    p, kv, metrics = start(binary, 64, 1024, ["-c", str(max_conns), "--prometheus-max-connections", "8"])
    try:
        round_trips(kv, 20, "warm")  # each shard's TCP stack is set up (its buffer ring)
        base = baseline(p, kv)
        rejected0 = int(stats(kv)["rejected_connections"])
        clients = [connect(kv) for _ in range(max_conns + extra)]
        # Every client is either refused (the message, then the end of the stream) or served
        # (it answers version). The -c count may still hold the stats connection closed just
        # before: one more refusal is allowed.
        for s in clients:
            s.sendall(b"version\r\n")
        refused = served = 0
        for s in clients:
            line = read_until(s, [b"\r\n"])
            if line.startswith(b"VERSION "):
                served += 1
                continue
            if line != MESSAGE:
                fail("a client read %r" % line)
            try:
                rest = s.recv(100)
            except ConnectionResetError:
                rest = b""
            if rest != b"":
                fail("a refused client read %r after the refusal" % rest)
            refused += 1
        if served not in (max_conns - 1, max_conns) or refused != len(clients) - served:
            fail("%d refused and %d served, want %d and %d" % (refused, served, extra, max_conns))
        for s in clients:
            s.close()
        check_baseline(p, kv, base, "after -c was exceeded")
        if int(stats(kv)["rejected_connections"]) - rejected0 < refused:
            fail("rejected_connections did not count the refusals")
        round_trips(kv, 20, "after")
        print("ok: %d refused with memcached's message, %d served; fresh connections work on both shards"
              % (refused, served))

        # The Prometheus port: a flood far past its limit (and past what the KV port could
        # spare) while the KV port keeps working.
        flood_n = 1030
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < flood_n + 100:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, flood_n + 200), hard))
        flood_n = min(flood_n, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 100)
        flood = []
        for _ in range(flood_n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", metrics))
            flood.append(s)
        round_trips(kv, 20, "flood")
        for s in flood:
            s.close()
        wait_for("a scrape after the flood", lambda: scrape(metrics).startswith(b"HTTP/1.1 200 "))
        check_baseline(p, kv, base, "after the Prometheus flood")
        round_trips(kv, 20, "after-flood")
        print("ok: %d connections to the Prometheus port; KV and later scrapes kept working" % flood_n)
    finally:
        p.terminate()
        try:
            p.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p.returncode != 0:
        fail("shoal-kv exited with %d" % p.returncode)


def hard_limit_too_low(binary):
    p = subprocess.run([binary, "-p", "0", "-l", "127.0.0.1", "--smp", "2", "-c", "1024"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=DEADLINE,
                       preexec_fn=limit_nofile(100, 100))
    err = p.stderr.decode(errors="replace")
    if p.returncode == 0 or "failed to set rlimit for open files" not in err or "maxconns" not in err:
        fail("with a hard limit of 100 and -c 1024: status %d, stderr %r" % (p.returncode, err))
    print("ok: hard limit too low: status %d: %s" % (p.returncode, err.strip()))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    binary = sys.argv[1]
    hard_limit_too_low(binary)
    over_the_limit(binary)


if __name__ == "__main__":
    main()
