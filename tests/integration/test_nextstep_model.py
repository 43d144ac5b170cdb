"""genalign's NextStep-1 against the authors' modeling code (stepfun-ai/NextStep-1 6e49bae),
run once on a tiny config: tests/reference_outputs/nextstep_1/ holds the tiny weights the
authors' `NextStep` module saved (its parameter names and shapes: the checkpoint layout), and
what their code computed from them (README.md there says how it was produced)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from genalign.models.nextstep.head import head_sigmas
from genalign.models.nextstep.modeling import NextStepArchitecture, NextStepModel, sincos_grid_embedding
from genalign.models.nextstep.sampling import Streams, sample_walks, token_from_walk

REFERENCE = Path(__file__).resolve().parents[1] / "reference_outputs" / "nextstep_1"


def _reference():
    outputs = load_file(REFERENCE / "reference_outputs.safetensors")
    with safe_open(REFERENCE / "reference_outputs.safetensors", "pt") as f:
        meta = f.metadata()
    return outputs, meta


@pytest.fixture(scope="module")
def model() -> NextStepModel:
    arch = NextStepArchitecture.from_dict(json.loads((REFERENCE / "config.json").read_text()))
    built = NextStepModel(arch).eval()
    built.load_state_dict(load_file(REFERENCE / "model.safetensors"), strict=True)
    return built


def test_the_authors_checkpoint_layout_loads_strictly_and_the_buffer_is_theirs():
    state = load_file(REFERENCE / "model.safetensors")
    arch = NextStepArchitecture.from_dict(json.loads((REFERENCE / "config.json").read_text()))
    ours = NextStepModel(arch).state_dict()
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in state.items()}
    # gen_pos_embed is a persistent buffer in the checkpoint: ours is computed the same way
    torch.testing.assert_close(ours["gen_pos_embed"], state["gen_pos_embed"], rtol=0, atol=1e-6)
    assert sincos_grid_embedding(arch.hidden_size, 32).shape == (1024, arch.hidden_size)


def test_head_network_matches(model):
    out, _ = _reference()
    with torch.no_grad():
        ours = model.image_head.net(out["head_x"], out["head_t"], out["head_c"])
    # fp32, 2 residual blocks of width 32: rounding differences of order 1e-6
    torch.testing.assert_close(ours, out["head_out"], rtol=1e-5, atol=1e-5)


def test_prefill_matches_on_real_positions(model):
    out, _ = _reference()
    streams = Streams(out["input_ids"], out["attention_mask"])
    with torch.no_grad():
        hidden, _ = model.decode_hidden(model.embed_tokens(streams.ids), streams.padding)
    real = streams.padding.bool()  # padded query rows are never read
    torch.testing.assert_close(hidden[real], out["prefill_hidden"][real], rtol=1e-5, atol=1e-5)


def test_sampler_reproduces_the_authors_sampler_given_their_noise(model):
    """The whole generation: CFG on the head, shifted head σ's, the authors' SDE (em_sde at
    noise level 1) with the noise their sampler drew, the layer-normed tokens fed back through
    the key-value cache, `gen_pos_embed` added to each condition; then the latent layout."""
    out, meta = _reference()
    batch, rows, cols = int(meta["batch"]), int(meta["rows"]), int(meta["cols"])
    noises = out["noises"]  # [N, K, B, D]: per token the initial noise, then each SDE step's
    token_index = iter(range(rows * cols))
    current = {}

    def draw(k: int) -> torch.Tensor:
        if k == 0:
            current["n"] = next(token_index)
        return noises[current["n"], k]

    sigmas = head_sigmas(int(meta["num_sampling_steps"]), float(meta["timesteps_shift"]))
    walks, _ = sample_walks(
        model,
        Streams(out["input_ids"], out["attention_mask"]),
        rows * cols,
        sigmas,
        float(meta["guidance_scale"]),
        "em_sde",
        1.0,
        draw,
        use_norm=meta["use_norm"] == "true",
    )
    tokens = token_from_walk(walks[:, :, -1], use_norm=True)  # [B, N, D]
    assert tokens.shape == out["tokens"].shape == (batch, rows * cols, model.arch.token_dim)
    # six autoregressive tokens through random fp32 weights: rounding (σ as 1 − t, the time
    # input as 1 − σ) stays below 1e-4 on these unit-scale values
    torch.testing.assert_close(tokens, out["tokens"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model.unpatchify(tokens, rows, cols), out["latents"], rtol=1e-4, atol=1e-4)


def test_the_large_architecture_has_the_authors_layout_and_the_papers_head():
    """At NextStep-1-Large's shapes (genalign/models/nextstep/architectures/, whose source says
    what is and is not verified), on the meta device: the parameter names and shapes the
    authors' `NextStep` has at the same config (large_layout.json), and a head of 157M
    parameters, the paper's figure."""
    file = (
        Path(__file__).resolve().parents[2] / "genalign/models/nextstep/architectures/stepfun-ai--NextStep-1-Large.json"
    )
    config = json.loads(file.read_text())["components"]["transformer"]["config"]
    with torch.device("meta"):
        ours = NextStepModel(NextStepArchitecture.from_dict(config, str(file)))
    theirs = json.loads((REFERENCE / "large_layout.json").read_text())
    assert {k: list(v.shape) for k, v in ours.state_dict().items()} == theirs["parameters"]
    head = sum(p.numel() for p in ours.image_head.parameters())
    assert head == theirs["image_head_parameters"] and round(head / 1e6) == 157
    assert sum(p.numel() for p in ours.parameters()) == theirs["parameters_total"]


def _authors_head_sample(net, c, cfg, shift, num_sampling_steps, noise, last_step_size=0.04):
    """The authors' `FlowMatchingHead.sample` (6e49bae), transcribed in our words: time t from 0
    (noise) to 1 − last_step_size on a shifted linspace of `num_sampling_steps` points; per step
    the CFG velocity u, score (t·u − x) / (1 − t), drift u + (1 − t)·score and Euler–Maruyama noise
    sqrt(2(1 − t))·sqrt(dt)·w; then one Euler step of length last_step_size. `noise(k)` stands for
    their k-th `randn_tensor` draw (k = 0 the start)."""
    x = noise(0)
    t = torch.linspace(0, 1 - last_step_size, num_sampling_steps)
    t = t / (shift - (shift - 1) * t)

    def velocity(x, ti):
        out = net(torch.cat([x, x]), ti.expand(len(c)), c)
        cond, uncond = out.chunk(2)
        return uncond + cfg * (cond - uncond)

    for k, (ti, tj) in enumerate(zip(t[:-1], t[1:])):
        dt = tj - ti
        u = velocity(x, ti)
        score = (ti * u - x) / (1 - ti)
        x = x + (u + (1 - ti) * score) * dt + torch.sqrt(2 * (1 - ti)) * noise(k + 1) * torch.sqrt(dt)
    return x + velocity(x, t[-1]) * last_step_size


@pytest.mark.parametrize("num_steps, shift", [(7, 1.0), (12, 3.2)])
def test_the_head_walk_set_by_rollout_keys_is_the_authors_sampler(model, num_steps, shift):
    """rollout.num_steps (their `num_sampling_steps`) at counts other than the default, through
    the policy's `configure_rollout`, with rollout.kernel=em_sde at noise level 1 (their sampler:
    it has no noise parameter): the head walks the same path as their sampler on the same noise."""
    from dataclasses import replace

    from genalign.models.nextstep.policy import HeadSampling, NextStepPolicy
    from genalign.models.nextstep.sampling import head_walk
    from genalign.models.nextstep.tiny import tiny_vae
    from genalign.rollout.config import RolloutConfig

    policy = NextStepPolicy(
        model, None, tiny_vae(), torch.device("cpu"), torch.float32, replace(HeadSampling(), shift=shift)
    )
    policy.configure_rollout(RolloutConfig(num_steps=num_steps, noise_level=1.0, kernel="em_sde"))
    assert len(policy.sigmas) == num_steps + 1
    generator = torch.Generator().manual_seed(num_steps)
    batch, dim, hidden = 3, model.arch.token_dim, model.arch.hidden_size
    noises = torch.randn(num_steps, batch, dim, generator=generator)  # the start, then K − 1 SDE steps
    cond = torch.randn(2 * batch, hidden, generator=generator)  # conditional rows, then unconditional
    with torch.no_grad():
        s = policy.sampling
        walk, log_probs = head_walk(model, cond, batch, policy.sigmas, 3.0, s.kernel, s.noise_level, noises.__getitem__)
        theirs = _authors_head_sample(model.image_head.net, cond, 3.0, shift, num_steps, noises.__getitem__)
    assert walk.shape == (batch, num_steps + 1, dim) and log_probs.shape == (batch, num_steps - 1)
    # the same steps in two algebraic forms (our σ-form mean vs their score form) in fp32, on
    # values up to ~30 (the reference's random weights): a few ulp (relative ~1e-7) a step, so
    # about 1e-6 relative after 12 steps; rtol 1e-5 leaves a factor of ten
    torch.testing.assert_close(walk[:, -1], theirs, rtol=1e-5, atol=1e-5)
