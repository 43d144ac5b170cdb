"""`place_policy` moves every module a policy holds, except text encoders parked on the CPU.

The target here is the `meta` device: the move is real (each weight's device changes) without
a GPU; the modules are throwaway, so losing their values to `meta` does not matter."""

import torch

from genalign.models.base import encoding_prompts
from genalign.rollout.ray_engine import place_policy


class Pipeline:
    def __init__(self):
        self.text_encoder = torch.nn.Linear(2, 2)
        self.vae = torch.nn.Linear(2, 2)

    @property
    def components(self):
        return {"text_encoder": self.text_encoder, "vae": self.vae, "scheduler": object()}


class Policy:
    def __init__(self, offload: bool):
        self.pipeline = Pipeline()
        self.transformer = torch.nn.Linear(2, 2)
        self.device = torch.device("meta")
        if offload:
            self.offloaded_text_encoders = (self.pipeline.text_encoder,)


def test_every_module_moves_to_the_device_and_back():
    policy = Policy(offload=False)
    assert place_policy(policy, torch.device("meta")) == ("text_encoder", "transformer", "vae")
    for module in (policy.transformer, policy.pipeline.text_encoder, policy.pipeline.vae):
        assert module.weight.device.type == "meta"


def test_parked_text_encoders_stay_on_the_cpu_until_prompts_are_encoded():
    policy = Policy(offload=True)
    assert place_policy(policy, torch.device("meta")) == ("transformer", "vae")
    encoder = policy.pipeline.text_encoder
    assert encoder.weight.device.type == "cpu"
    moves, seen = [], []

    def to(device):  # a meta tensor cannot be copied back: allocate empty CPU storage instead
        moves.append(str(device))
        return torch.nn.Module.to(encoder, device) if str(device) == "meta" else encoder.to_empty(device=device)

    encoder.to = to
    with encoding_prompts(policy):
        seen.append(encoder.weight.device.type)
    assert seen == ["meta"] and moves == ["meta", "cpu"]  # on the policy's device only while encoding
    assert encoder.weight.device.type == "cpu"
