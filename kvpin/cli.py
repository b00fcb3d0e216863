"""`kvpin` command line: flags -> config objects -> the subcommand's run(). No logic here.

Each subcommand imports its package lazily, so `kvpin sim` does not pay for kopf and the
operator does not pay for the router.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from kvpin import __version__, logs


def _add_logging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")


def _operator_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "operator",
        help="reconcile CachedEndpoints into pinned GPU pod pools",
        description="Run the kopf operator that turns CachedEndpoints into StatefulSets, "
        "headless Services and PDBs, and publishes status.ring for the router.",
    )
    parser.add_argument(
        "-n", "--namespace", action="append", default=[], metavar="NS",
        help="watch this namespace (repeatable, globs allowed); default: all namespaces",
    )  # fmt: skip
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="watch the cluster")
    parser.add_argument("--resync-seconds", type=float, default=60.0, help="periodic resync")
    parser.add_argument(
        "--peering", metavar="NAME", help="kopf peering name for several replicas (opt-in)"
    )
    parser.add_argument("--sim-image", help="image for the `sim` engine preset")
    parser.add_argument("--host", default="0.0.0.0", help="bind address of /healthz, /metrics")
    parser.add_argument("--liveness-port", type=int, default=8080, help="/healthz port, 0: off")
    parser.add_argument("--metrics-port", type=int, default=9090, help="/metrics port, 0: off")
    _add_logging(parser)
    parser.set_defaults(run=_run_operator)


def _run_operator(args: argparse.Namespace) -> None:
    import kopf

    from kvpin.operator import running, settings

    kopf.configure(
        verbose=args.log_level.upper() == "DEBUG",
        log_format=kopf.LogFormat.JSON if args.log_json else kopf.LogFormat.FULL,
    )
    config = settings.OperatorConfig(
        namespaces=() if args.all_namespaces else tuple(args.namespace),
        resync_seconds=args.resync_seconds,
        peering=args.peering,
        sim_image=args.sim_image or settings.DEFAULT_SIM_IMAGE,
        liveness_host=args.host,
        liveness_port=args.liveness_port,
        metrics_port=args.metrics_port,
    )
    running.run(config)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="kvpin", description="Keep LLM prompt caches hot on Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"kvpin {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _operator_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `kvpin` console script."""
    args = build_parser().parse_args(argv)
    if args.command != "operator":  # kopf configures logging for the operator itself
        logs.configure(level=args.log_level, json_format=args.log_json)
    run: Callable[[argparse.Namespace], None] = args.run
    try:
        run(args)
    except KeyboardInterrupt:
        sys.exit(130)
