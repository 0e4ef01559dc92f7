"""``python -m arena demo``: an inference engine's workspace lifecycle, end to end.

Three consumer modules share one arena, as vLLM's attention, fused-MoE and sparse-indexer
layers share its WorkspaceManager:

* attention asks for its output and log-sum-exp buffers every step;
* the MoE block asks for ``workspace13`` and ``workspace2`` in one request and aliases
  ``fused_out`` onto ``workspace13``'s bytes (their lifetimes are disjoint);
* the indexer keeps a persistent key cache and a long-lived scratch view taken at
  warm-up, which is only safe because locked buffers never move.

Two micro-batch threads (dual-batch overlap) each run every module. Warm-up runs the
largest batch, the arena is locked, then many steps run with varying batch sizes; the
table at the end shows capacities, growths, allocations after lock (must be 0), pointer
stability and the peak demand per call site.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from arena.base.events import MB
from arena.core import Arena
from arena.memory.devices import default_device, parse_device

__all__ = ["DemoReport", "main", "run_demo"]

HIDDEN = 1024
HEADS = 16
HEAD_DIM = 64
EXPERTS_TOP_K = 2
MOE_INTERMEDIATE = 2048
INDEX_TOP_K = 256


@dataclass
class DemoReport:
    """What the demo measured; ``ok`` is True when every guarantee held."""

    device: str
    framework: str
    steps: int
    slot_rows: list[tuple[str, float, int, int]]
    allocations_at_lock: int
    allocations_after_lock: int
    pointer_changes_after_lock: int
    long_lived_view_intact: bool
    call_sites: dict[str, int]
    locked_call_us: float
    refused_growth_message: str
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the locked phase allocated nothing and no pointer moved."""
        return (
            self.allocations_after_lock == 0
            and self.pointer_changes_after_lock == 0
            and self.long_lived_view_intact
            and not self.errors
        )


class _Modules:
    """The three consumers, written against one front (torch, NumPy or CuPy; JAX below)."""

    def __init__(self, arena: Arena, framework: str) -> None:
        self.front = arena.front(framework)
        self.arena = arena
        self.dtype = "float16" if framework != "numpy" else "float32"
        self.long_lived: dict[int, Any] = {}
        self.pointers: dict[tuple[int, str], set[int]] = {}

    def _track(self, ubatch: int, name: str, view: Any) -> None:
        self.pointers.setdefault((ubatch, name), set()).add(self.front.data_ptr(view))

    def attention(self, ubatch: int, tokens: int) -> float:
        out, lse = self.front.get_simultaneous(
            ((tokens, HEADS, HEAD_DIM), self.dtype), ((tokens, HEADS), "float32")
        )
        out[...] = 1
        lse[...] = 2
        self._track(ubatch, "attention", out)
        return float(lse.sum())

    def moe(self, ubatch: int, tokens: int) -> float:
        rows = tokens * EXPERTS_TOP_K
        workspace13, workspace2 = self.front.get_simultaneous(
            ((rows, max(MOE_INTERMEDIATE, HIDDEN)), self.dtype),
            ((rows, MOE_INTERMEDIATE // 2), self.dtype),
        )
        workspace13[...] = 1  # gate/up projection output
        workspace2[...] = workspace13[:, : MOE_INTERMEDIATE // 2]
        # fused_out aliases workspace13's bytes: its first use starts after workspace13's last
        fused_out = workspace13.reshape(-1)[: tokens * HIDDEN].reshape(tokens, HIDDEN)
        fused_out[...] = 3
        self._track(ubatch, "moe", workspace13)
        return float(fused_out[0, 0])

    def indexer(self, ubatch: int, tokens: int, warm_up: bool) -> float:
        keys = _indexer_keys(self.front)
        (scores,) = self.front.get_simultaneous(((tokens, INDEX_TOP_K), "float32"))
        if warm_up:
            # a long-lived view, as FlashMLA keeps q_concat_buffer: valid because the
            # buffer never moves after lock
            self.long_lived[ubatch] = scores
        scores[...] = 0.5
        keys[0, 0] += 1
        self._track(ubatch, "indexer", scores)
        return float(keys[0, 0])


def _step(modules: _Modules, ubatch: int, tokens: int, warm_up: bool = False) -> None:
    modules.attention(ubatch, tokens)
    modules.moe(ubatch, tokens)
    modules.indexer(ubatch, tokens, warm_up)


def run_demo(
    device: Any = None,
    framework: str | None = None,
    steps: int = 2000,
    max_tokens: int = 512,
    seed: int = 0,
    *,
    profile: str | None = None,
) -> DemoReport:
    """Play the lifecycle and return what was measured (prints nothing).

    With ``profile``, the arena records into (and is presized from) that profile file;
    without, it records nothing, whatever ``ARENA_PROFILE`` says (an operator's profile
    is the engine's, never the demo's).

    Raises
    ------
    ConfigError
        When ``steps`` is under 2: each micro-batch thread checks its view in a step.
    """
    _check_steps(steps)
    resolved = default_device() if device is None else parse_device(device)
    framework = _default_framework(resolved.is_cuda) if framework is None else framework
    chosen = False if profile is None else profile
    # The spelling given (not the parsed device), so that a refusal names it: 'gpu'.
    spelled = resolved if device is None else device
    with Arena(spelled, ubatches=2, framework=framework, profile=chosen) as arena:
        modules = (_JaxModules if framework == "jax" else _Modules)(arena, framework)
        errors: list[str] = []

        def warm_up(ubatch: int) -> None:
            arena.bind_ubatch(ubatch)
            _step(modules, ubatch, max_tokens, warm_up=True)

        # warm-up: micro-batch 0 runs the largest batch; micro-batch 1 only a small one
        # (never larger: lock() would grow 0 under its long-lived view), so lock() has to
        warm_up(0)  # size it (the sibling sizing vLLM #42275 missed)
        arena.bind_ubatch(1)
        _step(modules, 1, min(8, max_tokens), warm_up=True)
        arena.bind_ubatch(0)
        arena.lock()
        at_lock = arena.stats()
        modules.pointers.clear()

        sizes = random.Random(seed).choices(range(1, max_tokens + 1), k=steps)
        timings: list[float] = []

        def serve(ubatch: int) -> None:
            arena.bind_ubatch(ubatch)
            try:
                for tokens in sizes[ubatch::2]:
                    start = time.perf_counter()
                    _step(modules, ubatch, tokens)
                    timings.append(time.perf_counter() - start)
            except Exception as exc:  # reported in the table, not swallowed
                errors.append(f"ubatch {ubatch}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=serve, args=(u,)) for u in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        after = arena.stats()

        intact = not [
            ub
            for ub, view in modules.long_lived.items()
            if modules.front.data_ptr(view) not in modules.pointers.get((ub, "indexer"), set())
        ]
        try:
            modules.front.get_simultaneous(((max_tokens * 64, HIDDEN), "float32"))
            refused = "(growth was not refused!)"
            errors.append("growth after lock was not refused")
        except Exception as exc:
            refused = str(exc)
        # the locked hot path itself: the attention request, timed alone
        tokens = max_tokens // 2
        specs = (((tokens, HEADS, HEAD_DIM), modules.dtype), ((tokens, HEADS), "float32"))
        calls = 2000
        start = time.perf_counter()
        for _ in range(calls):
            modules.front.get_simultaneous(*specs)
        locked_us = (time.perf_counter() - start) / calls * 1e6

        rows = [
            (f"ubatch {s.ubatch} lane {s.lane}", s.capacity / MB, s.growths, s.calls)
            for s in after.slots
        ]
        return DemoReport(
            device=str(resolved),
            framework=framework,
            steps=steps,
            slot_rows=rows,
            allocations_at_lock=at_lock.allocations,
            allocations_after_lock=after.allocations - at_lock.allocations,
            pointer_changes_after_lock=sum(len(p) - 1 for p in modules.pointers.values()),
            long_lived_view_intact=intact,
            call_sites=after.call_sites,
            locked_call_us=locked_us,
            refused_growth_message=refused,
            errors=errors,
        )


# Defined after run_demo so that the call-site lines the docs show (demo.py:84:attention,
# demo.py:192:run_demo, ...) stay those of the torch, NumPy and CuPy consumers above.
class _JaxModules(_Modules):
    """The same consumers for JAX, whose arrays have no in-place writes.

    Every write goes through ``front.write_into`` (one copy into the arena bytes), which
    returns the array to read the new bytes through. The values written are computed on
    the host with NumPy, so no JAX operation is compiled for each of the many token counts.
    """

    def __init__(self, arena: Arena, framework: str) -> None:
        super().__init__(arena, framework)
        # The persistent keys as last written: the object get_persistent returns may hold
        # a host copy of older bytes on a GPU (docs/jax.md, rule 5).
        self.keys: dict[int, Any] = {}

    def attention(self, ubatch: int, tokens: int) -> float:
        import numpy as np

        out, lse = self.front.get_simultaneous(
            ((tokens, HEADS, HEAD_DIM), self.dtype), ((tokens, HEADS), "float32")
        )
        out = self.front.write_into(out, _full(out, 1))
        lse = self.front.write_into(lse, _full(lse, 2))
        self._track(ubatch, "attention", out)
        return float(np.asarray(lse).sum())

    def moe(self, ubatch: int, tokens: int) -> float:
        import numpy as np

        rows = tokens * EXPERTS_TOP_K
        workspace13, workspace2 = self.front.get_simultaneous(
            ((rows, max(MOE_INTERMEDIATE, HIDDEN)), self.dtype),
            ((rows, MOE_INTERMEDIATE // 2), self.dtype),
        )
        self._track(ubatch, "moe", workspace13)
        gate_up = np.ones(workspace13.shape, workspace13.dtype)  # gate/up projection output
        self.front.write_into(workspace13, gate_up)
        self.front.write_into(workspace2, gate_up[:, : MOE_INTERMEDIATE // 2])
        # fused_out lives in workspace13's first bytes: written through the whole view
        gate_up.reshape(-1)[: tokens * HIDDEN] = 3
        workspace13 = self.front.write_into(workspace13, gate_up)
        fused_out = np.asarray(workspace13).reshape(-1)[: tokens * HIDDEN]
        return float(fused_out.reshape(tokens, HIDDEN)[0, 0])

    def indexer(self, ubatch: int, tokens: int, warm_up: bool) -> float:
        import numpy as np

        keys = _indexer_keys(self.front)
        (scores,) = self.front.get_simultaneous(((tokens, INDEX_TOP_K), "float32"))
        if warm_up:
            self.long_lived[ubatch] = scores
        self.front.write_into(scores, _full(scores, 0.5))
        self._track(ubatch, "indexer", scores)
        updated = np.array(self.keys.get(ubatch, keys))
        updated[0, 0] += 1
        self.keys[ubatch] = self.front.write_into(keys, updated)
        return float(np.asarray(self.keys[ubatch])[0, 0])


def _check_steps(steps: int) -> None:
    """Refuse fewer locked steps than micro-batch threads (one would check nothing)."""
    from arena.errors import ConfigError

    if steps < 2:
        raise ConfigError(
            f"steps={steps}: the demo needs at least 2 locked steps, one per micro-batch "
            "thread (each checks its long-lived view in a step of its own); pass steps=2 "
            "or more"
        )


def _default_framework(cuda: bool) -> str:
    """Torch where it is installed, else CuPy on a GPU and NumPy on the host."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return "torch"
    return "cupy" if cuda else "numpy"


def _full(view: Any, value: float) -> Any:
    """A host array of ``view``'s shape and dtype holding ``value``: write_into copies
    exactly that (it never casts or broadcasts)."""
    import numpy as np

    return np.full(view.shape, value, np.dtype(view.dtype))


def format_report(report: DemoReport) -> str:
    """The report as the tables the demo prints."""
    lines = [
        f"arena demo: device {report.device}, {report.framework} views, 2 micro-batch "
        f"threads, {report.steps} steps after lock",
        "",
        f"{'slot':<16}{'capacity MB':>12}{'growths':>9}{'calls':>8}",
    ]
    lines += [f"{n:<16}{mb:>12.2f}{g:>9}{c:>8}" for n, mb, g, c in report.slot_rows]
    lines += [
        "",
        f"{'check':<44}{'result':>12}",
        f"{'backend allocations up to lock':<44}{report.allocations_at_lock:>12}",
        f"{'backend allocations after lock (must be 0)':<44}{report.allocations_after_lock:>12}",
        f"{'pointer changes across locked steps':<44}{report.pointer_changes_after_lock:>12}",
        f"{'long-lived indexer view still the buffer':<44}"
        f"{'yes' if report.long_lived_view_intact else 'NO':>12}",
        f"{'locked attention request (us per call)':<44}{report.locked_call_us:>12.1f}",
        "",
        f"{'peak demand per call site (warm-up)':<44}{'MB':>12}",
    ]
    lines += [
        f"{site:<44}{nbytes / MB:>12.2f}"
        for site, nbytes in sorted(report.call_sites.items(), key=lambda kv: -kv[1])
    ]
    lines += ["", "growth after lock is refused with:", f"  {report.refused_growth_message}"]
    lines += [f"ERROR: {e}" for e in report.errors]
    lines.append("")
    lines.append(
        "OK: zero allocations and no pointer movement after lock"
        if report.ok
        else "FAILED: see above"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of ``python -m arena demo``."""
    parser = argparse.ArgumentParser(
        prog="python -m arena demo",
        description="Play an inference engine's workspace lifecycle (warm-up, lock, steady "
        "state) and print what it measured: capacities, allocations after lock (must be 0), "
        "pointer stability and the peak demand per call site.",
    )
    parser.add_argument(
        "--device", help="cpu, cuda or cuda:N (default: the GPU if there is one, else cpu)"
    )
    parser.add_argument(
        "--framework",
        choices=["torch", "numpy", "cupy", "jax"],
        help="the views' framework (default: torch if installed, else cupy on a GPU and "
        "numpy on cpu)",
    )
    parser.add_argument(
        "--steps",
        type=_at_least(2, "one per micro-batch thread"),
        default=2000,
        help="locked steps to run, at least 2: one per micro-batch thread (default: %(default)s)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_at_least(1),
        default=512,
        help="warm-up batch size, the largest batch (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random batch sizes (default: %(default)s)"
    )
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="record into (and presize from) this profile (default: no profile)",
    )
    args = parser.parse_args(argv)
    report = run_demo(
        args.device, args.framework, args.steps, args.max_tokens, args.seed, profile=args.profile
    )
    print(format_report(report))
    from arena.tools.plandemo import format_planning_demo, run_planning_demo

    planning = run_planning_demo(report.device, report.framework, args.max_tokens, args.seed)
    print()
    print(format_planning_demo(planning))
    return 0 if report.ok and planning.ok else 1


def _at_least(low: int, why: str = "") -> Any:
    """An argparse type: an int of at least ``low``, else a one-line usage error (saying
    ``why`` where given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an int") from None
        if value < low:
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(
                f"must be at least {low}{reason}, got {value}; pass {low} or more"
            )
        return value

    return parse


def _indexer_keys(front: Any) -> Any:
    """The indexer's persistent key cache, zeroed when it is created: the consumers read
    it before they write it (uninitialised, it held whatever the memory did, once a
    signalling NaN, on which NumPy warned "invalid value encountered in scalar add").
    Kept down here so that the call sites the docs print (demo.py:108:indexer, ...) stay
    on their lines."""
    return front.get_persistent("indexer.keys", (INDEX_TOP_K, HEAD_DIM), "float32", zero_init=True)


if __name__ == "__main__":
    sys.exit(main())
