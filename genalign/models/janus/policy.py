"""Janus-Pro (DeepSeek) behind the `TokenPolicy` protocol: text-to-image by image tokens.

Where it fits: the token collector (`rollout/token_collector.py`) samples with
`sample_tokens` and records `token_log_probs`; the AR-GRPO algorithm replays the same
`token_log_probs` with gradients; rewards see `decode_tokens`'d uint8 images. Loading goes
through the real transformers classes (`JanusForConditionalGeneration` and its
`JanusProcessor`, from a hub id or a local `save_pretrained` directory).

How Janus generates an image, and what is kept here exactly as in
`JanusForConditionalGeneration.generate(generation_mode="image")` (and DeepSeek's
`generation_inference.py`):
* the prompt is the SFT template "<|User|>: {prompt}\\n\\n<|Assistant|>:" that the processor
  ends with <begin_of_image> (generation_mode="image"); prompts are left-padded;
* CFG runs a second, unconditional stream whose prompt keeps only BOS and <begin_of_image>,
  every other token replaced by the pad token (same attention mask), and combines the
  generation head's raw logits as  l = l_u + w (l_c − l_u);
* the next token is drawn from softmax(l / T) (temperature T; no top-k/top-p, as DeepSeek's
  loop; `generate` would add its default top-k 50 unless top_k=0 is passed);
* each drawn token enters both streams through `prepare_embeddings_for_image_generation`
  (generation embeddings + aligner), and the VQ decoder maps the N tokens to the image.
Positions are 0..L+N−1 including left padding, as `generate` does; RoPE is relative, so a
padded row computes what the unpadded one does.

Trained module: the language model (`model.language_model`, LoRA on its attention
projections); the generation head, generation embeddings, vision tower and VQ model are frozen.
The VQ decoder always runs in float32 (as the VAEs of the diffusion families).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from genalign.models.base import (
    ModelConfig,
    SampledTokens,
    TokenCondition,
    compute_precision,
    guided_velocity,
    resolve_device,
    resolve_dtype,
)
from genalign.models.diffusers_common import check_model_path, missing_weights_error
from genalign.models.spec import FamilySpec

log = logging.getLogger(__name__)

JANUS_PROMPT_TEMPLATE = "<|User|>: {}\n\n<|Assistant|>:"
"""Janus-Pro's SFT format for text-to-image with an empty system prompt (DeepSeek
`generation_inference.py`, and the chat template of the transformers conversion); the
processor appends <begin_of_image> in generation_mode="image"."""
JANUS_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
"""Every attention projection of the language model (peft's LLaMA convention plus k/o)."""
JANUS_REPEATED_BLOCKS = ("LlamaDecoderLayer",)


def embed_prompt_ids(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook on the language model: a `prompt_ids` [S, L] keyword becomes its
    embeddings, followed by `inputs_embeds` [S, N, D] when given (the image tokens), as
    `inputs_embeds` [S, L+N, D]. The lookup runs inside the module's call, after a wrapper's
    own pre-forward: under FSDP2 the embedding table is then gathered (looked up outside the
    call it is still this rank's shard, and the first FSDP2 call must be the root's)."""
    ids = kwargs.pop("prompt_ids", None)
    if ids is None:
        return None
    embeds = module.get_input_embeddings()(ids)  # [S, L, D]
    tail = kwargs.get("inputs_embeds")
    kwargs["inputs_embeds"] = embeds if tail is None else torch.cat([embeds, tail.to(embeds.dtype)], dim=1)
    return args, kwargs


def guided_token_logits(
    cond_logits: torch.Tensor,
    uncond_logits: torch.Tensor | None,
    guidance_scale: float,
    temperature: float,
    detach_uncond: bool = False,
) -> torch.Tensor:
    """The sampling logits (l_u + w (l_c − l_u)) / T [..., V] float32: Janus' CFG on raw head
    logits, then the temperature (`generate` applies its CFG processor before the temperature
    warper). Without an unconditional stream (w = 1) it is l_c / T."""
    logits = cond_logits.float()
    if uncond_logits is not None:
        logits = guided_velocity(uncond_logits.float(), logits, guidance_scale, detach_uncond)
    return logits / temperature


def token_log_probs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] [B, N] for logits [B, N, V] and tokens [B, N]."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [B, N]


def unconditional_ids(input_ids: torch.Tensor, bos_id: int, boi_id: int, pad_id: int) -> torch.Tensor:
    """Janus' unconditional prompt [B, L]: every token but BOS and <begin_of_image> -> pad."""
    keep = (input_ids == bos_id) | (input_ids == boi_id)  # [B, L]
    return torch.where(keep, input_ids, torch.full_like(input_ids, pad_id))


SPEC = FamilySpec(
    name="janus",
    policy="genalign.models.janus.policy:JanusPolicy",
    package="genalign.models.janus",
    sampler="token",
    text_encoders=False,
    gradient_checkpointing=False,
    split_cfg=False,
    export="peft",
    pipeline_class="JanusForConditionalGeneration",
    tiny_builder="genalign.models.janus.tiny:build_tiny_janus",
    # the token collector hands `sample_tokens` only guidance and temperature, rollout and evaluation
    # alike; the kind-wide SDE keys (same_initial_noise, sde_window, ode_final_step, sampler) are the
    # algorithm checks' (preflight/algorithm_checks.py)
    unread_keys=("rollout.num_steps", "rollout.noise_level", "rollout.kernel", "eval.num_steps"),
    unread_reason=(
        "it draws its image tokens one at a time from the generation head's softmax: no denoising steps, "
        "SDE noise or transition kernel"
    ),
)
"""Janus-Pro: image tokens (16 pixels each; the exact size is the checkpoint's), a peft adapter
onto the transformers class; no gradient checkpointing, CFG streams always joint; the flow
sampler's keys refused."""


class JanusPolicy:
    """Janus-Pro 1B / 7B: the language model is trained; generation head and VQ decode."""

    spec = SPEC
    family = SPEC.name
    lora_target_modules = JANUS_LORA_TARGETS
    repeated_blocks = JANUS_REPEATED_BLOCKS
    peft_module_prefix = "model.language_model"
    """Where the trained module sits inside the spec's `pipeline_class` (the exported adapter's key prefix)."""

    def __init__(self, model, processor, device: torch.device, dtype: torch.dtype):
        self.model = model.eval().requires_grad_(False)
        self.model.to(device=device)
        if next(self.model.parameters()).dtype != dtype:
            self.model.to(dtype=dtype)
        self.model.model.vqmodel.float()  # the decoder always in float32
        self.processor = processor
        self.device, self.dtype = device, dtype
        self.transformer = self.model.model.language_model
        # registered before any wrapper, so FSDP2's pre-forward (prepended) runs first
        self.transformer.register_forward_pre_hook(embed_prompt_ids, with_kwargs=True)
        self.num_image_tokens = int(self.model.model.vision_model.config.num_image_tokens)
        vq = self.model.model.vqmodel.config
        self.image_size = int(vq.num_patches) * 2 ** (len(vq.channel_multiplier) - 1)
        generation = self.model.generation_config
        self.bos_id, self.pad_id = generation.bos_token_id, generation.pad_token_id
        self.boi_id = (getattr(generation, "generation_kwargs", None) or {}).get("boi_token_id")
        missing = [
            name
            for name, value in (
                ("bos_token_id", self.bos_id),
                ("pad_token_id", self.pad_id),
                ("generation_kwargs.boi_token_id", self.boi_id),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"the Janus checkpoint's generation_config lacks {missing}: image generation needs them "
                "(Janus-Pro's hub generation_config.json sets them)"
            )

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "JanusPolicy":
        return cls.from_pretrained(cfg.path, cfg.dtype, cfg.device, cfg.revision)

    @classmethod
    def from_loaded(cls, bundle, cfg: ModelConfig) -> "JanusPolicy":
        """The policy over a model and processor already built (`bundle.model`,
        `bundle.processor`: what `from_pretrained` loads), with `cfg`'s device and dtype."""
        return cls(bundle.model, bundle.processor, resolve_device(cfg.device), resolve_dtype(cfg.dtype))

    @classmethod
    def from_pretrained(
        cls, path: str, dtype: str = "float32", device: str = "auto", revision: str | None = None
    ) -> "JanusPolicy":
        from transformers import AutoProcessor, JanusForConditionalGeneration

        check_model_path(path)
        torch_dtype = resolve_dtype(dtype)
        try:
            model = JanusForConditionalGeneration.from_pretrained(path, dtype=torch_dtype, revision=revision)
            processor = AutoProcessor.from_pretrained(path, revision=revision)
        except (OSError, ValueError) as exc:
            if Path(path).expanduser().exists():
                raise
            raise missing_weights_error(path, exc) from exc
        return cls(model, processor, resolve_device(device), torch_dtype)

    # ------------------------------------------------------------------ prompts
    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> TokenCondition:
        """The processor's image-generation input (template + <begin_of_image>, left-padded)."""
        texts = [JANUS_PROMPT_TEMPLATE.format(prompt) for prompt in prompts]
        encoded = self.processor(text=texts, generation_mode="image", padding=True, return_tensors="pt")
        ids = encoded["input_ids"].to(self.device)  # [B, L]
        mask = encoded["attention_mask"].to(self.device)  # [B, L]
        if not with_negative:
            return TokenCondition(ids, mask)
        return TokenCondition(ids, mask, unconditional_ids(ids, self.bos_id, self.boi_id, self.pad_id), mask.clone())

    def check_image_size(self, height: int, width: int) -> None:
        if (height, width) != (self.image_size, self.image_size):
            raise ValueError(
                f"rollout.height/width={height}x{width}: this Janus checkpoint generates "
                f"{self.image_size}x{self.image_size} images ({self.num_image_tokens} tokens); set "
                f"rollout.height={self.image_size} rollout.width={self.image_size}"
            )

    # ------------------------------------------------------------------ the language model
    def _streams(self, cond: TokenCondition, guidance_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt ids and mask of the streams run together: [cond; uncond] with CFG ([2B, L])."""
        if guidance_scale > 1.0:
            if cond.negative_input_ids is None:
                raise ValueError("guidance_scale > 1 needs the unconditional prompt stream (encode with_negative)")
            return (
                torch.cat([cond.input_ids, cond.negative_input_ids]),
                torch.cat([cond.attention_mask, cond.negative_attention_mask]),
            )
        return cond.input_ids, cond.attention_mask

    def _head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.model.generation_head(hidden)

    def _split_guided(
        self, logits: torch.Tensor, batch: int, guidance_scale: float, temperature: float, detach_uncond: bool = False
    ) -> torch.Tensor:
        uncond = logits[batch:] if guidance_scale > 1.0 else None
        return guided_token_logits(logits[:batch], uncond, guidance_scale, temperature, detach_uncond)

    @torch.no_grad()
    def sample_tokens(
        self, cond: TokenCondition, generators: list[torch.Generator], guidance_scale: float, temperature: float
    ) -> SampledTokens:
        """N tokens per row with a key-value cache, one forward per token (as `generate`); row b
        draws from its own generator, so a sample does not depend on its batch neighbours."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampled tokens with log-probs, got {temperature}")
        batch = len(cond)
        ids, mask = self._streams(cond.to(self.device), guidance_scale)  # [S, L], S = B or 2B
        step_input = {"prompt_ids": ids}  # the first call embeds the prompt (embed_prompt_ids)
        past = None
        tokens = torch.zeros(batch, self.num_image_tokens, dtype=torch.long, device=self.device)  # [B, N]
        log_probs = torch.zeros(batch, self.num_image_tokens, device=self.device)  # [B, N]
        for i in range(self.num_image_tokens):
            with compute_precision(self.device, self.dtype):
                out = self.transformer(**step_input, attention_mask=mask, past_key_values=past, use_cache=True)
                logits = self._head_logits(out.last_hidden_state[:, -1])  # [S, V]
            past = out.past_key_values
            guided = self._split_guided(logits, batch, guidance_scale, temperature)  # [B, V]
            probs = torch.softmax(guided, dim=-1)  # [B, V]
            chosen = torch.cat(
                [torch.multinomial(probs[b : b + 1], 1, generator=generators[b])[0] for b in range(batch)]
            )  # [B]
            tokens[:, i] = chosen
            log_probs[:, i] = torch.log_softmax(guided, dim=-1).gather(-1, chosen[:, None])[:, 0]
            streams = torch.cat([chosen, chosen]) if guidance_scale > 1.0 else chosen  # [S]
            step_input = {"inputs_embeds": self.model.prepare_embeddings_for_image_generation(streams[:, None])}
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # [S, L + i + 1]
        return SampledTokens(tokens, log_probs)

    def token_log_probs(
        self,
        cond: TokenCondition,
        tokens: torch.Tensor,
        guidance_scale: float,
        temperature: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """Teacher forcing: one forward over [prompt, tokens[:, :-1]] for both streams; the hidden
        state at <begin_of_image> and at each image token gives the next token's logits.
        log π [B, N] float32; grad follows the caller's mode."""
        batch, count = tokens.shape
        ids, mask = self._streams(cond.to(self.device), guidance_scale)  # [S, L]
        streams = tokens.to(self.device)
        if guidance_scale > 1.0:
            streams = torch.cat([streams, streams])  # [S, N]
        prompt_len = ids.shape[1]
        with compute_precision(self.device, self.dtype):
            image_embeds = self.model.prepare_embeddings_for_image_generation(streams[:, :-1])  # [S, N-1, D]
            full_mask = torch.cat([mask, mask.new_ones(mask.shape[0], count - 1)], dim=1)  # [S, L+N-1]
            # the prompt's embeddings are looked up inside the call, before the image tokens' (embed_prompt_ids)
            hidden = self.transformer(
                prompt_ids=ids, inputs_embeds=image_embeds, attention_mask=full_mask
            ).last_hidden_state  # [S, L+N-1, D]
            logits = self._head_logits(hidden[:, prompt_len - 1 :])  # [S, N, V]
        guided = self._split_guided(logits, batch, guidance_scale, temperature, detach_uncond)  # [B, N, V]
        return token_log_probs_from_logits(guided, tokens.to(self.device))  # [B, N]

    # ------------------------------------------------------------------ images
    @torch.no_grad()
    def decode_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """VQ-decode [B, N] tokens to uint8 [B, 3, H, W] on CPU: clip((x + 1) / 2 · 255, 0, 255)
        truncated to uint8, as DeepSeek's `generation_inference.py` writes its images."""
        pixels = self.model.decode_image_tokens(tokens.to(self.device)).float()  # [B, H, W, 3] in ~[-1, 1]
        scaled = ((pixels + 1) / 2 * 255).clamp(0, 255)  # [B, H, W, 3]
        return scaled.to(torch.uint8).permute(0, 3, 1, 2).contiguous().cpu()  # [B, 3, H, W]
