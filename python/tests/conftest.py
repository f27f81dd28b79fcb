"""Fixtures: a real tsdfd started from the build tree on private ipc://
sockets, and clients of it.

TSDFD_BIN names the daemon binary (default: build/daemon/tsdfd or
build-cpu/daemon/tsdfd of the source tree); TSDF_SOURCE_DIR the source
tree (default: two levels above this file). Tests that need the daemon
fail, saying why, when it cannot be found or started: a test run that
silently skips them would prove nothing.
"""

import atexit
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import tsdf

SOURCE_DIR = pathlib.Path(os.environ.get("TSDF_SOURCE_DIR",
                                         pathlib.Path(__file__).resolve().parents[2]))
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 30.0

_daemons = []


def _tsdfd_bin():
    if os.environ.get("TSDFD_BIN"):
        return pathlib.Path(os.environ["TSDFD_BIN"])
    for build in ("build", "build-cpu"):
        candidate = SOURCE_DIR / build / "daemon" / "tsdfd"
        if candidate.exists():
            return candidate
    return SOURCE_DIR / "build" / "daemon" / "tsdfd"


class Daemon:
    """One tsdfd: CPU backend, /metrics off (parallel tests never fight over
    its port), no autosave, no snapshot at stop or start (each run starts
    empty), the log in its work folder; a ring socket there unless
    ring=False."""

    def __init__(self, binary, workdir, ring=True):
        self.binary = pathlib.Path(binary)
        self.workdir = pathlib.Path(workdir)
        # ipc:// paths must fit sun_path (108 bytes): keep the folder short.
        self.req_url = f"ipc://{self.workdir}/tsdfd.sock"
        self.push_url = f"ipc://{self.workdir}/frames.sock"
        self.state_dir = self.workdir / "state"
        self.log_path = self.workdir / "tsdfd.log"
        self.ring_path = self.workdir / "rings.sock" if ring else None
        self.proc = None

    def start(self):
        if not os.access(self.binary, os.X_OK):
            pytest.fail(f"{self.binary} is not an executable: build the tsdfd target or set "
                        f"TSDFD_BIN", pytrace=False)
        self.state_dir.mkdir(exist_ok=True)
        conf = self.workdir / "tsdfd.conf"
        conf.write_text(f"[server]\nring_socket = {self.ring_path or ''}\n"
                        "[snapshot]\nautosave_period_s = 0\nsave_on_stop = false\n"
                        "load_on_start = false\n"
                        # The session's tests share this daemon, a map or a few each.
                        "[volume]\nmax_maps = 64\n")
        cmd = [str(self.binary), "--config", str(conf), "--foreground", "--backend", "cpu",
               "--listen", self.req_url, "--frames-listen", self.push_url,
               "--state-dir", str(self.state_dir), "--metrics", "off"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"tsdfd exited with {self.proc.returncode} at start:\n"
                            f"{self.log_tail()}", pytrace=False)
            if all((self.workdir / s).is_socket() for s in ("tsdfd.sock", "frames.sock")):
                try:
                    with tsdf.Client(self.req_url, timeout_ms=1000) as c:
                        c.ping()
                    return
                except tsdf.TsdfError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"tsdfd did not answer a ping within {START_TIMEOUT_S:.0f} s:\n"
                            f"{self.log_tail()}", pytrace=False)
            time.sleep(0.05)

    def stop(self):
        """SIGTERM, then the exit status (SIGKILL after STOP_TIMEOUT_S)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc, self.proc = self.proc.returncode, None
        return rc

    def log_tail(self, lines=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@pytest.fixture(scope="session")
def daemon():
    workdir = tempfile.mkdtemp(prefix="tsdf-py.")
    # Removed at exit, after pytest_terminal_summary has shown the log.
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    d = Daemon(_tsdfd_bin(), workdir)
    _daemons.append(d)
    d.start()
    yield d
    rc = d.stop()
    if rc != 0:
        pytest.fail(f"tsdfd exited with {rc} after SIGTERM:\n{d.log_tail()}", pytrace=False)


@pytest.fixture
def client(daemon):
    with tsdf.Client(daemon.req_url, daemon.push_url, timeout_ms=20000) as c:
        yield c


def pytest_terminal_summary(terminalreporter):
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        for d in _daemons:
            terminalreporter.write_line(f"--- tail of {d.log_path} ---")
            terminalreporter.write_line(d.log_tail())
