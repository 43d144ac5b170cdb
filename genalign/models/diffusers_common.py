"""What every diffusers-backed family shares: loading, placement, CFG batching, latent
packing, guidance embedding, the scheduler's schedule, the uint8 decode and its inverse encode.

Where it fits: a family adapter (`sd3.py`, `flux.py`, `qwen_image.py`, `wan.py`, `cosmos.py`)
owns only what differs between the families — prompt encoding, the transformer's call
signature, the CFG combination, the VAE's latent normalisation — and calls these helpers for
the rest, so a fix to CFG batching or to the loading errors lands in every family at once.
"""

from __future__ import annotations

import os
import re
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, get_args

import torch

from genalign.finite import require_finite_rows
from genalign.models.base import Condition, ModelConfig, guided_velocity, resolve_device, resolve_dtype
from genalign.models.config import CfgBatch
from genalign.sampling.schedules import dynamic_shift_mu, pipeline_sigmas

CFG_BATCHES = get_args(CfgBatch)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_path(path: str) -> None:
    """Fail before any hub call when `model.path` names a local directory that is missing.

    A path is local-looking when it starts with /, ./, ../ or ~, or is not of the hub form
    "org/name" (e.g. "outputs/a/b" or a bare "my_model")."""
    if Path(path).expanduser().exists():
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or not _HUB_ID.match(path)
    if looks_local:
        raise FileNotFoundError(
            f"model.path={path!r}: no such local directory (and it is not a hub id of the form 'org/name')"
        )


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def load_pipeline(
    pipeline_cls_name: str, path: str, dtype: torch.dtype, revision: str | None = None, components: dict | None = None
):
    """`<diffusers pipeline>.from_pretrained` with the VAE in float32 and errors that say how to
    fix a missing model (one attempt, no retries). `components` are passed to `from_pretrained`
    as ready objects (those a checkpoint does not store, e.g. Cosmos' guardrail)."""
    import diffusers

    pipeline_cls = getattr(diffusers, pipeline_cls_name)
    check_model_path(path)
    try:
        return pipeline_cls.from_pretrained(
            path, dtype={"default": dtype, "vae": torch.float32}, revision=revision, **(components or {})
        )
    except (OSError, ValueError) as exc:
        if Path(path).expanduser().exists():
            raise
        raise missing_weights_error(path, exc) from exc


def missing_weights_error(path: str, exc: Exception) -> FileNotFoundError:
    """The error for hub weights that could not be loaded: why (offline and not cached, or the
    hub unreachable), where the cache is, and how to fix it. Shared with the transformers
    families (Janus-Pro)."""
    from huggingface_hub import constants

    reason = (
        "HF_HUB_OFFLINE is set and the weights are not cached"
        if _hub_offline()
        else "the weights could not be fetched from the hub"
    )
    return FileNotFoundError(
        f"model.path={path!r}: {reason} (cache: {constants.HF_HUB_CACHE}). Download them where you have "
        f"access (`hf download {path}`, then copy the cache or set HF_HOME) or set model.path to a local "
        f"directory written by save_pretrained. Original error: {exc}"
    )


def place(module: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """Move to `device`; cast only when the loaded dtype differs (diffusers warns on every cast)."""
    module.to(device=device)
    if next(module.parameters()).dtype != dtype:
        module.to(dtype=dtype)
    return module


def check_tokenizers(pipeline, names: tuple[str, ...], family: str) -> None:
    """An offline load of a repo that is not cached can produce an empty tokenizer: refuse it."""
    for name in names:
        tokenizer = getattr(pipeline, name, None)
        if tokenizer is None or len(tokenizer) == 0:
            raise ValueError(
                f"{name} of the {family} pipeline is missing or empty (an offline load of a repo "
                "that is not cached?); check model.path"
            )


Combine = Callable[[torch.Tensor, torch.Tensor, float, bool], torch.Tensor]


def cfg_velocity(
    forward: Callable[..., torch.Tensor],
    conditional: dict[str, torch.Tensor],
    unconditional: dict[str, torch.Tensor | None],
    guidance_scale: float,
    detach_uncond: bool = False,
    cfg_batch: str = "joint",
    combine: Combine = guided_velocity,
) -> torch.Tensor:
    """Classifier-free guidance around one family's `forward(**inputs) -> [B, ...]`.

    `conditional` / `unconditional` hold the per-sample inputs of the two branches (each
    tensor batch-first). guidance_scale <= 1: the conditional forward alone. Otherwise
    `combine(v_u, v_c, w, detach_uncond)` of the two branches, run as one forward over
    [uncond, cond] (`cfg_batch="joint"`, Flow-GRPO) or as two, the unconditional one without
    autograd when `detach_uncond` (`"split"`, model.cfg_batch). Rollout and replay call the
    same function, so the training log-prob is of the policy that sampled (docs/algorithms.md §2.7)."""
    if guidance_scale <= 1.0:
        return forward(**conditional)
    if any(value is None for value in unconditional.values()):
        raise ValueError(
            f"guidance_scale={guidance_scale} > 1 needs prompts encoded with_negative=True "
            "(the empty-prompt branch of CFG)"
        )
    if cfg_batch == "split":
        with torch.no_grad() if detach_uncond else nullcontext():
            uncond = forward(**unconditional)  # [B, ...]
        text = forward(**conditional)  # [B, ...]
    elif cfg_batch == "joint":
        both = forward(**{name: torch.cat([unconditional[name], value]) for name, value in conditional.items()})
        uncond, text = both.chunk(2)  # [B, ...] each
    else:
        raise ValueError(f"model.cfg_batch={cfg_batch!r}: choose one of {list(CFG_BATCHES)}")
    return combine(uncond, text, guidance_scale, detach_uncond)


def pack_2x2(latents: torch.Tensor) -> torch.Tensor:
    """[B, C, h, w] -> [B, (h/2)(w/2), 4C]: 2x2 latent patches as tokens, row-major, channels
    outermost within a token (FluxPipeline / QwenImagePipeline `_pack_latents`)."""
    batch, channels, height, width = latents.shape
    patches = latents.view(batch, channels, height // 2, 2, width // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(batch, (height // 2) * (width // 2), channels * 4)  # [B, hw/4, 4C]


def unpack_2x2(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Inverse of `pack_2x2`: [B, (h/2)(w/2), 4C] -> [B, C, h, w] for a latent of h x w."""
    batch, _, packed = tokens.shape
    patches = tokens.view(batch, height // 2, width // 2, packed // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return patches.reshape(batch, packed // 4, height, width)  # [B, C, h, w]


def pad_tokens(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """Zero-pad the token axis (dim 1) of embeds [B, l, D] or a mask [B, l] to `length`."""
    padding = length - tensor.shape[1]
    return torch.nn.functional.pad(tensor, (0, 0, 0, padding) if tensor.dim() == 3 else (0, padding))


def masked_pair(
    embeds: torch.Tensor, mask: torch.Tensor, negative: torch.Tensor, negative_mask: torch.Tensor
) -> Condition:
    """Both CFG branches of prompts padded with a mask (embeds [B, l, D], mask [B, l]; the
    negative's [B, l', D], [B, l']) zero-padded to the longer of l and l', so they share one shape
    (Qwen-Image, Z-Image)."""
    length = max(embeds.shape[1], negative.shape[1])
    embeds, mask, negative, negative_mask = (pad_tokens(t, length) for t in (embeds, mask, negative, negative_mask))
    return Condition(embeds=embeds, mask=mask, negative_embeds=negative, negative_mask=negative_mask)


def check_image_size(height: int, width: int, multiple: int, family: str) -> None:
    if height % multiple or width % multiple:
        raise ValueError(
            f"rollout.height/width must be multiples of {multiple} for {family} (VAE factor x "
            f"latent patch 2), got {height}x{width}"
        )


def guidance_embedding(
    transformer: torch.nn.Module, embedded_guidance: float | None, batch: int, device: torch.device
) -> torch.Tensor | None:
    """The distilled-guidance input [B] float32 of a transformer with a guidance embedding
    (FLUX.1-dev; the pipeline's `guidance_scale`), or None for one without (FLUX.1-schnell,
    Qwen-Image). A mismatch with model.embedded_guidance is an error, not a silent default."""
    has_embedding = bool(transformer.config.get("guidance_embeds", False))
    if has_embedding and embedded_guidance is None:
        raise ValueError(
            f"{type(transformer).__name__} is guidance-distilled (guidance_embeds=True): set "
            "model.embedded_guidance (FLUX.1-dev: 3.5, FluxPipeline's guidance_scale)"
        )
    if not has_embedding and embedded_guidance is not None:
        raise ValueError(
            f"model.embedded_guidance={embedded_guidance}: {type(transformer).__name__} has no "
            "guidance embedding (guidance_embeds=False); set it to null"
        )
    if not has_embedding:
        return None
    return torch.full((batch,), float(embedded_guidance), device=device, dtype=torch.float32)


def scheduler_sigmas(scheduler_config, num_steps: int, image_seq_len: int, mu: float | None = None) -> torch.Tensor:
    """The schedule FluxPipeline / QwenImagePipeline would sample `num_steps` with for an image
    of `image_seq_len` packed tokens, from their scheduler config (dynamic shift μ or static
    shift, shift_terminal), float32 [num_steps + 1]. `mu`: the dynamic shift a pipeline computes
    itself and hands the scheduler (FLUX.2's `empirical_shift_mu`) instead of the config's
    linear μ; as in the scheduler, it applies only when the config shifts dynamically."""
    config = dict(scheduler_config)
    if config.get("time_shift_type", "exponential") != "exponential":
        raise ValueError(f"scheduler time_shift_type={config['time_shift_type']!r}: only 'exponential' is supported")
    if not config.get("use_dynamic_shifting", False):
        mu = None
    elif mu is None:
        mu = dynamic_shift_mu(
            image_seq_len,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
    return pipeline_sigmas(
        num_steps, mu=mu, shift=float(config.get("shift", 1.0)), shift_terminal=config.get("shift_terminal")
    )


@torch.no_grad()
def images_to_uint8(images: torch.Tensor) -> torch.Tensor:
    """VAE output in [-1, 1] (images [B, 3, H, W] or video [B, F, 3, H, W]) -> uint8 of the same
    shape on the CPU: the pipelines' `postprocess` map to [0, 1] ((x/2 + 0.5) clamped), then
    rounded to 0..255. A NaN or inf pixel (a broken decoder weight) raises `NonFiniteError`
    naming the rows: the cast to uint8 would silently turn it into a black pixel."""
    require_finite_rows(images, "the decoder's output")
    return ((images.float() / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).cpu()


@torch.no_grad()
def vae_decode_uint8(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """An `AutoencoderKL` decode of model-space latents [B, C, h, w]: the VAE sees
    `latents / scaling_factor + shift_factor` (SD3, FLUX), in float32. uint8 [B, 3, H, W] out."""
    return images_to_uint8(_vae_decode(vae, latents))


def vae_decode_pixels(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """`vae_decode_uint8` before the rounding: float [B, 3, H, W] in [0, 1], differentiable in
    `latents` (grad follows the caller's mode; the VAE's weights are frozen): the decode the
    reward-feedback algorithms back-propagate through. The clamp is the pipelines' postprocess
    (and ReFL's and AlignProp's): pixels pushed past [0, 1] get no gradient."""
    return (_vae_decode(vae, latents) / 2 + 0.5).clamp(0, 1)


def _vae_decode(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """The VAE's output [B, 3, H, W] in about [-1, 1] for model-space latents [B, C, h, w]."""
    config = vae.config
    dtype = next(vae.parameters()).dtype
    scaled = latents.to(dtype) / config.scaling_factor + config.shift_factor  # [B, C, h, w]
    return vae.decode(scaled, return_dict=False)[0]


@torch.no_grad()
def vae_encode(vae: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The inverse of `vae_decode_uint8`: uint8 [B, 3, H, W] -> model-space latents [B, C, h, w]
    float32, the posterior mean shifted and scaled as the pipelines write it
    ((z − shift_factor) · scaling_factor; offline preference data, Diffusion-DPO's encode)."""
    config = vae.config
    pixels = images.to(next(vae.parameters()).device, torch.float32) / 127.5 - 1.0  # [B, 3, H, W] in [-1, 1]
    posterior = vae.encode(pixels).latent_dist
    return ((posterior.mean - config.shift_factor) * config.scaling_factor).float()


def _wan_latent_stats(vae: torch.nn.Module, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (mean, 1 / std) [1, C, 1, 1, 1] of a Wan-architecture VAE's latents."""
    config = vae.config
    channels = (1, config.z_dim, 1, 1, 1)
    mean = torch.tensor(config.latents_mean, device=device).view(channels)
    inverse_std = 1.0 / torch.tensor(config.latents_std, device=device).view(channels)
    return mean, inverse_std


@torch.no_grad()
def wan_vae_encode(vae: torch.nn.Module, videos: torch.Tensor) -> torch.Tensor:
    """The inverse of `wan_vae_decode_uint8`: uint8 video [B, F, 3, H, W] -> model-space latents
    [B, C, F_lat, h, w] float32, the posterior mean as `(z − mean) · (1 / std)` (how
    WanImageToVideoPipeline normalises an encoded video)."""
    pixels = videos.to(torch.float32).permute(0, 2, 1, 3, 4) / 127.5 - 1.0  # [B, 3, F, H, W] in [-1, 1]
    return wan_vae_encode_pixels(vae, pixels)


def pack_rows(*parts: torch.Tensor) -> torch.Tensor:
    """Per-prompt tensors [B, ...] -> one row a prompt [B, 1, N], each flattened in turn: an
    image-to-video family's encoded first frame (its latents, its image tokens) as the one
    tensor `Condition.source_latents` is."""
    return torch.cat([part.flatten(1) for part in parts], dim=1)[:, None]


def unpack_rows(packed: torch.Tensor, shapes: list[tuple[int, ...]], family: str) -> list[torch.Tensor]:
    """The inverse of `pack_rows` for rows [B, 1, N] holding tensors of per-prompt `shapes`;
    ValueError when N is not their size (a source of another size than the rollout's)."""
    flat = packed[:, 0]  # [B, N]
    sizes = [int(torch.Size(shape).numel()) for shape in shapes]
    if flat.shape[1] != sum(sizes):
        raise ValueError(
            f"{family}: the encoded source ({flat.shape[1]} values a prompt) is not {' plus '.join(map(str, shapes))}; "
            "the source image must have the rollout's size (rollout.height x rollout.width) and model.num_frames "
            "must not change within a run"
        )
    return [chunk.reshape(len(flat), *shape) for chunk, shape in zip(flat.split(sizes, dim=1), shapes)]


@torch.no_grad()
def wan_vae_encode_pixels(vae: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """Float video [B, 3, F, H, W] in [-1, 1] -> model-space latents [B, C, F_lat, h, w] float32:
    the posterior mean (its mode, the pipelines' `sample_mode="argmax"`) as `(z − mean) · (1 / std)`.
    Pixels that are no uint8 value (the zero frames WanImageToVideoPipeline pads a first frame
    with) come in here."""
    device = next(vae.parameters()).device
    mean, inverse_std = _wan_latent_stats(vae, device)
    return ((vae.encode(pixels.to(device, torch.float32)).latent_dist.mean - mean) * inverse_std).float()


@torch.no_grad()
def wan_vae_decode_uint8(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """A Wan-architecture VAE decode (`AutoencoderKLWan`, and `AutoencoderKLQwenImage`, which is
    the same VAE) of model-space latents [B, C, F_lat, h, w]: per channel `latents · std + mean`,
    written as `latents / (1 / std) + mean` as WanPipeline / QwenImagePipeline write it, in
    float32 on the latents' device. uint8 video [B, F, 3, H, W] out."""
    mean, inverse_std = _wan_latent_stats(vae, latents.device)  # [1, C, 1, 1, 1] each
    pixels = vae.decode(latents.float() / inverse_std + mean, return_dict=False)[0]  # [B, 3, F, H, W] in [-1, 1]
    return images_to_uint8(pixels.permute(0, 2, 1, 3, 4))  # [B, F, 3, H, W]


@torch.no_grad()
def encode_prompt_pair(
    pipeline,
    prompts: list[str],
    negative_prompt: str,
    with_negative: bool,
    max_sequence_length: int,
    device: torch.device,
) -> Condition:
    """The pipeline's own `encode_prompt` for pipelines whose CFG negative is a prompt option
    (WanPipeline, Cosmos2_5_PredictBasePipeline): embeds [B, max_sequence_length, D] and, with
    `with_negative`, the embeddings of `negative_prompt` repeated for the batch."""
    embeds, negative = pipeline.encode_prompt(
        prompt=list(prompts),
        negative_prompt=[negative_prompt] * len(prompts) if with_negative else None,
        do_classifier_free_guidance=with_negative,
        num_videos_per_prompt=1,
        max_sequence_length=max_sequence_length,
        device=device,
    )
    return Condition(embeds=embeds, negative_embeds=negative if with_negative else None)


class PackedLatents:
    """Latent handling of the families whose transformer reads 2x2-packed latent tokens (FLUX.1,
    Qwen-Image): latents are stored unpacked `[C, h, w]`, packed around each transformer call;
    the schedule shifts by the packed token count; the distilled-guidance embedding, where the
    transformer has one, rides along with both CFG branches. Needs `transformer`, `vae`,
    `device`, `cfg_batch`, `pipeline` and `display_name`; `_adopt_packed` sets the rest."""

    display_name: str
    config_options = ("embedded_guidance",)
    """The packed families take `model.embedded_guidance` (PipelineLoading.from_config)."""

    def _adopt_packed(self, embedded_guidance: float | None, vae_scale_factor: int) -> None:
        self.embedded_guidance = embedded_guidance
        guidance_embedding(self.transformer, embedded_guidance, 1, self.device)  # fail at load, not mid-rollout
        self.vae_scale_factor = vae_scale_factor
        self.latent_channels = int(self.transformer.config.in_channels) // 4

    def packed_velocity(
        self,
        forward: Callable[..., torch.Tensor],
        latents: torch.Tensor,
        sigma: torch.Tensor,
        conditional: dict,
        unconditional: dict,
        guidance_scale: float,
        detach_uncond: bool,
        combine: Combine = guided_velocity,
    ) -> torch.Tensor:
        """v̂ [B, C, h, w]: `forward(hidden_states, timestep, [guidance], **branch inputs)` on the
        packed tokens [B, hw/4, 4C] at timestep σ [B], under `cfg_velocity` with `combine`."""
        batch, _, height, width = latents.shape
        branch = dict(
            hidden_states=pack_2x2(latents.to(self.device)), timestep=sigma.to(self.device, torch.float32).expand(batch)
        )  # [B, hw/4, 4C], [B]
        guidance = guidance_embedding(self.transformer, self.embedded_guidance, batch, self.device)  # [B] or None
        if guidance is not None:
            branch["guidance"] = guidance
        tokens = cfg_velocity(
            forward,
            {**branch, **conditional},
            {**branch, **unconditional},
            guidance_scale,
            detach_uncond,
            self.cfg_batch,
            combine,
        )  # [B, hw/4, 4C]
        return unpack_2x2(tokens, height, width)  # [B, C, h, w]

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int]:
        check_image_size(height, width, self.vae_scale_factor * 2, self.display_name)
        return (self.latent_channels, height // self.vae_scale_factor, width // self.vae_scale_factor)

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """The pipeline's schedule for this resolution (its dynamic shift over the (h/2)(w/2)
        packed tokens; Qwen-Image's `shift_terminal` comes with its scheduler config)."""
        return scheduler_sigmas(self.pipeline.scheduler.config, num_steps, latent_shape[-2] * latent_shape[-1] // 4)


class KLVAEImages:
    """Decode and encode of the image families whose VAE is an `AutoencoderKL` in the SD3 / FLUX
    latent convention (`latents / scaling_factor + shift_factor` to decode: SD3, FLUX.1, Z-Image).
    Needs `vae` and `device`."""

    vae: torch.nn.Module
    device: torch.device

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, h, w] -> uint8 [B, 3, h·f, w·f] on CPU (f = VAE scale factor)."""
        return vae_decode_uint8(self.vae, latents.to(self.device))

    def decode_pixels(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, h, w] -> float [B, 3, h·f, w·f] in [0, 1] on the device, differentiable
        in the latents (reward feedback back-propagates through the frozen VAE)."""
        return vae_decode_pixels(self.vae, latents.to(self.device))

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, H, W] -> latents [B, C, h, w] float32: the VAE posterior mean, shifted and
        scaled as `decode` undoes (`vae_encode`: offline preference data, Diffusion-DPO's encode)."""
        return vae_encode(self.vae, images)


class WanVAEVideo:
    """Latent geometry, decode and encode of the video families whose VAE is Wan's
    (`AutoencoderKLWan`: Wan 2.1, Cosmos-Predict2.5). Needs `vae`, `transformer`, `device` and
    `display_name`; `_adopt_video` sets the frame count and the VAE/patch factors."""

    display_name: str

    def _adopt_video(self, num_frames: int) -> None:
        self.num_frames = num_frames
        self.temporal_factor = int(self.vae.config.scale_factor_temporal)
        self.spatial_factor = int(self.vae.config.scale_factor_spatial)
        self.patch_size = tuple(self.transformer.config.patch_size)  # (t, h, w)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, F_lat, h, w] -> uint8 video [B, F, 3, H, W] on the CPU, one video at a
        time (peak decode memory is one video's frames), un-normalised as the pipelines write it
        (`wan_vae_decode_uint8`)."""
        samples = latents.to(self.device, torch.float32).split(1)  # [1, C, F_lat, h, w] each
        return torch.cat([wan_vae_decode_uint8(self.vae, sample) for sample in samples])  # [B, F, 3, H, W]

    def encode_images(self, videos: torch.Tensor) -> torch.Tensor:
        """uint8 video [B, F, 3, H, W] -> latents [B, C, F_lat, h, w] float32 that `decode` maps
        back (`wan_vae_encode`), one video at a time like `decode`."""
        if videos.dim() != 5:
            raise ValueError(
                f"{self.display_name} encodes uint8 video [B, F, 3, H, W], got {tuple(videos.shape)} "
                "(offline preference data of still images is for image families)"
            )
        return torch.cat([wan_vae_encode(self.vae, video) for video in videos.split(1)])  # [B, C, F_lat, h, w]

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(C, F_lat, H/8, W/8): C the VAE's latent channels, F_lat = (num_frames − 1) / t + 1
        for the VAE's temporal factor t, for `model.num_frames` frames of height x width."""
        check_image_size(height, width, self.spatial_factor * self.patch_size[1], self.display_name)
        if (self.num_frames - 1) % self.temporal_factor:
            raise ValueError(
                f"model.num_frames={self.num_frames}: {self.display_name} needs num_frames = "
                f"{self.temporal_factor}k + 1 (its VAE compresses time by {self.temporal_factor}), "
                "e.g. 1, 33 or 93"
            )
        latent_frames = (self.num_frames - 1) // self.temporal_factor + 1
        return (int(self.vae.config.z_dim), latent_frames, height // self.spatial_factor, width // self.spatial_factor)


class PipelineLoading:
    """`from_config` / `from_pretrained` of a family policy built as
    `cls(pipeline, device, dtype, max_sequence_length, cfg_batch, **family_options)` from a
    diffusers pipeline (`diffusers_pipeline`, a class name). One place for every family, so a
    family declares only what differs: its pipeline class and `config_options`."""

    diffusers_pipeline: str
    """The diffusers pipeline class name: what loads the model, and whose `load_lora_weights`
    loads our exported LoRA."""
    config_options: tuple[str, ...] = ()
    """`model.*` keys the family's constructor takes as keywords (e.g. embedded_guidance)."""

    text_encoder_names: tuple[str, ...] = ("text_encoder",)
    """The pipeline's text encoder attributes (frozen, in the compute dtype)."""
    tokenizer_names: tuple[str, ...] = ("tokenizer",)
    """The pipeline's tokenizer attributes (checked at load)."""

    @property
    def text_encoders(self) -> list[torch.nn.Module]:
        return [getattr(self.pipeline, name) for name in self.text_encoder_names]

    @property
    def tokenizers(self) -> list:
        return [getattr(self.pipeline, name) for name in self.tokenizer_names]

    def _adopt(
        self, pipeline, device: torch.device, dtype: torch.dtype, max_sequence_length: int, cfg_batch: str, label: str
    ) -> None:
        """The part of every family's constructor that is the same: check the tokenizers, keep
        the settings, freeze the text encoders and the transformer in `dtype` and the VAE in
        float32 (decoding stays full precision, as the pipelines' upcast does)."""
        check_tokenizers(pipeline, self.tokenizer_names, label)
        self.pipeline = pipeline
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_sequence_length = max_sequence_length
        self.cfg_batch = cfg_batch
        for name in self.text_encoder_names:
            place(getattr(pipeline, name), self.device, dtype).requires_grad_(False).eval()
        self.vae = place(pipeline.vae, self.device, torch.float32).requires_grad_(False).eval()
        self.transformer = place(pipeline.transformer, self.device, dtype).requires_grad_(False)

    @classmethod
    def pipeline_components(cls) -> dict:
        """Objects handed to the pipeline's `from_pretrained` in place of stored components
        (none by default)."""
        return {}

    @classmethod
    def from_config(cls, cfg: ModelConfig):
        pipeline = load_pipeline(
            cls.diffusers_pipeline, cfg.path, resolve_dtype(cfg.dtype), cfg.revision, cls.pipeline_components()
        )
        return cls.from_loaded(pipeline, cfg)

    @classmethod
    def from_loaded(cls, pipeline, cfg: ModelConfig):
        """The policy over a pipeline already built, with `cfg`'s device, dtype and options: what
        `from_config` does after loading (a benchmark's random-weight pipeline at a model's real
        shapes comes in here, `models/real_shapes.py`)."""
        return cls(
            pipeline,
            resolve_device(cfg.device),
            resolve_dtype(cfg.dtype),
            max_sequence_length=cfg.max_sequence_length,
            cfg_batch=cfg.cfg_batch,
            **{name: getattr(cfg, name) for name in cls.config_options},
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        revision: str | None = None,
        **options,
    ):
        """Load from a hub id or a local `save_pretrained` directory through diffusers;
        `options` (max_sequence_length, cfg_batch, the family's own) go to the constructor,
        whose defaults hold for those not given."""
        pipeline = load_pipeline(cls.diffusers_pipeline, str(path), dtype, revision, cls.pipeline_components())
        return cls(pipeline, torch.device(device), dtype, **options)
