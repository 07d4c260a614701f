"""What the black-box KV scripts share: a server process on a free loopback port, a blocking
text-protocol client, polling for a condition, and the server's resident memory and descriptors."""
import os
import random
import socket
import subprocess
import tempfile
import time


def free_port():
    """A TCP port on 127.0.0.1 that nothing uses now, below the kernel's ephemeral range (32768
    and up by default) so that no client socket of a concurrent test takes it meanwhile."""
    while True:
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


def rss_kb(pid):
    """The process's resident memory in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def fd_count(pid):
    """The process's open descriptors."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_for(what, check, seconds=120):
    """Polls `check` until it is true; AssertionError naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class client:
    """A blocking text-protocol connection."""

    def __init__(self, port, timeout=120):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.rx = b""

    def until(self, suffix):
        """Reads until what came ends with `suffix`; returns it."""
        while not self.rx.endswith(suffix):
            data = self.sock.recv(1 << 20)
            if not data:
                raise RuntimeError(f"connection closed; got {self.rx[:200]!r}")
            self.rx += data
        out, self.rx = self.rx, b""
        return out

    def call(self, req, suffix=b"\r\n"):
        """Sends `req` and reads its reply up to `suffix`."""
        self.sock.sendall(req)
        return self.until(suffix)

    def stats(self):
        """`stats` as a dict of strings."""
        out = {}
        for line in self.call(b"stats\r\n", b"END\r\n").split(b"\r\n"):
            parts = line.split(b" ")
            if len(parts) == 3 and parts[0] == b"STAT":
                out[parts[1].decode()] = parts[2].decode()
        return out


class server:
    """`binary -l 127.0.0.1 -p PORT ARGS...` on a free port, its output kept for a failure's
    report; `first` is a connected client once it listens. Use as a context manager."""

    def __init__(self, binary, args):
        self.log = tempfile.TemporaryFile()
        # Another process may take the port between its choice and the server's bind: a server
        # that exits before listening is started again on another port.
        for attempt in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen([binary, "-l", "127.0.0.1", "-p", str(self.port)] + args, stdout=self.log,
                                         stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60
            while True:
                try:
                    self.first = client(self.port)
                    return
                except OSError:
                    if self.proc.poll() is not None and attempt < 4:
                        break
                    if time.monotonic() > deadline or self.proc.poll() is not None:
                        self.stop()
                        raise
                    time.sleep(0.1)

    @property
    def pid(self):
        return self.proc.pid

    def output(self):
        """The last 4,000 characters the server printed."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
