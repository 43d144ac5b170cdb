"""The policy protocols: what every model family gives the rest of the loop (`Policy`), and
the sampling side of a flow-matching family (`FlowPolicy`) or a token one (`TokenPolicy`).

Where it fits: the rollout collector samples with `velocity` + the pure SDE kernels, the
algorithm replays stored latents through `velocity` again, rewards see `decode`d uint8
images. What a family is (token or flow, image or video, export kind, ...) is its
`FamilySpec` (spec.py), which a policy carries as `spec`. A family (sd3, toy, ...) never
imports the trainer, the rewards or an algorithm.

Conventions (docs/algorithms.md §1): sigma in [0, 1], 1 = pure noise; the network predicts the
velocity `x1 - x0`; a family maps sigma to its own timestep input (`1000 * sigma` for SD3).
Images handed to rewards are `torch.uint8` tensors `[B, 3, H, W]`; video families hand
`[B, F, 3, H, W]`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, Self, get_args, runtime_checkable

import torch

from genalign.models.config import ComputeDtype, LoraConfig, ModelCardConfig, ModelConfig  # noqa: F401  (their home is models/config.py)

if TYPE_CHECKING:
    from genalign.models.spec import FamilySpec


class TensorRecord:
    """Slicing, moving and concatenating a dataclass of [B, ...] tensors (None fields stay None);
    plain tensors, so it moves through Ray unchanged."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every subclass is a @dataclass (fields() reads it)

    def __len__(self) -> int:
        return next(t for t in self._tensors() if t is not None).shape[0]

    def _tensors(self) -> list[torch.Tensor | None]:
        return [getattr(self, f.name) for f in fields(self)]

    @property
    def device(self) -> torch.device:
        return next(t for t in self._tensors() if t is not None).device

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Self:
        """Apply `fn` to every tensor field (slicing, `.to(device)`, `cat` helpers)."""
        return type(self)(
            **{f.name: (None if getattr(self, f.name) is None else fn(getattr(self, f.name))) for f in fields(self)}
        )

    def index(self, idx: torch.Tensor | slice | Sequence[int]) -> Self:
        return self.map(lambda t: t[idx])

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Self:
        return self.map(lambda t: t.to(device=device, dtype=dtype if t.is_floating_point() else None))

    @classmethod
    def cat(cls, records: Sequence[Self]) -> Self:
        out: dict[str, torch.Tensor | None] = {}
        for f in fields(records[0]):
            values = [getattr(r, f.name) for r in records]
            out[f.name] = None if values[0] is None else torch.cat(values, dim=0)
        return cls(**out)


@dataclass
class Condition(TensorRecord):
    """Encoded prompts for one batch; plain tensors so it moves through Ray unchanged.

    `embeds` [B, L, D] and `pooled` [B, P] (or None) are the conditional branch;
    `negative_embeds` / `negative_pooled` hold the empty-prompt branch used by CFG
    (None when the batch was encoded without it). `mask` / `negative_mask` [B, L] (1 = a real
    token, 0 = padding) for families whose prompts are padded to a fixed length (Qwen-Image);
    None where every token is real (SD3 and FLUX attend to their T5 padding by design).
    `source_latents` [B, S, ...] the prompt's S source images encoded by an image-conditioned
    family (`SourceEncoder`; FLUX.1 Kontext: VAE latents [B, S, C, h, w]), read by both CFG
    branches; None for a text-only prompt.
    """

    embeds: torch.Tensor
    pooled: torch.Tensor | None = None
    negative_embeds: torch.Tensor | None = None
    negative_pooled: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    negative_mask: torch.Tensor | None = None
    source_latents: torch.Tensor | None = None


CONDITIONAL_FIELDS = ("embeds", "pooled", "mask", "source_latents")
NEGATIVE_FIELDS = ("negative_embeds", "negative_pooled", "negative_mask")


@dataclass
class SharedCondition:
    """A step's `Condition` with each distinct row stored once: how trajectories keep prompts.

    A group repeats its prompt G times and CFG's negative prompt is the same for every sample,
    so per-sample rows would store the same embedding G (and B) times: Cosmos' 512 x 100352
    embedding is 100 MB a row. `table` holds the distinct rows (conditional fields [U, ...],
    negative fields [N, ...]: N = 1 when every sample's negative is the same); `rows` and
    `negative_rows` [B] map each sample to its row. Selecting and concatenating samples works
    on the maps; `to(device)` - the move of a replay micro-batch to the compute device - is
    where the rows are gathered into a plain `Condition`, bit for bit the per-sample one."""

    table: Condition
    rows: torch.Tensor
    """[B] int64: sample -> row of the table's conditional fields."""
    negative_rows: torch.Tensor | None = None
    """[B] int64: sample -> row of the table's negative fields (None without CFG)."""

    @classmethod
    def of(cls, distinct: Condition, rows: torch.Tensor) -> "SharedCondition":
        """Share `distinct` [U, ...] among samples `rows` [B]; a negative branch whose rows are
        all equal is kept once."""
        rows = rows.to(distinct.embeds.device)
        if distinct.negative_embeds is None:
            return cls(distinct, rows, None)
        negatives = [getattr(distinct, name) for name in NEGATIVE_FIELDS]
        if all(t is None or bool((t == t[:1]).all()) for t in negatives):
            first: dict[str, Any] = {name: None if t is None else t[:1] for name, t in zip(NEGATIVE_FIELDS, negatives)}
            distinct = dataclasses.replace(distinct, **first)
            return cls(distinct, rows, torch.zeros_like(rows))
        return cls(distinct, rows, rows.clone())

    def __len__(self) -> int:
        return self.rows.shape[0]

    @property
    def device(self) -> torch.device:
        return self.table.embeds.device

    def __getattr__(self, name: str) -> torch.Tensor | None:
        """Condition's fields, gathered per sample (for reading; storage stays shared)."""
        if name in CONDITIONAL_FIELDS + NEGATIVE_FIELDS:
            value: torch.Tensor | None = getattr(self.materialize(), name)
            return value
        raise AttributeError(name)

    def materialize(self) -> Condition:
        """The per-sample `Condition` [B, ...] on the table's device."""
        out: dict[str, Any] = {}  # field name -> [B, ...] tensor or None (embeds is never None)
        for names, rows in ((CONDITIONAL_FIELDS, self.rows), (NEGATIVE_FIELDS, self.negative_rows)):
            for name in names:
                value = getattr(self.table, name)
                out[name] = None if value is None or rows is None else value[rows]
        return Condition(**out)

    def index(self, idx: torch.Tensor | slice | Sequence[int]) -> "SharedCondition":
        idx = torch.as_tensor(idx, dtype=torch.long, device=self.rows.device)
        return SharedCondition(
            self.table, self.rows[idx], None if self.negative_rows is None else self.negative_rows[idx]
        )

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Condition:
        """The samples' rows on `device` (a plain `Condition`)."""
        return self.materialize().to(device, dtype)

    @classmethod
    def cat(cls, parts: list["SharedCondition"]) -> "SharedCondition":
        """Join samples; parts that share a table (the same object, or equal tensors: Ray
        workers each encode the whole step) keep one copy of it."""
        tables: list[tuple[Condition, int, int]] = []  # (table, conditional offset, negative offset)
        rows, negative_rows = [], []
        for part in parts:
            entry = next((e for e in tables if _same_table(e[0], part.table)), None)
            if entry is None:
                last_table, last_offset, last_negative = tables[-1] if tables else (None, 0, 0)
                offset = last_offset + (last_table.embeds.shape[0] if last_table is not None else 0)
                negative = last_negative + (_negative_size(last_table) if last_table is not None else 0)
                entry = (part.table, offset, negative)
                tables.append(entry)
            rows.append(part.rows + entry[1])
            if part.negative_rows is not None:
                negative_rows.append(part.negative_rows + entry[2])
        joined: dict[str, Any] = {
            name: _cat_field([getattr(t, name) for t, _, _ in tables]) for name in CONDITIONAL_FIELDS + NEGATIVE_FIELDS
        }
        table = Condition(**joined)
        return cls(table, torch.cat(rows), torch.cat(negative_rows) if negative_rows else None)


def _negative_size(table: Condition) -> int:
    return 0 if table.negative_embeds is None else table.negative_embeds.shape[0]


def _cat_field(values: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The parts of one field joined; a field is None in every part or in none."""
    present = [value for value in values if value is not None]
    if len(present) not in (0, len(values)):
        raise ValueError(f"a Condition field is None in {len(values) - len(present)} of {len(values)} parts")
    return torch.cat(present) if present else None


def _same_table(a: Condition, b: Condition) -> bool:
    if a is b:
        return True
    for name in CONDITIONAL_FIELDS + NEGATIVE_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if (x is None) != (y is None) or (x is not None and (x.shape != y.shape or not torch.equal(x, y))):
            return False
    return True


@dataclass
class TokenCondition(TensorRecord):
    """Tokenized prompts of a token-autoregressive family for one batch, left-padded to the
    batch's longest prompt. `input_ids` / `attention_mask` [B, L] are the conditional stream;
    `negative_input_ids` / `negative_attention_mask` [B, L] the unconditional one CFG runs
    beside it (None without CFG)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    negative_input_ids: torch.Tensor | None = None
    negative_attention_mask: torch.Tensor | None = None


@runtime_checkable
class Policy(Protocol):
    """What every model family's policy provides, whatever it samples: how it is built, what
    is trained, and where it runs. `FlowPolicy` and `TokenPolicy` add the sampling side."""

    spec: "FamilySpec"
    """The family's declaration (models/spec.py): sampler, media, export, config facts."""
    family: str
    """`spec.name` (messages)."""
    transformer: torch.nn.Module
    """The trained module: LoRA attaches to it, the optimizer trains it."""
    device: torch.device
    dtype: torch.dtype
    """Compute dtype (model.dtype) of the frozen weights and the autocast of the trained ones."""
    lora_target_modules: list[str]
    """Default LoRA targets of the family (used when `model.lora.target_modules` is empty)."""
    repeated_blocks: tuple[str, ...]
    """Class names of the trained module's repeated blocks (regional `model.compile`)."""

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "Policy":
        """Load the model `cfg` names (model.path, dtype, device and the family's own keys)."""
        ...


@runtime_checkable
class FlowPolicy(Policy, Protocol):
    """What a flow-matching model family (`spec.sampler == "flow"`) provides to rollout, replay
    and evaluation. A family whose spec says `text_encoders` also has `text_encoders` (the
    modules model.offload_text_encoders parks on the CPU)."""

    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """Encode prompts (and, with `with_negative`, the empty prompt for CFG). No grad."""
        ...

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """Predicted velocity [B, ...] for latents [B, ...] at sigma [B] (float32 out).

        guidance_scale > 1 runs the unconditional and conditional branches in one batch and
        returns `v_u + w (v_c - v_u)`; the same call is used in rollout and replay, so the
        training log-prob is of the same policy that sampled (docs/algorithms.md §2.7).
        `detach_uncond` stops the gradient through v_u (the value is unchanged, so replay
        log-probs still equal the rollout's bit for bit)."""
        ...

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Final latents [B, ...] -> uint8 images [B, 3, H, W] or video [B, F, 3, H, W] (no grad)."""
        ...

    # Optional (a family whose spec sets `decode_reads_condition`), so not a protocol member:
    # def decode_conditioned(self, latents: torch.Tensor, cond: Condition) -> torch.Tensor:
    #     """`decode` of final latents that leave out what `cond` gives (`decode_samples`)."""

    # Optional (a family whose spec sets `differentiable_decode`), so not a protocol member:
    # def decode_pixels(self, latents: torch.Tensor) -> torch.Tensor:
    #     """Final latents [B, ...] -> float images [B, 3, H, W] in [0, 1], differentiable in
    #     the latents (what `decode` rounds to uint8), on the policy's device."""

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images [B, 3, H, W] (video families: video [B, F, 3, H, W]) -> latents [B, ...]
        float32 that `decode` maps back (no grad): offline preference data enters training
        through it."""
        ...

    def latent_shape(self, height: int, width: int) -> tuple[int, ...]:
        """Shape of one sample's latent (without batch dim) for an image of height x width."""
        ...

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """The sampling schedule [num_steps + 1], float32, 1 -> 0, with the family's shift for
        one sample of `latent_shape` (FLUX and Qwen-Image shift by the image's token count)."""
        ...


@runtime_checkable
class SourceEncoder(Protocol):
    """What an image-conditioned flow family (`spec.source_images > 0`: FLUX.1 Kontext) adds to
    `FlowPolicy`: its prompts' source images encoded once per step (rollout/chunks.py) into
    `Condition.source_latents`, which rollout, replay and evaluation hand back to `velocity`."""

    def encode_sources(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 source images [B, S, 3, H, W] -> float32 latents [B, S, ...] (no grad)."""
        ...

    def encode_conditions(self, prompts: list[str], images: torch.Tensor, with_negative: bool) -> Condition:
        """Prompts [B] and their source images uint8 [B, S, 3, H, W] encoded together: the text
        embeddings (which may read the images: Qwen-Image-Edit's Qwen2.5-VL sees them) with
        `source_latents` = `encode_sources(images)`. `SourcesBesideText` is the form for a
        family whose text encoder reads text alone (FLUX.1 Kontext)."""
        ...


def decode_samples(policy: FlowPolicy, latents: torch.Tensor, cond: Condition) -> torch.Tensor:
    """Final latents [B, ...] of prompts `cond` -> uint8 media, as rollout and evaluation decode
    them: `decode`, or for a family whose samples leave out what the condition gives
    (`spec.decode_reads_condition`) its `decode_conditioned(latents, cond)`."""
    if policy.spec.decode_reads_condition:
        decoded: torch.Tensor = policy.decode_conditioned(latents, cond)  # type: ignore[attr-defined]
        return decoded
    return policy.decode(latents)


class SourcesBesideText:
    """`SourceEncoder.encode_conditions` of a family whose text encoder reads the text alone:
    `encode_prompts`, then the sources through `encode_sources` into `source_latents`."""

    def encode_conditions(self, prompts: list[str], images: torch.Tensor, with_negative: bool) -> Condition:
        encoded: Condition = self.encode_prompts(prompts, with_negative=with_negative)  # type: ignore[attr-defined]
        latents: torch.Tensor = self.encode_sources(images)  # type: ignore[attr-defined]  # [B, S, ...]
        return dataclasses.replace(encoded, source_latents=latents.to(encoded.device))


class SampledTokens(NamedTuple):
    tokens: torch.Tensor  # [B, N] int64 image tokens
    log_probs: torch.Tensor  # [B, N] float32: log-prob of each sampled token under the sampling distribution


@runtime_checkable
class TokenPolicy(Policy, Protocol):
    """What a token-autoregressive family (`spec.sampler == "token"`, Janus-Pro) provides to
    rollout, replay and evaluation.

    One trajectory is a prompt and N image tokens; its "positions" for the algorithm are the
    whole sequence at once (`TokenTrajectoryBatch`): `token_log_probs` scores every token with
    one teacher-forced forward, so rollout, parity preflight and replay share one function.
    A family exported as a peft adapter (`spec.export == "peft"`) also names
    `peft_module_prefix`, where `transformer` sits inside `spec.pipeline_class`."""

    num_image_tokens: int
    """N, the image tokens per sample."""

    def encode_prompts(self, prompts: list[str], with_negative: bool) -> TokenCondition:
        """Tokenize prompts (and, with `with_negative`, the unconditional stream for CFG)."""
        ...

    def sample_tokens(
        self, cond: TokenCondition, generators: list[torch.Generator], guidance_scale: float, temperature: float
    ) -> SampledTokens:
        """Sample N tokens per row (row b draws with generators[b]) under CFG and temperature. No grad."""
        ...

    def token_log_probs(
        self,
        cond: TokenCondition,
        tokens: torch.Tensor,
        guidance_scale: float,
        temperature: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """log π(tokens) [B, N] float32 by teacher forcing (grad follows the caller's mode)."""
        ...

    def decode_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Image tokens [B, N] -> uint8 images [B, 3, H, W] (no grad)."""
        ...

    def check_image_size(self, height: int, width: int) -> None:
        """Raise ValueError naming rollout.height/width unless the model generates that size."""
        ...


@contextmanager
def encoding_prompts(policy: Policy) -> Iterator[None]:
    """The block that encodes prompts: a policy whose text encoders wait on the CPU
    (`offloaded_text_encoders`, set by `model.offload_text_encoders`) has them on its device
    for the block, and on the CPU again after it (the cached memory returned)."""
    encoders = getattr(policy, "offloaded_text_encoders", ())
    for encoder in encoders:
        encoder.to(policy.device)
    try:
        yield
    finally:
        for encoder in encoders:
            encoder.to("cpu")
        if encoders and torch.cuda.is_available():
            torch.cuda.empty_cache()


def resolve_device(name: str) -> torch.device:
    """`model.device` -> torch.device; "auto" picks cuda when available."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"model.device={name!r} but no CUDA device is visible; use model.device=cpu or auto")
    return device


def guided_velocity(
    uncond: torch.Tensor, cond: torch.Tensor, guidance_scale: float, detach_uncond: bool = False
) -> torch.Tensor:
    """Classifier-free guidance v_u + w (v_c − v_u) [B, ...]; `detach_uncond` stops the
    gradient through v_u (algorithm.detach_uncond) without changing the value."""
    if detach_uncond:
        uncond = uncond.detach()
    return uncond + guidance_scale * (cond - uncond)


def rescale_to_norm(guided: torch.Tensor, reference: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """guided · ‖reference‖ / ‖guided‖ along `dim`: Qwen-Image's norm-preserving CFG, which
    keeps each token's guided velocity at the conditional prediction's length (QwenImagePipeline
    rescales `comb_pred` to `noise_pred`'s norm over the packed channel dim)."""
    # torch.norm is annotated as returning Any; with dim given it returns a tensor
    scale: torch.Tensor = torch.norm(reference, dim=dim, keepdim=True) / torch.norm(guided, dim=dim, keepdim=True)
    return guided * scale


def compute_precision(device: torch.device, dtype: torch.dtype) -> torch.autocast:
    """The context every denoiser call runs in: autocast to the compute `dtype`.

    Trained weights are float32 masters (`training/precision.py`); autocast casts them (and
    the activations) to `dtype` for each matmul, so LoRA and full fine-tunes compute in
    bf16/fp16 while the optimizer sees float32. A no-op for float32."""
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != torch.float32)


def resolve_dtype(name: str) -> torch.dtype:
    """A `model.dtype` choice (`ComputeDtype`) -> the torch dtype of that name."""
    if name not in get_args(ComputeDtype):
        raise ValueError(f"model.dtype={name!r}: choose one of {sorted(get_args(ComputeDtype))}")
    dtype: torch.dtype = getattr(torch, name)  # float32 | float16 | bfloat16, checked above
    return dtype
