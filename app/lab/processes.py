"""Stopping what the lab started: SIGTERM to all at once, then SIGKILL to what lingers."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterable


def terminate_all(processes: Iterable[subprocess.Popen[bytes]], timeout: float = 10.0) -> None:
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
