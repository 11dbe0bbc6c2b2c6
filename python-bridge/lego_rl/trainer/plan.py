"""A job checked before it runs: `python -m lego_rl.trainer.check_job FILE.toml` (what `lego check --config` calls).

Everything here reads only the job file and the model's config.json, never weights, Ray or a
GPU, so a Qwen3-30B-A3B-sized job is checked on a laptop. Each check is one JSON line
`{"name", "ok", "detail", "fix"?, "skipped"?}`; the exit status is 1 when any failed.

1. job:        the file parses into a JobConfig for the Ray entry point (types, known keys).
2. model:      model.path/config.json is a Qwen3-MoE config this model implements.
3. expert parallel: the routed experts split evenly over the trainer ranks (the EP size).
4. devices:    GPU ranks use NCCL, CPU ranks gloo.
5. placement:  the trainer's placement-group bundles (and the embedded engines) fit [hardware].
6. memory:     per trainer rank, 16 bytes per parameter it holds (below) within 90% of a GPU.
7. engines:    which engine serves rollouts and that its addresses have the right scheme.

Memory model (6), stated so a reader can redo it: a rank holds the replicated parameters
(embeddings, attention, norms, routers, shared expert) plus 1/EP of the routed experts. It
pays 16 B per held parameter: bf16 weights (2) and gradients (2), an fp32 master copy (4) and
AdamW's two fp32 moments (8); fp32 training, as the trainer runs today, is the same 16 B
(4 + 4 + 8). Activations are not estimated (they depend on the batch), hence the 10% headroom.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..model import Config, ConfigError, read_config
from .job import ClusterConfig, JobConfig, JobConfigError, build_job, read_job_file

BYTES_PER_TRAINED_PARAMETER = 16
"""bf16 weights + bf16 grads + fp32 master + AdamW m and v (module docstring, memory model)."""
GPU_MEMORY_USABLE = 0.9
"""Share of a GPU's memory the estimate may take; the rest is for activations and the allocator."""
BF16_BYTES = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    skipped: bool = False

    def json(self) -> str:
        out = {"name": self.name, "ok": self.ok, "detail": self.detail}
        if self.fix is not None:
            out["fix"] = self.fix
        if self.skipped:
            out["skipped"] = True
        return json.dumps(out)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParameterCounts:
    replicated: int
    """On every trainer rank: embeddings, attention, norms, routers, shared expert."""
    routed_experts: int
    """Sharded over the expert-parallel ranks."""

    @property
    def total(self) -> int:
        return self.replicated + self.routed_experts

    def per_rank(self, expert_parallel: int) -> int:
        return self.replicated + self.routed_experts // expert_parallel


def parameter_counts(config: Config) -> ParameterCounts:
    """Counted from the config by the module tree's shapes (lego_rl.model.transformer); a test holds
    this equal to the parameters of the real module built on the meta device, which takes seconds
    for a 48-layer model where this takes microseconds."""
    D, V, Dh = config.hidden_size, config.vocab_size, config.head_dim
    H, G = config.num_attention_heads, config.num_key_value_heads
    attention = D * H * Dh + 2 * D * G * Dh + H * Dh * D + 2 * Dh  # q, k, v, o projections; q_norm, k_norm
    if config.attention_bias:
        attention += H * Dh + 2 * G * Dh + D
    replicated = V * D * (1 if config.tie_word_embeddings else 2) + D  # embeddings, LM head, final norm
    routed = 0
    for layer in range(config.num_hidden_layers):
        replicated += attention + 2 * D  # and the two norms around it
        if config.is_moe_layer(layer):
            E, F, S = config.num_experts, config.moe_intermediate_size, config.shared_expert_intermediate_size
            routed += E * 3 * F * D  # gate_up_proj [E, 2F, D] + down_proj [E, D, F]
            replicated += E * D + (3 * S * D + D if S else 0)  # router; shared expert and its gate
        else:
            replicated += 3 * config.intermediate_size * D
    return ParameterCounts(replicated=replicated, routed_experts=routed)


def trainer_bundles(cluster: ClusterConfig) -> list[dict[str, float]]:
    """One placement-group bundle per trainer rank (TrainerGroup places its ranks in these)."""
    bundle: dict[str, float] = {"CPU": cluster.cpus_per_rank}
    if cluster.gpus_per_rank:
        bundle["GPU"] = cluster.gpus_per_rank
    return [dict(bundle) for _ in range(cluster.trainer_ranks)]


def _fits(bundles: list[dict[str, float]], nodes: int, node: dict[str, float]) -> bool:
    """First-fit of bundles onto identical nodes, largest first (a bundle never spans nodes)."""
    free = [dict(node) for _ in range(nodes)]
    for bundle in sorted(bundles, key=lambda b: (-b.get("GPU", 0), -b.get("CPU", 0))):
        host = next((f for f in free if all(f.get(k, 0) >= v for k, v in bundle.items())), None)
        if host is None:
            return False
        for k, v in bundle.items():
            host[k] -= v
    return True


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"


def check_expert_parallel(job: JobConfig, model: Config) -> Check:
    ranks, experts = job.cluster.trainer_ranks, model.num_experts
    if ranks < 1:
        return Check(name="expert parallel", ok=False, detail=f"cluster.trainer_ranks = {ranks}", fix="set cluster.trainer_ranks >= 1")
    if experts == 0:
        return Check(name="expert parallel", ok=ranks == 1, detail=f"dense model, {ranks} trainer rank(s)",
                     fix=None if ranks == 1 else "a dense model trains on one rank: set cluster.trainer_ranks = 1")
    if experts % ranks:
        divisors = [d for d in range(1, experts + 1) if experts % d == 0]
        return Check(name="expert parallel", ok=False,
                     detail=f"{experts} experts do not split evenly over cluster.trainer_ranks = {ranks}",
                     fix=f"set cluster.trainer_ranks to a divisor of {experts}: {', '.join(map(str, divisors))}")
    return Check(name="expert parallel", ok=True,
                 detail=f"{experts} experts over {ranks} rank(s): {experts // ranks} per rank, top-{model.num_experts_per_tok}, "
                        f"{len(model.moe_layers)} MoE layers")


def check_devices(job: JobConfig) -> Check:
    cluster = job.cluster
    if cluster.gpus_per_rank < 0 or cluster.cpus_per_rank < 1:
        return Check(name="devices", ok=False, detail=f"gpus_per_rank = {cluster.gpus_per_rank}, cpus_per_rank = {cluster.cpus_per_rank}",
                     fix="set cluster.gpus_per_rank >= 0 and cluster.cpus_per_rank >= 1")
    if cluster.gpus_per_rank and cluster.backend != "nccl" and cluster.trainer_ranks > 1:
        return Check(name="devices", ok=False, detail=f"GPU ranks with backend {cluster.backend!r}",
                     fix='set cluster.backend = "nccl" (gloo has no all-to-all for CUDA tensors)')
    if not cluster.gpus_per_rank and cluster.backend == "nccl":
        return Check(name="devices", ok=False, detail="backend 'nccl' with CPU ranks (cluster.gpus_per_rank = 0)",
                     fix='set cluster.gpus_per_rank >= 1, or cluster.backend = "gloo" for CPU ranks')
    where = f"{cluster.gpus_per_rank} GPU(s)" if cluster.gpus_per_rank else "CPU"
    return Check(name="devices", ok=True, detail=f"{cluster.trainer_ranks} trainer rank(s) on {where} each, {cluster.backend}")


def check_placement(job: JobConfig) -> Check:
    hw, cluster = job.hardware, job.cluster
    bundles = trainer_bundles(cluster)
    # Embedded replicas (engine_group.py) or the fleet's engine servers (job_fleet.py): one CPU each.
    engines = [{"CPU": 1.0}] * cluster.engines if job.source.toy_steps or job.fleet.enabled else []
    if hw.nodes is None or hw.cpus_per_node is None:
        return Check(name="placement", ok=True, skipped=True,
                     detail=f"no [hardware] nodes/cpus_per_node: {len(bundles)} bundle(s) of {bundles[0]} not fitted")
    node = {"CPU": float(hw.cpus_per_node), "GPU": float(hw.gpus_per_node)}
    if not _fits(bundles + engines, hw.nodes, node):
        need_gpus = sum(b.get("GPU", 0) for b in bundles)
        return Check(name="placement", ok=False,
                     detail=f"{len(bundles)} trainer bundle(s) of {bundles[0]}" + (f" + {len(engines)} engine(s) of 1 CPU" if engines else "")
                            + f" do not fit {hw.nodes} node(s) of {hw.cpus_per_node} CPU, {hw.gpus_per_node} GPU ({need_gpus:g} GPUs needed)",
                     fix="add nodes ([hardware] nodes), or lower cluster.trainer_ranks / gpus_per_rank / cpus_per_rank")
    return Check(name="placement", ok=True,
                 detail=f"{len(bundles)} trainer bundle(s) of {bundles[0]} fit {hw.nodes} node(s) of "
                        f"{hw.cpus_per_node} CPU, {hw.gpus_per_node} GPU")


def check_memory(job: JobConfig, counts: ParameterCounts) -> Check:
    ep = max(job.cluster.trainer_ranks, 1)
    held = counts.per_rank(ep)
    need = held * BYTES_PER_TRAINED_PARAMETER
    detail = (f"{counts.total / 1e9:.2f}B parameters ({counts.replicated / 1e9:.2f}B replicated, {counts.routed_experts / 1e9:.2f}B in "
              f"routed experts); a rank holds {held / 1e9:.2f}B -> {_gib(need)} for weights, grads and AdamW "
              f"({BYTES_PER_TRAINED_PARAMETER} B/parameter), activations not included; bf16 weights alone: "
              f"{_gib(held * BF16_BYTES)} per rank, {_gib(counts.total * BF16_BYTES)} for the whole model in an engine")
    gpu = job.hardware.gpu_memory_gib
    if not job.cluster.gpus_per_rank:
        return Check(name="memory", ok=True, skipped=True, detail=f"{detail} (CPU ranks: host memory, not compared)")
    if gpu is None:
        return Check(name="memory", ok=True, skipped=True, detail=f"{detail} (no [hardware] gpu_memory_gib: not compared)")
    budget = gpu * 2**30 * GPU_MEMORY_USABLE * job.cluster.gpus_per_rank
    if need > budget:
        return Check(name="memory", ok=False, detail=f"{detail}; over {GPU_MEMORY_USABLE:.0%} of {job.cluster.gpus_per_rank} x {gpu:g} GiB",
                     fix="more trainer ranks (fewer experts each; cluster.trainer_ranks, a divisor of the expert count), "
                         "or GPUs with more memory ([hardware] gpu_memory_gib)")
    return Check(name="memory", ok=True, detail=f"{detail}; within {GPU_MEMORY_USABLE:.0%} of {job.cluster.gpus_per_rank} x {gpu:g} GiB")


def check_engines(job: JobConfig) -> Check:
    sync = job.weights
    kinds = {"vLLM": (sync.vllm, ("http://", "https://")), "SGLang": (sync.sglang, ("http://", "https://")),
             "engine server": (sync.engine, ("tcp://", "ipc://"))}
    for kind, (addresses, schemes) in kinds.items():
        for address in addresses:
            if not address.startswith(schemes):
                return Check(name="engines", ok=False, detail=f"{kind} address {address!r} does not start with {' or '.join(schemes)}",
                             fix=f"write the {kind} address as {schemes[0]}HOST:PORT")
    named = [f"{len(a)} {k}" for k, (a, _) in kinds.items() if a]
    if job.source.toy_steps:
        named.insert(0, f"{job.cluster.engines} embedded replica(s) ({job.cluster.engine_dtype}) on Ray")
    elif job.fleet.enabled and job.cluster.engines:
        named.insert(0, f"the rollout fleet's {job.cluster.engines} engine server(s) ({job.cluster.engine_dtype}) on Ray")
    if not named:
        return Check(name="engines", ok=True, detail="no engine to publish to: rollout workers' engines load weights themselves "
                                                     "(weights.dir)" if sync.dir else "no engine to publish weights to")
    note = ""
    if sync.vllm:
        note = ("; start each vLLM with --enable-return-routed-experts (for R3) and --worker-extension-cls "
                "lego_rl.weights.vllm_worker_extension.LegoWeightReloader, VLLM_SERVER_DEV_MODE=1 (docs/weight-sync.md)")
    return Check(name="engines", ok=True, detail=f"publishes each version to {', '.join(named)}{note}")


def check_job_file(path: Path) -> list[Check]:
    """Every check of a job file for the Ray entry point (python -m lego_rl.cluster.train)."""
    try:
        job = build_job(read_job_file(path, "cluster"), origin=str(path))
    except JobConfigError as error:
        return [Check(name="job", ok=False, detail=str(error), fix=JobConfigError.hint)]
    checks = [Check(name="job", ok=True, detail=f"{path} is a job for python -m lego_rl.cluster.train")]
    model_dir = job.model.path  # relative to the working directory, as the entry point reads it
    try:
        model = read_config(model_dir)
    except (ConfigError, ValueError, OSError) as error:
        return checks + [Check(name="model", ok=False, detail=f"{model_dir}: {error}",
                               fix="point model.path at an HF-layout Qwen3-MoE directory with a config.json")]
    weights = any(model_dir.glob("*.safetensors"))
    checks.append(Check(name="model", ok=True, detail=f"{model_dir}/config.json: {model.num_hidden_layers} layers, D={model.hidden_size}, "
                        f"{model.num_attention_heads}/{model.num_key_value_heads} heads of {model.head_dim}, vocab {model.vocab_size}"
                        + ("" if weights else "; no safetensors here (read at train time, not needed to check)")))
    checks += [check_expert_parallel(job, model), check_devices(job), check_placement(job)]
    checks.append(check_memory(job, parameter_counts(model)))
    checks.append(check_engines(job))
    return checks


__all__ = ["BYTES_PER_TRAINED_PARAMETER", "Check", "ParameterCounts", "check_job_file", "parameter_counts", "trainer_bundles"]
