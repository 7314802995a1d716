"""What every ``mongoshift`` command shares: the group, the global flags, settings, output, Ctrl-C, prompts.

Sub-command modules import this module, never :mod:`mongoshift.cli.main`
(which only gathers them and runs the program).
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from ..errors import ConfigInvalidError, ConfirmationRequiredError, RunAbortedError
from ..project.redaction import uri_secrets
from ..project.run import CancelSignal
from .log_format import json_line
from .output import Output, reserve_stdout

if TYPE_CHECKING:
    from ..project.settings import Settings


def _bounds(low: float | None, high: float | None) -> str:
    """``from 1 to 64``, ``of at least 1``: the bounds in the words of the API's own refusals."""
    if low is not None and high is not None:
        return f"from {low:,} to {high:,}"
    return f"of at least {low:,}" if low is not None else f"of at most {high:,}"


class IntRange(click.IntRange):
    """An integer option within bounds; a value that is no integer is "not a valid integer" (click's
    own words for this type say "integer range", which the value is not), one out of bounds says them
    as the API does ("must be a whole number from 1 to 64, not 0"), not as ``1<=x<=64``."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.INT.convert(value, param, ctx)
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            self.fail(f"must be a whole number {_bounds(self.min, self.max)}, not {number}", param, ctx)
        return number


class FloatRange(click.FloatRange):
    """A number option within bounds (see :class:`IntRange`); ``nan`` and ``inf``, which Python reads as
    numbers and no bound refuses, are refused (a wait of ``nan`` seconds never ends)."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            self.fail(f"must be a number {_bounds(self.min, self.max)}, not {value}", param, ctx)
        return number


def listen_host(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--host`` of a server command: empty text is refused, since a socket bound to "" listens on every
    interface (while the server would say 127.0.0.1); ``0.0.0.0`` says that on purpose."""
    if not value.strip():
        raise click.BadParameter("must name an address to listen on (127.0.0.1 by default; 0.0.0.0 for every interface), not be empty")
    return value


class FilePath(click.Path):
    """A file option (``--config``, ``--env-file``): empty text names no file (as a path it would be the
    current folder, refused as "." with a confusing message)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("must name a file, not be empty", param, ctx)
        return super().convert(value, param, ctx)


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value not in (None, False) and param.name:
        ctx.find_root().ensure_object(dict)[param.name] = value
        if param.name == "json":  # before any of the project's code can print
            reserve_stdout()
    return value


def _file_option(flag: str, help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(flag, type=FilePath(dir_okay=False, path_type=Path), help=help_text, callback=_store, expose_value=False)


#: ``--json``, eager as --version is: `mongoshift --json --version` prints the version as JSON. Also on the server
#: commands, which take no other global flag: they print where they serve as their one JSON document.
json_option = click.option("--json", "json", is_flag=True, is_eager=True, help="Print one JSON document on stdout.", callback=_store, expose_value=False)


def global_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The connection and output flags, accepted before or after the command name."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option("--uri", help="MongoDB connection string (MONGOSHIFT_URI).", callback=_store, expose_value=False),
        click.option("--db", help="Database name (MONGOSHIFT_DB).", callback=_store, expose_value=False),
        click.option("--dir", help="Migrations folder (MONGOSHIFT_MIGRATIONS_DIR).", callback=_store, expose_value=False),
        _file_option("--config", "Config file (default: ./mongoshift.toml or [tool.mongoshift] in ./pyproject.toml)."),
        _file_option("--env-file", "Read this .env file (default: .env next to the project file, when there is one)."),
        click.option("--no-env", is_flag=True, help="Read no .env file.", callback=_store, expose_value=False),
        json_option,
        click.option("-v", "--verbose", is_flag=True, help="More log output.", callback=_store, expose_value=False),
        click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.", callback=_store, expose_value=False),
        click.option(
            "--log-format",
            type=click.Choice(["text", "json"]),
            help="stderr lines as text (default) or one JSON object per line.",
            callback=_store,
            expose_value=False,
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def options() -> dict[str, Any]:
    return click.get_current_context().find_root().ensure_object(dict)


def output() -> Output:
    obj = options()
    if "output" not in obj:
        obj["output"] = Output(
            json_mode=bool(obj.get("json")),
            quiet=bool(obj.get("quiet")),
            verbose=bool(obj.get("verbose")),
            log_json=obj.get("log_format") == "json",
        )
    out: Output = obj["output"]
    return out


def settings() -> Settings:
    from ..project.settings import load_settings  # start-up time: pydantic loads when a command needs settings

    out = output()  # logging is configured before anything runs
    obj = options()
    flags = {"uri": obj.get("uri"), "db": obj.get("db"), "migrations_dir": obj.get("dir")}
    if obj.get("no_env") and obj.get("env_file"):
        raise ConfigInvalidError("--env-file and --no-env cannot be combined")
    env_file: Path | Literal[False] | None = False if obj.get("no_env") else obj.get("env_file")
    loaded = load_settings(flags, config_path=obj.get("config"), env_file=env_file)
    if not obj.get("secrets_checked"):
        obj["secrets_checked"] = True
        _export_env_file(env_file)
        _warn_secrets_in_file(out)
        _warn_hidden_pyproject(out)
    return loaded


def _project_file() -> Path | None:
    from ..project.settings import find_project_file  # start-up time: see settings()

    config_path: Path | None = options().get("config")
    return config_path or (Path(os.environ["MONGOSHIFT_CONFIG"]) if os.environ.get("MONGOSHIFT_CONFIG") else find_project_file(Path.cwd()))


def _export_env_file(env_file: Path | Literal[False] | None) -> None:
    """The CLI is the process: like a shell that sources the ``.env``, it hands every variable
    of the file to the code it runs (migrations, hooks, uri_command, uri_factory), never over
    one already set. (``api.load_settings`` only reads the file's settings.)"""
    from ..project.env_file import read_env_file  # start-up time: see settings()
    from ..project.settings import env_file_path

    path = env_file_path(_project_file(), Path.cwd(), env_file)
    if path is not None:
        for name, value in read_env_file(path).items():
            os.environ.setdefault(name, value)


def _warn_secrets_in_file(out: Output) -> None:
    """A project file is committed: a password in its ``uri`` is a leak waiting to happen."""
    from ..project.settings import read_project_file  # start-up time: see settings()

    path = _project_file()
    if path is None:
        return
    uri = read_project_file(path).get("uri")
    found = uri_secrets(uri) if isinstance(uri, str) else []
    if found:
        out.warn(
            f"{path.name} holds secrets in its uri ({', '.join(found)}): move the full URI to MONGOSHIFT_URI "
            "(environment or a .env file kept out of git) and keep the file's uri without them"
        )


def _warn_hidden_pyproject(out: Output) -> None:
    """mongoshift.toml comes first: a ``[tool.mongoshift]`` section beside it is not read, and its settings
    (a ``strict``, the ``hooks``) would be dropped without a word."""
    from ..project.settings import hidden_pyproject  # start-up time: see settings()

    if options().get("config") is not None or os.environ.get("MONGOSHIFT_CONFIG"):  # the file was named: a choice
        return
    cwd = Path.cwd()
    hidden = hidden_pyproject(cwd) if (cwd / "mongoshift.toml").is_file() else None
    if hidden is not None:
        out.warn(
            f"{hidden.name} has a [tool.mongoshift] section that is not read: mongoshift.toml is the project file and "
            "comes first; move those settings into mongoshift.toml and delete the section"
        )


#: What the first Ctrl-C or SIGTERM makes a command do, said on stderr (each command names its own boundary).
STOPPING = "stopping: nothing new starts (press Ctrl-C again to stop now)"
#: The migration line's (``up``, ``down``, ``redo``): the migration running is told through ``ctx.cancelled``.
LINE_STOPPING = "stopping: nothing new starts and ctx.cancelled is set (press Ctrl-C again to stop now)"
#: What a second signal leaves behind, said as the process ends at once (each command that holds something else names it).
LOCK_LEFT_BEHIND = (
    "a lock this run held stays held: the next run on this host takes it over at once (this process is gone); "
    "from another host, wait for its time-to-live (lock_ttl_seconds) or 'mongoshift unlock' clears it"
)
LEFT_BEHIND = f"{LOCK_LEFT_BEHIND}; a migration that was running is not recorded and runs again with the next run"
#: ``converge``'s: no migration runs there; a step the server had begun goes on without the process.
CONVERGE_LEFT_BEHIND = (
    f"{LOCK_LEFT_BEHIND}; a step the server had begun (an index build) goes on there and is not in the converge log: "
    "'mongoshift converge --check' says where the collections stand"
)


def first_signal_notice(stopping: str, signum: int) -> str:
    """The first signal's line, for the signal that came: a pod sent SIGTERM (Kubernetes, systemd) has no
    Ctrl-C to press, and its log should say which signal it got and that another one stops it at once."""
    if signum != signal.SIGINT:
        name = signal.Signals(signum).name
        return stopping.replace("(press Ctrl-C again to stop now)", f"({name} received: a second {name} or Ctrl-C stops now)")
    return stopping


def run_async[T](make: Callable[[CancelSignal], Awaitable[T]], *, stopping: str = STOPPING, left_behind: str = LEFT_BEHIND) -> T:
    """Run a command; the first Ctrl-C asks it to stop at the next boundary (``stopping`` says
    which), the second ends it now (``left_behind`` says what that leaves and how to clear it).

    Called from a running event loop (the CLI hosted in-process by an async application or test),
    the command runs on a loop of its own in a worker thread, blocking the caller meanwhile, and
    Ctrl-C / SIGTERM reach it through handlers set in the calling thread for that time."""
    cancel = CancelSignal()
    context = click.get_current_context(silent=True)
    options = context.find_root().ensure_object(dict) if context else {}
    json_mode, log_json = bool(options.get("json")), options.get("log_format") == "json"

    def notice(message: str) -> None:
        """The signal's line on stderr: a JSON line under ``--log-format json`` (every stderr line is
        one); on a terminal, on a line of its own past the ``^C`` it echoed."""
        if log_json:
            sys.stderr.write(json_line("warning", message) + "\n")
        else:
            lead = "\n" if sys.stderr.isatty() else ""
            sys.stderr.write(f"{lead}mongoshift: {message}\n")
        sys.stderr.flush()

    def on_signal(signum: int) -> None:
        if cancel.is_set():
            # Nothing is cleaned up now: say what is left behind and how to clear it.
            left = left_behind
            notice(f"second signal, stopping now: {left}")
            if json_mode:  # even now, one JSON document
                stopped = {
                    "code": 128 + signum,
                    "kind": "second_signal",
                    "message": f"stopped at once by a second {signal.Signals(signum).name}: {left}",
                }
                Output.emit_json({"error": stopped})
            os._exit(128 + signum)
        cancel.set(f"interrupted by {signal.Signals(signum).name}")
        notice(first_signal_notice(stopping, signum))

    async def main() -> T:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, on_signal, signum)
            except (NotImplementedError, RuntimeError):  # not the main thread (see below), or Windows
                pass
        return await make(cancel)

    try:
        asyncio.get_running_loop()
        beside = True
    except RuntimeError:
        beside = False
    if not beside:  # outside the except: a command's traceback (-v) does not begin with "no running event loop"
        return asyncio.run(main())
    return _beside_running_loop(main, on_signal)


def _beside_running_loop[T](main: Callable[[], Awaitable[T]], on_signal: Callable[[int], None]) -> T:
    """``asyncio.run(main())`` in a worker thread: ``asyncio.run`` refuses a thread whose loop runs."""

    async def run() -> T:
        return await main()

    saved: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():  # only the main thread may set signal handlers
        for signum in (signal.SIGINT, signal.SIGTERM):
            saved[signum] = signal.signal(signum, lambda received, _frame: on_signal(received))
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongoshift-cli") as pool:
            return pool.submit(asyncio.run, run()).result()
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def can_ask() -> bool:
    """Whether a question can be put to someone: a terminal on stdin and no ``--json`` (a script reads that)."""
    return not output().json_mode and sys.stdin.isatty()


def named_file(s: Settings, name: str) -> None:
    """Refuse a NAME that is no migration file (exit 8, 19) before asking about it: a prompt, or exit 42
    without a terminal, about a typo helps nobody. Reads the folder's listing only."""
    from ..project.loader import discover, find, resolve_name  # start-up time: only the commands that ask about a file

    find(discover(s.migrations_dir), resolve_name(name, s.migrations_dir))


def confirm(question: str, yes: bool) -> None:
    """Ask before something destructive; without anyone to ask, refuse (exit 42) unless --yes.

    Every prompt of the CLI goes through here or :func:`can_ask`, so all of them refuse the
    same way: a missing answer is not a configuration error."""
    if yes:
        return
    if not can_ask():
        raise ConfirmationRequiredError(f"{question} Nothing was changed: pass --yes to confirm when not running interactively.")
    if not click.confirm(question, default=False):
        raise RunAbortedError("cancelled at the prompt")


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: ``mongoshift, version X``, or ``{"version": "X"}`` after ``--json``."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version  # start-up time: only when asked

    number = version("mongoshift")
    if ctx.find_root().ensure_object(dict).get("json"):
        Output.emit_json({"version": number})
    else:
        click.echo(f"mongoshift, version {number}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
# not eager: after --json, wherever that is
@click.option("-V", "--version", is_flag=True, expose_value=False, callback=_version, help="Show the version and exit.")
@global_options
def cli() -> None:
    """MongoDB schema and data migrations."""


WAIT_HELP = "Wait for a held lock (SECONDS, default 600) instead of failing."
