"""Pure helpers every diffusers family shares: 2x2 latent packing (against the pipelines' own
static methods), Qwen-Image's norm-preserving CFG by hand, CFG batching forms."""

from __future__ import annotations

import pytest
import torch

from genalign.models.base import rescale_to_norm
from genalign.models.diffusers_common import cfg_velocity, pack_2x2, unpack_2x2


def test_pack_matches_the_pipelines_and_unpack_inverts_it():
    from diffusers import FluxPipeline, QwenImagePipeline

    latents = torch.randn(2, 4, 6, 8)  # [B, C, h, w]
    packed = pack_2x2(latents)
    assert packed.shape == (2, 12, 16)
    assert torch.equal(packed, FluxPipeline._pack_latents(latents, 2, 4, 6, 8))
    assert torch.equal(packed, QwenImagePipeline._pack_latents(latents, 2, 4, 6, 8))
    assert torch.equal(unpack_2x2(packed, 6, 8), latents)
    # token 0 holds channel-major the top-left 2x2 patch: (c0: x00 x01 x10 x11, c1: ...)
    assert torch.equal(packed[0, 0, :4], latents[0, 0, :2, :2].reshape(4))


def test_rescale_to_norm_by_hand():
    guided = torch.tensor([[3.0, 4.0]])  # norm 5
    reference = torch.tensor([[0.0, 10.0]])  # norm 10
    torch.testing.assert_close(rescale_to_norm(guided, reference), torch.tensor([[6.0, 8.0]]))


def test_cfg_velocity_forms_agree_and_need_the_negative():
    weight = torch.tensor(2.0, requires_grad=True)

    def forward(hidden_states, embeds):
        return weight * hidden_states + embeds  # [B, D]

    latents, cond, uncond = torch.ones(2, 3), torch.full((2, 3), 5.0), torch.full((2, 3), 1.0)
    joint = cfg_velocity(
        forward, dict(hidden_states=latents, embeds=cond), dict(hidden_states=latents, embeds=uncond), 4.0
    )
    # v_c = 7, v_u = 3: 3 + 4 (7 - 3) = 19
    torch.testing.assert_close(joint, torch.full((2, 3), 19.0))
    split = cfg_velocity(
        forward,
        dict(hidden_states=latents, embeds=cond),
        dict(hidden_states=latents, embeds=uncond),
        4.0,
        detach_uncond=True,
        cfg_batch="split",
    )
    torch.testing.assert_close(split, joint)
    assert torch.equal(
        cfg_velocity(forward, dict(hidden_states=latents, embeds=cond), {"embeds": None}, 1.0), forward(latents, cond)
    )
    with pytest.raises(ValueError, match="with_negative=True"):
        cfg_velocity(forward, dict(hidden_states=latents, embeds=cond), dict(hidden_states=latents, embeds=None), 4.0)
    with pytest.raises(ValueError, match="model.cfg_batch"):
        cfg_velocity(
            forward,
            dict(hidden_states=latents, embeds=cond),
            dict(hidden_states=latents, embeds=uncond),
            4.0,
            cfg_batch="both",
        )


def test_guidance_forms_by_hand():
    # docs/algorithms.md §2.7: v_u + w (v_c − v_u), and Cosmos' v_c + w (v_c − v_u)
    from genalign.models.base import guided_velocity
    from genalign.models.cosmos.policy import cosmos_guidance

    uncond, cond = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 1.0]])
    torch.testing.assert_close(guided_velocity(uncond, cond, 4.5), torch.tensor([[10.0, -2.5]]))  # 1 + 4.5·2, 2 − 4.5
    torch.testing.assert_close(cosmos_guidance(uncond, cond, 7.0), torch.tensor([[17.0, -6.0]]))  # 3 + 7·2, 1 − 7
    # detaching v_u leaves the value and sends the gradient through v_c only, with scale w
    uncond.requires_grad_(True)
    cond.requires_grad_(True)
    guided_velocity(uncond, cond, 4.5, detach_uncond=True).sum().backward()
    assert uncond.grad is None and cond.grad.tolist() == [[4.5, 4.5]]
