"""``python -m mongoshift.embedded``: run the embedded server in the foreground.

The URI is the first line of stdout (flushed as soon as the server accepts
connections); logs go to stderr. SIGINT or SIGTERM stops it (writing the
``--path`` snapshot) with exit status 0. A ``--path`` that is not a readable
snapshot (or names a folder, or one that does not exist, or one another server
serves) exits 6 at start, one the
system refuses to read or write 44; an address that cannot be listened on exits 45.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from pathlib import Path

from mongoshift.embedded.server import (
    DEFAULT_CHANGE_HISTORY,
    DEFAULT_HOST,
    DEFAULT_PORT,
    AddressUnavailable,
    EmbeddedServerUnavailable,
    run,
)
from mongoshift.embedded.snapshot import SnapshotError, SnapshotIOError

#: Exit status for a ``--path`` that cannot be used (mongoshift's CONFIG_INVALID).
PATH_UNUSABLE = 6
#: Exit status when the system refuses to read or write the snapshot (mongoshift's IO_FAILED).
PATH_IO_FAILED = 44
#: Exit status when the host and port cannot be listened on (mongoshift's ADDRESS_IN_USE).
ADDRESS_IN_USE = 45


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mongoshift.embedded",
        description="Run a local MongoDB-compatible server (mongoeco memory engine, patched). "
        "Prints its URI as the first line of stdout.",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port, 0 for a free one (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--path",
        type=Path,
        default=None,
        help="snapshot file: loaded at start, written at clean shutdown (a crash loses "
        "everything since the last clean shutdown); default: memory only",
    )
    parser.add_argument(
        "--change-history",
        type=int,
        default=DEFAULT_CHANGE_HISTORY,
        metavar="N",
        help="events change streams can resume from; older ones are dropped "
        f"(default {DEFAULT_CHANGE_HISTORY})",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="serve a standalone mongod instead of a single-node replica set: no transactions, "
        "retryable writes or change streams",
    )
    parser.add_argument("--log-level", default="INFO", help="stderr log level (default INFO)")
    # The process that starts it as its child (embedded_server): the server stops once that process is gone.
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.change_history < 1:
        parser.error("--change-history must be at least 1")
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code = run(
            args.host, args.port, args.path, change_history=args.change_history, standalone=args.standalone, parent_pid=args.parent_pid
        )
        # The process ends next: frozen, what the server held is left to its end, not walked by the last collection.
        gc.freeze()
        return code
    except EmbeddedServerUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except AddressUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return ADDRESS_IN_USE
    except SnapshotIOError as error:
        # The same statuses as `mongoshift embedded`: 44 when the system refuses the file, 6 for a bad one.
        print(f"error: {error}", file=sys.stderr)
        return PATH_IO_FAILED
    except SnapshotError as error:
        # The same status as `mongoshift embedded`: 6, an unusable --path.
        print(f"error: {error}", file=sys.stderr)
        return PATH_UNUSABLE
    except Exception as error:
        logging.getLogger("mongoshift.embedded").exception("embedded server failed")
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
