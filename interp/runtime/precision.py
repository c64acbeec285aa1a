"""Which model dtype a run computes in: `--model-dtype auto` picks bfloat16 where the device multiplies it natively
(CUDA, and CPUs with bfloat16 matrix instructions: Intel AMX-BF16, AVX512-BF16 on Intel and AMD, Arm's BF16
extension) and float32 elsewhere, where bfloat16 matmuls are emulated and slower than float32. The choice and its
reason go into run.json (`dtype`). What stays in float32 whatever the model dtype: docs/precision.md."""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}  # the names a model dtype may be given by ("auto" apart)
NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class DtypeChoice:
    """asked: what the caller gave ("auto", a dtype name, or "default" when nothing was given); used: the dtype the
    model was loaded in; reason: why, in words (the detection's finding for auto)."""

    asked: str
    used: str
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def _cpu_flags(cpuinfo: str) -> set[str]:
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):  # x86 "flags", aarch64 "Features"
            flags.update(value.split())
    return flags


def cpu_bf16_support(cpuinfo: str | None = None, machine: str | None = None) -> tuple[bool, str]:
    """(native, what was found): does this CPU multiply bfloat16 in hardware? On x86 torch's own CPU-feature
    probes (the instructions oneDNN dispatches to: AMX tiles with AMX-BF16, AVX512-BF16), else the kernel's
    /proc/cpuinfo flags (amx_bf16, avx512_bf16); on aarch64 the `bf16` feature. `cpuinfo` / `machine`
    replace the real ones (tests)."""
    machine = (machine or platform.machine()).lower()
    probed = cpuinfo is None
    if probed:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        except OSError:
            cpuinfo = ""
    flags = _cpu_flags(cpuinfo)
    if machine in ("x86_64", "amd64", "i686", "x86"):
        found = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
        if probed and not found:  # no /proc/cpuinfo (not Linux): torch's own probes of the running CPU
            cpu = getattr(torch, "cpu", None)
            if getattr(cpu, "_is_amx_tile_supported", lambda: False)():
                found.append("amx (torch)")
            if getattr(cpu, "_is_avx512_bf16_supported", lambda: False)():
                found.append("avx512_bf16 (torch)")
        if found and not any("amx" in f for f in found):  # vector bf16 only: measured ~2x float32's matmul rate
            return True, (f"this CPU has bfloat16 matrix instructions ({', '.join(found)}) but no AMX: bfloat16 "
                          "matmuls run about 2x float32's rate here, 6x with AMX (docs/precision.md#speed)")
        if found:
            return True, f"this CPU has bfloat16 matrix instructions ({', '.join(found)})"
        return False, "this x86 CPU has neither AMX-BF16 nor AVX512-BF16: bfloat16 matmuls would be emulated"
    if machine in ("aarch64", "arm64"):
        if "bf16" in flags:
            return True, "this Arm CPU has the BF16 extension (bf16)"
        return False, "this Arm CPU lacks the BF16 extension: bfloat16 matmuls would be emulated"
    return False, f"no known bfloat16 matrix unit on a {machine or 'unknown'} CPU"


def auto_dtype(device: torch.device | None, device_map=None, cuda_available: bool | None = None,
               cpu_support: tuple[bool, str] | None = None) -> DtypeChoice:
    """The dtype `--model-dtype auto` loads a model in on `device` (or with a device map), and why."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    on_gpu = (device_map is not None and cuda_available) or (device is not None and device.type == "cuda")
    if on_gpu:
        return DtypeChoice("auto", "bfloat16", "CUDA device: bfloat16 runs on its tensor cores")
    if device is not None and device.type == "mps":
        return DtypeChoice("auto", "float32", "MPS device: bfloat16 support varies by chip and macOS; float32")
    native, found = cpu_support if cpu_support is not None else cpu_bf16_support()
    return DtypeChoice("auto", "bfloat16" if native else "float32", found)


def choose_dtype(asked, device: torch.device | None, device_map=None, cuda_available: bool | None = None,
                 default: torch.dtype | None = None) -> tuple[torch.dtype, DtypeChoice]:
    """(torch dtype, DtypeChoice) for a model's dtype as asked: "auto" (detected), a torch dtype or name (as
    given; the caller has validated the name), or None (the `default` dtype)."""
    if isinstance(asked, str) and asked.strip().lower() == "auto":
        c = auto_dtype(device, device_map, cuda_available)
        return DTYPES[c.used], c
    if asked is None:
        return default, DtypeChoice("default", NAMES.get(default, str(default)),
                                    "float32 on CPU, bfloat16 on CUDA (pass --model-dtype auto to use bfloat16 "
                                    "where the CPU computes it natively)")
    dt = DTYPES[asked] if isinstance(asked, str) else asked
    name = NAMES.get(dt, str(dt))
    return dt, DtypeChoice(asked if isinstance(asked, str) else name, name, "asked for")
