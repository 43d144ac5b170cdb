import torch
from support import assert_close_reordered, make_groups

from genalign.rollout.collector import SamplingSpec, generate
from genalign.sampling.kernels import ode_step

LATENT_DIM = 2 * 4 * 4
"""The linear test policy's flattened latent: the length of its velocity's dot products."""


def spec(**kw):
    base = dict(height=4, width=4, num_steps=4, guidance_scale=1.0, noise_level=0.7, chunk_size=3)
    base.update(kw)
    return SamplingSpec(**base)


def test_trajectory_shapes_and_stored_schedule(linear_policy):
    batch = generate(linear_policy, make_groups(), spec())
    batch.validate()
    assert batch.latents.shape == (6, 5, 2, 4, 4)
    assert batch.log_probs.shape == (6, 4)
    assert torch.equal(batch.sigmas, linear_policy.sigmas(4, linear_policy.shape))
    assert batch.sde_mask.all()
    assert (batch.log_probs != 0).all()
    assert batch.images.dtype == torch.uint8 and batch.images.shape == (6, 3, 4, 4)


def test_same_seeds_give_identical_trajectories_and_distinct_seeds_differ(linear_policy):
    groups = make_groups()
    first = generate(linear_policy, groups, spec())
    second = generate(linear_policy, groups, spec())
    assert torch.equal(first.latents, second.latents)
    assert torch.equal(first.log_probs, second.log_probs)
    # distinct per-sample seeds -> distinct samples within a group
    assert not torch.equal(first.latents[0, -1], first.latents[1, -1])


def test_sample_does_not_depend_on_chunking(linear_policy):
    groups = make_groups()
    by_three = generate(linear_policy, groups, spec(chunk_size=3))
    by_two = generate(linear_policy, groups, spec(chunk_size=2))
    # chunks of 3 vs 2 regroup the linear model's 32-long dot products over 4 steps: rounding only
    assert_close_reordered(by_three.latents, by_two.latents, length=LATENT_DIM, depth=4)


def test_noise_level_zero_is_the_euler_ode(linear_policy):
    groups = make_groups(1, 2)
    batch = generate(linear_policy, groups, spec(noise_level=0.0))
    assert not batch.sde_mask.any() and (batch.log_probs == 0).all()
    cond = linear_policy.encode_prompts(groups.prompts, with_negative=False)
    x = batch.latents[:, 0]
    for i in range(4):
        sigma = torch.full((2,), float(batch.sigmas[i]))
        v = linear_policy.velocity(x, sigma, cond, 1.0)
        x = ode_step(x, v, float(batch.sigmas[i]), float(batch.sigmas[i + 1]))
        assert_close_reordered(x, batch.latents[:, i + 1], length=LATENT_DIM, depth=i + 1)  # same math, own order


def test_shared_initial_noise_still_diverges_through_the_sde(linear_policy):
    from genalign.data.prompts import PromptExample
    from genalign.data.sampler import PromptSampler

    examples = [PromptExample(prompt=f"p{i}", prompt_id=i) for i in range(3)]
    groups = PromptSampler(examples, 2, 3, seed=5, same_initial_noise=True).sample(1)
    batch = generate(linear_policy, groups, spec())
    assert torch.equal(batch.latents[0, 0], batch.latents[1, 0])  # one x_T per group
    assert not torch.equal(batch.latents[0, 0], batch.latents[3, 0])  # groups differ
    assert not torch.equal(batch.latents[0, -1], batch.latents[1, -1])  # SDE noise is per sample


def test_sa_solver_rollout_records_the_latents_and_no_log_probs(linear_policy):
    """rollout.sampler=sa_solver: T + 1 latents (the last the clean prediction), zero log-probs,
    no SDE step, the kernel name "sa_solver" so no replay accepts the trajectory; each sample's
    noise is its own (a group sharing x_T still diverges) and the chunking changes rounding only."""
    from genalign.data.prompts import PromptExample
    from genalign.data.sampler import PromptSampler
    from genalign.rollout.config import SASolverConfig

    solver = SASolverConfig(tau=0.7, tau_sigma_min=0.0, tau_sigma_max=1.0)
    examples = [PromptExample(prompt=f"p{i}", prompt_id=i) for i in range(3)]
    groups = PromptSampler(examples, 2, 3, seed=5, same_initial_noise=True).sample(1)
    batch = generate(linear_policy, groups, spec(noise_level=0.0, sa_solver=solver))
    batch.validate()
    assert batch.latents.shape == (6, 5, 2, 4, 4) and batch.kernel == "sa_solver"
    assert (batch.log_probs == 0).all() and not batch.sde_mask.any()
    assert torch.isfinite(batch.latents).all()
    assert torch.equal(batch.latents[0, 0], batch.latents[1, 0])  # one x_T per group
    assert not torch.equal(batch.latents[0, -1], batch.latents[1, -1])  # the SA-Solver noise is per sample
    again = generate(linear_policy, groups, spec(noise_level=0.0, sa_solver=solver, chunk_size=2))
    # each state sums up to 3 data predictions of the linear model over 4 steps: rounding only
    assert_close_reordered(batch.latents, again.latents, length=LATENT_DIM, depth=4, gain=3.0)
