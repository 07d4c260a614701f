#!/usr/bin/env python3
"""read_timeline.py TRACE COMM - splits the one-at-a-time READs of COMM, read from an ftrace
text TRACE of one CPU (tracepoints sys_enter/exit_write, sched_switch), into the segments of
a Soft-RoCE READ round trip, and prints each segment's median in microseconds.

With rxe, a READ is posted by one write(2) on the verbs command file (the doorbell); the
requester, the responder and the completer all run on the poster's CPU, mostly inside that
write (the responder in a softirq run on the way out). Raising that softirq also wakes
ksoftirqd, which then often preempts the poster on its way back to user space for nothing.
Segments of each round trip:
  write     the doorbell write(2), the READ itself included;
  switch    from its return to the switch to ksoftirqd (when there is one);
  ksoftirqd that detour, until the poster runs again;
  user      back in user space until the next doorbell (the poll, the completion, the
            caller's code and the next post).
"""
import re
import statistics
import sys

EVENT = re.compile(r'^\s*(\S.*?)-(\d+)\s+\[\d+\]\s+\S+\s+(\d+\.\d+): (\w+):? ?(.*)$')


def segments(path, comm):
    """(round trips, detours, {segment: [µs per round trip]}) of COMM's doorbells in the trace."""
    comm = comm[:15]  # the kernel keeps a task's name to 15 characters
    seg = {"write": [], "switch": [], "ksoftirqd": [], "user": [], "round trip": []}
    ops = detours = 0
    enter = leave = away = back = None
    with open(path, errors="replace") as f:
        lines = f.readlines()
    for line in lines:
        m = EVENT.match(line)
        if not m:
            continue
        task, t, name, rest = m.group(1), float(m.group(3)) * 1e6, m.group(4), m.group(5)
        if name == "sys_write" and task.startswith(comm):
            if "fd:" in rest:  # entry
                if enter is not None:
                    seg["round trip"].append(t - enter)
                    seg["user"].append(t - (back if back is not None else leave))
                enter, leave, away, back = t, None, None, None
                ops += 1
            elif enter is not None:
                leave = t
                seg["write"].append(t - enter)
        elif name == "sched_switch" and leave is not None:
            if "next_comm=ksoftirqd" in rest and rest.startswith(f"prev_comm={comm}") and away is None:
                away = t
                detours += 1
                seg["switch"].append(t - leave)
            elif "prev_comm=ksoftirqd" in rest and away is not None and back is None:
                back = t
                seg["ksoftirqd"].append(t - away)
    return ops, detours, seg


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: read_timeline.py TRACE COMM")
    ops, detours, seg = segments(sys.argv[1], sys.argv[2])
    if ops < 2:
        sys.exit(f"read_timeline: no doorbell writes of {sys.argv[2]} in {sys.argv[1]}")
    med = {k: statistics.median(v) if v else 0.0 for k, v in seg.items()}
    print(f"{sys.argv[2]:16s} ops {ops:6d}  ksoftirqd detours {100.0 * detours / ops:5.1f} %  "
          + "  ".join(f"{k} {med[k]:6.1f}" for k in ("write", "switch", "ksoftirqd", "user", "round trip")))


if __name__ == "__main__":
    main()
