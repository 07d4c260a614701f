#!/usr/bin/env python3
"""memcached text and meta protocol conformance: a table of request -> exact reply.

Each row is sent on a fresh connection after `flush_all`; the reply must equal the table's
byte for byte (CAS uniques, which depend on the server's history, are normalized). The table
was recorded from memcached 1.6.18; when a memcached binary is installed the same table is
replayed against it in the same run, so the expectations are checked, not assumed.

usage: conformance.py SHOAL_KV_BINARY [MEMCACHED_BINARY]
"""
import os, re, shutil, socket, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv_process  # noqa: E402

CASES = [
    # An HTTP request line closes the connection (nothing after it is answered); so does
    # nothing else that merely looks like one.
    (b"get k\r\nGET / HTTP/1.0\r\nversion\r\n",
     b'END\r\n'),
    (b"FOO bar HTTP/1.1\r\nversion\r\n",
     b''),
    (b"GET /x\r\nx HTTP/1.0\r\nget / HTTP/1.1\r\n",
     b'ERROR\r\nERROR\r\nEND\r\n'),
    # An opaque token is at most 32 bytes with its flag.
    (b"mg k O" + b"x" * 32 + b" v\r\nmg k O" + b"x" * 31 + b" v\r\nmd k O" + b"x" * 32 + b"\r\n",
     b'CLIENT_ERROR opaque token too long\r\nEN O' + b"x" * 31 + b'\r\nCLIENT_ERROR opaque token too long\r\n'),
    # Meta flag errors, each command with memcached's text (md and ma have one for all but
    # the opaque's; errors show in quiet mode too).
    (b"mg k Z\r\nmg k v v\r\nmg k q v v\r\nmg k Tx\r\nmg k Cx\r\nmg k b\r\nmg k \x01\r\nmn\r\n",
     b'CLIENT_ERROR invalid flag\r\nCLIENT_ERROR duplicate flag\r\nCLIENT_ERROR duplicate flag\r\n'
     b'CLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\n'
     b'CLIENT_ERROR error decoding key\r\nCLIENT_ERROR invalid flag\r\nMN\r\n'),
    (b"md k Z\r\nmd k Cx\r\nmd k q q\r\nma k Z\r\nma k Nx\r\nma k MIX\r\nma k MX\r\nma k O" + b"x" * 32 +
     b"\r\nmn\r\n",
     b'CLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\n'
     b'CLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\n'
     b'CLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\n'
     b'CLIENT_ERROR invalid mode for ma M token\r\nCLIENT_ERROR opaque token too long\r\nMN\r\n'),
    (b"ms k 1 Z\r\na\r\nms k 1 MX\r\na\r\nms k 1 MSS\r\na\r\nms k 1 Fx\r\na\r\nms k 1 Cx\r\na\r\n"
     b"ms k 1 O" + b"x" * 32 + b"\r\na\r\nms k x\r\nmn\r\n",
     b'CLIENT_ERROR invalid flag\r\nCLIENT_ERROR invalid mode for ms M token\r\n'
     b'CLIENT_ERROR incorrect length for M token\r\nCLIENT_ERROR bad command line format\r\n'
     b'CLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR opaque token too long\r\n'
     b'CLIENT_ERROR bad command line format\r\nMN\r\n'),
    # The largest item: 56 + key + 1 + value + 2 bytes fit in -I (1 MB).
    (b"set k 0 0 1048516\r\n" + b"a" * 1048516 + b"\r\nset kk 0 0 1048516\r\n" + b"a" * 1048516 +
     b"\r\nmg k s\r\n",
     b'STORED\r\nSERVER_ERROR object too large for cache\r\nHD s1048516\r\n'),
    (b"set a 5 0 2\r\n10\r\nget a\r\n",
     b'STORED\r\nVALUE a 5 2\r\n10\r\nEND\r\n'),
    (b"set a 5 0 2\r\n10\r\ndecr a 1\r\n",
     b'STORED\r\n9\r\n'),
    (b"get a\r\n",
     b'END\r\n'),
    (b"incr a 18446744073709551615\r\n",
     b'NOT_FOUND\r\n'),
    (b"set e 0 0 0\r\n\r\nincr e 1\r\n",
     b'STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n'),
    (b"set n 0 0 3\r\n-12\r\nincr n 1\r\n",
     b'STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n'),
    (b"set n 0 0 3\r\n 12\r\nincr n 1\r\n",
     b'STORED\r\n13\r\n'),
    (b"set n 0 0 3\r\n12a\r\nincr n 1\r\n",
     b'STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n'),
    (b"set n 0 0 25\r\n1234567890123456789012345\r\nincr n 1\r\n",
     b'STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n'),
    (b"set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\nget n\r\n",
     b'STORED\r\n1\r\nVALUE n 0 20\r\n1                   \r\nEND\r\n'),
    (b"incr n abc\r\nincr n -1\r\nincr\r\nincr n\r\nincr n 1 2 3\r\ndecr nope 1\r\n",
     b'CLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid numeric delta argument\r\nERROR\r\nERROR\r\nERROR\r\nNOT_FOUND\r\n'),
    (b"\r\n",
     b'ERROR\r\n'),
    (b"foo\r\n",
     b'ERROR\r\n'),
    (b"set x 0 0 2\r\nabcd\r\n",
     b'CLIENT_ERROR bad data chunk\r\nERROR\r\n'),
    (b"set x 0 0 -1\r\n",
     b'CLIENT_ERROR bad command line format\r\n'),
    (b"set x 0 0 abc\r\nab\r\n",
     b'CLIENT_ERROR bad command line format\r\nERROR\r\n'),
    (b"set x 0 0\r\n",
     b'ERROR\r\n'),
    (b"set x 0 0 2 noreply\r\nab\r\nget x\r\n",
     b'VALUE x 0 2\r\nab\r\nEND\r\n'),
    (b"set x 0 -1 2\r\nab\r\nget x\r\n",
     b'STORED\r\nEND\r\n'),
    (b"delete x 0\r\ndelete x 1\r\ndelete x noreply\r\ndelete x 0 noreply\r\ndelete\r\n",
     b'NOT_FOUND\r\nCLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\nERROR\r\n'),
    (b"set x 0 0 1\r\na\r\ndelete x\r\ndelete x\r\n",
     b'STORED\r\nDELETED\r\nNOT_FOUND\r\n'),
    (b"touch x 10\r\ntouch x abc\r\ngat 10 x\r\ngat abc x\r\ngat\r\ngats 1\r\n",
     b'NOT_FOUND\r\nCLIENT_ERROR invalid exptime argument\r\nEND\r\nCLIENT_ERROR invalid exptime argument\r\nERROR\r\nEND\r\n'),
    (b"set x 3 0 1\r\na\r\ntouch x 10\r\ngat 100 x\r\n",
     b'STORED\r\nTOUCHED\r\nVALUE x 3 1\r\na\r\nEND\r\n'),
    (b"flush_all\r\nflush_all 0\r\nflush_all abc\r\nflush_all noreply\r\nversion\r\nverbosity\r\nverbosity 1\r\nverbosity 1 noreply\r\n",
     b'OK\r\nOK\r\nCLIENT_ERROR invalid exptime argument\r\nVERSION 1.6.18\r\nERROR\r\nOK\r\n'),
    (b"get\r\n",
     b'ERROR\r\n'),
    (b"get " + b"k"*251 + b"\r\n",
     b'CLIENT_ERROR bad command line format\r\n'),
    (b"get a " + b"k"*251 + b" b\r\n",
     b'CLIENT_ERROR bad command line format\r\n'),
    (b"set " + b"k"*251 + b" 0 0 1\r\na\r\n",
     b'CLIENT_ERROR bad command line format\r\nERROR\r\n'),
    (b"set " + b"k"*250 + b" 0 0 1\r\na\r\nget " + b"k"*250 + b"\r\n",
     b'STORED\r\nVALUE kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk 0 1\r\na\r\nEND\r\n'),
    (b"cas x 0 0 1\r\na\r\ncas x 0 0 1 abc\r\na\r\ncas x 0 0 1 1\r\na\r\n",
     b'ERROR\r\nERROR\r\nCLIENT_ERROR bad command line format\r\nERROR\r\nNOT_FOUND\r\n'),
    (b"append nox 0 0 1\r\na\r\nset x 0 0 1\r\na\r\nprepend x 0 0 1\r\nb\r\nappend x 5 0 1\r\nc\r\nget x\r\nadd x 0 0 1\r\nz\r\nreplace y 0 0 1\r\nz\r\nadd y 0 0 1\r\ny\r\nreplace y 1 0 2\r\nyy\r\nget y\r\n",
     b'NOT_STORED\r\nSTORED\r\nSTORED\r\nSTORED\r\nVALUE x 0 3\r\nbac\r\nEND\r\nNOT_STORED\r\nNOT_STORED\r\nSTORED\r\nSTORED\r\nVALUE y 1 2\r\nyy\r\nEND\r\n'),
    (b"set f 4294967295 0 1\r\na\r\nget f\r\nset f 4294967296 0 1\r\na\r\nget f\r\nset f -1 0 1\r\na\r\n",
     b'STORED\r\nVALUE f 4294967295 1\r\na\r\nEND\r\nSTORED\r\nVALUE f 0 1\r\na\r\nEND\r\nCLIENT_ERROR bad command line format\r\nERROR\r\n'),
    (b"quit\r\nget x\r\n",
     b''),
    (b"set x 0 0 3\r\nbac\r\nmn\r\nmg x v\r\nmg x s v f t k\r\nmg nope v\r\nmg nope v q\r\nmn\r\n",
     b'STORED\r\nMN\r\nVA 3\r\nbac\r\nVA 3 s3 f0 t-1 kx\r\nbac\r\nEN\r\nMN\r\n'),
    (b"ms m 2\r\nhi\r\nms m 2 T10 F5\r\nhi\r\nmg m v t f\r\nmd m\r\nmd m q\r\nmd m\r\nmn\r\n",
     b'HD\r\nHD\r\nVA 2 t10 f5\r\nhi\r\nHD\r\nNF\r\nNF\r\nMN\r\n'),
    (b"ma c\r\nma c N0 J13\r\nma c v\r\nma c MD D5 v\r\nma c O123 k v t\r\nmd c\r\n",
     b'NF\r\nHD\r\nVA 2\r\n14\r\nVA 1\r\n9\r\nVA 2 O123 kc t-1\r\n10\r\nHD\r\n'),
    (b"\x00\x01\x02garbage\xff\r\n",
     b'ERROR\r\n'),
    (b"stats nope\r\nstats detail\r\n",
     b'ERROR\r\nCLIENT_ERROR usage: stats detail on|off|dump\r\n'),
    (b"set a 5 0 1\r\n8\r\nset c 0 0 2\r\n10\r\nget a b c\r\n",
     b'STORED\r\nSTORED\r\nVALUE a 5 1\r\n8\r\nVALUE c 0 2\r\n10\r\nEND\r\n'),
    (b"set t 0 0 1\r\na\r\nmg t v h l t\r\nmg t h l\r\nmg t k O99 q\r\nmg t\r\nmg nope\r\nmg nope q\r\nmg nope k O5\r\nmn\r\n",
     b'STORED\r\nVA 1 h0 l0 t-1\r\na\r\nHD h1 l0\r\nHD kt O99\r\nHD\r\nEN\r\nEN knope O5\r\nMN\r\n'),
    (b"mg\r\nms t\r\nms t abc\r\nms t 1 S1\r\nx\r\nset t 0 0 1\r\na\r\nms t 1 MA\r\ny\r\nmg t v\r\nms t 2 MX\r\nzz\r\nms nope 1 MR\r\nz\r\nms t 1 C1\r\nz\r\nms t 1 q\r\nz\r\nmn\r\n",
     b'ERROR\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR invalid flag\r\nSTORED\r\nHD\r\nVA 2\r\nay\r\nCLIENT_ERROR invalid mode for ms M token\r\nNS\r\nEX\r\nMN\r\n'),
    (b"set t 0 0 1\r\nz\r\nmg t s v T30 t\r\nmg t E55\r\nmd t C1\r\nmd t k O1\r\nma t\r\nma x1 N0 J5 v\r\nma x1 MI D3 v\r\nma x1 Mz\r\nma x1 Dabc\r\n",
     b'STORED\r\nVA 1 s1 t30\r\nz\r\nCLIENT_ERROR invalid flag\r\nEX\r\nHD kt O1\r\nNF\r\nVA 1\r\n5\r\nVA 1\r\n8\r\nCLIENT_ERROR invalid mode for ma M token\r\nCLIENT_ERROR invalid or duplicate flag\r\n'),
    (b"set v 0 0 3\r\nabc\r\nma v\r\n",
     b'STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n'),
    (b"mg " + b"k"*251 + b" v\r\n",
     b'CLIENT_ERROR bad command line format\r\n'),
    (b"md zz q\r\nmn\r\n",
     b'NF\r\nMN\r\n'),
    (b"set zz 0 0 1\r\na\r\nmd zz q\r\nmn\r\n",
     b'STORED\r\nMN\r\n'),
    (b"set zz 0 0 1\r\na\r\nmd zz q C1\r\nmn\r\n",
     b'STORED\r\nEX\r\nMN\r\n'),
    (b"set zz 0 0 1\r\na\r\nms zz 1 q MR\r\na\r\nms nope 1 q MR\r\na\r\nmn\r\n",
     b'STORED\r\nNS\r\nMN\r\n'),
    (b"ms nope 1 q C5\r\na\r\nmn\r\n",
     b'NF\r\nMN\r\n'),
    (b"set zz 0 0 1\r\na\r\nma nope q\r\nmn\r\nma zz q\r\nmn\r\n",
     b'STORED\r\nNF\r\nMN\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nMN\r\n'),
    (b"set k abc 0 1 noreply\r\na\r\n",
     b'ERROR\r\n'),
    (b"set k 0 0 2000000 noreply\r\n" + b"a"*2000000 + b"\r\n",
     b''),
    (b"set x 0 0 1\r\na\r\nset x 0 0 2000000\r\n" + b"a"*2000000 + b"\r\nget x\r\n",
     b'STORED\r\nSERVER_ERROR object too large for cache\r\nEND\r\n'),
    (b"set big 0 0 1048576\r\n" + b"a"*1048576 + b"\r\nmg big s\r\n",
     b'SERVER_ERROR object too large for cache\r\nEN\r\n'),
    (b"set big 0 0 1048000\r\n" + b"a"*1048000 + b"\r\nmg big s\r\n",
     b'STORED\r\nHD s1048000\r\n'),
    (b"incr k abc noreply\r\ntouch k abc noreply\r\ndelete k 5 noreply\r\nverbosity abc\r\nverbosity\r\nverbosity 1 2 3\r\nflush_all 1 2 3\r\nversion 1 2\r\nmn extra\r\n",
     b'CLIENT_ERROR bad command line format\r\nERROR\r\nERROR\r\nERROR\r\nVERSION 1.6.18\r\nMN\r\n'),
    (b"ms k 2 b\r\nhi\r\nmg k b\r\nmg k v v\r\n",
     b'CLIENT_ERROR error decoding key\r\nCLIENT_ERROR error decoding key\r\nCLIENT_ERROR duplicate flag\r\n'),
    (b"ms " + b"k"*251 + b" 1\r\na\r\n",
     b'CLIENT_ERROR bad command line format\r\nERROR\r\n'),
    (b"ms k -1\r\n",
     b'CLIENT_ERROR bad command line format\r\n'),
    (b"ms k 2000000\r\n" + b"a"*2000000 + b"\r\n",
     b'SERVER_ERROR object too large for cache\r\n'),
    (b"ms k 2 T-1\r\nhi\r\nmg k v\r\n",
     b'HD\r\nEN\r\n'),
    (b"ms k 2 Tabc\r\nhi\r\nms k 2 Fabc\r\nhi\r\n",
     b'CLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad command line format\r\n'),
    (b"set k 0 0 1\r\na\r\nappend k 0 0 1048500\r\n" + b"a"*1048500 + b"\r\n",
     b'STORED\r\nSTORED\r\n'),
    (b"set a\x00b 0 0 1\r\nx\r\nget a\r\n",
     b'ERROR\r\nERROR\r\nEND\r\n'),
    (b"set a\tb 0 0 1\r\nx\r\nget a\tb\r\n",
     b'STORED\r\nVALUE a\tb 0 1\r\nx\r\nEND\r\n'),
    (b"set x 0 0 2 noreply\r\nabcd\r\n",
     b'ERROR\r\n'),
    (b"set f 0 abc 1\r\na\r\nset f 0 99999999999 1\r\na\r\nget f\r\nset f 0 0 1 2\r\na\r\nset f 0 0 1 noreply extra\r\na\r\nset f 0 0 1x\r\na\r\n",
     b'CLIENT_ERROR bad command line format\r\nERROR\r\nSTORED\r\nEND\r\nSTORED\r\nERROR\r\nERROR\r\nCLIENT_ERROR bad command line format\r\nERROR\r\n'),
    (b"set  f  0 0 1\r\na\r\nset f 0 0 1\na\r\nset f 0 0 1\r\nab\r\nGET f\r\nget f \r\n get f\r\nget f\n",
     b'STORED\r\nSTORED\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\nERROR\r\nVALUE f 0 1\r\na\r\nEND\r\nVALUE f 0 1\r\na\r\nEND\r\nVALUE f 0 1\r\na\r\nEND\r\n'),
    (b"set f 0 0 2147483647\r\n",
     b'CLIENT_ERROR bad command line format\r\n'),
    (b"set f 0 0 4294967296\r\n\r\nget f\r\n",
     b'STORED\r\nVALUE f 0 0\r\n\r\nEND\r\n'),
    (b"ms zz 1 k O1 c\r\na\r\nms zz 1 MS C1 k\r\na\r\nms zz 1 ME k O2\r\na\r\n",
     b'HD kzz O1 c18271\r\nEX kzz\r\nNS kzz O2\r\n'),
    (b"set cc 0 0 1\r\n1\r\ngets cc\r\ngats 0 cc\r\n",
     b'STORED\r\nVALUE cc 0 1 18273\r\n1\r\nEND\r\nVALUE cc 0 1 18273\r\n1\r\nEND\r\n'),
    (b"set s 0 0 1\r\n1\r\nget s s s\r\n",
     b'STORED\r\nVALUE s 0 1\r\n1\r\nVALUE s 0 1\r\n1\r\nVALUE s 0 1\r\n1\r\nEND\r\n'),
    (b"set p 0 0 1\r\n1\r\nset p 0 0 1\r\n2\r\nget p\r\n",
     b'STORED\r\nSTORED\r\nVALUE p 0 1\r\n2\r\nEND\r\n'),
    (b"set d 0 0 4\r\n1000\r\ndecr d 1\r\nget d\r\nincr d 10000\r\nget d\r\n",
     b'STORED\r\n999\r\nVALUE d 0 4\r\n999 \r\nEND\r\n10999\r\nVALUE d 0 5\r\n10999\r\nEND\r\n'),
]


def normalize(reply):
    reply = re.sub(rb"(VALUE \S+ \d+ \d+) \d+\r\n", rb"\1 <cas>\r\n", reply)
    return re.sub(rb" c\d+", b" c<cas>", reply)


def free_port():
    return kv_process.free_port()  # below the ephemeral range: no concurrent client takes it


def wait_listening(port, proc, what):
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited early with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port} within 60 s")


def exchange(port, data, expect_len, linger=0.03):
    """Sends `data`, reads until `expect_len` (normalized) bytes came (or the server closed), then `linger`
    seconds more for bytes that should not be there."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(data)
    out = b""
    deadline = time.time() + 60
    s.settimeout(0.01)
    quiet_since = None
    while time.time() < deadline:
        if len(normalize(out)) >= expect_len and (linger == 0 or (quiet_since and time.time() - quiet_since >= linger)):
            break
        try:
            b = s.recv(1 << 20)
        except socket.timeout:
            quiet_since = quiet_since or time.time()
            continue
        quiet_since = None
        if not b:
            break
        out += b
    s.close()
    return out


def run_table(port, name):
    failures = 0
    for request, expected in CASES:
        exchange(port, b"flush_all\r\n", 4, linger=0)
        got = exchange(port, request, len(normalize(expected)))
        if normalize(got) != normalize(expected):
            failures += 1
            print(f"FAIL [{name}] {request[:80]!r}\n  expected {expected[:300]!r}\n  got      {got[:300]!r}")
    print(f"{name}: {len(CASES) - failures}/{len(CASES)} replies as memcached 1.6 sends them")
    return failures


def main():
    shoal = sys.argv[1]
    memcached = sys.argv[2] if len(sys.argv) > 2 else shutil.which("memcached")
    failures = 0
    procs = []
    try:
        port = free_port()
        p = subprocess.Popen([shoal, "-l", "127.0.0.1", "-p", str(port), "--smp", "2", "-m", "64"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        procs.append(p)
        wait_listening(port, p, "shoal-kv")
        failures += run_table(port, "shoal-kv")
        if memcached:
            mport = free_port()
            args = [memcached, "-l", "127.0.0.1", "-p", str(mport), "-U", "0", "-t", "1", "-m", "64"]
            if os.geteuid() == 0:
                args += ["-u", "root"]
            m = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            procs.append(m)
            wait_listening(mport, m, "memcached")
            failures += run_table(mport, "memcached " + memcached)
        else:
            print("memcached is not installed (apt-get install memcached): the table was checked against "
                  "shoal-kv only, not against the reference server")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
