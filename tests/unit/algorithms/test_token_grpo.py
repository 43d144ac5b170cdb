"""AR-GRPO's token math against hand-computed values: the guided sampling logits, token
log-probs, the k3 KL, and the per-token clipped loss with its aggregation (mean over tokens
and samples), its gradient, the KL term and the parity replay on a token trajectory."""

from __future__ import annotations

import math
from contextlib import contextmanager

import pytest
import torch

from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.losses import token_kl
from genalign.algorithms.token_grpo import TokenGRPO
from genalign.models.base import SampledTokens, TokenCondition
from genalign.models.janus.policy import guided_token_logits, token_log_probs_from_logits, unconditional_ids
from genalign.models.spec import FamilySpec
from genalign.rollout.token_batch import TokenTrajectoryBatch
from genalign.training.parity import replay_parity

LOG = math.log


def test_guided_logits_are_janus_cfg_then_temperature():
    # l = (l_u + w (l_c − l_u)) / T with l_c = [2, 0], l_u = [1, 1], w = 3, T = 2:
    #   [1 + 3·1, 1 + 3·(−1)] / 2 = [4, −2] / 2 = [2, −1]
    guided = guided_token_logits(torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 1.0]]), 3.0, 2.0)
    assert torch.allclose(guided, torch.tensor([[2.0, -1.0]]))
    # no unconditional stream: l_c / T
    assert torch.allclose(guided_token_logits(torch.tensor([[2.0, 0.0]]), None, 1.0, 2.0), torch.tensor([[1.0, 0.0]]))
    # log softmax([2, −1])[0] = 2 − log(e² + e⁻¹) = 2 − log(7.389056 + 0.367879) = −0.048587
    log_probs = token_log_probs_from_logits(guided[:, None], torch.tensor([[0]]))  # [1, 1]
    assert log_probs.item() == pytest.approx(-0.048587, abs=1e-6)


def test_unconditional_prompt_keeps_only_bos_and_begin_of_image():
    ids = torch.tensor([[9, 9, 0, 5, 6, 4], [0, 7, 8, 5, 6, 4]])  # left pad 9 (masked), BOS 0, BOI 4
    assert unconditional_ids(ids, bos_id=0, boi_id=4, pad_id=2).tolist() == [[2, 2, 0, 2, 2, 4], [0, 2, 2, 2, 2, 4]]


def test_token_kl_is_the_k3_estimator():
    # k3 = exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1:
    #   ℓ = log .5, ℓ_ref = log .25: 0.5 − log 0.5 − 1 = 0.5 + 0.693147 − 1 = 0.193147
    #   ℓ = ℓ_ref: 0;   ℓ = log .25, ℓ_ref = log .5: 2 − log 2 − 1 = 0.306853
    kl = token_kl(torch.tensor([LOG(0.5), LOG(0.3), LOG(0.25)]), torch.tensor([LOG(0.25), LOG(0.3), LOG(0.5)]))
    assert torch.allclose(kl, torch.tensor([0.193147, 0.0, 0.306853]), atol=1e-6)


class TableModule(torch.nn.Module):
    def __init__(self, values: torch.Tensor):
        super().__init__()
        self.values = torch.nn.Parameter(values.clone())


class TablePolicy:
    """A TokenPolicy whose log-probs of the stored tokens are a trainable [B, N] table."""

    spec = FamilySpec(
        name="table",
        policy="test_token_grpo:TablePolicy",
        sampler="token",
        text_encoders=False,
        export="none",
        hub_weights=False,
    )
    family = spec.name
    lora_target_modules: list[str] = []
    repeated_blocks = ()
    num_image_tokens = 2

    def __init__(self, values: torch.Tensor):
        self.transformer = TableModule(values)
        self.device = torch.device("cpu")
        self.seen = []

    def encode_prompts(self, prompts, with_negative):
        return TokenCondition(torch.ones(len(prompts), 3, dtype=torch.long), torch.ones(len(prompts), 3))

    def sample_tokens(self, cond, generators, guidance_scale, temperature):
        return SampledTokens(torch.zeros(len(cond), 2, dtype=torch.long), torch.zeros(len(cond), 2))

    def token_log_probs(self, cond, tokens, guidance_scale, temperature, detach_uncond=False):
        self.seen.append((guidance_scale, temperature, detach_uncond))
        rows = tokens[:, 0]  # the tests store the sample's row index as its first token
        return self.transformer.values[rows]

    def decode_tokens(self, tokens):
        return torch.zeros(len(tokens), 3, 4, 4, dtype=torch.uint8)

    def check_image_size(self, height, width):
        pass


def token_batch(old_log_probs: torch.Tensor) -> TokenTrajectoryBatch:
    size = old_log_probs.shape[0]
    return TokenTrajectoryBatch(
        prompts=[f"p{i}" for i in range(size)],
        prompt_ids=torch.arange(size),
        group_ids=torch.zeros(size, dtype=torch.long),
        seeds=torch.arange(size),
        condition=TokenCondition(torch.ones(size, 3, dtype=torch.long), torch.ones(size, 3)),
        tokens=torch.arange(size)[:, None].repeat(1, 2),
        log_probs=old_log_probs[:, None].clone(),
        images=torch.zeros(size, 3, 4, 4, dtype=torch.uint8),
        guidance_scale=5.0,
        temperature=0.7,
        scored_guidance_scale=5.0,
    )


CURRENT = torch.tensor([[LOG(0.5), LOG(0.5)], [LOG(0.25), LOG(0.8)]])
OLD = torch.tensor([[LOG(0.4), LOG(0.5)], [LOG(0.25), LOG(0.5)]])


def test_clipped_token_loss_is_the_mean_over_tokens_and_samples():
    # r = [[1.25, 1], [1, 1.6]], Â = [+1, −1], ε = 0.2; per token max(−Â r, −Â clip(r)):
    #   sample 0: max(−1.25, −1.2) = −1.2, max(−1, −1) = −1
    #   sample 1: max(1, 1) = 1,           max(1.6, 1.2) = 1.6
    # mean over the 4 tokens: (−1.2 − 1 + 1 + 1.6) / 4 = 0.1; |r − 1| > 0.2 at 2 of 4 tokens
    policy = TablePolicy(CURRENT)
    algorithm = TokenGRPO(AlgorithmConfig(name="ar_grpo", clip_range=0.2, detach_uncond=True))
    batch = token_batch(OLD)
    assert algorithm.train_step_indices(batch) == [0]
    loss, stats = algorithm.compute_loss(policy, batch, torch.tensor([1.0, -1.0]), 0)
    assert loss.item() == pytest.approx(0.1, abs=1e-6)
    assert stats["clip_frac"].tolist() == [0.5, 0.5]
    assert torch.allclose(stats["ratio"], torch.tensor([[1.25, 1.0], [1.0, 1.6]]))
    assert policy.seen == [(5.0, 0.7, True)]  # the rollout's scored guidance and temperature, uncond detached
    loss.backward()
    # d loss / d ℓ = −Â r / 4 where the unclipped term is taken, 0 where the clip binds:
    #   [[0 (clipped, Â > 0, r > 1.2), −1/4], [+1/4, +1.6/4]]
    assert torch.allclose(policy.transformer.values.grad, torch.tensor([[0.0, -0.25], [0.25, 0.4]]), atol=1e-6)


class TableReference:
    def __init__(self, values: torch.Tensor):
        self.policy = TablePolicy(values)

    @contextmanager
    def active(self):
        yield self.policy


def test_kl_term_adds_beta_times_the_token_mean_k3():
    # ℓ_ref = log .5 everywhere: k3 = [[0, 0], [0.306853, 0.095004]]
    #   (ℓ = log .8: 0.625 − log 0.625 − 1 = 0.625 + 0.470004 − 1 = 0.095004)
    # loss = 0.1 + β · mean k3 = 0.1 + 0.5 · 0.100464 = 0.150232; per-sample KL = [0, 0.200929]
    algorithm = TokenGRPO(
        AlgorithmConfig(name="ar_grpo", clip_range=0.2, kl_beta=0.5),
        reference=TableReference(torch.full((2, 2), LOG(0.5))),
    )
    loss, stats = algorithm.compute_loss(TablePolicy(CURRENT), token_batch(OLD), torch.tensor([1.0, -1.0]), 0)
    assert loss.item() == pytest.approx(0.150232, abs=1e-5)
    assert torch.allclose(stats["kl"], torch.tensor([0.0, 0.200929]), atol=1e-5)


def test_parity_replays_every_token_of_the_one_position():
    policy = TablePolicy(CURRENT)
    algorithm = TokenGRPO(AlgorithmConfig(name="ar_grpo"))
    batch = token_batch(CURRENT)
    assert replay_parity(policy, batch, [0], 1, replay=algorithm.replay_log_probs) == {0: 0.0}
    drifted = token_batch(CURRENT.clone().index_put_((torch.tensor([1]), torch.tensor([1])), torch.tensor(-1.0)))
    gap = replay_parity(policy, drifted, [0], 1, replay=algorithm.replay_log_probs)[0]
    assert gap == pytest.approx(abs(LOG(0.8) + 1.0), abs=1e-6)  # the last token of the last sample


def test_rollout_correction_records_proximal_log_probs_per_token():
    # behaviour ℓ_old vs proximal ℓ (the table): ρ = exp(ℓ − ℓ_old) = [[1.25, 1], [1, 1.6]];
    # truncate at C = 1.5 -> weights [[1.25, 1], [1, 1.5]]; the ratio is taken against ℓ, so it is 1
    algorithm = TokenGRPO(AlgorithmConfig(name="ar_grpo", clip_range=0.2))
    algorithm.cfg.rollout_correction.mode, algorithm.cfg.rollout_correction.threshold = "truncate", 1.5
    policy = TablePolicy(CURRENT)
    batch = algorithm.prepare_update(policy, token_batch(OLD), [0], 2)
    assert torch.allclose(batch.proximal_log_probs[:, 0], CURRENT)
    loss, stats = algorithm.compute_loss(policy, batch, torch.tensor([1.0, -1.0]), 0)
    assert torch.allclose(stats["rollout_is_weight"], torch.tensor([[1.25, 1.0], [1.0, 1.5]]), atol=1e-6)
    # loss = mean(−Â·w) with r = 1: (−1.25 − 1 + 1 + 1.5) / 4 = 0.0625
    assert loss.item() == pytest.approx(0.0625, abs=1e-6)


def test_conditional_scoring_replays_at_guidance_one():
    """algorithm.token_log_prob=conditional (T2I-R1): the trajectory says its log-probs were
    taken on the conditional stream alone, and replay scores them the same way."""
    policy = TablePolicy(CURRENT)
    batch = token_batch(OLD)
    batch.scored_guidance_scale = 1.0
    TokenGRPO(AlgorithmConfig(name="ar_grpo")).compute_loss(policy, batch, torch.tensor([1.0, -1.0]), 0)
    assert policy.seen[0][:2] == (1.0, 0.7)
