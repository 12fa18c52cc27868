"""CPU stand-ins for the Ascend-only operators that MindFormers 1.9's mcore training models
(`mindformers.parallel_core.training_graph`, `use_legacy: False`) build unconditionally.

For the tests and `make demo-moe` on a machine without an NPU; never loaded in a user's training.
apply() must run after `import mindformers` and before the Trainer builds the network
(train_mcore.py does both). It changes no parameter, parameter name or shape, only what these
compute. Paths are those of the installed mindformers 1.9.0 package; T = mindformers/parallel_core/training_graph.

1. FusedRMSNorm (P.RmsNorm: "Unsupported op [RmsNorm] on CPU", T/transformer/norm.py:349). Qwen3 and
   Qwen3-MoE build their layer spec with get_gpt_layer_local_spec(qk_layernorm=True)
   (models/qwen3/modeling_qwen3_train.py:45, models/qwen3_moe/modeling_qwen3_moe_train.py:52), whose
   fused_norm defaults to True (T/base_models/gpt/gpt_layer_specs.py:92): the YAML cannot turn it off.
   Replaced by the reduce-mean formula of RMSNorm.construct.
2. FlashAttention (FlashAttentionScore, no CPU kernel, T/transformer/flash_attention.py:141): every
   mcore attention, SelfAttention and MLA, uses it as core_attention (gpt_layer_specs.py:80, :177);
   training_graph has no other core attention. Replaced by softmax(q k^T * scale + mask) v on the
   BNSD layout, which `use_flash_attention: True` selects when there is no context parallel, no TND
   and no mask compression (mindformers/parallel_core/transformer_config.py:2063-2074). With
   `track_max_attention_logit` it also keeps the kernel's per-head running max of the scaled, masked
   logits in `max_logits_val` (what FlashAttention.construct takes from FlashAttentionScore's softmax_max).
3. Outer (RoPE, "Unsupported op [Outer] on CPU", T/base_models/common/embeddings/
   rotary_pos_embedding.py:75, :132; YaRN inherits it): a broadcast multiply.
4. Embedding backward ("Unsupported op [EmbeddingDenseBackward] on CPU", mint.nn.functional.embedding
   at T/tensor_parallel/layers.py:160, also reached by the MTP's shared embedding through its Morph):
   the lookup becomes ops.gather, whose gradient runs on CPU. Tensor parallel 1 only.
5. TopkExt ("Unsupported op [TopkExt] on CPU", T/transformer/moe/router.py:165, :365): a cell over
   P.TopK.
6. FFNGroupedGEMM (GroupedMatmul at T/transformer/moe/ffn.py:178, :181, plus Swiglu and the alltoall
   token dispatcher's sort/permute ops; `moe_grouped_gemm: False` is refused: "moe_grouped_gemm =
   'False' is not supported now", T/base_models/gpt/moe_module_specs.py:38): a dense mixture, every
   expert on every token weighted by the router's combine coefficients (zero for the experts not
   chosen), which is the dropless result; same w1/w2 parameters. With `print_expert_load: True` it
   also adds each step's tokens per expert to experts.num_tokens_per_expert, as the dispatcher does.
7. Data parallel (`parallel_mode: 0` under msrun): BaseTrainer resets parallel_config.data_parallel to
   1 in that mode (mindformers/trainer/base_trainer.py:290), then GPTModel.__init__ calls
   initialize_model_parallel(dp=1) in every mode but stand-alone (T/base_models/gpt/gpt_model.py:269),
   and its check fails: "total_model_size(1) = data_parallel_size(1) * ... which is not equal to
   world_size (2)" (mindformers/parallel_core/inference/parallel_state.py:258). In data-parallel mode
   only, the call gets data_parallel_size = the world size. (semi_auto_parallel, the real configs'
   mode, does not compile on CPU: "RuntimeError: Invalid backend: CPU",
   mindspore/ccsrc/frontend/parallel/graph_util/pipeline_split_utils.cc:1464 GetWorldGroup.)
8. SplitWithSize ("Unsupported op [SplitWithSize] on CPU" in MindSpore 2.7, used by MindFormers
   1.7-1.8's attention, MLP, MLA and activation cells): StridedSlice per chunk. And MindFormers 1.7's
   FFNGroupedGEMM has no num_tokens_per_expert, which the dense mixture reads: set to None.
"""

import importlib

import mindspore as ms
from mindspore import ops
from mindspore.ops import operations as P

_APPLIED: list[bool] = []  # one entry once apply() has run


def _rms_norm_construct(self, x):
    """Same arithmetic as mcore RMSNorm.construct, with the FusedRMSNorm weight."""
    original_type = x.dtype
    x = self.cast(x, self.compute_type)
    norm_factor = ops.rsqrt(ops.mean(ops.square(x), -1, True) + self.eps)
    output = x * norm_factor * self.weight
    return self.cast(output, original_type)


def _attention_construct(
    self,
    query,
    key,
    value,
    attention_mask,
    attn_mask_type=None,
    attention_bias=None,
    packed_seq_params=None,
    alibi_mask=None,
    prefix=None,
    padding_mask=None,
    actual_seq_qlen=None,
    actual_seq_kvlen=None,
):
    """query/key/value (S, B, N, D) -> output (S, B, N*Dv), as FlashAttention.construct on BNSD."""
    q = self.cpu_transpose(self.cpu_cast(query, ms.float32), (1, 2, 0, 3))  # B N S D
    k = self.cpu_transpose(self.cpu_cast(key, ms.float32), (1, 2, 0, 3))  # B Nk S D
    v = self.cpu_transpose(self.cpu_cast(value, ms.float32), (1, 2, 0, 3))  # B Nk S Dv
    bsz, n_kv, kv_len, head_dim = k.shape
    if n_kv != self.head_num:  # grouped-query attention: repeat each KV head
        rep = self.head_num // n_kv
        k = self.cpu_reshape(
            self.cpu_tile(self.cpu_reshape(k, (bsz, n_kv, 1, kv_len * head_dim)), (1, 1, rep, 1)),
            (bsz, self.head_num, kv_len, head_dim),
        )
        v_dim = v.shape[-1]
        v = self.cpu_reshape(
            self.cpu_tile(self.cpu_reshape(v, (bsz, n_kv, 1, kv_len * v_dim)), (1, 1, rep, 1)),
            (bsz, self.head_num, kv_len, v_dim),
        )
    scores = self.cpu_bmm_qk(q, k) * self.cpu_scale  # B N S S
    if attention_mask is not None:  # 1 = masked out
        scores = scores + self.cpu_cast(attention_mask, ms.float32) * -1e9
    if self.track_max_attention_logit:  # per head: max over batch, queries and keys
        step_max = self.cpu_reduce_max(scores, (0, 2, 3))
        self.cpu_assign(self.max_logits_val, self.cpu_maximum(self.max_logits_val, step_max))
    probs = self.cpu_softmax(scores)
    out = self.cpu_bmm_pv(probs, v)  # B N S Dv
    out = self.cpu_transpose(out, (2, 0, 1, 3))  # S B N Dv
    s, b, n, dv = out.shape
    return self.cpu_reshape(out, (s, b, n * dv))


class _CpuOuter(ms.nn.Cell):
    """outer(a, b) = a[:, None] * b[None, :]; shard() accepted and ignored (data parallel only)."""

    def construct(self, a, b):
        return ops.reshape(a, (-1, 1)) * ops.reshape(b, (1, -1))

    def shard(self, *args, **kwargs):
        return self


def _embedding_func(self, input_, weight):
    """Vocabulary lookup (tp = 1); the MTP's shared embedding calls it through its Morph."""
    bs, seq_len = input_.shape
    output = ops.gather(weight, self.reshape(input_, (bs * seq_len,)), 0)
    return self.reshape(output, (bs, seq_len, weight.shape[1]))


def _embedding_construct(self, input_):
    """Vocabulary lookup without the Morph (tp = 1)."""
    return _embedding_func(self, input_, self.weight)


class _CpuTopkExt(ms.nn.Cell):
    """TopkExt(input, k, dim=-1, largest=True, sorted=True) on the last axis, largest, via P.TopK."""

    def __init__(self):
        super().__init__()
        self.topk = P.TopK(sorted=True)

    def construct(self, x, k, dim=-1, largest=True, sorted=True):
        values, indices = self.topk(x, k)
        return values, ops.cast(indices, ms.int64)

    def recompute(self, *args, **kwargs):  # the router calls the primitive's recompute(False)
        return self

    def shard(self, *args, **kwargs):
        return self

    def add_prim_attr(self, *args, **kwargs):
        return self


def _dense_moe_construct(self, tokens, probs, routing_map):
    """tokens (dp, N, h), probs (dp, N, k) combine weights, routing_map (dp, N, k) expert ids -> (dp, N, h)."""
    dtype = tokens.dtype
    shape = tokens.shape
    n_experts = self.num_local_experts
    x = ops.reshape(ops.cast(tokens, self.compute_dtype), (1, -1, self.hidden_size))  # 1 N h
    x = ops.tile(x, (n_experts, 1, 1))  # E N h
    w1 = ops.reshape(ops.cast(self.weight1, self.compute_dtype), (n_experts, self.hidden_size, -1))
    w2 = ops.reshape(ops.cast(self.weight2, self.compute_dtype), (n_experts, self.moe_ffn_hidden_size, -1))
    fc1 = ops.bmm(x, w1)  # E N 2F
    gate, up = ops.split(fc1, self.moe_ffn_hidden_size, -1)
    fc2 = ops.bmm(ops.silu(gate) * up, w2)  # E N h
    selected = ops.one_hot(
        ops.cast(ops.reshape(routing_map, (-1,)), ms.int32),
        n_experts,
        ops.ones((), ms.float32),
        ops.zeros((), ms.float32),
    )  # N*k E
    k = routing_map.shape[-1]
    weights = ops.reshape(selected * ops.reshape(ops.cast(probs, ms.float32), (-1, 1)), (-1, k, n_experts))
    weights = ops.transpose(ops.reduce_sum(weights, 1), (1, 0))  # E N
    out = ops.reduce_sum(fc2 * ops.expand_dims(ops.cast(weights, fc2.dtype), -1), 0)  # N h
    if self.num_tokens_per_expert is not None:
        counts = ops.cast(ops.reduce_sum(selected, 0), ms.int32)
        out = ops.depend(out, ops.assign_add(self.num_tokens_per_expert, counts))
    return ops.cast(ops.reshape(out, shape), dtype)


class _CpuSplitWithSize(ms.nn.Cell):
    """SplitWithSize(x, split_size, dim) via StridedSlice: MindSpore 2.7 has no CPU kernel for it
    ("Unsupported op [SplitWithSize] on CPU"; 2.9 has one). shard()/add_prim_attr() accepted, ignored."""

    def __init__(self):
        super().__init__()
        self.slice = P.StridedSlice()

    def construct(self, x, split_size, dim=0):
        shape = x.shape
        rank = len(shape)
        axis = dim % rank
        outs = ()
        start = 0
        for size in split_size:
            begin = tuple(start if i == axis else 0 for i in range(rank))
            end = tuple(start + size if i == axis else shape[i] for i in range(rank))
            outs = outs + (self.slice(x, begin, end, (1,) * rank),)  # noqa: RUF005 (graph-mode syntax)
            start = start + size
        return outs

    def shard(self, *args, **kwargs):
        return self

    def add_prim_attr(self, *args, **kwargs):
        return self

    def recompute(self, *args, **kwargs):
        return self


def _split_with_size_needs_stand_in():
    """True when this MindSpore has no CPU kernel for SplitWithSize (2.7)."""
    major, minor = (int(v) for v in ms.__version__.split(".")[:2])
    return (major, minor) < (2, 8)


def apply():
    """Install the stand-ins (class attributes of MindFormers' mcore training cells); idempotent."""
    if _APPLIED:
        return
    from mindformers.parallel_core.training_graph.base_models.common.embeddings import rotary_pos_embedding
    from mindformers.parallel_core.training_graph.base_models.gpt import gpt_model
    from mindformers.parallel_core.training_graph.tensor_parallel import layers
    from mindformers.parallel_core.training_graph.transformer import flash_attention, norm
    from mindformers.parallel_core.training_graph.transformer.moe import ffn, router
    from mindspore.communication import get_group_size
    from mindspore.context import ParallelMode
    from mindspore.parallel._utils import _get_parallel_mode

    # 1. fused RMSNorm
    norm.FusedRMSNorm.construct = _rms_norm_construct

    # 2. FlashAttention
    fa_init = flash_attention.FlashAttention.__init__

    def fa_init_cpu(self, *args, **kwargs):
        fa_init(self, *args, **kwargs)
        if self.input_layout != "BNSD":
            raise ValueError(
                f"mcore_cpu_patch: the FlashAttention stand-in supports BNSD only, got "
                f"{self.input_layout} (set use_flash_attention: True; no context parallel, "
                "no attention mask compression, no EOD reset)"
            )
        self.cpu_scale = float(self.flash_attention.scale_value)
        self.cpu_transpose = P.Transpose()
        self.cpu_reshape = P.Reshape()
        self.cpu_tile = P.Tile()
        self.cpu_cast = P.Cast()
        self.cpu_bmm_qk = P.BatchMatMul(transpose_b=True)
        self.cpu_bmm_pv = P.BatchMatMul()
        self.cpu_softmax = P.Softmax(axis=-1)
        self.track_max_attention_logit = getattr(self, "track_max_attention_logit", False)  # not in MindFormers 1.7/1.8
        if self.track_max_attention_logit:
            self.cpu_reduce_max = P.ReduceMax()
            self.cpu_maximum = P.Maximum()
            self.cpu_assign = P.Assign()

    flash_attention.FlashAttention.__init__ = fa_init_cpu
    flash_attention.FlashAttention.construct = _attention_construct

    # 3. Outer in RoPE (YaRN inherits RotaryEmbedding.__init__)
    rope_init = rotary_pos_embedding.RotaryEmbedding.__init__

    def rope_init_cpu(self, *args, **kwargs):
        rope_init(self, *args, **kwargs)
        self.outer = _CpuOuter()
        self.outer_for_eod = _CpuOuter()

    rotary_pos_embedding.RotaryEmbedding.__init__ = rope_init_cpu

    # 4. embedding lookup (main embedding, and the MTP's shared embedding through its Morph)
    layers.VocabParallelEmbedding.construct = _embedding_construct
    layers.VocabParallelEmbedding.embedding_func = _embedding_func

    # 5. + 6. MoE router top-k and experts
    router.TopkExt = _CpuTopkExt
    ffn.FFNGroupedGEMM.construct = _dense_moe_construct
    ffn_init = ffn.FFNGroupedGEMM.__init__

    def ffn_init_cpu(self, *args, **kwargs):
        ffn_init(self, *args, **kwargs)
        if not hasattr(self, "num_tokens_per_expert"):  # mindformers < 1.8: no print_expert_load counter
            self.num_tokens_per_expert = None

    ffn.FFNGroupedGEMM.__init__ = ffn_init_cpu

    # 7. data parallel under msrun
    init_mp = gpt_model.initialize_model_parallel

    def init_mp_cpu(*args, **kwargs):
        if _get_parallel_mode() == ParallelMode.DATA_PARALLEL:
            kwargs["data_parallel_size"] = get_group_size()
        return init_mp(*args, **kwargs)

    gpt_model.initialize_model_parallel = init_mp_cpu

    # 8. SplitWithSize (MindSpore 2.7: no CPU kernel). attention.py and activation.py look it up as
    # aclnn_ops.SplitWithSize (= mindspore.ops.auto_generate) when a cell is built; mlp.py and
    # multi_latent_attention.py bound the class at import.
    if _split_with_size_needs_stand_in():
        from mindspore.ops import auto_generate

        auto_generate.SplitWithSize = _CpuSplitWithSize
        for name in ("mlp", "multi_latent_attention"):
            module = importlib.import_module(f"mindformers.parallel_core.training_graph.transformer.{name}")
            if hasattr(module, "SplitWithSize"):
                module.SplitWithSize = _CpuSplitWithSize
    _APPLIED.append(True)
