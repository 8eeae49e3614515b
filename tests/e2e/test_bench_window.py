"""bench/window.py at a tiny scale: it runs both policies to the end, its last line has the
promised form, and no measured ratio beats the lower bound it is measured against (the
makespan ratios of the last lines are against the bound with the canary batches as barriers,
the line before them against the plain bound)."""

import re
import subprocess
import sys

from support import ROOT


def test_window_bench_last_line_and_ratios_at_least_one(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "window.py"), "--nodes", "5", "--max-out", "2",
                        "--scale", "0.01", "--stragglers", "20"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert "1 straggler(s) reboot in 30 min instead of 10" in lines[0]
    assert any(ln.startswith("serial: 5 node(s) upgraded") for ln in lines)
    assert any(ln.startswith("window: 5 node(s) upgraded") for ln in lines)
    m = re.fullmatch(r"window: out_of_service_ratio=(\d+\.\d+) makespan_ratio=(\d+\.\d+) "
                     r"serial_makespan_ratio=(\d+\.\d+)", lines[-1])
    assert m, lines[-1]
    oos, window, serial = (float(x) for x in m.groups())
    assert oos >= 1.0 and window >= 1.0 and serial >= 1.0
    s = re.fullmatch(r"serial: out_of_service_ratio=(\d+\.\d+) makespan_ratio=(\d+\.\d+)", lines[-2])
    assert s and float(s.group(1)) >= 1.0 and float(s.group(2)) == serial
    # the plain bound (every slot busy from the start) is printed beside the one with the canaries,
    # and lies below it: each ratio against it is at least the one against the canaries' bound
    p_ = re.fullmatch(r"plain lower bound \(every slot busy from the start\): window makespan_ratio=(\d+\.\d+) "
                      r"serial makespan_ratio=(\d+\.\d+)", lines[-3])
    assert p_ and float(p_.group(1)) >= window and float(p_.group(2)) >= serial
