"""A real (tiny) LoRA fine-tuning of the embedded Gemma 3 270M: the adapter it writes loads as a policy and
answers, a signal stops it with a checkpoint that a rerun resumes from, and bad input is refused before any
model loads."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from sft_rows import TINY, short_rows

from jupiter.cli import main
from jupiter.sft.config import profile
from jupiter.sft.train import SftInterrupted, SftRequest, latest_checkpoint, train_sft

pytest.importorskip("peft")


def test_tiny_run_writes_an_adapter_and_its_record(tiny_adapter):
    assert (tiny_adapter / "adapter_config.json").is_file()
    assert (tiny_adapter / "adapter_model.safetensors").stat().st_size > 0
    config = json.loads((tiny_adapter / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["base_model_name_or_path"] == "default"
    assert {"q_proj", "down_proj"} <= set(config["target_modules"]) and "lm_head" not in config["target_modules"]
    record = json.loads((tiny_adapter / "training.json").read_text())
    assert record["command"].startswith("jupiter sft ") and "--max-steps 2" in record["command"]
    assert record["profile"] == "cpu" and record["seed"] == 3 and record["steps"] == 2
    assert len(record["data"]["sha256"]) == 64 and record["data"]["rows"] == 4
    assert record["tokens_seen"] > 0 and record["session"]["tokens_per_second"] > 0
    assert record["final_loss"] > 0 and len(record["losses"]) == 2


def test_the_adapter_loads_as_a_policy_and_answers(tiny_adapter):
    from jupiter.llm.model_dirs import merged_dir_for
    from jupiter.llm.spec import describe_policy, load_policy
    from jupiter.llm.types import SamplingParams

    merged = merged_dir_for(tiny_adapter)
    try:
        with load_policy(f"hf:{tiny_adapter}") as policy:
            assert describe_policy(policy)["model"] == str(merged)
            [[completion]] = policy.generate([[{"role": "user", "content": "Task: what is 2 + 2?"}]],
                                             SamplingParams(temperature=0, max_tokens=8))
            assert completion.num_tokens >= 1 and completion.finish_reason in ("stop", "length")
        assert (merged / "model.safetensors").is_file() and (merged / "tokenizer.json").is_file()
    finally:
        shutil.rmtree(merged, ignore_errors=True)  # the merge is cached under the user's cache: leave none


def test_a_signal_saves_a_checkpoint_and_the_same_command_resumes_from_it(tmp_path, base_model_dir):
    data = short_rows(tmp_path / "sft.jsonl", 8)
    config = profile("cpu").with_overrides({"max_steps": 6, "batch_size": 1, "micro_batch_size": 1, "lora_r": 2,
                                            "lora_alpha": 4, "max_len": 96, "save_steps": 2, "seed": 1})
    request = SftRequest(data=data, base="default", out=tmp_path / "out", config=config, command="test")

    def stop_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while latest_checkpoint(request.out) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # caught by train_sft's handler, as `kill PID` would be

    watcher = threading.Thread(target=stop_after_first_checkpoint, daemon=True)
    watcher.start()
    with pytest.raises(SftInterrupted, match="rerun the same command to resume"):
        train_sft(request)
    watcher.join()
    stopped_at = int(latest_checkpoint(request.out).name.split("-")[1])
    assert 2 <= stopped_at < 6 and not (request.out / "training.json").exists()
    result = train_sft(request)
    assert result.resumed_from == stopped_at and result.steps == 6
    record = json.loads((request.out / "training.json").read_text())
    assert record["resumed_from_step"] == stopped_at and len(record["losses"]) == 6


def test_resume_refuses_other_data_or_settings(tmp_path, base_model_dir):
    from jupiter.sft.train import RUN_FILE, SftError

    data = short_rows(tmp_path / "sft.jsonl", 2)
    out = tmp_path / "out"
    (out / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    config = profile("cpu").with_overrides({"max_steps": 4})
    (out / RUN_FILE).write_text(json.dumps({"data_sha256": "0" * 64, "base": "default",
                                            "config": {**config.to_dict(), "learning_rate": 1.0}}))
    with pytest.raises(SftError, match=r"different run \(differs in: data_sha256, config.learning_rate"):
        train_sft(SftRequest(data=data, base="default", out=out, config=config))


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(["sft", *argv])
    return code, capsys.readouterr().err


def test_bad_input_is_refused_before_any_model_loads(tmp_path, capsys):
    data = short_rows(tmp_path / "sft.jsonl", 2)
    code, err = run_cli(capsys, str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o"))
    assert code == 2 and "missing.jsonl does not exist" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(data.read_text() + '{"conversations": [{"from": "robot", "value": "x"}]}\n')
    code, err = run_cli(capsys, str(bad), "--out", str(tmp_path / "o"))
    assert code == 2 and "bad.jsonl line 3" in err and "conversations[0]" in err
    code, err = run_cli(capsys, str(data), "--out", str(tmp_path / "o"), "--base", str(tmp_path))
    assert code == 2 and "is not a Hugging Face model folder" in err
    code, err = run_cli(capsys, str(data), "--out", str(data))
    assert code == 2 and "--out" in err
    code, err = run_cli(capsys, str(data), "--out", str(tmp_path / "o"), "--batch-size", "3")
    assert code == 2 and "batch_size (3) must be a multiple of micro_batch_size" in err
    assert not (tmp_path / "o").exists()


def test_finished_run_is_not_overwritten(tiny_adapter, capsys, tmp_path):
    data = short_rows(tmp_path / "sft.jsonl", 2)
    code, err = run_cli(capsys, str(data), "--out", str(tiny_adapter), *TINY)
    assert code == 2 and "already holds a finished run" in err


def test_print_config_shows_the_profile_with_overrides(capsys):
    assert main(["sft", "x.jsonl", "--profile", "paper", "--lr", "2e-4", "--print-config"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["profile"] == "paper" and config["lora_r"] == 8 and config["learning_rate"] == 2e-4
    assert config["batch_size"] == 16 and config["epochs"] == 3 and config["warmup_ratio"] == 0.1
    assert config["schedule"] == "cosine" and config["target_modules"] == "all-linear"


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path, base_model_dir):
    """SIGKILL (no chance to save): the rerun continues from the last checkpoint written before the kill."""
    data = short_rows(tmp_path / "sft.jsonl", 8)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "jupiter.cli", "sft", str(data), "--out", str(out), "--max-steps", "6",
               "--batch-size", "1", "--micro-batch-size", "1", "--lora-r", "2", "--max-len", "96",
               "--save-steps", "2"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while latest_checkpoint(out) is None and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
    finally:
        process.kill()
        process.wait()
    killed_at = int(latest_checkpoint(out).name.split("-")[1])
    assert not (out / "training.json").exists()
    assert subprocess.run(command, capture_output=True).returncode == 0
    record = json.loads((out / "training.json").read_text())
    assert record["resumed_from_step"] >= killed_at and record["steps"] == 6


def test_a_second_stage_starts_from_the_given_adapter_and_records_it(tiny_adapter, tmp_path, capsys, monkeypatch):
    import peft.utils.save_and_load as peft_saving
    import torch
    from safetensors.torch import load_file

    hub_lookups: list[str] = []  # the checkpoints' save must not look the base model up on the Hub
    monkeypatch.setattr(peft_saving, "check_file_exists_on_hf_hub", lambda repo, *a, **k: hub_lookups.append(repo))
    data = short_rows(tmp_path / "sft.jsonl", 3)
    out = tmp_path / "stage2"
    no_steps = [a if a != "2" else "1" for a in TINY]  # one step of lr 1e-9: the first stage's weights stay
    no_steps[no_steps.index("--lr") + 1] = "1e-9"
    assert main(["sft", str(data), "--out", str(out), "--init-adapter", str(tiny_adapter), *no_steps]) == 0
    first, second = load_file(tiny_adapter / "adapter_model.safetensors"), load_file(out / "adapter_model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.allclose(first[k], second[k], atol=1e-6) for k in first)  # fresh LoRA B would be zeros
    assert any(bool(first[k].abs().sum() > 0) for k in first if "lora_B" in k)
    record = json.loads((out / "training.json").read_text())
    assert record["init_adapter"]["path"] == str(tiny_adapter)
    assert record["init_adapter"]["command"] == json.loads((tiny_adapter / "training.json").read_text())["command"]
    assert f"--init-adapter {tiny_adapter}" in record["command"]
    assert hub_lookups == []
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "default"

    code, err = run_cli(capsys, str(data), "--out", str(tmp_path / "r8"), "--init-adapter", str(tiny_adapter),
                        "--max-steps", "1", "--lora-r", "8")
    assert code == 2 and "has LoRA rank 4, the settings say 8" in err
    code, err = run_cli(capsys, str(data), "--out", str(tmp_path / "none"), "--init-adapter", str(tmp_path))
    assert code == 2 and "not an adapter folder" in err
