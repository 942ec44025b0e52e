"""The lines ``parley chat`` reads: from standard input's file descriptor, one reader for
every prompt. Client side.

A prompt (``ask``) blocks the main thread, as ``input()`` does (Ctrl-C there leaves at
once). While a decision's turn waits out an undo window, chat reads on without a
prompt (``next_line``, on the event loop, never a thread): ``/undo`` acts at once, and
any other line typed meanwhile is held (``hold``) for the prompts that follow, in order.
Reading the descriptor itself, never ``sys.stdin``, keeps both ways on one buffer: a
line piped in is read once, whichever way asks for it.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import TextIO

#: How much one read takes from the descriptor.
READ_BYTES = 1 << 16


class LineInput:
    """Lines from the descriptor ``fd``; prompts are written to ``out``."""

    def __init__(self, fd: int, out: TextIO) -> None:
        self._fd = fd
        self._out = out
        self._buffer = b""
        self._ended = False
        #: Lines read while no prompt was asking: the next prompts answer with them.
        self._held: deque[str] = deque()

    def ask(self, prompt: str) -> str:
        """Write ``prompt`` and read one line (without its end); EOFError at the end of
        input."""
        self._out.write(prompt)
        self._out.flush()
        if self._held:
            return self._held.popleft()
        while (line := self._take()) is None:
            if self._ended:
                raise EOFError
            self._fill(os.read(self._fd, READ_BYTES))
        return line

    def hold(self, line: str) -> None:
        """Keep ``line`` (read by ``next_line``) for the next prompt."""
        self._held.append(line)

    async def next_line(self) -> str | None:
        """The next line, read as it comes while the event loop runs; None once input
        has ended. Cancelled, it leaves what it read in the buffer."""
        while (line := self._take()) is None:
            if self._ended:
                return None
            await self._readable()
            self._fill(os.read(self._fd, READ_BYTES))
        return line

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        try:
            loop.add_reader(self._fd, lambda: ready.done() or ready.set_result(None))
        except (OSError, ValueError):
            return  # a regular file (no polling needed: it is always readable)
        try:
            await ready
        finally:
            loop.remove_reader(self._fd)

    def _fill(self, chunk: bytes) -> None:
        if chunk:
            self._buffer += chunk
        else:
            self._ended = True

    def _take(self) -> str | None:
        """The first whole line of the buffer (the rest of it once input ended)."""
        end = self._buffer.find(b"\n")
        if end < 0:
            if not self._ended or not self._buffer:
                return None
            end = len(self._buffer)
        raw, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
        return raw.decode(errors="replace").rstrip("\r")
