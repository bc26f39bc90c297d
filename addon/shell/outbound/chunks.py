"""Where an HTTP/1.1 chunked body ends (``Chunks``): the relay's client reads the chunk sizes of
an upstream's body, not its data (``addon.shell.outbound.http1``)."""

from __future__ import annotations


class Chunks:
    """Where a chunked body ends, its bytes read once: the sizes, not the data."""

    __slots__ = ("line", "need", "trailer")

    def __init__(self) -> None:
        self.need = 0
        """Bytes of the current chunk still to come, its CRLF included."""
        self.line = b""
        """A size or trailer line not yet whole."""
        self.trailer = False

    def feed(self, data: bytes, out: list[bytes] | None) -> int:
        """Where in ``data`` the body ended (-1: not yet); the chunks' data appended to ``out``
        when given (the body decoded), else only counted. ValueError: no chunked framing."""
        i, n = 0, len(data)
        find = data.find
        while i < n:
            if self.need:
                take = min(self.need, n - i)
                if out is not None and self.need > 2:
                    out.append(data[i : i + min(take, self.need - 2)])
                self.need -= take
                i += take
                continue
            j = find(b"\n", i)
            if j < 0:
                self.line += data[i:]
                if len(self.line) > 4096:
                    raise ValueError("chunk line too long")
                return -1
            if self.line:
                line, self.line = self.line + data[i:j], b""
            else:
                line = data[i:j]
            i = j + 1
            if self.trailer:
                if not line.rstrip(b"\r"):
                    return i
                continue
            try:
                size = int(line, 16)  # the common line, "1a3\r" (int strips the \r)
            except ValueError:  # an extension: "1a3;name=value"
                size = int(line.split(b";", 1)[0].strip(), 16)
            if size < 0:
                raise ValueError("negative chunk size")
            if size == 0:
                self.trailer = True
            elif i + size + 2 <= n:  # the whole chunk in this read (the common case): at once
                if out is not None:
                    out.append(data[i : i + size])
                i += size + 2
            else:
                self.need = size + 2
        return -1
