import torch

from genalign.training.ema import EMA


def test_ema_updates_every_n_steps_with_decay():
    param = torch.nn.Parameter(torch.tensor([1.0]))
    ema = EMA({"w": param}, decay=0.9, update_every=2)
    with torch.no_grad():
        param.fill_(3.0)
    ema.on_optimizer_step()
    assert ema.shadow["w"].item() == 1.0  # not yet: every 2nd step
    ema.on_optimizer_step()
    assert abs(ema.shadow["w"].item() - (0.9 * 1.0 + 0.1 * 3.0)) < 1e-7


def test_applied_swaps_in_and_restores():
    param = torch.nn.Parameter(torch.tensor([5.0]))
    ema = EMA({"w": param}, decay=0.5, update_every=1)
    with torch.no_grad():
        param.fill_(7.0)
    with ema.applied():
        assert param.item() == 5.0
    assert param.item() == 7.0
