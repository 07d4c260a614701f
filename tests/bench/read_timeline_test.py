#!/usr/bin/env python3
"""Checks bench/read_timeline.py against pieces of real traces (ib_read_lat in the Soft-RoCE
guest, CPU 0). The first (tracepoints sys_enter/exit_write, sched_switch, sched_wakeup) has six
doorbell writes, the first followed by a detour through ksoftirqd, the other five not. The
second, from another boot, has the softirq events too. Each shows how a run of round trips
without a detour starts. The values below were worked out by hand from the timestamps."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import read_timeline  # noqa: E402

SAMPLE = os.path.join(HERE, "read_timeline_sample.txt")
WAKEUP_SAMPLE = os.path.join(HERE, "read_timeline_wakeup_sample.txt")


class read_timeline_test(unittest.TestCase):
    def test_segments_of_each_round_trip(self):
        ops, detours, seg = read_timeline.segments(SAMPLE, "ib_read_lat")
        self.assertEqual(ops, 6)
        # The write at 4.957506 leaves at .957545 (39 µs), switches to ksoftirqd at .957549,
        # runs again at .957556; the next write enters at .957560. (The sample's first lines,
        # the end of an earlier round trip, come before any write entry and are skipped.)
        self.assertEqual(detours, 1)
        self.assertEqual([round(x) for x in seg["switch"]], [4])
        self.assertEqual([round(x) for x in seg["ksoftirqd"]], [7])
        self.assertEqual([round(x) for x in seg["write"]], [39, 42, 32, 30, 27, 26])
        # User time runs from the return to the poster (after a detour) or from the write's
        # exit (without one) to the next write.
        self.assertEqual([round(x) for x in seg["user"]], [4, 4, 3, 2, 2])
        self.assertEqual([round(x) for x in seg["round trip"]], [54, 46, 35, 32, 29])

    def test_wake_ups_that_do_not_preempt_start_a_run_without_detours(self):
        # Five doorbells, four complete round trips: the first wakes ksoftirqd with need-resched
        # set ("dN.3.") and detours; the second wakes it without ("d..3."), so it stays runnable
        # and the third and fourth raise the softirq without waking anybody.
        w = read_timeline.wakeups(WAKEUP_SAMPLE, "ib_read_lat")
        self.assertEqual(w, {"round trips": 4, "preempting": 1, "not preempting": 1, "quiet": 2, "runs": [3]})
        ops, detours, seg = read_timeline.segments(WAKEUP_SAMPLE, "ib_read_lat")
        self.assertEqual((ops, detours), (5, 1))
        self.assertEqual([round(x) for x in seg["round trip"]], [53, 44, 36, 33])

    def test_the_first_sample_starts_such_a_run_too(self):
        # Its wake-ups: "dN.3." at 4.957523 (the detour), "d..3." at .957579, then none.
        w = read_timeline.wakeups(SAMPLE, "ib_read_lat")
        self.assertEqual(w, {"round trips": 5, "preempting": 1, "not preempting": 1, "quiet": 3, "runs": [4]})

    def test_a_trace_without_wake_up_events_reports_none(self):
        with tempfile.TemporaryDirectory() as d:
            bare = os.path.join(d, "trace.txt")
            with open(SAMPLE) as src, open(bare, "w") as dst:
                dst.writelines(line for line in src if "sched_wakeup" not in line)
            w = read_timeline.wakeups(bare, "ib_read_lat")
            self.assertEqual((w["preempting"], w["not preempting"], w["quiet"]), (0, 0, 5))
            script = os.path.join(HERE, "..", "..", "bench", "read_timeline.py")
            out = subprocess.run([sys.executable, script, bare, "ib_read_lat"], capture_output=True, text=True,
                                 check=True).stdout
            self.assertIn("ops      6", out)
            self.assertNotIn("wake-ups", out)

    def test_other_tasks_writes_are_not_counted(self):
        ops, detours, _ = read_timeline.segments(SAMPLE, "shoal-bench-rdma")
        self.assertEqual((ops, detours), (0, 0))

    def test_command_line_prints_medians_and_refuses_an_empty_trace(self):
        script = os.path.join(HERE, "..", "..", "bench", "read_timeline.py")
        out = subprocess.run([sys.executable, script, SAMPLE, "ib_read_lat"], capture_output=True,
                             text=True, check=True).stdout
        self.assertIn("ops      6", out)
        self.assertIn("ksoftirqd detours  16.7 %", out)
        self.assertIn("write   31.0", out)
        self.assertIn("round trip   35.0", out)
        self.assertIn("preempting 1, not preempting 1, none (quiet) 3 of 5", out)
        out = subprocess.run([sys.executable, script, WAKEUP_SAMPLE, "ib_read_lat"], capture_output=True,
                             text=True, check=True).stdout
        self.assertIn("preempting 1, not preempting 1, none (quiet) 2 of 4", out)
        self.assertIn("runs without a detour: 1, median length 3", out)
        bad = subprocess.run([sys.executable, script, SAMPLE, "nobody"], capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("no doorbell writes", bad.stderr)


if __name__ == "__main__":
    unittest.main()
