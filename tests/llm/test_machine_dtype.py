"""Local backends compute in bfloat16 only where the CPU has bfloat16 instructions, else in float32 (about twice as
fast there); a dtype given in the policy spec always wins."""

from __future__ import annotations

import pytest

from jupiter.llm import load_policy, machine_dtype
from jupiter.llm.hf_local import HfConfig
from jupiter.llm.machine_dtype import cpu_dtype, cpu_flags, native_bf16

# /proc/cpuinfo lines as these CPUs print them (shortened)
EPYC_AVX2 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
             "flags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2 sha_ni vaes vpclmulqdq\n")
SAPPHIRE_RAPIDS = ("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8\n"
                   "bugs\t\t: spectre_v1\n")
NEOVERSE_V1 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sha2 crc32 atomics asimdhp i8mm bf16 sve\n"
NEOVERSE_N1 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimdrdm lrcpc dcpop\n"


@pytest.mark.parametrize("cpuinfo, native", [(EPYC_AVX2, False), (SAPPHIRE_RAPIDS, True), (NEOVERSE_V1, True),
                                             (NEOVERSE_N1, False)])
def test_the_dtype_follows_the_cpus_bfloat16_instructions(cpuinfo, native):
    flags = cpu_flags(cpuinfo)
    assert ("avx2" in flags or "asimd" in flags) and "processor" not in flags
    assert native_bf16(flags) is native
    assert cpu_dtype(flags) == ("bfloat16" if native else "float32")


def test_this_machines_flags_are_read():
    flags = cpu_flags()
    assert flags, "no flags read from /proc/cpuinfo"
    assert cpu_dtype() == ("bfloat16" if flags & machine_dtype.BF16_FLAGS else "float32")


def test_a_dtype_in_the_spec_wins_and_none_means_the_machines(monkeypatch, tmp_path):
    built: list[HfConfig] = []

    class _Loaded:
        name, model_ref = "hf", str(tmp_path)

    monkeypatch.setattr("jupiter.llm.hf_local.HfPolicy", lambda config: built.append(config) or _Loaded())
    (tmp_path / "config.json").write_text("{}")
    load_policy(f"hf:{tmp_path}")
    load_policy(f"hf:{tmp_path}#dtype=bfloat16")
    assert [c.dtype for c in built] == [None, "bfloat16"]


def test_the_transformers_backend_loads_the_weights_in_the_machines_dtype(monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from jupiter.default_model import ensure_default_model
    from jupiter.llm.hf_local import HfPolicy

    folder = ensure_default_model()  # stored in bfloat16
    monkeypatch.setattr(machine_dtype, "cpu_flags", lambda cpuinfo=None: frozenset({"avx2"}))
    policy = HfPolicy(HfConfig(model_dir=folder))
    try:
        assert policy.dtype == "float32" and policy.model.dtype == torch.float32
    finally:
        policy.close()
    policy = HfPolicy(HfConfig(model_dir=folder, dtype="bfloat16"))
    try:
        assert policy.dtype == "bfloat16" and policy.model.dtype == torch.bfloat16
    finally:
        policy.close()
