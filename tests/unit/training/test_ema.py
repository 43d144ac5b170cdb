import torch

from genalign.training.ema import EMA, ema_decay


def test_flow_grpo_decay_warms_up_to_its_cap():
    assert ema_decay(0, 0.9, warmup=True) == 0.1  # (1 + 0) / (10 + 0)
    assert ema_decay(7, 0.9, warmup=True) == 8 / 17
    assert ema_decay(80, 0.9, warmup=True) == 0.9  # 81/90 = 0.9 exactly: the cap from here on
    assert ema_decay(7, 0.9, warmup=False) == 0.9


def test_optimizer_step_cadence_updates_every_n_steps_with_decay():
    param = torch.nn.Parameter(torch.tensor([1.0]))
    ema = EMA({"w": param}, decay=0.9, update_every=2, warmup=False, cadence="optimizer_step")
    with torch.no_grad():
        param.fill_(3.0)
    ema.on_optimizer_step()
    ema.on_micro_batch()  # ignored on this cadence
    assert ema.shadow["w"].item() == 1.0  # not yet: every 2nd step
    ema.on_optimizer_step()
    assert abs(ema.shadow["w"].item() - (0.9 * 1.0 + 0.1 * 3.0)) < 1e-7


def test_micro_batch_cadence_matches_flow_grpo():
    """Flow-GRPO calls ema.step(params, g) after every micro-batch with the optimizer-step
    count g, updating when (g + 1) % 8 == 0 with decay min((1 + g)/(10 + g), 0.9). With 2
    micro-batches per optimizer step the update at g = 7 runs twice."""
    param = torch.nn.Parameter(torch.tensor([0.0]))
    ema = EMA({"w": param}, decay=0.9, update_every=8)
    expected = 0.0
    for g in range(16):  # optimizer steps 1..16, 2 micro-batches each
        for micro in range(2):
            with torch.no_grad():
                param.fill_(float(g + 1))
            if micro == 1:
                ema.on_optimizer_step()  # the step lands on the second micro-batch
            ema.on_micro_batch()
            count = g + 1 if micro == 1 else g
            if (count + 1) % 8 == 0:
                d = min((1 + count) / (10 + count), 0.9)
                expected = d * expected + (1 - d) * float(g + 1)
    assert abs(ema.shadow["w"].item() - expected) < 1e-5
    # the warm-up forgets the initial weights: after 16 steps almost nothing of w=0 is left
    assert ema.optimizer_steps == 16


def test_applied_swaps_in_and_restores():
    param = torch.nn.Parameter(torch.tensor([5.0]))
    ema = EMA({"w": param}, decay=0.5, update_every=1)
    with torch.no_grad():
        param.fill_(7.0)
    with ema.applied():
        assert param.item() == 5.0
    assert param.item() == 7.0


def test_ema_counts_its_updates_and_the_starting_weights_share():
    """The export says how many updates the EMA holds and how much of the untrained weights is
    left: the product of the decays (constant decay 0.9, 3 updates: 0.729)."""
    from genalign.export.folder import ema_description

    param = torch.nn.Parameter(torch.tensor([0.0]))
    ema = EMA({"w": param}, decay=0.9, update_every=1, warmup=False, cadence="optimizer_step")
    with torch.no_grad():
        param.fill_(1.0)
    for _ in range(3):
        ema.on_optimizer_step()
    assert ema.updates == 3 and abs(ema.initial_share - 0.729) < 1e-12
    assert abs(ema.shadow["w"].item() - (1 - 0.729)) < 1e-6  # the share is exactly what is left of w = 0
    text = ema_description(0.9, ema.updates, ema.initial_share)
    assert "3 updates" in text and "73 %" in text and "barely moved" in text
    assert "barely moved" not in ema_description(0.9, 40, 0.9**40)
    assert "unknown" in ema_description(0.9, -1, float("nan"))


def test_state_dict_carries_the_weights_and_the_counters():
    """A resumed EMA continues where it stopped: its shadow and all three counters come back."""
    param = torch.nn.Parameter(torch.tensor([0.0, 2.0]))
    ema = EMA({"w": param}, decay=0.9, update_every=1, warmup=False, cadence="optimizer_step")
    with torch.no_grad():
        param.fill_(1.0)
    for _ in range(2):
        ema.on_optimizer_step()
    state = ema.state_dict()
    assert (state["optimizer_steps"], state["updates"], state["initial_share"]) == (2, 2, 0.9 * 0.9)
    fresh = EMA(
        {"w": torch.nn.Parameter(torch.zeros(2))}, decay=0.9, update_every=1, warmup=False, cadence="optimizer_step"
    )
    fresh.load_state_dict(state)
    assert torch.equal(fresh.shadow["w"], ema.shadow["w"])
    assert (fresh.optimizer_steps, fresh.updates, fresh.initial_share) == (2, 2, 0.9 * 0.9)
    state["weights"]["w"].fill_(5.0)  # the state is a copy, not the live shadow
    assert not torch.equal(ema.shadow["w"], state["weights"]["w"])


def test_older_checkpoints_counters_are_read_from_their_flat_keys():
    from genalign.training.checkpointing import ema_counters

    counters = {"optimizer_steps": 4, "updates": 4, "initial_share": 0.5}
    assert ema_counters({"ema": counters, "eval_history": {}}) == counters
    flat = {"ema_optimizer_steps": 4, "ema_updates": 4, "ema_initial_share": 0.5}  # before the EMA kept its own
    assert ema_counters(flat) == counters
    oldest = ema_counters({"ema_optimizer_steps": 4})  # before the EMA counted its updates: unknown
    assert (
        oldest["optimizer_steps"] == 4
        and oldest["updates"] == -1
        and oldest["initial_share"] != oldest["initial_share"]
    )
