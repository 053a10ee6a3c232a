"""Which dtype a local backend computes in on this machine's CPU, when the user did not say.

Why: bfloat16 halves a model's memory, but only CPUs with bfloat16 instructions (x86 ``avx512_bf16`` or
``amx_bf16``, Arm ``bf16``) compute in it natively. Elsewhere (e.g. AVX2-only AMD EPYC and older Intel) every
bfloat16 matmul is converted on the fly; vLLM 0.32.0's CPU build says "Failed to create oneDNN linear, fallback
to torch linear". Measured on a 2-core AVX2 EPYC with the embedded 270M model
(``benchmarks/perf/policy_throughput.py --dtypes``): vLLM 14.1 tokens/s in bfloat16 against 25.6 in float32,
transformers 7.8 against 13.5. So the default is bfloat16 where the CPU has it and float32 where it has not; an
explicit ``#dtype=`` in the policy spec always wins.
"""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["BF16_FLAGS", "cpu_flags", "native_bf16", "cpu_dtype"]

#: /proc/cpuinfo flags of CPUs that compute in bfloat16 natively
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``) from /proc/cpuinfo text; empty if unknown."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU computes in bfloat16 natively (an Apple silicon Mac counts: its CPUs have BF16)."""
    flags = cpu_flags() if flags is None else flags
    if flags & BF16_FLAGS:
        return True
    return not flags and platform.system() == "Darwin" and platform.machine() == "arm64"


def cpu_dtype(flags: frozenset[str] | None = None) -> str:
    """``"bfloat16"`` on a CPU with native bfloat16, else ``"float32"`` (twice the memory, about twice the speed)."""
    return "bfloat16" if native_bf16(flags) else "float32"
