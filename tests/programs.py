"""Random programs of requests for a differential run: the compiled paths against
``ARENA_PURE_PYTHON=1`` (tests/test_hostile49_differential.py).

A program (from a seed) is an arena's settings and a list of operations: plain requests,
``try_get_simultaneous``, steps and scopes opened, used and closed (recorded bodies run
again, with a few changes: another key, a skipped request or release, an exit out of
order), releases (of the run's own views and of others), lock, unlock, a capture probe
turned on and off, micro-batches and lanes, ``torch.inference_mode()`` and
``torch.no_grad()``, plan_steps, reserve, stats; specs with odd and invalid dimensions and
dtypes now and then; NumPy, cached NumPy, torch and torch inference fronts. Every outcome is
recorded: each view as the allocation it lies in (numbered in allocation order), its
offset there, shape, strides, dtype, whether it is an object handed out before, and its
framework flags; an error as its type and text (addresses masked); the books checked after
every operation. ``python -m tests.programs FIRST COUNT LENGTH`` prints one JSON line per
program (hostile49 ran 12,000 programs of 300 to 400 operations each way).
"""

from __future__ import annotations

import json
import random
import re
import sys
import warnings

import numpy as np
import torch

import arena
from tests.sources import RecordingSource, check_books

SHAPES = [(4, 8), (16,), (), (3, 5, 2), (0, 7), (1, 64), (100,), (33, 3)]
DTYPES = ["float32", "int32", "uint8", "float16"]


class Probe:
    def __init__(self) -> None:
        self.on = False

    def __call__(self) -> bool:
        return self.on


def gen(seed: int, length: int):  # noqa: PLR0915 (one generator, read top to bottom)
    rng = random.Random(seed)
    cfg = dict(
        ubatches=rng.choice([1, 1, 2]),
        poison=rng.random() < 0.2,
        debug=rng.random() < 0.15,
        cached_views=rng.random() < 0.3,
        probe=rng.random() < 0.4,
        alignment=rng.choice([256, 256, 64, 16]),
        growth=rng.choice(["exact", "exact", "pow2", 4096]),
        max_bytes=rng.choice([None, None, 1 << 14, 1 << 16]),
        lanes=rng.choice([1, 1, 2]),
    )

    def odd(dim):
        alike = [float(dim), np.int64(dim), torch.tensor(dim), np.array(dim)]
        if dim in (0, 1):
            alike += [bool(dim), np.bool_(dim)]
        invalid = [-1, torch.tensor([2]), np.array([2]), "4", None, 2**70, 2.5]
        return rng.choice(alike) if rng.random() < 0.7 else rng.choice(invalid)

    def one():
        shape = rng.choice(SHAPES)
        if shape and rng.random() < 0.1:
            dims = list(shape)
            i = rng.randrange(len(dims))
            dims[i] = odd(dims[i])
            shape = tuple(dims)
        dtype = rng.choice(DTYPES)
        if rng.random() < 0.03:
            dtype = rng.choice(["float", "nope", np.float32, np.dtype("float32"), None])
        return (shape, dtype)

    def rspecs():
        return tuple(one() for _ in range(rng.choice([1, 1, 2, 3])))

    fr = ["numpy", "numpy", "torch", "cnumpy", "itorch"]
    # bodies: (kind, key, front, actions); an action: ("r", specs), ("rel", how many),
    # ("plain", specs) or ("nest", an earlier body's index)
    bodies = []
    for b in range(rng.randint(2, 5)):
        kind = rng.choice(["step", "step", "scope"])
        acts = []
        for _ in range(rng.randint(1, 6)):
            a = rng.choices(["r", "rel", "plain", "nest"], [6, 3, 1, 1])[0]
            if a in {"r", "plain"}:
                acts.append((a, rspecs()))
            elif a == "rel":
                acts.append((a, rng.randint(1, 3)))
            elif b > 0:
                acts.append((a, rng.randrange(b)))
        bodies.append((kind, rng.choice("abcde"), rng.choice(fr), acts))

    ops = []

    def emit(bi, depth):
        kind, key, front, acts = bodies[bi]
        if rng.random() < 0.05:
            key = rng.choice("abcde")
        if rng.random() < 0.05:
            front = rng.choice(fr)
        ops.append((kind, front, (), key, 0.0, 0.0, 0))
        for a, arg in acts:
            if rng.random() < 0.04:
                continue  # skip an action
            if a == "r":
                specs = arg if rng.random() > 0.05 else rspecs()
                ops.append(("rget", front, specs, key, 0.0, 0.0, 0))
            elif a == "plain":
                ops.append(("plain_in", front, arg, key, 0.0, 0.0, 0))
            elif a == "rel":
                ops.append(("relback", front, (), key, float(arg), rng.random(), 0))
            elif depth < 3:
                emit(arg, depth + 1)
        if rng.random() < 0.05:
            ops.append(("exit", front, (), key, 0.9, rng.random(), rng.randrange(2)))
        else:
            ops.append(("exit", front, (), key, 0.0, 0.0, 0))

    while len(ops) < length:
        c = rng.random()
        if c < 0.6:
            emit(rng.randrange(len(bodies)), 0)
        else:
            kind = rng.choices(
                [
                    "get",
                    "try",
                    "release",
                    "reenter",
                    "lock",
                    "unlock",
                    "probe",
                    "ubatch",
                    "plan",
                    "reserve",
                    "stats",
                    "step",
                    "scope",
                    "rget",
                    "exit",
                    "mode",
                ],
                [6, 2, 3, 1, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 3],
            )[0]
            ops.append(
                (
                    kind,
                    rng.choice(fr),
                    rspecs(),
                    rng.choice("abcde"),
                    rng.random(),
                    rng.random(),
                    rng.randrange(2),
                )
            )
    return cfg, ops


HEX = re.compile(r"0x[0-9a-fA-F]+")


def norm(text: str) -> str:
    return HEX.sub("0x?", text)


def counts(ws: arena.Arena) -> list:
    """The arena's counts and each slot's sizes, as both paths must report them."""
    s = ws.stats()
    return [
        s.calls,
        s.allocations,
        s.frees,
        s.live_bytes,
        [(t.capacity, t.growths, t.load, t.high_water) for t in s.slots],
    ]


def books(ws: arena.Arena, source: RecordingSource, out: list) -> None:
    """Append ``("BOOKS", why)`` to ``out`` where the ledger's books do not balance."""
    try:
        check_books(ws, source)
    except AssertionError as error:
        out.append(("BOOKS", str(error)))


def run(seed: int, length: int) -> list:  # noqa: PLR0915 (one interpreter of the operations)
    cfg, ops = gen(seed, length)
    source = RecordingSource()
    order: list[int] = []  # block starts in allocation order
    inner_allocate = source.allocate

    def allocate(nbytes):
        allocation = inner_allocate(nbytes)
        order.append((allocation.ptr, nbytes))
        return allocation

    source.allocate = allocate  # type: ignore[method-assign]
    probe = Probe()
    ws = arena.Arena(
        "cpu",
        framework="numpy",
        ubatches=cfg["ubatches"],
        poison=cfg["poison"],
        debug=cfg["debug"],
        cached_views=cfg["cached_views"],
        capture_probe=probe if cfg["probe"] else None,
        alignment=cfg["alignment"],
        growth=cfg["growth"],
        max_bytes=cfg["max_bytes"],
        lanes=cfg["lanes"],
        source=source,
    )
    fronts = {
        "numpy": ws.numpy,
        "torch": ws.torch,
        "cnumpy": ws.front("numpy", cached=True),
        "itorch": ws.front("torch", inference=True),
    }
    tdtypes = {name: getattr(torch, name) for name in DTYPES}

    def spec_for(front, specs):
        if front in ("torch", "itorch"):
            return tuple((s, tdtypes.get(d, d) if isinstance(d, str) else d) for s, d in specs)
        return specs

    def where(ptr):
        for i in range(len(order) - 1, -1, -1):
            start, n = order[i]
            if start <= ptr < start + max(n, 1):
                return (i, ptr - start)
        return ("?",)

    seen_ids: dict = {}

    def describe(views, fname):
        if views is None:
            return None
        out = []
        for v in views:
            if isinstance(v, torch.Tensor):
                ptr, strides = v.data_ptr(), tuple(v.stride())
            else:
                ptr, strides = v.__array_interface__["data"][0], v.strides
            loc = where(ptr) if 0 not in tuple(v.shape) else None
            key = id(v)
            if key not in seen_ids:
                seen_ids[key] = (len(seen_ids), v)
            flags = (
                (v.is_inference(), v.requires_grad, v._base is None)
                if isinstance(v, torch.Tensor)
                else (v.flags.writeable, v.flags.owndata, type(v.base).__name__)
            )
            out.append(
                (
                    loc,
                    tuple(v.shape),
                    tuple(strides),
                    str(v.dtype).replace("torch.", ""),
                    seen_ids[key][0],
                    flags,
                )
            )
        return out

    regions: list = []  # open: (kind, obj, front)
    lane_ctx: list = []
    modes: list = []
    closed: list = []
    handed: list = []  # views handed out
    handed_by: list = []
    trace: list = [cfg]

    def attempt(fn, *args):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = fn(*args)
            w = [norm(str(x.message))[:200] for x in caught]
            return ("ok", result, w)
        except Exception as error:
            return ("err", type(error).__name__, norm(str(error))[:300])

    for n, (kind, fname, specs, key, x, y, bit) in enumerate(ops):
        front = fronts[fname]
        sp = spec_for(fname, specs)
        rec: list = [n, kind]
        if kind in {"get", "plain_in"}:
            if kind == "plain_in" and not regions:
                continue
            out = attempt(front.get_simultaneous, *sp)
            if out[0] == "ok":
                handed.extend(out[1])
                rec.append(("ok", describe(out[1], fname), out[2]))
            else:
                rec.append(out)
        elif kind == "try":
            out = attempt(front.try_get_simultaneous, *sp)
            if out[0] == "ok":
                if out[1]:
                    handed.extend(out[1])
                rec.append(("ok", describe(out[1], fname), out[2]))
            else:
                rec.append(out)
        elif kind in ("step", "scope"):
            obj = front.step(key) if kind == "step" else front.scope()
            out = attempt(obj.__enter__)
            if out[0] == "ok":
                regions.append((kind, obj, fname))
                rec.append(("ok", out[2]))
            else:
                rec.append(out)
        elif kind == "rget":
            if not regions:
                continue
            i = len(regions) - 1 if x < 0.8 else int(y * len(regions))
            rk, obj, rf = regions[i]
            sp = spec_for(rf, specs)
            out = attempt(obj.get_simultaneous, *sp)
            if out[0] == "ok":
                handed.extend(out[1])
                handed_by.extend((v, obj) for v in out[1])
                rec.append(("ok", i, describe(out[1], rf), out[2]))
            else:
                rec.append(out)
        elif kind == "release":
            steps = [r for r in regions if r[0] == "step"]
            if not steps or not handed:
                continue
            _, obj, rf = steps[-1] if x < 0.7 else steps[int(y * len(steps))]
            k = 1 + int(x * 3)
            picks = [
                handed[-1 - int(((y * 7919 * (j + 1)) % 1) * min(len(handed), 6))] for j in range(k)
            ]
            out = attempt(obj.release, *picks)
            rec.append(out if out[0] == "err" else ("ok", out[2]))
        elif kind == "relback":
            steps = [r for r in regions if r[0] == "step"]
            if not steps:
                continue
            _, obj, rf = steps[-1]
            mine = [v for v, o in handed_by if o is obj]
            if not mine:
                continue
            k = int(x)
            picks = [
                mine[-1 - int(((y * 7919 * (j + 1)) % 1) * min(len(mine), 4))] for j in range(k)
            ]
            out = attempt(obj.release, *picks)
            rec.append(out if out[0] == "err" else ("ok", out[2]))
        elif kind == "exit":
            if not regions:
                continue
            i = len(regions) - 1 if x < 0.85 else int(y * len(regions))
            rk, obj, rf = regions[i]
            exc = KeyboardInterrupt if bit and x < 0.1 else None
            if exc is None:
                out = attempt(obj.__exit__, None, None, None)
            else:
                out = attempt(obj.__exit__, ValueError, ValueError("x"), None)
            del regions[i]
            closed.append((rk, obj, rf))
            rec.append((i, out if out[0] == "err" else ("ok", out[2])))
        elif kind == "reenter":
            if not closed:
                continue
            rk, obj, rf = closed[int(y * len(closed))]
            out = attempt(obj.__enter__)
            if out[0] == "ok":
                closed.remove((rk, obj, rf))
                regions.append((rk, obj, rf))
                rec.append(("ok", out[2]))
            else:
                rec.append(out)
        elif kind == "lock":
            rec.append(attempt(ws.lock)[::2])
        elif kind == "unlock":
            rec.append(attempt(ws.unlock)[::2])
        elif kind == "probe":
            probe.on = bool(bit) and x < 0.5
            rec.append(probe.on)
        elif kind == "ubatch":
            if cfg["ubatches"] > 1:
                rec.append(attempt(ws.bind_ubatch, bit)[::2])
            if cfg["lanes"] > 1 and x < 0.5:
                if lane_ctx:
                    lane_ctx.pop().__exit__(None, None, None)
                    rec.append("lane 0")
                else:
                    c = ws.lane(1)
                    c.__enter__()
                    lane_ctx.append(c)
                    rec.append("lane 1")
        elif kind == "mode":
            if modes:
                modes.pop().__exit__(None, None, None)
                rec.append("mode off")
            else:
                c = torch.inference_mode() if x < 0.6 else torch.no_grad()
                c.__enter__()
                modes.append(c)
                rec.append("mode on")
        elif kind == "plan":
            out = attempt(ws.plan_steps)
            rec.append(out if out[0] == "err" else ("ok", sorted(map(str, out[1].items())), out[2]))
        elif kind == "reserve":
            out = attempt(ws.reserve, *specs)
            rec.append(out if out[0] == "err" else ("ok", out[1], out[2]))
        elif kind == "stats":
            rec.append(counts(ws))
        books(ws, source, rec)
        trace.append(rec)
        if len(handed) > 40:
            del handed[:20]
        if len(handed_by) > 60:
            del handed_by[:30]
    while modes:
        modes.pop().__exit__(None, None, None)
    # close everything
    for _kind, obj, _front in reversed(regions):
        out = attempt(obj.__exit__, None, None, None)
        trace.append(("final-exit", out if out[0] == "err" else "ok"))
    trace.append(["end", *counts(ws)])
    books(ws, source, trace)
    ws.close()
    return trace


def main() -> None:
    """``FIRST COUNT LENGTH`` (programs FIRST to FIRST + COUNT - 1), or ``SEED,SEED,...
    LENGTH``: one JSON line per program, ``[seed, outcomes]``."""
    if "," in sys.argv[1] or len(sys.argv) == 3:
        seeds = [int(a) for a in sys.argv[1].split(",")]
        length = int(sys.argv[2])
    else:
        start, count, length = (int(a) for a in sys.argv[1:4])
        seeds = list(range(start, start + count))
    for seed in seeds:
        try:
            trace = run(seed, length)
        except BaseException as error:
            trace = [("CRASH", type(error).__name__, norm(str(error)))]
        print(json.dumps([seed, trace], default=str))


if __name__ == "__main__":
    main()
