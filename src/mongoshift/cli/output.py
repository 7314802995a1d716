"""How results reach the terminal.

``--json``: exactly one JSON document on stdout, everything else on stderr.
Otherwise rich tables on a terminal and plain tab-separated text when piped;
rich honours ``NO_COLOR``. Every text this class prints, and every log line of the
handler it installs, loses its terminal control characters first: file names, changelog
records, migration errors and ``ctx.logger`` lines are not ours to trust. JSON output
keeps them, escaped by ``json.dumps``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import MongoshiftError
from ..project.redaction import elide_long_words, escape_undecodable, mask_credentials, redact, strip_controls

if TYPE_CHECKING:
    from rich.console import Console


def escape(text: str) -> str:
    """``text`` as rich markup that prints as is."""
    from rich.markup import escape  # start-up time: rich loads with the first Output, not with the CLI

    return escape(text)


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as a person reads it: relative to the working directory when it is inside it
    (``migrations/2026..._add_index.py``), else as given. ``--json`` keeps absolute paths."""
    given = Path(path)
    try:
        return str(given.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(given)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


_stdout_failure: OSError | None = None
#: JSON documents written on stdout since :func:`guard_stdout` (a command's run): a late Ctrl-C adds none.
_documents = 0


class _GuardedStdout:
    """stdout as a command writes it: the first failure to write (the reader of a pipe went away,
    ``| head``; a full disk; a closed descriptor, ``>&-``) is kept for :func:`stdout_failure` and
    every later write is dropped, so the command ends as it would have and ``main`` reports the
    failure once, on stderr (exit 44), instead of a traceback."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def _failed(self, error: OSError | ValueError) -> None:
        global _stdout_failure
        if _stdout_failure is None:
            _stdout_failure = error if isinstance(error, OSError) else OSError(errno.EBADF, os.strerror(errno.EBADF))
        try:  # what is still buffered goes nowhere, rather than failing again when Python exits
            fd = self._stream.fileno() if self._stream is not None else -1
            if fd > 2 or fd == 1:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if _stdout_failure is None:
            if self._stream is None:
                self._failed(OSError(errno.EBADF, os.strerror(errno.EBADF)))
            else:
                try:
                    return self._stream.write(text)
                except (OSError, ValueError) as error:
                    self._failed(error)
        return len(text)

    def flush(self) -> None:
        if _stdout_failure is None and self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as error:
                self._failed(error)

    def close(self) -> None:
        self.flush()
        if self._stream is not None:
            try:
                self._stream.close()
            except (OSError, ValueError):
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_stdout() -> None:
    """Let no failure to write stdout break a command (see :class:`_GuardedStdout`)."""
    global _stdout_failure, _documents
    _stdout_failure, _documents = None, 0
    if not isinstance(sys.stdout, _GuardedStdout):
        sys.stdout = _GuardedStdout(sys.stdout)


def document_written() -> bool:
    """Whether this run already wrote its JSON document: under ``--json`` stdout holds one, never two."""
    return _documents > 0


def unguard_stdout() -> OSError | None:
    """Undo :func:`guard_stdout` (``main`` may run again in-process); the first failure to write stdout, if any."""
    global _stdout_failure
    guarded = sys.stdout
    if isinstance(guarded, _GuardedStdout):
        guarded.flush()
        sys.stdout = guarded._stream
    failure, _stdout_failure = _stdout_failure, None
    return failure


class _Reserved:
    """What :func:`reserve_stdout` replaced: the stream of the JSON document, the previous
    ``sys.stdout``, and a copy of file descriptor 1 when it was redirected too."""

    def __init__(self, stream: TextIO, previous: TextIO, saved_fd: int | None) -> None:
        self.stream = stream
        self.previous = previous
        self.saved_fd = saved_fd


_reserved: _Reserved | None = None


def reserve_stdout() -> None:
    """``--json``: from now on stdout carries only the JSON document, whoever else prints.

    Migrations, hooks, transforms and ``uri_factory`` are the project's code, and they may
    print (from worker threads, coroutines or child processes too): ``sys.stdout`` becomes
    stderr for the whole command and, in a real process, so does file descriptor 1, while
    :meth:`Output.emit_json` writes to the stdout kept aside here. In-process (a test's
    captured stdout has no descriptor) only ``sys.stdout`` is swapped.
    """
    global _reserved
    if _reserved is not None:
        return
    previous = sys.stdout
    previous.flush()
    try:
        real = previous.fileno() == 1 and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: a captured stream
        real = False
    if real:
        saved = os.dup(1)
        stream: TextIO = _GuardedStdout(os.fdopen(saved, "w", encoding="utf-8", closefd=False))  # type: ignore[assignment]
        os.dup2(2, 1)
        _reserved = _Reserved(stream, previous, saved)
    else:
        _reserved = _Reserved(previous, previous, None)
    sys.stdout = sys.stderr


def release_stdout() -> None:
    """Undo :func:`reserve_stdout` at the end of a command (``main`` may run again in-process)."""
    global _reserved
    reserved, _reserved = _reserved, None
    if reserved is None:
        return
    sys.stdout.flush()
    reserved.stream.flush()
    if reserved.saved_fd is not None:
        os.dup2(reserved.saved_fd, 1)
        reserved.stream.close()
        os.close(reserved.saved_fd)
    sys.stdout = reserved.previous


class SafeFormatter(logging.Formatter):
    """A log line without terminal control characters; a logged traceback (``log.exception``)
    also through the shared redaction, since its last line is the raw exception text."""

    def format(self, record: logging.LogRecord) -> str:
        # credentials masked in every line: a migration's own ctx.logger line printed a URI's password as written
        return mask_credentials(strip_controls(super().format(record)))

    def formatException(self, ei: Any) -> str:
        return redact(super().formatException(ei), limit=20_000)


def _column_layout(columns: Sequence[str], cells: Sequence[Sequence[str]], width: int) -> list[dict[str, Any]]:
    """Rich column options for a table at most ``width`` characters wide.

    The first column names the row (a migration, a partition), so it is never cut: it keeps its
    whole width while the other columns shrink to about their header's longest word, and only
    then folds onto more lines. The other columns fold too: no character is ever lost.
    """
    from rich.cells import cell_len  # start-up time: only a terminal's tables need it

    # Terminal columns, not characters: a CJK or fullwidth character takes two.
    natural = [max([cell_len(column), *(cell_len(row[i]) for row in cells)]) for i, column in enumerate(columns)]
    overhead = 3 * len(columns) + 1  # a border per column and the last, two spaces of padding each
    if sum(natural) + overhead <= width:
        return [{"no_wrap": True}, *({} for _ in columns[1:])]
    least = [min(natural[i], max(4, min(10, max(cell_len(word) for word in columns[i].split())))) for i in range(1, len(columns))]
    first = min(natural[0], max(cell_len(columns[0]), width - overhead - sum(least)))
    widths = list(least)
    spare = width - overhead - first - sum(widths)
    while spare > 0 and any(w < n for w, n in zip(widths, natural[1:], strict=True)):
        for i, n in enumerate(natural[1:]):
            if spare > 0 and widths[i] < n:
                widths[i] += 1
                spare -= 1
    return [{"width": first, "overflow": "fold"}, *({"width": w, "overflow": "fold"} for w in widths)]


def _elided(value: Any) -> Any:
    """An error document's details with every text's long words cut (a path or name as long as the
    argument that gave it) and its undecodable bytes escaped, as the message's."""
    if isinstance(value, str):
        return escape_undecodable(elide_long_words(value))
    if isinstance(value, dict):
        return {key: _elided(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_elided(item) for item in value]
    return value


class Output:
    def __init__(self, *, json_mode: bool = False, quiet: bool = False, verbose: bool = False, log_json: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        #: ``--log-format json``: every stderr line is one JSON object (:mod:`.log_format`).
        self.log_json = log_json
        from rich.console import Console  # start-up time: rich loads with the first Output, not with the CLI

        self.out: Console = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self._configure_logging(verbose)

    def _configure_logging(self, verbose: bool) -> None:
        logger = logging.getLogger("mongoshift")
        logger.handlers.clear()
        if self.log_json:
            from .log_format import JsonLineFormatter

            handler: logging.Handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(JsonLineFormatter())
        elif self.err.is_terminal:
            from rich.logging import RichHandler  # start-up time: only a terminal's log lines need it

            handler = RichHandler(console=self.err, show_path=False, show_time=False)
            handler.setFormatter(SafeFormatter("%(message)s"))
        else:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(SafeFormatter("mongoshift: %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbose else logging.WARNING if self.quiet else logging.INFO)
        logger.propagate = False
        if self.log_json:
            self._other_lines_as_json()

    @staticmethod
    def _other_lines_as_json() -> None:
        """``--log-format json``: what other loggers (a library's, a migration's own) and Python's
        ``warnings`` say reaches stderr as JSON lines too, not as Python's plain text."""
        from .log_format import JsonLineFormatter

        root = logging.getLogger()
        for old in [h for h in root.handlers if getattr(h, "mongoshift_json", False)]:
            root.removeHandler(old)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonLineFormatter())
        handler.setLevel(logging.WARNING)
        handler.mongoshift_json = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        logging.captureWarnings(True)

    def json(self, document: Any) -> None:
        self.emit_json(document)

    @staticmethod
    def emit_json(document: Any) -> None:
        """The one JSON document, written and flushed (also from a signal handler about to exit),
        on the stdout that :func:`reserve_stdout` kept for it."""
        global _documents
        stream = _reserved.stream if _reserved is not None else sys.stdout
        stream.write(json.dumps(document, default=_default, indent=2) + "\n")
        stream.flush()
        _documents += 1

    def say(self, message: str) -> None:
        """A human line: stdout normally, stderr in JSON mode, nothing when quiet."""
        if self.quiet:
            return
        if self.log_json:
            self._line("info", message)
            return
        message = strip_controls(message)
        if self.json_mode:
            print(message, file=sys.stderr, flush=True)
        elif self.out.is_terminal:
            self.out.print(escape(message))
        else:
            # Flushed: stdout into a file or a pipe is block-buffered, so a line held back would land after
            # the log lines printed (to stderr) after it when both go to one file (``> log 2>&1``).
            print(message, flush=True)

    def verdict(self, message: str, *, failed: bool) -> None:
        """A checking command's closing line (``audit``, ``lint``): a human line as :meth:`say`; when quiet
        and the check failed, still said on stderr, as ``status --check`` says its own, so that an exit
        code is never the only word a ``-q`` run prints about its failure."""
        if self.quiet and failed:
            self.warn(message)
        else:
            self.say(message)

    def progress(self, message: str, **fields: Any) -> None:
        """A line about work under way, on stderr (stdout keeps the table or the JSON document): a JSON line
        under ``--log-format json``, nothing when quiet."""
        if self.quiet:
            return
        if self.log_json:
            self._line("info", message, **fields)
            return
        print(strip_controls(message), file=sys.stderr, flush=True)

    def _line(self, level: str, message: str, **fields: Any) -> None:
        from .log_format import json_line

        print(json_line(level, message, **fields), file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        if self.log_json:
            self._line("warning", message)
            return
        message = strip_controls(message)
        if self.err.is_terminal:
            self.err.print(f"[yellow]warning:[/yellow] {escape(message)}")
        else:
            print(f"warning: {message}", file=sys.stderr)

    def error(self, exc: MongoshiftError) -> None:
        """The failure, through the one redaction whoever built its message (built to size: a loose bound),
        after the warnings its run had gathered (a migration a dead run left half done...), which a run
        that succeeds prints with its report."""
        warnings = exc.details.get("warnings")
        for warning in warnings if isinstance(warnings, list) else []:
            self.warn(redact(str(warning), limit=10_000))
        message = redact(elide_long_words(exc.message), limit=10_000)
        if self.json_mode:
            self.json({"error": {**_elided(exc.to_json()), "message": message}})
        if self.log_json:
            self._line("error", message, kind=exc.kind, code=int(exc.exit_code))
        elif self.err.is_terminal:
            self.err.print(f"[red]error:[/red] {escape(message)}")
        else:
            print(f"error: {message}", file=sys.stderr)

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
        """A result table on stdout; nothing when quiet (``--json`` documents are printed by :meth:`json`)."""
        if self.quiet:
            return
        cells = [[strip_controls("" if v is None else (v.isoformat(timespec="seconds") if isinstance(v, datetime) else str(v))) for v in row] for row in rows]
        columns = [strip_controls(c) for c in columns]
        title = strip_controls(title) if title else title
        if self.out.is_terminal:
            from rich.table import Table  # start-up time: only a terminal's tables need it

            table = Table(title=title)
            for column, options in zip(columns, _column_layout(columns, cells, self.out.width), strict=True):
                table.add_column(column, **options)
            for row in cells:
                table.add_row(*row)
            self.out.print(table)
            return
        if title:
            print(title)
        print("\t".join(columns))
        for row in cells:
            print("\t".join(row))
        sys.stdout.flush()  # before the next line on stderr, as :meth:`say` does
