"""DiffusionNFT and Flow-DPO algorithm classes on the linear test policy."""

import pytest
import torch
from support import make_groups

from genalign.algorithms.config import AlgorithmConfig, DPOConfig, NFTConfig
from genalign.algorithms.dpo import FlowDPO, best_worst_pairs
from genalign.algorithms.forward_draws import forward_draws
from genalign.algorithms.nft import DiffusionNFT
from genalign.rollout.collector import SamplingSpec, generate


def ode_rollout(policy):
    spec = SamplingSpec(height=4, width=4, num_steps=4, guidance_scale=1.0, noise_level=0.0, chunk_size=3)
    return generate(policy, make_groups(), spec)


def trainable(policy):
    return {name: p for name, p in policy.transformer.named_parameters() if p.requires_grad}


def test_forward_draws_are_a_per_sample_permutation_and_batch_independent():
    seeds = torch.tensor([11, 12, 13])
    indices = torch.stack([forward_draws(seeds, j, 5, (2,))[0] for j in range(5)])  # [5, B]
    for column in indices.T:
        assert sorted(column.tolist()) == [0, 1, 2, 3, 4]
    alone_index, alone_noise = forward_draws(seeds[1:2], 2, 5, (2,))
    index, noise = forward_draws(seeds, 2, 5, (2,))
    assert alone_index[0] == index[1] and torch.equal(alone_noise[0], noise[1])
    assert not torch.equal(forward_draws(seeds, 0, 5, (2,))[1], forward_draws(seeds, 1, 5, (2,))[1])


def test_nft_old_policy_equals_current_at_start_and_lags_after_soft_update(linear_policy):
    batch = ode_rollout(linear_policy)
    params = trainable(linear_policy)
    algo = DiffusionNFT(AlgorithmConfig(name="nft", kl_beta=0.0), parameters=params)
    advantages = torch.zeros(len(batch))  # r = 0.5 everywhere
    loss, stats = algo.compute_loss(linear_policy, batch, advantages, 0)
    # θ_old == θ: the implicit policies coincide, L⁺ == L⁻, and with r = 0.5 the gradient is 0
    assert torch.equal(stats["old_velocity_gap"], torch.zeros(len(batch)))
    assert torch.equal(stats["nft_positive_loss"], stats["nft_negative_loss"])
    loss.backward()
    assert max(p.grad.abs().max().item() for p in params.values()) < 1e-6
    # move θ, then soft-update: θ_old = η·θ_old + (1 − η)·θ with η = min(0.001·2, 0.5)
    before = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        for p in params.values():
            p.add_(1.0)
    assert algo.after_update(2) == {"old_policy_decay": pytest.approx(0.002)}
    for name, p in params.items():
        torch.testing.assert_close(algo.old.shadow[name], 0.002 * before[name] + 0.998 * p.detach())
    with algo.rollout_weights():  # the rollout samples with θ_old
        for name, p in params.items():
            assert torch.equal(p.detach(), algo.old.shadow[name])
    assert torch.equal(params["latent.bias"].detach(), before["latent.bias"] + 1.0)  # restored


def test_nft_state_round_trips(linear_policy):
    params = trainable(linear_policy)
    algo = DiffusionNFT(AlgorithmConfig(name="nft", nft=NFTConfig()), parameters=params)
    with torch.no_grad():
        params["latent.bias"].add_(0.5)
    algo.after_update(3)
    state = algo.state_dict()
    fresh = DiffusionNFT(AlgorithmConfig(name="nft"), parameters=params)
    fresh.load_state_dict(state)
    assert fresh.optimizer_steps == 3
    for name in params:
        assert torch.equal(fresh.old.shadow[name], algo.old.shadow[name])
    with pytest.raises(ValueError, match="optimizer_steps"):
        fresh.load_state_dict({})


def test_best_worst_pairs_pair_or_drop_tied_groups():
    advantages = torch.tensor([0.1, 0.5, -0.2, 0.0, 0.0, 0.0, 1.0, 1.0, -1.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    # group 1 ties: "pair" (the default) takes its second sample over its first; ties inside
    # group 2's maximum go to the first of them
    chosen, rejected = best_worst_pairs(advantages, groups)
    assert chosen.tolist() == [1, 4, 6] and rejected.tolist() == [2, 3, 8]
    chosen, rejected = best_worst_pairs(advantages, groups, "drop")
    assert chosen.tolist() == [1, 6] and rejected.tolist() == [2, 8]
    with pytest.raises(ValueError, match="tied_groups='skip'"):
        best_worst_pairs(advantages, groups, "skip")


def stat_tracker_dpo_pairs(rewards: list[float], prompts: list[str]) -> set[tuple[int, int]]:
    """Flow-GRPO's online DPO pairs (`PerPromptStatTracker.update(type="dpo")`, read at
    yifan123/flow_grpo 94e23ee5), restated: per prompt, its samples in batch order; the first
    maximum is chosen and the first minimum rejected, and when those are the same sample (every
    reward equal) the prompt's second sample is chosen over its first."""
    pairs = set()
    for prompt in sorted(set(prompts)):
        members = [i for i, p in enumerate(prompts) if p == prompt]
        values = [rewards[i] for i in members]
        best, worst = values.index(max(values)), values.index(min(values))
        if best == worst:
            best, worst = 1, 0
        pairs.add((members[best], members[worst]))
    return pairs


@pytest.mark.parametrize("seed", range(5))
def test_online_pairs_are_flow_grpo_s_on_a_binary_reward(seed):
    """A 0/1 reward (many ties) with each prompt's samples interleaved as the reference's
    shuffled sampler leaves them: the pairs cut from the group-normalised advantages are the
    reference's pairs from the rewards, one per group; `drop` keeps only the groups with a gap."""
    from genalign.algorithms.advantages import group_advantages

    g = torch.Generator().manual_seed(seed)
    num_groups, n = 16, 4
    groups = torch.arange(num_groups).repeat_interleave(n)[torch.randperm(num_groups * n, generator=g)]  # [B]
    rewards = torch.randint(0, 2, (num_groups * n,), generator=g).float()  # [B]
    advantages = group_advantages(rewards, groups)
    chosen, rejected = best_worst_pairs(advantages, groups)
    reference = stat_tracker_dpo_pairs(rewards.tolist(), [f"prompt {int(k)}" for k in groups])
    assert set(zip(chosen.tolist(), rejected.tolist())) == reference and len(reference) == num_groups
    kept, _ = best_worst_pairs(advantages, groups, "drop")
    gapped = sum(int(rewards[groups == k].max() > rewards[groups == k].min()) for k in range(num_groups))
    assert len(kept) == gapped < num_groups


def test_dpo_online_pairs_and_loss_at_reference(linear_policy):
    batch = ode_rollout(linear_policy)  # 2 groups of 3
    algo = FlowDPO(AlgorithmConfig(name="dpo"), parameters=trainable(linear_policy))
    advantages = torch.tensor([1.0, -1.0, 0.0, 0.5, 0.2, -0.3])
    pairs, pair_advantages = algo.training_batch(batch, advantages)
    assert len(pairs) == 2 and pair_advantages.tolist() == pytest.approx([2.0, 0.8])
    assert torch.equal(pairs.chosen[0], batch.latents[0, -1]) and torch.equal(pairs.rejected[1], batch.latents[5, -1])
    loss, stats = algo.compute_loss(linear_policy, pairs, pair_advantages, 0)
    # the policy is still the reference: −log σ(0) = log 2
    assert loss.item() == pytest.approx(0.6931471805599453)
    assert torch.equal(stats["dpo_logit"], torch.zeros(2))
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in linear_policy.transformer.parameters())


def test_dpo_step_without_pairs_trains_nothing(linear_policy):
    from genalign.training.config import ActorConfig
    from genalign.training.update import UpdateContext, run_update

    batch = ode_rollout(linear_policy)
    algo = FlowDPO(AlgorithmConfig(name="dpo", dpo=DPOConfig(tied_groups="drop")), parameters=trainable(linear_policy))
    pairs, pair_advantages = algo.training_batch(batch, torch.zeros(len(batch)))  # every group constant
    assert len(pairs) == 0
    params = list(trainable(linear_policy).values())
    context = UpdateContext(
        linear_policy, algo, torch.optim.AdamW(params), params, ActorConfig(gradient_accumulation_steps=1)
    )
    result = run_update(context, pairs, pair_advantages, 4, torch.Generator().manual_seed(0))
    assert result.optimizer_steps == 0 and result.metrics()["trained_fraction"] == 0.0


def _shifted(params, by):
    with torch.no_grad():
        for p in params.values():
            p.add_(by)


def test_dpo_reference_is_refreshed_from_the_learner_every_ref_update_step(linear_policy):
    """train_sd3_dpo.py: copy_learner_to_ref when the optimizer-step count reaches a multiple of
    ref_update_step; until then the reference keeps the starting weights."""
    params = trainable(linear_policy)
    start = {n: p.detach().clone() for n, p in params.items()}
    algo = FlowDPO(AlgorithmConfig(name="dpo", dpo=DPOConfig(ref_update_step=3)), parameters=params)
    _shifted(params, 1.0)
    assert algo.after_update(2) == {"dpo_reference_refreshed": 0.0}  # 2 steps: not yet
    for name in params:
        assert torch.equal(algo.reference.shadow[name], start[name])
    assert algo.after_update(2) == {"dpo_reference_refreshed": 1.0}  # 4 steps: crossed 3
    for name, p in params.items():
        assert torch.equal(algo.reference.shadow[name], p.detach())
    never = FlowDPO(AlgorithmConfig(name="dpo", dpo=DPOConfig(ref_update_step=0)), parameters=params)
    _shifted(params, 1.0)
    assert never.after_update(100) == {"dpo_reference_refreshed": 0.0}


@pytest.mark.parametrize("sample_with", ["reference", "policy"])
def test_dpo_online_rollout_samples_with_the_reference_or_the_learner(linear_policy, sample_with):
    params = trainable(linear_policy)
    algo = FlowDPO(AlgorithmConfig(name="dpo", dpo=DPOConfig(sample_with=sample_with)), parameters=params)
    start = {n: p.detach().clone() for n, p in params.items()}
    _shifted(params, 0.5)
    live = {n: p.detach().clone() for n, p in params.items()}
    with algo.rollout_weights():
        expected = start if sample_with == "reference" else live
        for name, p in params.items():
            assert torch.equal(p.detach(), expected[name])
    for name, p in params.items():  # restored
        assert torch.equal(p.detach(), live[name])


def test_dpo_reference_state_round_trips(linear_policy):
    params = trainable(linear_policy)
    algo = FlowDPO(AlgorithmConfig(name="dpo", dpo=DPOConfig(ref_update_step=1)), parameters=params)
    _shifted(params, 0.25)
    algo.after_update(1)
    fresh = FlowDPO(AlgorithmConfig(name="dpo"), parameters=params)
    fresh.load_state_dict(algo.state_dict())
    assert fresh.optimizer_steps == 1
    for name in params:
        assert torch.equal(fresh.reference.shadow[name], algo.reference.shadow[name])
    with pytest.raises(ValueError, match="optimizer_steps"):
        fresh.load_state_dict({})
