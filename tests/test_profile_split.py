"""bench/profile_split.py: a py-spy raw profile split by process, thread and the part of a step."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("profile_split", ROOT / "bench/profile_split.py")
profile_split = importlib.util.module_from_spec(spec)
spec.loader.exec_module(profile_split)

TRAINER = 'process 1:"bash rollouts.sh";process 2:"python3 -m fathom grpo --config x.toml"'
WORKER = 'process 1:"bash rollouts.sh";process 2:"python3 -m fathom grpo";process 9:"/usr/bin/python3 /sbx/worker.py {}"'
VLLM = "Thread._bootstrap (threading.py:1030);VLLMService._loop (fathom/rollout/service.py:316)"
LINES = [
    f"{TRAINER};{VLLM};LLMEngine.step (v1/engine/llm_engine.py:304);Scheduler.schedule (scheduler.py:564) 300",
    f"{TRAINER};{VLLM};GPUModelRunner.execute_model (model_runner.py:1211);"
    "CudaGraphManager.run_pw_graph (cudagraph_utils.py:412);LlamaForCausalLM.forward (llama.py:523) 50",
    f"{TRAINER};{VLLM};GPUModelRunner.execute_model (model_runner.py:1211);LlamaForCausalLM.forward (llama.py:523) 70",
    f"{TRAINER};<module> (fathom/__main__.py:3);FathomRollout.rollout_func (fathom/train/rollout_func.py:90) 120",
    f"{TRAINER};<module> (fathom/__main__.py:3);LLM.__init__ (vllm/entrypoints/llm.py:300) 400",
    f"{TRAINER};<module> (fathom/__main__.py:3);_get_per_token_logps (trl/grpo_trainer.py:900) 80",
    f"{TRAINER};<module> (fathom/__main__.py:3);import_module (importlib.py:90) 5",
    f"{WORKER};<module> (worker.py:360);main (worker.py:333);_read_exact (worker.py:47) 1000",
    'process 1:"bash";process 3:"python3 torch/_inductor/compile_worker" ;compile (x.py:1) 10',
]


def write(path: Path, lines: list[str]) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return path


def test_samples_split_by_process_thread_and_step_part(tmp_path):
    out = profile_split.split(profile_split.read_profile(write(tmp_path / "p.txt", LINES)), rate=100.0)
    assert out["processes"] == {
        "sandbox workers (stopped between cells: not CPU)": 10.0,
        "trainer": 10.25,
        "other processes": 0.1,
    }
    assert out["trainer_threads"] == {"main and other threads": 6.05, "vLLM driver thread": 4.2}
    assert out["vllm_thread"] == {
        "scheduler: schedule": 3.0,
        "model forward without a CUDA graph": 0.7,
        "model forward through vLLM's CUDA graph manager": 0.5,
    }
    assert out["main_thread"] == {
        "vLLM engine start": 4.0,
        "rollouts (episodes, sandbox traffic, tokenization)": 1.2,
        "TRL log-prob forward": 0.8,
        "start-up, imports and other": 0.05,
    }


def test_the_script_reads_a_gzipped_profile_and_writes_its_json(tmp_path):
    profile = write(tmp_path / "p.txt.gz", LINES[:2])
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench/profile_split.py"), str(profile), "--json", str(tmp_path / "s.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "scheduler: schedule" in result.stdout
    assert json.loads((tmp_path / "s.json").read_text())["trainer_threads"] == {"vLLM driver thread": 3.5}
