#!/usr/bin/env python3
"""Checks bench/read_timeline.py against a piece of a real trace (ib_read_lat in the Soft-RoCE
guest, tracepoints sys_enter/exit_write and sched_switch on CPU 0): six doorbell writes, the
first followed by a detour through ksoftirqd, the other five not. The values below were worked
out by hand from the sample's timestamps."""
import os
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import read_timeline  # noqa: E402

SAMPLE = os.path.join(HERE, "read_timeline_sample.txt")


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
        bad = subprocess.run([sys.executable, script, SAMPLE, "nobody"], capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("no doorbell writes", bad.stderr)


if __name__ == "__main__":
    unittest.main()
