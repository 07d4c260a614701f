#!/usr/bin/env python3
"""What the rpc/ and kv/ translation units and headers read from headers.

Usage: scripts/header_lines.py [--time] [--dirs rpc,kv] [BUILD_DIR]      (default build/release)

Reads BUILD_DIR/compile_commands.json (every preset exports it) and, for each translation unit
under the source tree's rpc/ and kv/ (each source file once, with its first compile command),
asks the compiler for the files it reads (-M: every header once, as #pragma once leaves it) and
prints the lines of those headers: all of them, and those of the project alone (files under the
source directory), and which of <infiniband/verbs.h> and <rdma/rdma_cma.h> are among them.
Then it checks each header under rpc/ and kv/ on its own (a file that includes only it, compiled
with the flags of a translation unit of the same directory) and lists those that reach verbs.h or
rdma_cma.h, which rpc/ and kv/ headers must not reach (docs/architecture.md, "Layers").

--time also compiles each translation unit once more, with ccache off and the object thrown
away, and prints the compiler's CPU time (user + system). Only meaningful on an otherwise idle
machine; run it twice and compare.

Nothing is written into the build directory or the source tree: the script can measure another
checkout's build (e.g. main's) read-only.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

WATCHED = ("infiniband/verbs.h", "rdma/rdma_cma.h")


def source_dir(build_dir):
    """The source directory of a CMake build directory (CMAKE_HOME_DIRECTORY)."""
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                return os.path.realpath(line.split("=", 1)[1].strip())
    sys.exit(f"{build_dir}: no CMAKE_HOME_DIRECTORY in CMakeCache.txt")


def compile_args(entry):
    """The compile command as a list, without a compiler launcher (ccache) and without the
    output, depfile and -c arguments (callers add their own)."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    while args and os.path.basename(args[0]) in ("ccache", "sccache"):
        args = args[1:]
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a in ("-c", "-MD", "-MMD", entry["file"]):
            pass
        else:
            out.append(a)
    return out


def read_deps(args, cwd, source):
    """The files the compiler reads for `source` (the source itself excluded)."""
    r = subprocess.run(args + ["-M", source], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{source}: the compiler failed:\n{r.stderr}")
    text = r.stdout.replace("\\\n", " ")
    deps = text.split(":", 1)[1]
    files = [p.replace("\\ ", " ") for p in re.split(r"(?<!\\)\s+", deps) if p]
    src = os.path.realpath(os.path.join(cwd, source))
    return {os.path.realpath(os.path.join(cwd, f)) for f in files} - {src}


_lines_cache = {}


def lines_of(path):
    if path not in _lines_cache:
        with open(path, "rb") as f:
            _lines_cache[path] = f.read().count(b"\n")
    return _lines_cache[path]


def watched_in(files):
    return [w for w in WATCHED if any(f.endswith("/" + w) for f in files)]


def cpu_seconds(args, cwd, source, obj):
    """User + system CPU time of one compilation (ccache off, object thrown away)."""
    env = dict(os.environ, CCACHE_DISABLE="1")
    before = os.times()
    r = subprocess.run(args + ["-c", source, "-o", obj], cwd=cwd, env=env, capture_output=True, text=True)
    after = os.times()
    if r.returncode != 0:
        sys.exit(f"{source}: the compiler failed:\n{r.stderr}")
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build_dir", nargs="?", default="build/release")
    p.add_argument("--dirs", default="rpc,kv", help="top-level source directories (comma-separated)")
    p.add_argument("--time", action="store_true", help="also measure compile CPU time (ccache off)")
    opts = p.parse_args()

    build = os.path.realpath(opts.build_dir)
    src = source_dir(build)
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    prefixes = tuple(os.path.join(src, d) + "/" for d in opts.dirs.split(","))
    units = {}
    for e in entries:
        path = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if path.startswith(prefixes) and path not in units:
            units[path] = e
    if not units:
        sys.exit(f"no translation unit under {', '.join(prefixes)} in {build}/compile_commands.json")

    print(f"source {src}, build {build}")
    head = f"{'translation unit':44} {'all lines':>10} {'project':>8}"
    print(head + (f" {'cpu s':>7}" if opts.time else "") + "  reads")
    total_all = total_proj = total_cpu = 0
    seeing = {w: 0 for w in WATCHED}
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(units):
            e = units[path]
            args = compile_args(e)
            deps = read_deps(args, e["directory"], e["file"])
            n_all = sum(lines_of(f) for f in deps)
            n_proj = sum(lines_of(f) for f in deps if f.startswith(src + "/"))
            hits = watched_in(deps)
            for w in hits:
                seeing[w] += 1
            total_all += n_all
            total_proj += n_proj
            row = f"{os.path.relpath(path, src):44} {n_all:10} {n_proj:8}"
            if opts.time:
                secs = cpu_seconds(args, e["directory"], e["file"], os.path.join(tmp, "unit.o"))
                total_cpu += secs
                row += f" {secs:7.2f}"
            print(row + "  " + " ".join(os.path.basename(w) for w in hits))

        total = f"{'total (' + str(len(units)) + ' units)':44} {total_all:10} {total_proj:8}"
        print(total + (f" {total_cpu:7.2f}" if opts.time else ""))
        for w in WATCHED:
            print(f"units reading {w}: {seeing[w]} of {len(units)}")

        # Each header on its own, with the flags of a unit of its directory (else of any unit).
        by_dir = {}
        for path, e in units.items():
            by_dir.setdefault(os.path.dirname(path), e)
        any_unit = next(iter(units.values()))
        offenders = []
        headers = []
        for d in sorted({os.path.join(src, x) for x in opts.dirs.split(",")}):
            for root, _, files in os.walk(d):
                headers += [os.path.join(root, f) for f in files if f.endswith(".hh")]
        for h in sorted(headers):
            e = by_dir.get(os.path.dirname(h), any_unit)
            probe = os.path.join(tmp, "probe.cc")
            with open(probe, "w") as f:
                f.write(f'#include "{h}"\n')
            hits = watched_in(read_deps(compile_args(e), e["directory"], probe))
            if hits:
                offenders.append(f"  {os.path.relpath(h, src)}: {' '.join(hits)}")
        print(f"headers reaching verbs.h or rdma_cma.h: {len(offenders)} of {len(headers)}")
        print("\n".join(offenders))


if __name__ == "__main__":
    main()
