"""The one place where Trinity adapts verl to run where verl does not expect to run.

Trinity trains on verl's FSDP2 engine (``verl.workers.engine``). verl 0.9.1 assumes an
accelerator: on a machine without one it still believes it is on CUDA. Trinity wants the same
trainer code on a laptop or CI machine (CPU, gloo) and on GPUs (CUDA, NCCL), so this module
patches the few places where verl hard-codes an accelerator. Every patch is:

* **pinned** to verl 0.9.1 (:data:`SUPPORTED_VERL_VERSION`): the patches reach into verl's
  internals, so another release fails loudly here (:class:`UnsupportedVerlVersion`) instead of
  misbehaving deep inside a training step;
* **idempotent**: :func:`apply_verl_compat` may be called any number of times (every engine
  calls it), from any module, before or after verl's engine modules were imported;
* **CPU only**, with one exception: with CUDA available nothing else is patched (NCCL, verl's
  own code paths); the version check runs, ``verl.workers.engine`` is imported with its
  warnings about optional backends (torchtitan, veomni, megatron, ...) silenced, and the
  value-model loader (5) honours the configured attention, which changes nothing where that is
  flash-attention 2 (verl's choice) and lets a critic load where flash-attn is not installed.

What is patched on CPU, and why (verl 0.9.1 sources in ``verl/``):

1. **A CPU platform** (``verl.plugin.platform``). verl registers ``nvidia``, ``huawei`` and ``amd``
   platforms only; with none available ``_detect_platform_name`` falls back to ``nvidia``, so
   ``get_device_name()`` says ``"cuda"``, ``get_device_id()`` calls ``torch.cuda.current_device()``
   and every ``tensor.to(get_device_id())`` in the engine tries CUDA. :class:`PlatformCPU`
   answers ``"cpu"`` / ``"gloo"`` and is installed as the process's platform singleton.
   Its :attr:`~PlatformCPU.device_module` is :data:`cpu_device_module`: ``torch.cpu`` plus the
   memory, cache and RNG calls verl makes on "the device module" (``empty_cache`` after
   offloads, ``max_memory_allocated`` in worker metrics, ``get_rng_state`` in checkpoints),
   which ``torch.cpu`` lacks: they are no-ops, zeros or the CPU generator.
2. **The FSDP engines for device "cpu"** (``verl.workers.engine.base.EngineRegistry``).
   ``FSDPEngineWithLMHead`` / ``FSDPEngineWithValueHead`` are registered for ``cuda`` and ``npu``
   only, so ``EngineRegistry.new`` raises "No engine registered for device='cpu'". The same
   classes are registered for ``cpu`` (their code is device-generic once (1) holds).
3. **Module-level device constants.** ``verl/workers/engine/fsdp/transformer_impl.py`` evaluates
   ``device_name = get_device_name()`` at import (used for autocast and the Ulysses mesh). If it
   was imported before the platform was set, it cached ``"cuda"``; it is reset to ``"cpu"``.
4. **Process-group backend** (``verl.utils.distributed``). ``initialize_global_process_group``
   and ``initialize_global_process_group_ray`` build ``f"cpu:gloo,{device}:{backend}"``, which on
   CPU is ``"cpu:gloo,cpu:gloo"`` and torch refuses ("Duplicate device type cpu"). Both are
   wrapped to use plain ``"gloo"`` on CPU (Ray ``TrainingWorker`` actors call the latter).
5. **Value-model loading** (``verl.utils.model.load_valuehead_model``, the critic's loader; on
   every device). It asks ``AutoModelForTokenClassification`` for
   ``attn_implementation="flash_attention_2"`` whatever the model config says; without flash-attn
   (always on CPU) the load fails and verl falls back to ``trl`` (which asks for flash-attention
   2 too). The same model class is loaded with the config's own attention implementation
   instead (the engine sets ``sdpa`` on CPU and on CUDA without flash-attn,
   ``flash_attention_2`` otherwise, as verl would); models without a token-classification class
   still go to verl's loader.
6. **Log-probabilities without flash-attn** (``logprobs_from_logits`` as imported by verl's
   engine modules). Its CPU fallback loops over rows, which in the packed layout are tokens;
   :func:`~trinity.launcher.trainer.verl_logprobs.chunked_logprobs` computes the same values
   over memory-bounded chunks of rows (the quickstart's train step spent a fifth of its time in
   that loop and its backward). Only where verl would take that fallback.

7. **Qwen2-VL / Qwen2.5-VL attention** (on every device): verl's replacement of their attention
   forward is written for ``transformers`` 4 (it imports ``apply_multimodal_rotary_pos_emb``,
   gone in 5); the Hugging Face forward is kept
   (:func:`~trinity.launcher.trainer.verl_mm.keep_hf_vl_attention`).
8. **Micro-batches of image rows** (on every device): verl rebuilds the ``[B, 4, j]`` nested
   ``position_ids`` of a micro-batch with a ragged dimension torch 2.13 does not keep
   (:func:`~trinity.launcher.trainer.verl_mm.fix_nested_ragged_dim`).

Not patched, but needed on CPU (settings, chosen by :mod:`trinity.launcher.trainer.verl_engine`):
``attn_implementation: sdpa`` (verl's default is flash-attention 2), fp32 parameters and compute
(bf16 autocast gives a 1e-2 logprob gap to the rollout engine), ``use_torch_compile: false``
(inductor needs a C++ toolchain and compiles for minutes on CPU).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import types
import warnings
from contextlib import contextmanager
from typing import Any, Optional

import torch

__all__ = [
    "SUPPORTED_VERL_VERSION",
    "UnsupportedVerlVersion",
    "apply_verl_compat",
    "check_verl_version",
    "cpu_device_module",
    "default_device",
]

#: The verl release these patches were written against (and tested with).
SUPPORTED_VERL_VERSION = "0.9.1"

_LOCK = threading.Lock()
_APPLIED: dict[str, bool] = {}


class UnsupportedVerlVersion(ImportError):
    """verl is missing or is not the release the adapter is pinned to."""


def check_verl_version() -> str:
    """Import verl and return its version.

    Raises:
        UnsupportedVerlVersion: verl is not installed, or its version is not
            :data:`SUPPORTED_VERL_VERSION` (the message says which is installed and how to get the
            supported one).
    """
    try:
        import verl
    except ImportError as exc:
        raise UnsupportedVerlVersion(
            f"Trinity's trainer needs verl=={SUPPORTED_VERL_VERSION} "
            f"(pip install 'trinity-launcher[verl]'); importing verl failed: {exc}"
        ) from exc
    version = str(getattr(verl, "__version__", "unknown"))
    if version != SUPPORTED_VERL_VERSION:
        raise UnsupportedVerlVersion(
            f"verl {version} is installed, but trinity.launcher.trainer supports verl "
            f"{SUPPORTED_VERL_VERSION} only (its adapter patches verl internals); install "
            f"verl=={SUPPORTED_VERL_VERSION}"
        )
    return version


def default_device() -> str:
    """``"cuda"`` where a CUDA device is usable in this process, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------- patch 1: platform


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


def _mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """(free, total) host memory in bytes (what ``torch.cuda.mem_get_info`` means on a GPU)."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except ImportError:  # pragma: no cover - psutil comes with ray and verl
        return 0, 0


def _make_cpu_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module."""
    module = types.ModuleType("trinity_verl_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    module.is_available = lambda: True
    # memory bookkeeping: no caching allocator on CPU
    for name in ("empty_cache", "reset_peak_memory_stats", "reset_max_memory_allocated"):
        setattr(module, name, _noop)
    for name in (
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
    ):
        setattr(module, name, _zero)
    module.mem_get_info = _mem_get_info
    module.set_per_process_memory_fraction = _noop
    module.memory_stats = lambda *a, **k: {}
    # RNG: the CPU generator is the device generator
    module.get_rng_state = lambda *a, **k: torch.get_rng_state()
    module.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    module.manual_seed = lambda seed: torch.manual_seed(seed)
    module.manual_seed_all = lambda seed: torch.manual_seed(seed)
    module.synchronize = lambda *a, **k: None
    return module


#: The device module :class:`PlatformCPU` hands to verl (``verl.utils.device.get_torch_device``).
cpu_device_module: types.ModuleType = _make_cpu_device_module()


def _platform_base() -> type:
    from verl.plugin.platform import PlatformBase

    return PlatformBase


def _build_platform_cpu_class() -> type:
    base = _platform_base()

    class _PlatformCPU(base):  # type: ignore[misc, valid-type]
        """verl platform for plain CPUs: device ``cpu``, collectives ``gloo``."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            return cpu_device_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            # never chosen by auto-detection: only apply_verl_compat installs it
            return False

        def current_device(self) -> Any:
            # "cpu", not an index: verl writes tensor.to(get_device_id()), and .to(0) means cuda:0
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: Any) -> None:
            return None

        def synchronize(self, device_index: Optional[int] = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):  # type: ignore[override]
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None

    _PlatformCPU.__name__ = _PlatformCPU.__qualname__ = "PlatformCPU"
    return _PlatformCPU


_PLATFORM_CPU_CLASS: Optional[type] = None


def __getattr__(name: str) -> Any:
    # PlatformCPU subclasses verl's PlatformBase, so it is built on first use: importing this
    # module must not import verl (the version check has to come first).
    if name == "PlatformCPU":
        return _platform_cpu_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _platform_cpu_class() -> type:
    global _PLATFORM_CPU_CLASS
    if _PLATFORM_CPU_CLASS is None:
        _PLATFORM_CPU_CLASS = _build_platform_cpu_class()
    return _PLATFORM_CPU_CLASS


def _install_cpu_platform() -> None:
    from verl.plugin.platform import PlatformRegistry, platform_manager

    cls = _platform_cpu_class()
    if PlatformRegistry.get("cpu") is not cls:
        PlatformRegistry.register(platform="cpu")(cls)
    current = platform_manager._current_platform
    if not isinstance(current, cls):
        # set the singleton directly: set_platform() warns when replacing a detected platform,
        # which happens legitimately when verl was used (e.g. imported an engine) before us
        platform_manager._current_platform = cls()


# --------------------------------------------------------------------- patch 2: engine registry


def _import_verl_engines() -> None:
    """Import ``verl.workers.engine`` without its warnings about optional backends.

    It warns once per backend it cannot import (torchtitan, veomni, automodel, mindspeed,
    megatron): noise for an FSDP-only user, on CPU and CUDA alike.
    """
    if "verl.workers.engine" in sys.modules:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r".* engine is not available", category=UserWarning
        )
        import verl.workers.engine  # noqa: F401


def _register_cpu_engines() -> None:
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import (
        FSDPEngineWithLMHead,
        FSDPEngineWithValueHead,
    )

    for model_type, cls in (
        ("language_model", FSDPEngineWithLMHead),
        ("value_model", FSDPEngineWithValueHead),
    ):
        backends = EngineRegistry._engines.setdefault(model_type, {})
        for backend in ("fsdp", "fsdp2"):
            backends.setdefault(backend, {})
            backends[backend]["cpu"] = cls


# ----------------------------------------------------------- patch 3: module-level device names


#: Modules of verl that cache ``get_device_name()`` in a module global at import.
_DEVICE_NAME_MODULES = (
    "verl.workers.engine.fsdp.transformer_impl",
    "verl.workers.engine.torchtitan.transformer_impl",
    "verl.experimental.separation.engine_workers",
)


def _fix_cached_device_names() -> None:
    for name in _DEVICE_NAME_MODULES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "device_name", None) != "cpu":
            module.device_name = "cpu"


# ------------------------------------------------------------ patch 4: process-group backend


def _wrap_process_group_init() -> None:
    import verl.utils.distributed as vdist

    if getattr(vdist.initialize_global_process_group_ray, "_trinity_cpu", False):
        return
    original_ray = vdist.initialize_global_process_group_ray
    original_env = vdist.initialize_global_process_group

    @functools.wraps(original_ray)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        # verl's default is "cpu:gloo,cpu:gloo" here, which torch rejects
        return original_ray(timeout_second=timeout_second, backend=backend or "gloo")

    @functools.wraps(original_env)
    def initialize_global_process_group(timeout_second=36000):
        from datetime import timedelta

        torch.distributed.init_process_group(
            backend="gloo",
            timeout=timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    for fn in (initialize_global_process_group_ray, initialize_global_process_group):
        fn._trinity_cpu = True  # type: ignore[attr-defined]
    vdist.initialize_global_process_group_ray = initialize_global_process_group_ray
    vdist.initialize_global_process_group = initialize_global_process_group
    # modules that imported the functions by name before we ran
    for module in list(sys.modules.values()):
        if module is None or not getattr(module, "__name__", "").startswith("verl."):
            continue
        if getattr(module, "initialize_global_process_group_ray", None) is original_ray:
            module.initialize_global_process_group_ray = initialize_global_process_group_ray
        if getattr(module, "initialize_global_process_group", None) is original_env:
            module.initialize_global_process_group = initialize_global_process_group


# ---------------------------------------------------------- patch 5: value-model attention


def _patch_valuehead_loader(device: str) -> None:
    import verl.utils.model as vmodel

    original = vmodel.load_valuehead_model
    if getattr(original, "_trinity_patched", False):
        return

    @functools.wraps(original)
    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        # verl hard-codes flash-attention 2 here; honour the config's attention instead
        from transformers import AutoModelForTokenClassification

        attn = getattr(model_config, "_attn_implementation", None) or "sdpa"
        if device == "cpu" and attn.startswith("flash_attention"):
            attn = "sdpa"  # no flash-attn kernels on CPU
        if type(model_config) not in AutoModelForTokenClassification._model_mapping:
            return original(local_path, torch_dtype, model_config, trust_remote_code)
        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation=attn,
            trust_remote_code=trust_remote_code,
        )

    load_valuehead_model._trinity_patched = True  # type: ignore[attr-defined]
    vmodel.load_valuehead_model = load_valuehead_model


# ------------------------------------------------------------ patch 6: log-probabilities


#: verl modules that import ``logprobs_from_logits`` by name.
_LOGPROB_MODULES = (
    "verl.workers.engine.fsdp.transformer_impl",
    "verl.workers.engine.torchtitan.transformer_impl",
    "verl.workers.engine.automodel.transformer_impl",
)


def _vectorise_logprobs() -> None:
    import verl.utils.torch_functional as vtf

    original = vtf.logprobs_from_logits
    if getattr(original, "_trinity_patched", False):
        return
    from trinity.launcher.trainer.verl_logprobs import chunked_logprobs

    @functools.wraps(original)
    def logprobs_from_logits(logits, labels, inplace_backward=True):
        if vtf.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE or vtf.NPU_CROSS_ENTROPY_LOSS_AVAILABLE:
            return original(logits, labels, inplace_backward=inplace_backward)
        return chunked_logprobs(logits, labels)

    logprobs_from_logits._trinity_patched = True  # type: ignore[attr-defined]
    vtf.logprobs_from_logits = logprobs_from_logits
    for name in _LOGPROB_MODULES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "logprobs_from_logits", None) is original:
            module.logprobs_from_logits = logprobs_from_logits


# --------------------------------------------------------------------------------- entry point


#: the format of the root handler verl's ``set_basic_config`` installs when it is imported
_VERL_ROOT_FORMAT = "%(levelname)s:%(asctime)s:%(message)s"


def _drop_verl_root_handler() -> None:
    """Remove the root-logger handler verl installs at import (``logging.basicConfig`` in
    ``verl.utils.logging_utils``): Trinity's loggers have their own handler and propagate to
    the root, so every trainer line was printed twice, once in verl's format. Only a handler
    with verl's exact format is removed; one the application installed stays."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        fmt = getattr(getattr(handler, "formatter", None), "_fmt", None)
        if type(handler) is logging.StreamHandler and fmt == _VERL_ROOT_FORMAT:
            root.removeHandler(handler)


def apply_verl_compat(device: Optional[str] = None) -> str:
    """Check verl's version and, on CPU, apply the patches of this module's docstring.

    Args:
        device: ``"cpu"`` or ``"cuda"``; ``None`` picks ``"cuda"`` when CUDA is available.

    Returns:
        The device the engine will run on (``"cpu"`` or ``"cuda"``).

    Raises:
        UnsupportedVerlVersion: see :func:`check_verl_version`.
        ValueError: ``device`` is neither ``"cpu"`` nor ``"cuda"``, or ``"cuda"`` without CUDA,
            or a device other than the one already applied in this process (verl's platform is
            a process-wide singleton).
    """
    device = default_device() if device is None else device
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch.cuda.is_available() is False")
    check_verl_version()
    with _LOCK:
        other = [d for d in _APPLIED if d != device]
        if other:
            raise ValueError(
                f"verl was already set up for device {other[0]!r} in this process; its platform "
                f"is a process-wide singleton, so {device!r} cannot be used as well"
            )
        if device == "cpu":
            # order matters: the platform first, so verl modules imported by the later steps
            # compute their module-level device names on the CPU platform
            _install_cpu_platform()
            _wrap_process_group_init()
        _import_verl_engines()
        _drop_verl_root_handler()
        _patch_valuehead_loader(device)
        from trinity.launcher.trainer.verl_mm import fix_nested_ragged_dim, keep_hf_vl_attention

        keep_hf_vl_attention()  # (7) and (8), on every device
        fix_nested_ragged_dim()
        if device == "cpu":
            _register_cpu_engines()
            _fix_cached_device_names()
            _vectorise_logprobs()
        _APPLIED[device] = True
    return device
