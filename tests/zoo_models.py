"""Real third-party models (transformers and timm), built as a user would and exported.

Every model is built from a tiny config (hidden size 32-64, one or two layers) with random weights
from a fixed seed, so nothing is downloaded (``HF_HUB_OFFLINE=1`` is set before transformers is
imported) and each export takes seconds. The cases are :class:`ModelCase`\\ s, the
:class:`serde.testing.zoo.Case` shape plus what these models need: a train-mode flag (batch norm updating
its statistics) and decode steps for the programs that carry a KV cache.

Importing this module needs ``transformers`` and ``timm`` (the ``models`` extra), imported by
``tests/zoo_model_libs.py`` (which also gets timm's import past the torchvision wheel of this index).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.export import Dim, ExportedProgram

from serde.testing.zoo import Case, decompose, find_case
from tests.zoo_model_libs import TorchExportableModuleWithStaticCache, timm, transformers

__all__ = ["CASES", "ModelCase", "export_model", "get"]

Step = tuple[tuple, dict]


@dataclass(frozen=True)
class ModelCase(Case):
    train: bool = False
    """Export (and run) in train mode: batch norm uses batch statistics and updates its buffers."""
    steps: Callable[[], list[Step]] | None = None
    """Decode steps: inputs run one after another on *one* module, whose cache buffers carry over."""


def get(name: str) -> ModelCase:
    return find_case(CASES, name, "model")  # type: ignore[return-value]


def export_model(case: ModelCase) -> ExportedProgram:
    """Export ``case`` (seed 0, non-strict) in eval mode, or train mode if ``case.train``."""
    torch.manual_seed(0)
    model, args, kwargs, dynamic_shapes = case.build()
    model.train(case.train)
    ep = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)
    return case.post(ep) if case.post else ep


# ---------------------------------------------------------------- transformers: decoders

_VOCAB = 96


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, _VOCAB, shape)


def _decoder_config(kind: str, **over):
    common = dict(vocab_size=_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**common)
    elif kind == "mistral":
        cfg = transformers.MistralConfig(**common, sliding_window=None)
    elif kind == "qwen2":
        cfg = transformers.Qwen2Config(**common)
    elif kind == "qwen3":
        cfg = transformers.Qwen3Config(**common, head_dim=8)
    elif kind == "gemma":
        cfg = transformers.GemmaConfig(**common, head_dim=8)
    elif kind == "phi3":
        cfg = transformers.Phi3Config(**common, pad_token_id=0)
    elif kind == "mixtral":
        cfg = transformers.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    elif kind == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(**common, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                          moe_intermediate_size=32, decoder_sparse_step=1)
    elif kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=_VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    else:
        raise KeyError(kind)
    for k, v in over.items():
        setattr(cfg, k, v)
    return cfg


def _causal_lm(kind: str, dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_decoder_config(kind))
    return model.to(dtype).eval()


_SEQ = Dim("seq", min=2, max=32)


def _prefill(kind: str, dtype: torch.dtype = torch.float32):
    """The whole-prompt forward, dynamic sequence length, no cache."""
    def build():
        ids = _ids(1, 6)
        return _causal_lm(kind, dtype), (), {"input_ids": ids, "use_cache": False}, {
            "input_ids": {1: _SEQ}, "use_cache": None}
    return build


def _prefill_other() -> list[Step]:
    return [((), {"input_ids": _ids(1, 3), "use_cache": False}),
            ((), {"input_ids": _ids(1, 17), "use_cache": False})]


_STATIC_LEN = 12


def _static_cache(kind: str, dtype: torch.dtype = torch.float32):
    """One decode step against a static cache held as buffers (transformers' executorch recipe)."""
    def build():
        model = _causal_lm(kind, dtype)
        model.generation_config.use_cache = True
        model.generation_config.cache_implementation = "static"
        wrapped = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=_STATIC_LEN)
        return wrapped, (), {"input_ids": _ids(1, 1), "cache_position": torch.tensor([0])}, None
    return build


def _static_steps() -> list[Step]:
    torch.manual_seed(3)
    return [((), {"input_ids": _ids(1, 1), "cache_position": torch.tensor([p])}) for p in range(4)]


def _kv(kind: str, past: int, dtype: torch.dtype = torch.float32):
    cfg = _decoder_config(kind)
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    layers = cfg.num_hidden_layers
    return transformers.DynamicCache(
        [(torch.randn(1, heads, past, head_dim).to(dtype), torch.randn(1, heads, past, head_dim).to(dtype))
         for _ in range(layers)])


_PAST = Dim("past", min=1, max=24)
_NEW = Dim("new", min=1, max=8)


def _dynamic_cache(kind: str):
    """A step over a DynamicCache input (a registered pytree) of dynamic length; returns the
    extended cache."""
    def build():
        model = _causal_lm(kind)
        cache = _kv(kind, 5)
        n = len(cache.layers)
        kv_shapes = {"key_cache": [{2: _PAST}] * n, "value_cache": [{2: _PAST}] * n}
        return model, (), {"input_ids": _ids(1, 2), "past_key_values": cache, "use_cache": True}, {
            "input_ids": {1: _NEW}, "past_key_values": [kv_shapes["key_cache"], kv_shapes["value_cache"]],
            "use_cache": None}
    return build


def _dynamic_other(kind: str):
    def other() -> list[Step]:
        return [((), {"input_ids": _ids(1, 1), "past_key_values": _kv(kind, 9), "use_cache": True}),
                ((), {"input_ids": _ids(1, 4), "past_key_values": _kv(kind, 1), "use_cache": True})]
    return other


class ListCacheStep(nn.Module):
    """One decode step whose cache goes in and out as lists of key and value tensors, the way a
    user exports a DynamicCache decoder without registering the cache class as a pytree."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, keys: list[torch.Tensor], values: list[torch.Tensor]):
        cache = transformers.DynamicCache(list(zip(keys, values, strict=True)))
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        new = out.past_key_values
        return out.logits, [layer.keys for layer in new.layers], [layer.values for layer in new.layers]


def _list_cache(kind: str):
    def build():
        cache = _kv(kind, 5)
        keys = [layer.keys for layer in cache.layers]
        values = [layer.values for layer in cache.layers]
        n = len(keys)
        return ListCacheStep(_causal_lm(kind)), (_ids(1, 2), keys, values), {}, (
            {1: _NEW}, [{2: _PAST}] * n, [{2: _PAST}] * n)
    return build


def _list_cache_other(kind: str):
    def other() -> list[Step]:
        out = []
        for new, past in ((1, 9), (4, 1)):
            cache = _kv(kind, past)
            out.append(((_ids(1, new), [la.keys for la in cache.layers], [la.values for la in cache.layers]), {}))
        return out
    return other


def list_cache_decode(module: nn.Module, first: Step, steps: int) -> list:
    """Runs ``steps`` decode steps of a :class:`ListCacheStep` program from ``first``: each step
    feeds the greedy next token and the returned cache back in. Returns every step's outputs."""
    (ids, keys, values), _ = first
    outs = []
    for _ in range(steps):
        logits, keys, values = module(ids, keys, values)
        outs.append((logits, keys, values))
        ids = logits[:, -1:].argmax(-1)
    return outs


# ---------------------------------------------------------------- transformers: encoders, seq2seq, vision, audio


def _from_config(cls_name: str, config) -> nn.Module:
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(config).eval()


_TOK = Dim("tokens", min=2, max=32)


def _encoder(cls_name: str, config_fn: Callable[[], object], type_ids: bool = True):
    def build():
        ids = _ids(2, 7)
        kwargs = {"input_ids": ids, "attention_mask": torch.ones(2, 7, dtype=torch.long)}
        kwargs["attention_mask"][1, 5:] = 0
        shapes = {"input_ids": {1: _TOK}, "attention_mask": {1: _TOK}}
        if type_ids:
            kwargs["token_type_ids"] = torch.zeros(2, 7, dtype=torch.long)
            shapes["token_type_ids"] = {1: _TOK}
        return _from_config(cls_name, config_fn()), (), kwargs, shapes
    return build


def _encoder_other(type_ids: bool = True):
    def other() -> list[Step]:
        out = []
        for t in (3, 12):
            kw = {"input_ids": _ids(2, t), "attention_mask": torch.ones(2, t, dtype=torch.long)}
            if type_ids:
                kw["token_type_ids"] = torch.ones(2, t, dtype=torch.long)
            out.append(((), kw))
        return out
    return other


def _bert_config():
    return transformers.BertConfig(vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=64)


def _roberta_config():
    return transformers.RobertaConfig(vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=68, pad_token_id=1)


def _distilbert_config():
    return transformers.DistilBertConfig(vocab_size=_VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                         max_position_embeddings=64)


def _t5():
    cfg = transformers.T5Config(vocab_size=_VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                num_heads=4, decoder_start_token_id=0)
    src, tgt = Dim("src", min=2, max=32), Dim("tgt", min=2, max=32)
    return (_from_config("T5ForConditionalGeneration", cfg), (),
            {"input_ids": _ids(2, 7), "decoder_input_ids": _ids(2, 4), "use_cache": False},
            {"input_ids": {1: src}, "decoder_input_ids": {1: tgt}, "use_cache": None})


def _bart():
    cfg = transformers.BartConfig(vocab_size=_VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, max_position_embeddings=64)
    return (_from_config("BartForConditionalGeneration", cfg), (),
            {"input_ids": _ids(2, 7), "decoder_input_ids": _ids(2, 4), "use_cache": False}, None)


def _seq2seq_other() -> list[Step]:
    return [((), {"input_ids": _ids(2, 3), "decoder_input_ids": _ids(2, 9), "use_cache": False})]


def _vit():
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 image_size=32, patch_size=8, num_labels=10)
    return _from_config("ViTForImageClassification", cfg), (torch.randn(2, 3, 32, 32),), {}, None


def _clip_vision():
    cfg = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, image_size=32, patch_size=8, projection_dim=16)
    return _from_config("CLIPVisionModelWithProjection", cfg), (torch.randn(2, 3, 32, 32),), {}, None


def _wav2vec2():
    cfg = transformers.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 4),
                                      conv_kernel=(10, 8), num_conv_pos_embeddings=16,
                                      num_conv_pos_embedding_groups=4, vocab_size=_VOCAB)
    return (_from_config("Wav2Vec2ForCTC", cfg), (torch.randn(2, 800),), {},
            ({1: 400 * Dim("frames", min=1, max=8)},))


def _wav2vec2_other() -> list[Step]:
    return [((torch.randn(2, 400),), {}), ((torch.randn(2, 2400),), {})]


def _whisper_encoder():
    cfg = transformers.WhisperConfig(vocab_size=_VOCAB, d_model=32, encoder_layers=2, decoder_layers=1,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=16,
                                     max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                     decoder_start_token_id=1)
    model = _from_config("WhisperModel", cfg).get_encoder()
    return model, (torch.randn(1, 16, 32),), {}, None


# ---------------------------------------------------------------- timm


def _timm(name: str, size: int = 32, batch: int = 2, channels_last: bool = False, dynamic: Dim | None = None,
          **kwargs):
    def build():
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
        x = torch.randn(batch, 3, size, size)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        shapes = ({2: dynamic, 3: dynamic},) if dynamic is not None else ({0: Dim("batch", min=1, max=8)},)
        return model, (x,), {}, shapes
    return build


def _images(*sizes: int, batch: int = 2, channels_last: bool = False):
    def other() -> list[Step]:
        out = []
        for s in sizes:
            x = torch.randn(batch, 3, s, s)
            out.append(((x.contiguous(memory_format=torch.channels_last) if channels_last else x,), {}))
        return out
    return other


def _batches(size: int, *batches: int, channels_last: bool = False):
    def other() -> list[Step]:
        out = []
        for b in batches:
            x = torch.randn(b, 3, size, size)
            out.append(((x.contiguous(memory_format=torch.channels_last) if channels_last else x,), {}))
        return out
    return other


# ---------------------------------------------------------------- cases

_HW = 32 * Dim("h32", min=1, max=4)

CASES: list[ModelCase] = [
    # decoders: prefill at dynamic length, static cache decode steps, dynamic cache steps
    ModelCase("hf/llama", _prefill("llama"), other_inputs=_prefill_other, tags=("decoder", "dynamic")),
    ModelCase("hf/llama_bf16", _prefill("llama", torch.bfloat16), other_inputs=_prefill_other,
              tags=("decoder", "dynamic", "bf16")),
    ModelCase("hf/llama_static_cache", _static_cache("llama"), steps=_static_steps, tags=("decoder", "cache")),
    ModelCase("hf/llama_bf16_static_cache", _static_cache("llama", torch.bfloat16), steps=_static_steps,
              tags=("decoder", "cache", "bf16")),
    ModelCase("hf/llama_dynamic_cache", _dynamic_cache("llama"), other_inputs=_dynamic_other("llama"),
              tags=("decoder", "cache", "dynamic")),
    ModelCase("hf/llama_list_cache", _list_cache("llama"), other_inputs=_list_cache_other("llama"),
              tags=("decoder", "cache", "dynamic", "list_cache")),
    ModelCase("hf/llama_aten", _prefill("llama"), post=decompose, other_inputs=_prefill_other,
              tags=("decoder", "dynamic", "aten")),
    ModelCase("hf/mistral_static_cache", _static_cache("mistral"), steps=_static_steps, tags=("decoder", "cache")),
    ModelCase("hf/qwen2", _prefill("qwen2"), other_inputs=_prefill_other, tags=("decoder", "dynamic")),
    ModelCase("hf/qwen2_dynamic_cache", _dynamic_cache("qwen2"), other_inputs=_dynamic_other("qwen2"),
              tags=("decoder", "cache", "dynamic")),
    ModelCase("hf/qwen3_static_cache", _static_cache("qwen3"), steps=_static_steps, tags=("decoder", "cache")),
    ModelCase("hf/gemma", _prefill("gemma"), other_inputs=_prefill_other, tags=("decoder", "dynamic")),
    ModelCase("hf/phi3_static_cache", _static_cache("phi3"), steps=_static_steps, tags=("decoder", "cache")),
    ModelCase("hf/gpt2", _prefill("gpt2"), other_inputs=_prefill_other, tags=("decoder", "dynamic", "tied")),
    ModelCase("hf/qwen2_list_cache", _list_cache("qwen2"), other_inputs=_list_cache_other("qwen2"),
              tags=("decoder", "cache", "dynamic", "list_cache")),
    ModelCase("hf/gpt2_dynamic_cache", _dynamic_cache("gpt2"), other_inputs=_dynamic_other("gpt2"),
              tags=("decoder", "cache", "dynamic")),
    ModelCase("hf/mixtral", _prefill("mixtral"), other_inputs=_prefill_other, tags=("decoder", "moe", "dynamic")),
    ModelCase("hf/qwen3_moe_static_cache", _static_cache("qwen3_moe"), steps=_static_steps,
              tags=("decoder", "moe", "cache")),
    # encoders
    ModelCase("hf/bert", _encoder("BertModel", _bert_config), other_inputs=_encoder_other(),
              tags=("encoder", "dynamic")),
    ModelCase("hf/bert_aten", _encoder("BertForSequenceClassification", _bert_config), post=decompose,
              other_inputs=_encoder_other(), tags=("encoder", "dynamic", "aten")),
    ModelCase("hf/distilbert", _encoder("DistilBertForMaskedLM", _distilbert_config, type_ids=False),
              other_inputs=_encoder_other(type_ids=False), tags=("encoder", "dynamic", "tied")),
    ModelCase("hf/roberta", _encoder("RobertaForMaskedLM", _roberta_config, type_ids=False),
              other_inputs=_encoder_other(type_ids=False), tags=("encoder", "dynamic", "tied")),
    # encoder-decoders
    ModelCase("hf/t5", _t5, other_inputs=_seq2seq_other, tags=("seq2seq", "dynamic", "tied")),
    ModelCase("hf/bart", _bart, tags=("seq2seq", "tied")),
    # vision and audio
    ModelCase("hf/vit", _vit, tags=("vision",)),
    ModelCase("hf/clip_vision", _clip_vision, tags=("vision",)),
    ModelCase("hf/wav2vec2", _wav2vec2, other_inputs=_wav2vec2_other, tags=("audio", "dynamic")),
    ModelCase("hf/whisper_encoder", _whisper_encoder, tags=("audio",)),
    # timm
    ModelCase("timm/resnet18", _timm("resnet18"), other_inputs=_batches(32, 1, 5), tags=("vision", "dynamic")),
    ModelCase("timm/resnet18_channels_last", _timm("resnet18", channels_last=True),
              other_inputs=_batches(32, 3, channels_last=True), tags=("vision", "dynamic", "channels_last")),
    ModelCase("timm/resnet18_train", _timm("resnet18"), train=True, other_inputs=_batches(32, 4),
              tags=("vision", "dynamic", "train")),
    ModelCase("timm/resnet18_train_aten", _timm("resnet18"), train=True, post=decompose,
              tags=("vision", "dynamic", "train", "aten")),
    ModelCase("timm/vit_tiny", _timm("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2),
              other_inputs=_batches(32, 1), tags=("vision", "dynamic")),
    ModelCase("timm/convnext_atto", _timm("convnext_atto"), other_inputs=_batches(32, 3),
              tags=("vision", "dynamic")),
    ModelCase("timm/convnext_atto_dynamic_size", _timm("convnext_atto", size=64, dynamic=_HW),
              other_inputs=_images(32, 96, 128), tags=("vision", "dynamic")),
    ModelCase("timm/efficientnet_b0", _timm("efficientnet_b0"), other_inputs=_batches(32, 1),
              tags=("vision", "dynamic")),
    ModelCase("timm/efficientnet_b0_aten", _timm("efficientnet_b0"), post=decompose,
              tags=("vision", "dynamic", "aten")),
    ModelCase("timm/mobilenetv3", _timm("mobilenetv3_small_050"), other_inputs=_batches(32, 3),
              tags=("vision", "dynamic")),
    ModelCase("timm/swin", _timm("swin_tiny_patch4_window7_224", size=32, img_size=32, window_size=4,
                                 embed_dim=32, depths=(1, 1), num_heads=(2, 4)),
              other_inputs=_batches(32, 1), tags=("vision", "dynamic")),
]
