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
