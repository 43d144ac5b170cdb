"""One optimizer round: accumulation counts micro-batches x trained steps (ALGORITHMS §2.5)."""

import torch

from genalign.training.config import ActorConfig
from genalign.training.update import micro_batch_indices, run_update
from support import make_batch


class QuadraticAlgorithm:
    """loss = mean_b (w * x_b - adv_b)^2 at each step: gradients are easy to reason about."""

    needs_reference = False
    needs_old_logprob = False
    supports_multi_update = True

    def __init__(self, weight, steps=(0, 1)):
        self.weight = weight
        self.steps = list(steps)
        self.calls = []

    def train_step_indices(self, batch):
        return self.steps

    def compute_loss(self, policy, batch, advantages, step_index):
        self.calls.append((tuple(batch.prompts), step_index))
        x = batch.latents[:, step_index].flatten(1).mean(1)  # [b]
        per_sample = (self.weight * x - advantages) ** 2
        return per_sample.mean(), {"ratio": torch.ones(len(batch))}


def run(batch, advantages, accumulation, micro, lr=0.1, epochs=1):
    weight = torch.nn.Parameter(torch.tensor(1.0))
    algo = QuadraticAlgorithm(weight)
    opt = torch.optim.SGD([weight], lr=lr)
    actor = ActorConfig(gradient_accumulation_steps=accumulation, max_grad_norm=1e9, num_inner_epochs=epochs,
                        shuffle_samples=False)
    result = run_update(None, algo, opt, [weight], batch, advantages, actor, micro, torch.Generator().manual_seed(0))
    return weight, result, algo


def test_optimizer_steps_per_round_follow_accumulation():
    batch = make_batch(size=8)
    _, result, algo = run(batch, torch.randn(8), accumulation=2, micro=2)
    assert result.optimizer_steps == 2  # 4 micro-batches / 2
    assert len(algo.calls) == 4 * 2  # every micro-batch at every trained step
    assert result.metrics()["ratio"] == 1.0


def test_full_accumulation_equals_one_big_batch():
    batch = make_batch(size=8)
    adv = torch.randn(8)
    small, _, _ = run(batch, adv, accumulation=4, micro=2)
    big, _, _ = run(batch, adv, accumulation=1, micro=8)
    assert torch.allclose(small, big, atol=1e-6)


def test_micro_batch_indices_cover_every_sample_once():
    parts = micro_batch_indices(10, 4, shuffle=True, generator=torch.Generator().manual_seed(3))
    assert sorted(torch.cat(parts).tolist()) == list(range(10))
    assert [len(p) for p in parts] == [4, 4, 2]
