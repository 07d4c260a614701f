#!/usr/bin/env python3
"""read_timeline.py TRACE COMM - splits the one-at-a-time READs of COMM, read from an ftrace
text TRACE of one CPU (tracepoints sys_enter/exit_write, sched_switch, sched_wakeup), into the
segments of a Soft-RoCE READ round trip, and prints each segment's median in microseconds.

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
With sched_wakeup in the trace it also tells why a round trip had no detour: every wake-up of
ksoftirqd that sets need-resched ('N' or 'n' in the event's flags) is a detour; a wake-up that does not
leaves ksoftirqd runnable but not running, so the raises of the next round trips wake nobody
(quiet) until it runs. The round trips without a detour come in such runs.
"""
import functools
import re
import statistics
import sys

EVENT = re.compile(r'^\s*(\S.*?)-(\d+)\s+\[\d+\]\s+(\S+)\s+(\d+\.\d+): (\w+):? ?(.*)$')


@functools.lru_cache(maxsize=4)
def events(path):
    """The trace's events as (task, flags, µs, event name, the rest), read and parsed once per
    file however many of the functions below look at it."""
    with open(path, errors="replace") as f:
        return tuple((m.group(1), m.group(3), float(m.group(4)) * 1e6, m.group(5), m.group(6))
                     for m in map(EVENT.match, f) if m)


def segments(path, comm):
    """(round trips, detours, {segment: [µs per round trip]}) of COMM's doorbells in the trace."""
    comm = comm[:15]  # the kernel keeps a task's name to 15 characters
    seg = {"write": [], "switch": [], "ksoftirqd": [], "user": [], "round trip": []}
    ops = detours = 0
    enter = leave = away = back = None
    for task, _, t, name, rest in events(path):
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


def wakeups(path, comm):
    """How ksoftirqd was woken in each complete round trip of COMM (from one doorbell to the
    next): {"round trips", "preempting", "not preempting", "quiet", "runs"}, where "runs" lists
    the lengths of the runs of consecutive round trips without a detour."""
    comm = comm[:15]
    kinds = []  # per complete round trip: "preempting", "not preempting" or "quiet"
    current = None
    for task, flags, _, name, rest in events(path):
        if name == "sys_write" and task.startswith(comm) and "fd:" in rest:
            if current is not None:
                kinds.append(current)
            current = "quiet"
        elif name == "sched_wakeup" and current is not None and "comm=ksoftirqd/" in rest:
            # The second flag is need-resched: 'N' (and 'n', 'p' on newer kernels) or '.'.
            current = "preempting" if flags[1:2] in ("N", "n", "p") else "not preempting"
    runs, run = [], 0
    for k in kinds:
        if k == "preempting":
            if run:
                runs.append(run)
            run = 0
        else:
            run += 1
    if run:
        runs.append(run)
    return {"round trips": len(kinds), "preempting": kinds.count("preempting"),
            "not preempting": kinds.count("not preempting"), "quiet": kinds.count("quiet"), "runs": runs}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: read_timeline.py TRACE COMM")
    ops, detours, seg = segments(sys.argv[1], sys.argv[2])
    if ops < 2:
        sys.exit(f"read_timeline: no doorbell writes of {sys.argv[2]} in {sys.argv[1]}")
    med = {k: statistics.median(v) if v else 0.0 for k, v in seg.items()}
    print(f"{sys.argv[2]:16s} ops {ops:6d}  ksoftirqd detours {100.0 * detours / ops:5.1f} %  "
          + "  ".join(f"{k} {med[k]:6.1f}" for k in ("write", "switch", "ksoftirqd", "user", "round trip")))
    w = wakeups(sys.argv[1], sys.argv[2])
    if w["preempting"] + w["not preempting"] > 0:  # traced with sched_wakeup
        runs = w["runs"]
        print(f"{'':16s} ksoftirqd wake-ups: preempting {w['preempting']}, not preempting {w['not preempting']}, "
              f"none (quiet) {w['quiet']} of {w['round trips']}; runs without a detour: {len(runs)}, "
              f"median length {statistics.median(runs) if runs else 0:g}")


if __name__ == "__main__":
    main()
