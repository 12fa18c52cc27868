"""Training-thread cost of one HistogramMonitor round: sample, bucket and queue every parameter.

Two parameter sets: the tiny LLaMA of ``configs/tiny/llama_tiny_cpu.yaml`` (built by MindFormers,
its real Parameters) and a synthetic LLaMA-shaped set of float16 numpy arrays of about 1B values
(hidden 2048, FFN 5632, vocab 32000, 16 layers; ``--quick``: 4 layers, about 0.33B). Each round goes
through the same calls as the callback (``sampled_values`` -> ``histogram`` -> ``add_histogram``);
encoding and disk I/O happen on the writer thread and are not counted.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mindspore  # noqa: F401  (before any tensorboard proto: its old-style *_pb2 modules fail after them)
import numpy as np

HIDDEN, FFN, VOCAB = 2048, 5632, 32_000


@dataclass
class RoundCost:
    variant: str
    tensors: int
    values: int
    round_ms: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.round_ms)

    @property
    def per_histogram_ms(self) -> float:
        return self.median_ms / self.tensors


def llama_like_arrays(layers: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float16 arrays with the shapes of a LLaMA of ``layers`` layers (biggest ~65M values)."""
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    arrays = {"model.tok_embeddings.embedding_weight": weight(VOCAB, HIDDEN)}
    for layer in range(layers):
        prefix = f"model.layers.{layer}"
        for name in ("wq", "wk", "wv", "wo"):
            arrays[f"{prefix}.attention.{name}.weight"] = weight(HIDDEN, HIDDEN)
        arrays[f"{prefix}.feed_forward.w1.weight"] = weight(FFN, HIDDEN)
        arrays[f"{prefix}.feed_forward.w2.weight"] = weight(HIDDEN, FFN)
        arrays[f"{prefix}.feed_forward.w3.weight"] = weight(FFN, HIDDEN)
        arrays[f"{prefix}.attention_norm.weight"] = np.ones(HIDDEN, dtype=np.float16)
        arrays[f"{prefix}.ffn_norm.weight"] = np.ones(HIDDEN, dtype=np.float16)
    arrays["lm_head.weight"] = weight(VOCAB, HIDDEN)
    return arrays


def tiny_model_parameters() -> dict[str, Any]:
    """The real Parameters of the bundled tiny LLaMA, built by MindFormers from its YAML."""
    import mindspore as ms
    import yaml
    from mindformers.models.llama import LlamaConfig, LlamaForCausalLM

    config_path = Path(__file__).resolve().parents[1] / "configs" / "tiny" / "llama_tiny_cpu.yaml"
    model_config = yaml.safe_load(config_path.read_text())["model"]["model_config"]
    model_config.pop("type")
    ms.set_context(mode=0)
    ms.set_device("CPU")
    network = LlamaForCausalLM(LlamaConfig(**model_config))
    return {param.name: param for param in network.trainable_params()}


def _round(params: dict[str, Any], writer: Any, step: int, max_elements: int) -> float:
    from mindformers_tbplugin.pipeline import histograms

    start = time.perf_counter()
    for name, param in params.items():
        summary = histograms.histogram(histograms.sampled_values(param, max_elements), bins=30)
        writer.add_histogram(step, "params/" + name, summary.stats, summary.limits, summary.counts)
    return (time.perf_counter() - start) * 1000.0


def measure(variant: str, params: dict[str, Any], rounds: int, max_elements: int) -> RoundCost:
    from mindformers_tbplugin.tfevents.writer import RunWriter

    values = sum(int(np.prod(p.shape)) for p in params.values())
    with tempfile.TemporaryDirectory() as folder:
        writer = RunWriter(Path(folder) / "run")
        try:
            _round(params, writer, 0, max_elements)  # warm-up: first touch of the sampled pages
            cost = RoundCost(variant, len(params), values, [])
            for step in range(1, rounds + 1):
                cost.round_ms.append(_round(params, writer, step, max_elements))
                writer.flush()  # the writer thread drains between rounds, as between training steps
        finally:
            writer.close()
    return cost


def run_all(quick: bool, max_elements: int = 65_536) -> list[RoundCost]:
    """Each set sampled to ``max_elements`` and, for contrast, read whole (the large set only in the
    full run, one round: it takes seconds)."""
    rounds = 3 if quick else 7
    layers = 4 if quick else 16
    results = []
    tiny = tiny_model_parameters()
    results.append(measure(f"tiny LLaMA, sampled to {max_elements:,}", tiny, rounds, max_elements))
    results.append(measure("tiny LLaMA, whole tensors", tiny, rounds, _WHOLE))
    large = llama_like_arrays(layers)
    label = f"synthetic LLaMA {layers} layers (float16)"
    results.append(measure(f"{label}, sampled to {max_elements:,}", large, rounds, max_elements))
    if not quick:
        results.append(measure(f"{label}, whole tensors", large, 1, _WHOLE))
    return results


_WHOLE = 1 << 62  # a max_elements no tensor reaches: no sampling


def markdown_section(quick: bool) -> str:
    """The BENCHMARKS.md section: ms per round and per histogram, median over rounds."""
    lines = [
        "## HistogramMonitor: training-thread cost of one histogram round",
        "",
        "All trainable parameters, 30 buckets each; median over rounds after one warm-up round. Encoding "
        "and writing happen on the writer thread and are not included.",
        "",
        "| parameter set | tensors | values | median ms/round | ms/histogram | min-max ms/round |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for cost in run_all(quick):
        spread = f"{min(cost.round_ms):.1f}-{max(cost.round_ms):.1f}"
        lines.append(
            f"| {cost.variant} | {cost.tensors} | {cost.values:,} | {cost.median_ms:.1f} "
            f"| {cost.per_histogram_ms:.2f} | {spread} |"
        )
    return "\n".join([*lines, ""])
