"""``casesignd serve`` with the test suite's parts plugged in, for the daemons the
tests start (tests/daemon.py) and the scripts that start theirs the same way.

    python -m tests.serve --config FILE [--node NAME] [--listen HOST:PORT]
                          [--sign-delay-ms MS] [--lenient-labels]

It plugs in, through :class:`casesignd.daemon.lifecycle.Extras` (the interfaces the
daemon's own parts use): the ``test`` job kind (tests/exercise_kind.py); with
``--sign-delay-ms``, a key that waits before every signature (tests/slow_signer.py);
and metric labels that raise on a value outside their set, unless
``--lenient-labels`` (a load script that only measures).
"""

from __future__ import annotations

import argparse
import sys

# Nothing heavy at the top: the daemon's worker processes import this module again
# (as the main module of the process that started them) before they do their work.


def main(argv: list[str] | None = None) -> int:
    from casesignd.daemon import server
    from casesignd.daemon.lifecycle import Extras
    from tests.exercise_kind import ExerciseKind
    from tests.slow_signer import SlowSigner

    ap = argparse.ArgumentParser(prog="python -m tests.serve", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the daemon's config file")
    ap.add_argument("--node", help="this daemon's name among those on one store")
    ap.add_argument("--listen", metavar="HOST:PORT", help="override server.listen")
    ap.add_argument("--sign-delay-ms", type=int, default=0,
                    help="wait this long before every signature")
    ap.add_argument("--lenient-labels", action="store_true",
                    help="record a metric label value outside its set as \"other\"")
    args = ap.parse_args(argv)
    delay_s = args.sign_delay_ms / 1000

    extras = Extras(
        kinds=(ExerciseKind(),),
        wrap_signer=(lambda signer: SlowSigner(signer, delay_s)) if delay_s > 0 else None,
        strict_labels=not args.lenient_labels)
    return server.serve(args.config, args.listen, args.node, extras)


if __name__ == "__main__":
    sys.exit(main())
