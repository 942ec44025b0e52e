"""A console script on a pseudo-terminal, as a user's shell runs it (Ctrl-C typed there
reaches it as SIGINT), with ``expect``-style reading. Client side. (The same helper as
``tests/test_cli_terminal.py``'s, for tests that run the CLI against their own worker.)"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
#: Run in the child, in its new session: the pty as its controlling terminal (so the
#: terminal's Ctrl-C reaches it) and SIGINT at its default, then become the command.
TAKE_TERMINAL = (
    "import fcntl, os, signal, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)
CTRL_C = "\x03"


class Terminal:
    """``args`` on a pseudo-terminal of ``columns`` columns, stdout and stderr both."""

    def __init__(self, args: list[str], env: dict[str, str], columns: int = 200) -> None:
        env = {**env, "COLUMNS": str(columns), "TERM": "dumb"}
        terminal, child_end = os.openpty()
        fcntl.ioctl(child_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.process = subprocess.Popen(
            [sys.executable, "-c", TAKE_TERMINAL, *args],
            stdin=child_end,
            stdout=child_end,
            stderr=child_end,
            env=env,
            start_new_session=True,
        )
        os.close(child_end)
        self.fd = terminal
        self.raw = b""
        self.seen = 0  # where the next expect() looks from

    @property
    def output(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace")).replace("\r\n", "\n")

    def _read(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; False once the terminal is closed."""
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 1 << 16)
        except OSError:  # EIO: the child has closed the terminal
            chunk = b""
        self.raw += chunk
        return bool(chunk)

    def expect(self, text: str, timeout: float = 60) -> str:
        """Wait for ``text`` after what was already expected; return the output between."""
        deadline = time.monotonic() + timeout
        while (found := self.output.find(text, self.seen)) < 0:
            remaining = deadline - time.monotonic()
            assert remaining > 0 and self._read(remaining), (
                f"{text!r} not seen; the terminal shows:\n{self.output[self.seen :]}"
            )
        between = self.output[self.seen : found]
        self.seen = found + len(text)
        return between

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 60) -> int:
        """The exit code, once the process has ended within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"still running; the terminal shows:\n{self.output}"
            if not self._read(min(remaining, 0.2)):
                time.sleep(0.05)
        while self._read(0):  # what it printed last
            pass
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.fd)
