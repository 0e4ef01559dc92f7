"""Every bad input gets a named error with the values and the fix; the arena stays usable."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import arena
from arena import (
    Arena,
    ArenaClosedError,
    ArenaOutOfMemoryError,
    ConfigError,
    DeviceError,
    DTypeError,
    FrameworkUnavailableError,
    NotInitializedError,
    SlotError,
    SpecError,
    compute_layout,
)
from tests.inplace import set_shape
from tests.sources import check_books

F32 = "float32"

REQUESTS: list[tuple[str, tuple[Any, ...], type[Exception], str]] = [
    ("negative dim", (((-1, 4), F32),), SpecError, "dimension 0 is negative"),
    ("float dim", (((2.0, 4), F32),), SpecError, "use 2"),
    ("fractional dim", (((2.5,), F32),), SpecError, "float 2.5"),
    ("bool dim", (((True, 4), F32),), SpecError, "bool"),
    ("None dim", (((None,), F32),), SpecError, "NoneType None"),
    ("string dim", ((("4",), F32),), SpecError, "str '4'"),
    ("shape is an int", ((4, F32),), SpecError, r"pass \(4,\)"),
    ("shape is None", ((None, F32),), SpecError, "NoneType"),
    ("spec not a pair", ({(4,), F32},), SpecError, r"must be a \(shape, dtype\) tuple"),
    ("spec too long", (((4,), F32, 0),), SpecError, r"\(shape, dtype\) tuple"),
    ("spec is a bare shape", ((4, 8),), SpecError, "spec #0"),
    ("second spec bad", (((4,), F32), ((-2,), F32)), SpecError, "spec #1"),
    ("unknown dtype name", (((4,), "float12"),), DTypeError, "unknown dtype 'float12'"),
    ("dtype None", (((4,), None),), DTypeError, "unknown dtype None"),
    ("dtype int", (((4,), 3),), DTypeError, "3 is a value"),
    ("structured dtype", (((4,), [("a", "f4")]),), DTypeError, "unknown dtype|structured"),
    (
        "byte-swapped dtype",
        (((4,), ">f4" if __import__("sys").byteorder == "little" else "<f4"),),
        DTypeError,
        "byte order",
    ),
    ("overflowing shape", (((2**40, 2**40), F32),), SpecError, "more than"),
    ("huge dim", (((2**70,), "uint8"),), SpecError, "exceeds|more than"),
    ("overflow over several specs", (((2**61,), "uint8"),) * 5, SpecError, "brings the layout"),
]


@pytest.mark.parametrize(
    ("case", "specs", "error", "pattern"), REQUESTS, ids=[r[0] for r in REQUESTS]
)
def test_bad_requests_raise_named_errors_and_leave_the_arena_usable(
    host: Arena, case: str, specs: tuple[Any, ...], error: type[Exception], pattern: str
) -> None:
    host.get_simultaneous(((4, 4), F32))  # a memoised layout must not mask the error
    with pytest.raises(error, match=pattern):
        host.get_simultaneous(*specs)
    with pytest.raises(error):
        host.try_get_simultaneous(*specs)
    (ok,) = host.get_simultaneous(((4, 4), F32))
    assert ok.shape == (4, 4)


CONSTRUCTION: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("alignment not a power of two", {"alignment": 100}, ConfigError, "alignment=128"),
    ("alignment too small", {"alignment": 8}, ConfigError, "alignment=16"),
    ("alignment float", {"alignment": 256.0}, ConfigError, "float"),
    ("alignment bool", {"alignment": True}, ConfigError, "bool"),
    ("zero ubatches", {"ubatches": 0}, ConfigError, "ubatches must be an int >= 1, got 0"),
    ("negative lanes", {"lanes": -1}, ConfigError, "lanes must be"),
    ("bad growth", {"growth": "double"}, ConfigError, "growth must be"),
    ("zero growth", {"growth": 0}, ConfigError, "growth must be"),
    ("unknown framework", {"framework": "tensorflow"}, ConfigError, "tensorflow"),
    ("resolver not callable", {"ubatch_resolver": 3}, ConfigError, "callable"),
    ("bad device string", {"device": "tpu:0"}, DeviceError, "'tpu:0'"),
    ("negative device", {"device": -1}, DeviceError, ">= 0"),
    ("device bool", {"device": True}, DeviceError, "True"),
    ("device source on host", {"device": "cpu", "source": "pool"}, ConfigError, "'pinned'"),
    ("alloc_context not callable", {"alloc_context": 5}, ConfigError, "context manager"),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "error", "pattern"), CONSTRUCTION, ids=[c[0] for c in CONSTRUCTION]
)
def test_bad_construction(
    case: str, kwargs: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    kwargs.setdefault("device", "cpu")
    with pytest.raises(error, match=pattern):
        Arena(**kwargs)


SLOT_CALLS: list[tuple[str, Callable[[Arena], Any], type[Exception], str]] = [
    ("ubatch out of range", lambda a: a.bind_ubatch(2), SlotError, r"ubatches=3"),
    ("negative ubatch", lambda a: a.ubatch(-1).__enter__(), SlotError, "out of range"),
    ("lane out of range", lambda a: a.lane(5).__enter__(), SlotError, "lanes=6"),
    ("lane not int", lambda a: a.lane("1").__enter__(), SlotError, "str"),
    # an index refused for its type names the fix: the plain int of its value, or the range
    (
        "NumPy ubatch",
        lambda a: a.bind_ubatch(np.int64(1)),
        SlotError,
        r"^ubatch must be an int, got int64 np.int64\(1\); pass the plain int 1, "
        r"int\(np.int64\(1\)\)$",
    ),
    (
        "float lane",
        lambda a: a.lane(1.0).__enter__(),
        SlotError,
        r"^lane must be an int, got float 1.0; pass the plain int 1, int\(1.0\)$",
    ),
    (
        "str ubatch",
        lambda a: a.ubatch("1").__enter__(),
        SlotError,
        r"^ubatch must be an int, got str '1'; pass a plain int from 0 to 1$",
    ),
    (
        "bool lane",
        lambda a: a.lane(True).__enter__(),
        SlotError,
        r"^lane must be an int, got bool True; pass a plain int from 0 to 1$",
    ),
    ("reserve negative", lambda a: a.reserve_bytes(-5), ConfigError, "-5"),
    # a byte count given to reserve() (its spec error named only the spec)
    ("reserve a byte count", lambda a: a.reserve(1 << 20), SpecError, r"reserve_bytes\(1048576\)"),
    # a spec given to reserve_bytes() (its error named only the value)
    (
        "reserve_bytes a spec",
        lambda a: a.reserve_bytes(((4,), "float32")),
        ConfigError,
        r"call reserve\(\) with the same specs",
    ),
    # the same hints for a NumPy integer byte count and a spec written as a list
    (
        "reserve a NumPy byte count",
        lambda a: a.reserve(np.int64(1 << 20)),
        SpecError,
        r"reserve_bytes\(1048576\)",
    ),
    (
        "reserve_bytes a list spec",
        lambda a: a.reserve_bytes([(4,), "float32"]),
        ConfigError,
        r"call reserve\(\) with the same specs",
    ),
    ("persistent bad shape", lambda a: a.get_persistent("k", (-1,), F32), SpecError, "negative"),
    # zero_init as a string was taken as truthy ("false" zeroed the buffer); refused like
    # a library workspace's zero_init
    (
        "persistent zero_init a string",
        lambda a: a.get_persistent("k", (4,), F32, zero_init="false"),
        ConfigError,
        r"^zero_init must be True or False, got str 'false'; pass zero_init=False ",
    ),
    ("unknown front", lambda a: a.front("mxnet"), ConfigError, "mxnet"),
]


@pytest.mark.parametrize(
    ("case", "call", "error", "pattern"), SLOT_CALLS, ids=[c[0] for c in SLOT_CALLS]
)
def test_bad_slot_and_arena_calls(
    case: str, call: Callable[[Arena], Any], error: type[Exception], pattern: str
) -> None:
    with Arena("cpu", ubatches=2, lanes=2, framework="numpy") as a:
        with pytest.raises(error, match=pattern):
            call(a)
        assert a.current_slot() == (0, 0)
        assert a.get_simultaneous(((2,), F32))[0].shape == (2,)


def test_calls_after_close_and_reset() -> None:
    a = arena.init_arena("cpu", framework="numpy")
    arena.reset_arena("cpu")
    with pytest.raises(ArenaClosedError, match="init_arena"):
        a.get_simultaneous(((1,), F32))
    with pytest.raises(NotInitializedError, match=r"init_arena\('cpu'\)"):
        arena.current_arena("cpu")
    with pytest.raises(NotInitializedError):
        arena.lock_arena("cpu")


def test_numpy_front_on_device_memory_is_refused() -> None:
    from arena.adapters import numpy as numpy_adapter

    with pytest.raises(arena.FrameworkUnavailableError, match=r"ws\.cupy"):
        numpy_adapter.ADAPTER.check_device(arena.Device("cuda", 0))


def test_error_hierarchy() -> None:
    for cls, builtin in [
        (SpecError, ValueError),
        (DTypeError, TypeError),
        (SlotError, IndexError),
        (arena.ArenaLockedError, RuntimeError),
        (arena.ArenaOutOfMemoryError, MemoryError),
        (ArenaClosedError, RuntimeError),
        (arena.FrameworkUnavailableError, ImportError),
    ]:
        assert issubclass(cls, arena.ArenaError) and issubclass(cls, builtin)


@pytest.mark.parametrize(
    ("name", "fix"), [("float", "float32"), ("int", "int64"), ("long", "int64")]
)
def test_ambiguous_dtype_names_are_refused_with_the_widths_to_use(name: str, fix: str) -> None:
    with pytest.raises(DTypeError, match=f"ambiguous.*{fix}"):
        arena.resolve_dtype(name)


def test_unknown_dtype_message_lists_the_short_names() -> None:
    with pytest.raises(DTypeError, match="bf16=bfloat16"):
        arena.resolve_dtype("float12")


def test_specs_passed_as_one_list_get_a_hint(host: Arena) -> None:
    with pytest.raises(SpecError, match=r"get_simultaneous\(\*specs\)"):
        host.get_simultaneous([((4,), F32), ((2,), "int32")])  # type: ignore[arg-type]


ONE_SEQUENCE = (
    "the specs look like they were passed as one sequence; pass each (shape, dtype) as its "
    "own argument, get_simultaneous(spec0, spec1, ...) or get_simultaneous(*specs)"
)


@pytest.mark.parametrize("method", ["get_simultaneous", "try_get_simultaneous", "reserve"])
def test_one_or_three_specs_passed_as_one_sequence_get_the_same_hint(
    host: Arena, method: str
) -> None:
    # Two specs in one list reach the dimension check; one or three are a spec of the
    # wrong length, which used to say only "must be a (shape, dtype) tuple".
    call = getattr(host, method)
    with pytest.raises(SpecError) as one:
        call([((4,), F32)])
    assert str(one.value) == (
        f"spec #0 is 1 (shape, dtype) pair(s) in one list, [((4,), 'float32')]: {ONE_SEQUENCE}"
    )
    three = (((4,), F32), ((2, 2), "int32"), ([8], "bfloat16"))
    with pytest.raises(SpecError) as info:
        call(three)
    assert str(info.value) == (
        f"spec #0 is 3 (shape, dtype) pair(s) in one tuple, {three!r}: {ONE_SEQUENCE}"
    )
    with pytest.raises(SpecError) as shape_only:  # a shape alone is not a pair: as before
        call(((4,),))
    assert str(shape_only.value).startswith("spec #0 must be a (shape, dtype) tuple")
    assert host.stats().allocations == 0


@pytest.mark.parametrize(
    ("dim", "message"),
    [
        (
            None,
            "got NoneType None; every dimension needs its size: pass the int (arena does "
            "not infer dimensions)",
        ),
        ("4", "got str '4'; use 4"),
        (" 16 ", "got str ' 16 '; use 16"),
        ("4x", "got str '4x'"),
    ],
)
def test_a_dimension_that_is_none_or_text_names_the_fix(dim: Any, message: str) -> None:
    with pytest.raises(SpecError) as info:
        compute_layout((((2, dim), F32),))
    assert str(info.value) == f"spec #0: dimension 1 must be an int, {message}"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            "NumPy",
            "unknown framework 'NumPy'; choose one of numpy, torch, cupy, jax (for "
            "'NumPy' write 'numpy')",
        ),
        (
            "np",
            "unknown framework 'np'; choose one of numpy, torch, cupy, jax (for 'np' "
            "write 'numpy')",
        ),
        (
            "pytorch",
            "unknown framework 'pytorch'; choose one of numpy, torch, cupy, jax (for "
            "'pytorch' write 'torch')",
        ),
        (np, "framework must be a name, got the module numpy; pass its name, 'numpy'"),
        (
            sys,
            "framework must be a name, got the module sys; choose one of numpy, torch, cupy, jax",
        ),
        ("tensorflow", "unknown framework 'tensorflow'; choose one of numpy, torch, cupy, jax"),
    ],
)
def test_a_framework_spelled_another_way_names_the_name_to_use(
    host: Arena, given: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as front:
        host.front(given)
    assert str(front.value) == message
    with pytest.raises(ConfigError) as construction:
        Arena("cpu", framework=given)
    assert str(construction.value) == message


def test_a_missing_cupy_gives_one_message_naming_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.delitem(sys.modules, "arena.adapters.cupy", raising=False)
    with (
        Arena("cpu", framework="numpy") as a,
        pytest.raises(arena.FrameworkUnavailableError) as info,
    ):
        a.front("cupy")
    message = str(info.value)
    # Issue 26: on a host arena installing CuPy cannot help, so the message says what can.
    assert message.count("cannot be imported") <= 1 and "CuPy views need a CUDA arena" in message


def test_the_command_line_ends_a_missing_framework_in_one_line() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None; from arena.__main__ import main; "
        "sys.exit(main(['demo', '--framework', 'torch', '--steps', '10']))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr and run.stderr.startswith("python -m arena demo: ")


def test_cpu_with_an_ordinal_is_the_host() -> None:
    assert arena.parse_device("cpu:0") == arena.CPU
    torch = pytest.importorskip("torch")
    assert arena.parse_device(torch.device("cpu", 0)) == arena.CPU
    with Arena(torch.device("cpu", 0), framework="numpy") as a:
        assert str(a.device) == "cpu"
    with pytest.raises(DeviceError, match="the host is one device"):
        arena.parse_device("cpu:1")


@pytest.mark.parametrize(
    ("device", "framework", "pattern"),
    [
        ("cpu", "cupy", "CuPy views device memory only.*framework='torch' or 'numpy'"),
    ],
)
def test_a_framework_that_cannot_view_the_device_is_refused_at_construction(
    device: str, framework: str, pattern: str
) -> None:
    with pytest.raises(ConfigError, match=pattern):
        Arena(device, framework=framework)


def test_current_slot_of_a_closed_arena_is_a_closed_error() -> None:
    a = Arena("cpu", framework="numpy")
    a.close()
    with pytest.raises(ArenaClosedError):
        a.current_slot()


def test_resolvers_may_return_integer_likes_and_name_what_is_wrong() -> None:
    np = pytest.importorskip("numpy")
    value: Any = np.int64(1)
    with Arena("cpu", framework="numpy", ubatches=2, ubatch_resolver=lambda: value) as a:
        assert a.current_slot() == (1, 0)
        a.get_simultaneous(((4,), F32))
        value = np.int64(2)
        with pytest.raises(SlotError, match=r"returned 2, .* 2 ubatch slot\(s\) \(0\.\.1\)"):
            a.current_slot()
        value = 1.0
        with pytest.raises(SlotError, match="not an integer"):
            a.current_slot()
        value = True
        with pytest.raises(SlotError, match="bool"):
            a.current_slot()
        value = -1
        with pytest.raises(SlotError, match="start at 0"):
            a.current_slot()


def test_warnings_point_at_the_users_line(tmp_path: Any) -> None:
    """Whatever the depth of arena's own frames, a warning names the caller's file."""
    import warnings

    profile = tmp_path / "profile.json"
    profile.write_text('{"format": "something else"}')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = Arena("cpu", framework="numpy", profile=profile, event_log=tmp_path)
        cached = a.front("numpy", cached=True)
        a.lock()
        a.close()
    assert caught, "expected warnings for the profile and the event log"
    for warning in caught:
        assert warning.filename == __file__, (warning.filename, str(warning.message))
    debug = Arena("cpu", framework="numpy", cached_views=True, debug=True)
    (view,) = debug.get_simultaneous(((4, 4), F32))
    (view,) = debug.get_simultaneous(((4, 4), F32))
    set_shape(view, (16,))
    with pytest.warns(arena.ArenaWarning) as record:
        debug.get_simultaneous(((4, 4), F32))
    assert record[0].filename == __file__
    del cached


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("shape", [(0, 2**70), (0, 2**62), (2**62, 0, 3)])
def test_a_zero_size_shape_with_a_huge_dimension_is_a_spec_error(
    framework: str, shape: tuple[int, ...]
) -> None:
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        front.get_simultaneous(((4, 4), F32))  # the plan for 2-D float32 exists
        with pytest.raises(SpecError):
            front.get_simultaneous((shape, F32))


def test_sizes_past_what_can_be_addressed_are_named_errors() -> None:
    with Arena("cpu", framework="numpy") as a:
        with pytest.raises(SpecError, match=str(2**63)):
            a.reserve_bytes(2**63)
        with pytest.raises(ArenaOutOfMemoryError, match=str(2**63 - 256)):
            a.get_simultaneous(((2**63 - 256,), "uint8"))
        with pytest.raises(ArenaOutOfMemoryError, match="more than"):
            Arena("cpu", growth="pow2", framework="numpy").reserve_bytes(2**62 + 1)
        a.get_simultaneous(((8,), F32))  # still usable
        check_books(a)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"alignment": 2**70}, "at most"),
        # a yes/no word names the bool it meant (the fix said True for "false")
        ({"debug": "false"}, "debug must be True or False.*; pass debug=False "),
        ({"cached_views": "no"}, "cached_views must be True or False.*; pass cached_views=False "),
        ({"poison": " YES "}, "poison must be True or False.*; pass poison=True "),
        ({"track_call_sites": 1}, "track_call_sites must be True or False.*=True "),
        ({"debug": np.array([1, 0])}, "debug must be True or False, got ndarray"),
        ({"capture_probe": 3}, "capture_probe must be a callable"),
    ],
)
def test_settings_of_the_wrong_type_are_refused(options: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        Arena("cpu", **options)


def test_compute_layout_validates_its_alignment() -> None:
    with pytest.raises(ConfigError, match="alignment"):
        compute_layout((((4,), F32), ((4,), F32)), 0)
    with pytest.raises(ConfigError, match="alignment"):
        compute_layout((((4,), F32),), 100)


def test_compute_layout_given_specs_as_arguments_names_the_sequence_it_takes() -> None:
    # Written like get_simultaneous(spec0, spec1): the second spec lands in alignment, which
    # said only "alignment must be an int power of two >= 16, got ((4,), 'float32')".
    with pytest.raises(ConfigError) as caught:
        compute_layout(((4,), F32), ((2, 3), "int8"))  # type: ignore[arg-type]
    assert str(caught.value) == (
        "compute_layout() got the spec ((2, 3), 'int8') as its alignment: it takes the specs "
        "as one sequence, compute_layout((spec0, spec1, ...)), and the alignment second, "
        "e.g. compute_layout(specs, alignment=256)"
    )
    with pytest.raises(ConfigError, match=r"^alignment must be an int power of two >= 16"):
        compute_layout((((4,), F32),), (4, 4))  # type: ignore[arg-type]  # no spec: as before


def test_a_missing_framework_is_framework_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.delitem(sys.modules, "arena.adapters.torch", raising=False)
    with (
        Arena("cpu", framework="numpy") as a,
        pytest.raises(FrameworkUnavailableError, match="pip install torch"),
    ):
        a.torch  # noqa: B018


def test_list_shapes_are_accepted_like_tuples() -> None:
    with Arena("cpu", framework="numpy") as a:
        x, y = a.get_simultaneous(([5, 3], F32), ([2], "int32"))
        assert x.shape == (5, 3) and y.shape == (2,)
        with pytest.raises(SpecError, match="bool"):
            a.get_simultaneous(([True, 3], F32))
        with pytest.raises(SpecError, match="float"):
            a.get_simultaneous(([2.5], F32))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_bool_and_one_element_tensors_are_not_dimensions(framework: str) -> None:
    torch = pytest.importorskip("torch")
    import numpy as np

    with arena.Arena("cpu", framework="numpy") as ws:
        front = ws.front(framework)
        for dim in (torch.tensor(True), np.array(True)):
            with pytest.raises(SpecError, match="bool"):
                front.get_simultaneous(((dim, 2), "float32"))
        for dim in (torch.tensor([3]), torch.tensor([[3]]), np.array([3])):
            with pytest.raises(SpecError, match="not a scalar"):
                front.get_simultaneous(((dim, 2), "float32"))
        for dim in (torch.tensor(3), np.int64(3)):  # 0-d integers are integers
            (view,) = front.get_simultaneous(((dim, 2), "float32"))
            assert tuple(view.shape) == (3, 2)
        check_books(ws)


@pytest.mark.parametrize("variable", ["ARENA_POISON", "ARENA_DEBUG"])
def test_flag_variables_read_yes_no_words_and_refuse_anything_else(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attribute = "debug" if variable == "ARENA_DEBUG" else None
    for value, on in (
        ("1", True), ("true", True), (" Yes ", True), ("ON", True),
        ("0", False), ("false", False), ("no", False), ("Off", False), ("", False),
    ):  # fmt: skip
        monkeypatch.setenv(variable, value)
        with arena.Arena("cpu", framework="numpy") as ws:
            if attribute is not None:
                assert ws.debug is on, value
            else:
                (view,) = ws.get_simultaneous(((4,), "int32"))
                view[...] = 7
                (view,) = ws.get_simultaneous(((4,), "int32"))  # poisoned, or kept
                assert bool((view == 7).all()) is not on, value
    for value in ("2", "maybe", "enabled"):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigError, match=rf"{variable}='{value}' is not a yes/no value"):
            arena.Arena("cpu", framework="numpy")


@pytest.mark.parametrize(
    ("value", "path"),
    [("false", "compiled"), ("no", "compiled"), ("off", "compiled"), ("yes", "python")],
)
def test_arena_pure_python_reads_the_same_words(value: str, path: str) -> None:
    import os
    import subprocess

    from arena.views import hit

    if path == "compiled" and hit.compiled is None and hit.WHY_PYTHON != "ARENA_PURE_PYTHON is set":
        pytest.skip("the compiled hit path is not built here")
    env = {**os.environ, "ARENA_PURE_PYTHON": value}
    code = "from arena.views import hit; print(hit.HIT_PATH)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == path


def test_arena_pure_python_refuses_other_values() -> None:
    import os
    import subprocess

    env = {**os.environ, "ARENA_PURE_PYTHON": "2"}
    out = subprocess.run(
        [sys.executable, "-c", "import arena"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "ARENA_PURE_PYTHON='2' is not a yes/no value" in out.stderr


def test_pinned_memory_on_a_host_without_cuda_says_it_needs_cuda() -> None:
    from arena.memory.devices import cuda_device_count

    if cuda_device_count():
        pytest.skip("a CUDA device is visible: pinned memory works here")
    with pytest.raises(arena.DeviceUnavailableError) as caught:
        arena.Arena("cpu", source="pinned")
    text = str(caught.value)
    assert "source='pinned'" in text and "needs CUDA" in text
    assert "use device='cpu'" not in text  # the device is cpu already: no help


def test_cupy_views_of_a_host_arena_say_they_need_a_cuda_arena() -> None:
    with arena.Arena("cpu", framework="numpy") as ws:
        with pytest.raises(FrameworkUnavailableError, match="CuPy views need a CUDA arena") as e:
            ws.cupy  # noqa: B018 (the property raises)
        assert "pip install" not in str(e.value)  # installing CuPy cannot help


@pytest.mark.parametrize("method", ["data_ptr", "write_into"])
def test_a_view_of_another_framework_is_named_with_the_front_to_use(method: str) -> None:
    """``ws.numpy.data_ptr(tensor)`` ended in the framework's own error (an AttributeError
    on ``__array_interface__``; a TypeError from ``np.copyto`` for ``write_into``); it is one
    DTypeError naming what was given and the front that takes it."""
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as ws:
        call = getattr(ws.numpy, method)
        args = (torch.zeros(3),) if method == "data_ptr" else (torch.zeros(3), np.zeros(3))
        with pytest.raises(
            DTypeError,
            match=r"numpy front takes numpy arrays, got a torch\.Tensor; call ws\.torch\.",
        ):
            call(*args)
        view = ws.torch.get_simultaneous(((3,), "float32"))[0]
        call = getattr(ws.torch, method)
        args = (np.zeros(3),) if method == "data_ptr" else (np.zeros(3), np.zeros(3, np.float32))
        with pytest.raises(
            DTypeError,
            match=r"torch front takes torch arrays, got a numpy\.ndarray; call ws\.numpy\.",
        ):
            call(*args)
        assert ws.torch.data_ptr(view) == view.data_ptr()  # its own views still answer


@pytest.mark.parametrize("given", [[1.0, 2.0], None, 5, memoryview(b"abcd")])
def test_an_object_of_no_framework_is_not_sent_to_another_front(given: object) -> None:
    """A list, None, a number or a memoryview at ``data_ptr``/``write_into`` is refused as
    what it is; the message does not tell the user to 'call the front.data_ptr' (there is
    no front of its framework) but to pass a view the arena handed out."""
    with Arena("cpu", framework="numpy") as ws:
        view = ws.get_simultaneous(((2,), "float32"))[0]
        for call in (lambda: ws.numpy.data_ptr(given), lambda: ws.numpy.write_into(given, view)):
            with pytest.raises(DTypeError) as caught:
                call()
            message = str(caught.value)
            assert "got a builtins." in message and "the front." not in message, message
            assert "pass a view this arena handed out (ws.numpy.get_simultaneous)" in message
