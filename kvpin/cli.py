"""`kvpin` command line: flags -> config objects -> the subcommand's run(). No logic here.

Each subcommand imports its package lazily, so `kvpin sim` does not pay for kopf and the
operator does not pay for the router.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from kvpin import __version__, logs

if TYPE_CHECKING:
    from kvpin.bench import runner, scoring


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
        sim_image=args.sim_image or settings.DEFAULT_SIM_IMAGE,
        liveness_host=args.host,
        liveness_port=args.liveness_port,
        metrics_port=args.metrics_port,
    )
    running.run(config)


def _router_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "router",
        help="route each request to the pod that holds its prefix",
        description="Serve the OpenAI API and send each request of an endpoint to the member "
        "of its pool whose KV cache holds the request's prefix, with bounded loads.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config", metavar="FILE", help="static endpoints (YAML), reloaded on change"
    )
    source.add_argument("--kubernetes", action="store_true", help="follow CachedEndpoints")
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="with --kubernetes: namespace to watch (repeatable; default all)",
    )
    parser.add_argument("--kubeconfig", help="with --kubernetes: a kubeconfig file")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--connect-timeout", type=float, default=5.0, help="seconds")
    parser.add_argument("--first-byte-timeout", type=float, default=300.0, help="seconds")
    parser.add_argument("--idle-timeout", type=float, default=60.0, help="seconds between chunks")
    parser.add_argument(
        "--client-timeout", type=float, default=60.0,
        help="seconds for a client to send its body, and to take each chunk of the answer",
    )  # fmt: skip
    parser.add_argument("--max-attempts", type=int, default=3, help="members tried per request")
    parser.add_argument("--eject-seconds", type=float, default=10.0, help="failed member cooldown")
    parser.add_argument(
        "--eject-after", type=int, default=3,
        help="failures on distinct requests (that other members served) that eject a member",
    )  # fmt: skip
    parser.add_argument("--max-body-bytes", type=int, default=32 * 2**20, help="413 above this")
    parser.add_argument("--max-messages", type=int, default=10_000, help="400 above this")
    parser.add_argument(
        "--parse-workers", type=int, default=1,
        help="processes that parse large bodies off the event loop (0: parse inline)",
    )  # fmt: skip
    parser.add_argument(
        "--prefix-break-header",
        action="store_true",
        help="name the broken zone in an X-Kvpin-Prefix-Break response header",
    )
    parser.add_argument(
        "--auth-tokens-file", metavar="FILE",
        help="accept only these bearer tokens: one per line, `TOKEN [TENANT]`",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-auth", action="store_true", help="ask for a bearer token on /metrics too"
    )
    parser.add_argument(
        "--holdings-bytes", type=int, default=32 * 2**20,
        help="memory per endpoint for the guesses of what each member holds",
    )  # fmt: skip
    parser.add_argument(
        "--engine-metrics-interval", type=float, default=0.25,
        help="seconds between reads of each member's /metrics (0: never)",
    )  # fmt: skip
    replicas = parser.add_argument_group(
        "replicas", "several router replicas: each endpoint is decided by one of them, "
        "which the others relay its requests to",
    )  # fmt: skip
    replicas.add_argument(
        "--replica", metavar="URL", help="this replica's URL as the others reach it"
    )
    source = replicas.add_mutually_exclusive_group()
    source.add_argument("--replicas", metavar="URL,...", help="every replica's URL, this one's too")
    source.add_argument(
        "--replicas-dns", metavar="NAME",
        help="a DNS name listing every replica's address (a headless Service), followed",
    )  # fmt: skip
    _add_logging(parser)
    parser.set_defaults(run=_run_router)


def _replicas(args: argparse.Namespace) -> dict[str, object]:
    """The replica settings from the flags; exits with what is wrong with them."""
    import urllib.parse

    listed = tuple(u.strip().rstrip("/") for u in (args.replicas or "").split(",") if u.strip())
    if not (listed or args.replicas_dns):
        if args.replica:
            raise SystemExit("--replica needs --replicas or --replicas-dns")
        return {}
    if not args.replica:
        raise SystemExit("--replicas and --replicas-dns need --replica (this replica's URL)")
    me = args.replica.rstrip("/")
    for url in (me, *listed):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
            raise SystemExit(f"replica {url!r}: expected http(s)://host:port")
    if listed and me not in listed:
        raise SystemExit(f"--replicas must list this replica's own URL ({me})")
    return {"replica": me, "replicas": listed, "replicas_dns": args.replicas_dns or ""}


def _run_router(args: argparse.Namespace) -> None:
    import pathlib

    from kvpin.router import app, auth, bodies, config, outliers
    from kvpin.router.membership import kubernetes, static

    tokens = auth.Tokens()
    if args.auth_tokens_file:
        try:
            tokens = auth.parse_tokens(pathlib.Path(args.auth_tokens_file).read_text())
        except (auth.TokensError, OSError, UnicodeDecodeError) as err:
            raise SystemExit(f"--auth-tokens-file {args.auth_tokens_file}: {err}") from None
        if not tokens:
            raise SystemExit(f"--auth-tokens-file {args.auth_tokens_file}: no token in the file")
    settings = config.ProxySettings(
        timeouts=config.Timeouts(
            connect=args.connect_timeout,
            first_byte=args.first_byte_timeout,
            idle=args.idle_timeout,
            client_body=args.client_timeout,
            client_write=args.client_timeout,
        ),
        max_attempts=args.max_attempts,
        outliers=outliers.OutlierSettings(args.eject_after, args.eject_seconds),
        max_body_bytes=args.max_body_bytes,
        parse=config.ParseSettings(
            workers=args.parse_workers, limits=bodies.Limits(max_messages=args.max_messages)
        ),
        break_header=args.prefix_break_header,
        tokens=tokens,
        metrics_auth=args.metrics_auth,
        holdings_bytes=args.holdings_bytes,
        engine_metrics_interval=args.engine_metrics_interval,
        **_replicas(args),
    )
    membership = (
        kubernetes.KubernetesMembership(
            args.namespace, client=lambda: kubernetes.api_client(args.kubeconfig)
        )
        if args.kubernetes
        else static.StaticMembership(pathlib.Path(args.config))
    )
    app.run(app.make_app(membership, settings), host=args.host, port=args.port)


def _sim_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from kvpin.sim import config

    parser = sub.add_parser(
        "sim",
        help="a GPU-free OpenAI-compatible engine with a real prefix KV cache",
        description="Serve an OpenAI-compatible engine that simulates vLLM's prefix caching, "
        "continuous batching and timing, without a GPU.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=8000)
    add("--model", default="sim-8b", help="model name (and block-hash salt)")
    add(
        "--served-model-name",
        nargs="+",
        default=[],
        metavar="NAME",
        help="names accepted as `model` (default: --model)",
    )
    add("--adapter", default="", help="adapter name, salted into block hashes")
    add(
        "--pod-name",
        default=os.environ.get("POD_NAME"),
        help="reported as `system_fingerprint` in every response, so clients can tell which "
        "pod answered (default: $POD_NAME; none: the field is left out, as vLLM does)",
    )
    cache = parser.add_argument_group("prefix cache")
    cache.add_argument("--block-size", type=int, default=16, help="tokens per block")
    cache.add_argument("--kv-cache-bytes", type=int, help="cache size in bytes (with the profile)")
    cache.add_argument("--kv-cache-blocks", type=int, help="cache size in blocks (overrides bytes)")
    cache.add_argument(
        "--model-profile",
        choices=sorted(config.PROFILES),
        default=config.DEFAULT_PROFILE,
        help="KV bytes per token come from this",
    )
    cache.add_argument("--max-model-len", type=int, default=131_072, help="context length")
    cache.add_argument("--tokenizer", help="a Hugging Face tokenizer.json instead of words")
    timing = parser.add_argument_group("timing")
    timing.add_argument("--prefill-tps", type=float, default=10_000.0, help="prefill tokens/s")
    timing.add_argument("--decode-tps", type=float, default=50.0, help="decode tokens/s/sequence")
    timing.add_argument("--step-overhead-ms", type=float, default=2.0, help="per scheduler step")
    timing.add_argument("--max-batch-tokens", type=int, default=8192, help="token budget per step")
    timing.add_argument("--max-running", type=int, default=64, help="sequences batched at once")
    timing.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiplies every duration: 0.01 is 100x faster, 0 no latency",
    )
    parser.add_argument(
        "--debug-routes", action="store_true",
        help="serve POST /debug/cached_tokens (what the cache holds of a prompt; benchmarks)",
    )  # fmt: skip
    faults = parser.add_argument_group("faults (for tests)")
    faults.add_argument("--startup-delay", type=float, default=0.0, help="seconds of 503 /health")
    faults.add_argument("--error-rate", type=float, default=0.0, help="fraction answered 500")
    faults.add_argument(
        "--drop-rate", type=float, default=0.0, help="fraction of dropped connections"
    )
    faults.add_argument("--stall-rate", type=float, default=0.0, help="fraction of stalled streams")
    faults.add_argument("--stall-seconds", type=float, default=3600.0, help="length of a stall")
    faults.add_argument("--seed", type=int, default=0, help="seed of the fault dice")
    add("--max-body-bytes", type=int, default=32 * 2**20, help="larger bodies get 413")
    _add_logging(parser)
    parser.set_defaults(run=_run_sim)


def _run_sim(args: argparse.Namespace) -> None:
    from kvpin.sim import config, engine, server

    profile = config.PROFILES[args.model_profile]
    if args.kv_cache_blocks is not None:
        blocks = args.kv_cache_blocks
    elif args.kv_cache_bytes is not None:
        blocks = config.capacity_blocks(args.kv_cache_bytes, profile, args.block_size)
    else:
        blocks = config.SimConfig.capacity_blocks
    sim_config = config.SimConfig(
        model=args.model,
        served_model_names=tuple(args.served_model_name),
        adapter=args.adapter,
        pod_name=args.pod_name,
        block_size=args.block_size,
        capacity_blocks=blocks,
        max_model_len=args.max_model_len,
        max_body_bytes=args.max_body_bytes,
        tokenizer=args.tokenizer,
        debug_routes=args.debug_routes,
        timing=engine.Timing(
            prefill_tokens_per_s=args.prefill_tps,
            decode_tokens_per_s=args.decode_tps,
            step_overhead_s=args.step_overhead_ms / 1000,
            max_batch_tokens=args.max_batch_tokens,
            max_running=args.max_running,
            time_scale=args.time_scale,
        ),
        faults=config.Faults(
            startup_delay_s=args.startup_delay,
            error_rate=args.error_rate,
            drop_rate=args.drop_rate,
            stall_rate=args.stall_rate,
            stall_s=args.stall_seconds,
            seed=args.seed,
        ),
    )
    server.run(sim_config, host=args.host, port=args.port)


def _bench_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("bench", help="benchmarks that print a table")
    modes = parser.add_subparsers(dest="mode", required=True, metavar="MODE")
    sim = modes.add_parser("sim", help="requests per second of one `kvpin sim` on one core")
    sim.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    sim.add_argument("--connections", type=int, default=32, help="concurrent connections")
    _add_logging(sim)
    sim.set_defaults(run=_run_bench_sim)
    workload = modes.add_parser(
        "workload", help="replay agent conversations through each routing policy and compare"
    )
    _add_workload_flags(workload)
    workload.add_argument(
        "--scenario", choices=("scale",),
        help="change the pool during each run: start with pods-1, add one at 1/3, restart one "
        "at 2/3, remove one at 5/6; prints figures per phase (policies kvpin-bare: kvpin "
        "without warm-up and kept homes; kvpin-static: kvpin on an unchanging pool)",
    )  # fmt: skip
    _add_repeat(workload)
    _add_seeds(workload)
    workload.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    _add_records(workload)
    workload.add_argument("--chart", metavar="PNG", help="also write a chart (needs matplotlib)")
    _add_logging(workload)
    workload.set_defaults(run=_run_bench_workload)
    sweep = modes.add_parser(
        "sweep", help="the agentic workload at rising arrival rates: each policy's knee"
    )
    sweep.add_argument("--rates", default="1,2,4,8",
                       help="conversations arriving per second, comma-separated")  # fmt: skip
    sweep.add_argument("--duration", type=float, default=15.0,
                       help="seconds of arrivals at each rate")  # fmt: skip
    _add_workload_flags(sweep)
    sweep.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    sweep.add_argument("--chart", metavar="PNG", help="also write a chart (needs matplotlib)")
    _add_logging(sweep)
    sweep.set_defaults(run=_run_bench_sweep)
    trace = modes.add_parser(
        "trace", help="replay a Mooncake-format trace open loop through each routing policy"
    )
    trace.add_argument("--trace", metavar="FILE", help="JSONL trace (default: a synthetic one)")
    trace.add_argument("--start", type=int, default=0, help="skip the first N requests")
    trace.add_argument("--limit", type=int, help="replay at most N requests")
    trace.add_argument("--speed", type=float, default=1.0, help="arrival time divisor")
    _add_workload_flags(trace)
    _add_repeat(trace)
    _add_seeds(trace, what="the synthetic trace")
    trace.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    _add_records(trace)
    trace.add_argument("--chart", metavar="PNG", help="also write a chart (needs matplotlib)")
    _add_logging(trace)
    trace.set_defaults(run=_run_bench_trace)
    router = modes.add_parser(
        "router", help="router throughput and added latency, beside sglang-router if installed"
    )
    router.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    router.add_argument("--connections", type=int, default=32, help="concurrent connections")
    _add_logging(router)
    router.set_defaults(run=_run_bench_router)


def _add_repeat(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeat", type=int, default=1, metavar="N",
        help="run every policy N times, round after round: the table shows each policy's "
        "means, a second table its lowest and highest figures (the noise between runs)",
    )  # fmt: skip


def _add_records(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--records", metavar="FILE",
        help="also write every request's pod, TTFT and cached tokens as JSON lines (no prompt "
        "text), to compare policies request by request",
    )  # fmt: skip


def seed_list(text: str) -> list[int]:
    """`--seeds 1-4,7` -> [1, 2, 3, 4, 7]."""
    seeds: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            seeds += range(int(first), int(last or first) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of seeds: {text!r} (e.g. 1-4,7)") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"no seeds in {text!r} (e.g. 1-4,7)")
    return list(dict.fromkeys(seeds))


def _add_seeds(parser: argparse.ArgumentParser, what: str = "the workload") -> None:
    parser.add_argument(
        "--seeds", type=seed_list, metavar="LIST",
        help=f"run everything once per seed of {what} (e.g. 1-8 or 1,3,5): a table per seed, "
        "then each policy's means over the seeds and on how many it led; --json writes "
        "every seed's rows, each with its seed, --chart the means over the seeds",
    )  # fmt: skip


def _run_bench_sim(args: argparse.Namespace) -> None:
    from kvpin.bench import sim_throughput

    config = sim_throughput.SimBenchConfig(duration_s=args.duration, connections=args.connections)
    print(sim_throughput.run(config))


def _add_workload_flags(
    parser: argparse.ArgumentParser,
    *,
    conversations: int = 48,
    turns: int = 6,
    arrival_rate: float | None = None,
    think: float | None = None,
    time_scale: float | None = None,
) -> None:
    from kvpin.bench import runner, workloads

    w = workloads.WorkloadConfig()
    b = runner.BenchConfig()
    add = parser.add_argument
    add("--variant", choices=workloads.VARIANTS, default=w.variant, help="workload shape")
    add("--conversations", type=int, default=conversations, help="conversations replayed")
    add("--turns", type=int, default=turns, help="turns per conversation")
    add("--agents", type=int, default=w.agents, help="distinct system prompts and tool sets")
    add("--system-words", type=int, default=w.system_words, help="system prompt length")
    add("--tools", type=int, default=w.tool_count, help="tool schemas per agent")
    add("--user-words", type=int, default=w.user_words, help="length of each user turn")
    add("--answer-tokens", type=int, default=w.answer_tokens, help="max_tokens of each turn")
    add("--endpoints", type=int, default=w.endpoints, help="endpoints (Zipf-skewed popularity)")
    add("--seed", type=int, default=w.seed, help="workload seed")
    add("--arrival-rate", type=float, default=arrival_rate or w.arrival_rate,
        help="agentic: conversations starting per second")  # fmt: skip
    add("--think", type=float, default=think or w.think_s,
        help="agentic: mean seconds between turns")  # fmt: skip
    add("--burst", action="store_true",
        help="bursty arrivals (agentic workload; the synthetic trace)")  # fmt: skip
    add("--pods", type=int, default=b.pods, help="simulators per endpoint")
    add("--cache-blocks", type=int,
        help="KV blocks per simulator (default: agentic, derived from the workload's live "
        f"working set; other variants {b.cache_blocks})")  # fmt: skip
    add(
        "--vram",
        metavar="QUANTITY",
        help="per-pod VRAM reservation (e.g. 512Mi) to derive the cache from, as the operator "
        "does with an 8B model's KV size; overrides --cache-blocks",
    )
    add("--prefill-tps", type=float, default=b.prefill_tps, help="simulated prefill tokens/s")
    add("--decode-tps", type=float, default=b.decode_tps, help="simulated decode tokens/s")
    add("--time-scale", type=float, default=time_scale or b.time_scale,
        help="simulated time multiplier")  # fmt: skip
    add("--concurrency", type=int, default=b.concurrency, help="conversations at once")
    add("--prefix-chars", type=int, default=b.prefix_chars, help="kvpin routing.prefixChars")
    add("--load-factor", type=float, default=b.load_factor, help="kvpin routing.loadFactor")
    add("--move-margin", type=float, default=b.move_margin, help="kvpin routing.moveMargin")
    add(
        "--policies",
        default=",".join(b.policies),
        help="comma-separated: kvpin, kvpin-session, kvpin-endpoint, oracle, random, round-robin, "
        "least-inflight, sglang-router:cache_aware, sglang-router:round_robin, "
        "vllm-router:cache_aware, vllm-router:consistent_hash; a kvpin policy may carry router "
        "settings to compare with the default in the same run: kvpin@moveMargin=1",
    )


def _bench_config(args: argparse.Namespace) -> runner.BenchConfig:
    from kvpin.bench import runner, workloads
    from kvpin.operator import quantity
    from kvpin.sim import config

    workload = workloads.WorkloadConfig(
        variant=args.variant, conversations=args.conversations, turns=args.turns,
        agents=args.agents, system_words=args.system_words, tool_count=args.tools,
        user_words=args.user_words, answer_tokens=args.answer_tokens,
        endpoints=args.endpoints, seed=args.seed, arrival_rate=args.arrival_rate,
        think_s=args.think, burst=args.burst,
    )  # fmt: skip
    blocks = args.cache_blocks
    if args.vram:
        profile = config.PROFILES[config.DEFAULT_PROFILE]
        blocks = config.capacity_blocks(quantity.parse_bytes(args.vram), profile, 16)
    if blocks is None:
        blocks = runner.default_cache_blocks(workload, args.pods)
    return runner.BenchConfig(
        workload=workload,
        pods=args.pods, cache_blocks=blocks, prefill_tps=args.prefill_tps,
        decode_tps=args.decode_tps, time_scale=args.time_scale, concurrency=args.concurrency,
        prefix_chars=args.prefix_chars, load_factor=args.load_factor,
        move_margin=args.move_margin,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        rounds=max(1, getattr(args, "repeat", 1)),
    )  # fmt: skip


def _describe(config: runner.BenchConfig) -> None:
    """Print the agentic workload's cache arithmetic (what makes affinity pay or not)."""
    from kvpin.bench import runner

    if config.workload.variant == "agentic":
        live = runner.live_working_set(config.workload)
        print(live.describe(config.pods, config.cache_blocks * 16))


def _run_bench_workload(args: argparse.Namespace) -> None:
    _each_seed(args, _workload_once)


def _workload_once(args: argparse.Namespace) -> list[scoring.Summary]:
    import dataclasses

    from kvpin.bench import progress, runner, scenarios

    config = _bench_config(args)
    _describe(config)
    if not args.scenario:
        return runner.run(config, progress=progress.ProgressBar(), sink=_records(args))
    config = dataclasses.replace(config, scenario=args.scenario)
    rows = runner.run_scenario(config, progress=progress.ProgressBar(), sink=_records(args))
    print(scenarios.markdown(rows))
    return [summary for summary, _ in rows]


def _each_seed(
    args: argparse.Namespace, once: Callable[[argparse.Namespace], list[scoring.Summary]]
) -> None:
    """Run `once` and report it, for `--seed` or for each of `--seeds`, then over them all."""
    import json
    import pathlib

    from kvpin.bench import report, scoring

    if args.records:
        pathlib.Path(args.records).write_text("")  # each run appends its policies' requests
    if not args.seeds:
        _report(args, once(args))
        return
    per_seed, rows = {}, []
    for seed in args.seeds:
        print(f"\n### seed {seed}")
        one = argparse.Namespace(**{**vars(args), "seed": seed, "json": None, "chart": None})
        summaries = once(one)
        _report(one, summaries)
        per_seed[seed] = scoring.combine(summaries)
        rows += [{"seed": seed, **row} for row in json.loads(report.to_json(per_seed[seed]))]
    print(f"\n### over seeds {', '.join(map(str, args.seeds))}")
    print(report.across_seeds(per_seed))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    means = scoring.combine([s for summaries in per_seed.values() for s in summaries])
    if args.chart and not report.chart(means, pathlib.Path(args.chart)):
        print("no chart: matplotlib is not installed (pip install 'kvpin[charts]')")


def _run_bench_sweep(args: argparse.Namespace) -> None:
    import json
    import pathlib

    from kvpin.bench import progress, report, sweep

    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    config = _bench_config(args)
    _describe(config)
    points = sweep.run(config, rates, duration_s=args.duration, progress=progress.ProgressBar())
    print(sweep.markdown(points))
    for policy in dict.fromkeys(s.policy for _, s in points):
        at = sweep.knee(points, policy)
        print(
            f"{policy}: TTFT p90 passes 3x its low-load value "
            + (f"at {at:g} conversations/s" if at else "nowhere in this sweep")
        )
    if args.json:
        rows = [{"rate": rate, **json.loads(report.to_json([s]))[0]} for rate, s in points]
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    if args.chart and not sweep.chart(points, pathlib.Path(args.chart)):
        print("no chart: matplotlib is not installed (pip install 'kvpin[charts]')")


def _run_bench_trace(args: argparse.Namespace) -> None:
    if args.trace and args.seeds:
        raise SystemExit("--seeds varies the synthetic trace: it cannot vary --trace FILE")
    _each_seed(args, _trace_once)


def _trace_once(args: argparse.Namespace) -> list[scoring.Summary]:
    import pathlib

    from kvpin.bench import progress, runner, traces

    if args.trace:
        with pathlib.Path(args.trace).open() as lines:
            limit = None if args.limit is None else args.start + args.limit
            requests = traces.window(traces.parse(lines, limit=limit), args.start)
    else:
        requests = traces.synthetic(burst=args.burst, seed=args.seed)[: args.limit]
    config = _bench_config(args)
    print(f"{len(requests)} requests over {requests[-1].at_s:.0f}s of trace time at speed "
          f"{args.speed:g}; {config.pods} pods of {config.cache_blocks} blocks")  # fmt: skip
    return runner.run_trace(
        config, requests, speed=args.speed, progress=progress.ProgressBar(), sink=_records(args)
    )


def _records(args: argparse.Namespace) -> runner.Sink:
    """Append each policy's requests to `--records` as JSON lines, labelled with the seed and
    the round (`--repeat`); nothing without it."""
    import collections
    import json
    import pathlib

    from kvpin.bench import report

    rounds: collections.Counter[str] = collections.Counter()

    def write(policy: str, placed: Sequence[scoring.Placement]) -> None:
        if not args.records:
            return
        rounds[policy] += 1
        rows = report.request_rows(policy, placed, seed=args.seed, round=rounds[policy])
        with pathlib.Path(args.records).open("a") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)

    return write


def _report(args: argparse.Namespace, summaries: list[scoring.Summary]) -> None:
    import pathlib

    from kvpin.bench import report, scoring

    combined = scoring.combine(summaries)
    if len(combined) < len(summaries):
        print(f"means of {max(s.rounds for s in combined)} runs per policy (errors: all runs)")
    print(report.markdown(combined))
    if len(combined) < len(summaries):
        print(report.noise(summaries))
    if args.json:
        pathlib.Path(args.json).write_text(report.to_json(combined))
    if args.chart and not report.chart(combined, pathlib.Path(args.chart)):
        print("no chart: matplotlib is not installed (pip install 'kvpin[charts]')")


def _demo_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "demo",
        help="show cache-affinity routing on a laptop: simulated pool, router, baselines",
        description="Start a pool of `kvpin sim` engines with finite caches and a `kvpin "
        "router`, replay multi-turn agent conversations through several routing policies, "
        "and print what each achieves. No cluster, no GPU.",
    )
    # small enough to run every policy in under a minute on two cores
    _add_workload_flags(parser, conversations=24, turns=4, arrival_rate=5.0, think=0.25,
                        time_scale=0.1)  # fmt: skip
    parser.add_argument("--chart", metavar="PNG", default="kvpin-demo.png", help="chart file")
    _add_logging(parser)
    parser.set_defaults(run=_run_demo, log_level="WARNING")


def _run_demo(args: argparse.Namespace) -> None:
    import pathlib
    import tempfile

    from kvpin.bench import demo, progress, report, runner

    with tempfile.TemporaryDirectory() as tmp:
        calls, careless = demo.checks(tmp)
    print("1. Two calls with the same long system prompt, through the router (openai client):")
    for i in range(2):
        prompt, cached, hits = calls.prompt_tokens[i], calls.cached_tokens[i], calls.hit_tokens[i]
        print(f"   call {i + 1}: prompt_tokens {prompt:,}, cached_tokens {cached:,} "
              f"(prompt_cache_hit_tokens {hits:,})")  # fmt: skip
    config = _bench_config(args)
    print(f"\n2. {args.conversations} agent conversations ({args.variant}) on {config.pods} "
          f"simulated pods, through each policy:")  # fmt: skip
    _describe(config)
    summaries = runner.run(config, progress=progress.ProgressBar())
    print(report.markdown(summaries))
    print(demo.verdict(summaries))
    zones = ", ".join(f"{z} {n}" for z, n in sorted(careless.breaks.items())) or "none"
    print(f"\n3. A careless client that writes the time into its system prompt: "
          f"{careless.cached_tokens:,} tokens cached over {careless.turns} turns; the router's "
          f"kvpin_router_prefix_breaks_total names it: {zones}.")  # fmt: skip
    if report.chart(summaries, pathlib.Path(args.chart)):
        print(f"chart: {args.chart}")


def _run_bench_router(args: argparse.Namespace) -> None:
    from kvpin.bench import router_throughput

    config = router_throughput.RouterBenchConfig(
        duration_s=args.duration, connections=args.connections
    )
    print(router_throughput.run(config))


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="kvpin", description="Keep LLM prompt caches hot on Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"kvpin {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _operator_parser(sub)
    _router_parser(sub)
    _sim_parser(sub)
    _bench_parser(sub)
    _demo_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `kvpin` console script."""
    args = build_parser().parse_args(argv)
    if args.command != "operator":  # kopf configures logging for the operator itself
        logs.configure(level=args.log_level, json_format=args.log_json)
    run: Callable[[argparse.Namespace], None] = args.run
    if args.command in ("bench", "demo"):  # they start servers: SIGTERM must stop them too
        signal.signal(signal.SIGTERM, _terminated)
    try:
        run(args)
    except KeyboardInterrupt:
        sys.exit(130)


def _terminated(signum: int, _frame: FrameType | None) -> NoReturn:
    """SIGTERM (`timeout`, `kill`, a CI job cancelled) as an exit through every `finally`,
    which stops the servers a benchmark started: Python's default ends the process at once
    and leaves them running."""
    raise SystemExit(128 + signum)
