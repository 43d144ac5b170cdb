"""The GPU suite: what a lent GPU runs first, in one command, ordered by value.

    python benchmarks/gpu_suite.py [--budget-s 420] [--out $OUT] [--only KEY ...]
    python benchmarks/gpu_suite.py --tiny --out /tmp/suite      # the same suite on the CPU

1. Every model family at its real shapes: each registered family's recipe (random weights at
   the published architecture, `benchmarks/random_weights.py`; the toy family its shipped
   weights), bf16 as the recipes say, eager, 2 training steps: finite, replay parity, images/s,
   peak GPU memory beside the memory plan's estimate. Shrunk only in counts, never in shapes:
   one prompt group a step, and, where the time plan needs it, a smaller group (never below the
   sampling chunk and replay micro-batch, which set the memory) and fewer denoising steps;
   each item says what it shrank. SD3.5 Large beside SD3.5 Medium. An item whose plan (allocator headroom
   and CUDA context included) is over `distributed.resources.gpu_memory_fraction` of the card
   (0.9), the trainer's own check, is skipped, naming the plan: SD3.5 Large and Qwen-Image run on a 141 GB card.
2. SD3.5 Medium against Flow-GRPO's own training loop at the same settings
   (`benchmarks/flow_grpo_reference.py`), the ratio in one run.
3. What remains of the budget: the rollout profile (where a step's rollout seconds go:
   transformer, VAE decode, text encoders, the rest) and the levers (compiled, split CFG).

It prints a time plan first; every item runs in a forked child with what is left of
`--budget-s` as its limit, so a crash, an out-of-memory or the budget ends that item alone,
and the suite stops cleanly with what it has. After every item it rewrites
`gpu_suite.json` and `gpu_suite.md` under `--out` (default $OUT); `gpu_suite_report.py`
turns the JSON into docs/benchmarks.md's tables, naming the card. `--tiny` runs the same
items at the tiny models' shapes in float32 on the CPU (the default test suite does,
tests/integration/test_gpu_suite.py), so the suite cannot rot; its numbers mean nothing.
What the GPU machine lacks is prepared by `benchmarks/prepare_gpu.sh` (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import faulthandler
import json
import math
import multiprocessing
import os
import signal
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # is_available() leaves CUDA to the forked children
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

# A forked child hangs at its first parallel CPU op once this parent has run one (OpenMP's
# thread pool does not survive fork: the child waits on threads it does not have). So the
# parent plans on one thread and each child takes the machine's count back (`child`). The
# first H200 run stopped every item this way, inside its model's construction.
CHILD_THREADS = torch.get_num_threads()
torch.set_num_threads(1)

from benchmarks import flow_grpo_reference as reference  # noqa: E402
from benchmarks.gpu_suite_plan import FINISH_S, GIB, LEVERS, Item, build_items, reuse_runs, select, warm_imports  # noqa: E402
from benchmarks.gpu_suite_report import write_outputs  # noqa: E402
from genalign.preflight.load import load_config  # noqa: E402


# ------------------------------------------------------------------ running one item (a forked child)
def child(item: Item, item_dir: Path, tiny: bool, debug_cuda: bool = False) -> None:
    """Run one item; write `child.json` as it goes (the parent reads it, and metrics.csv, even
    when it had to end the child). `debug_cuda`: autograd's anomaly mode, so an error in a
    backward kernel also prints the forward call that made it (with CUDA_LAUNCH_BLOCKING=1,
    set by the parent, the error is raised by the kernel that made it)."""
    item_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(CHILD_THREADS)
    if debug_cuda:
        torch.autograd.set_detect_anomaly(True, check_nan=False)
    log = open(item_dir / "log.txt", "w", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    # the parent sends SIGUSR1 before it ends a child at the budget: every thread's stack goes to
    # the log, so "stopped at the budget" says where (loading, sampling, a collective, ...)
    faulthandler.register(signal.SIGUSR1, file=log, all_threads=True)
    state: dict = {}

    def note(**values) -> None:
        state.update(values)
        (item_dir / "child.json").write_text(json.dumps(state))

    try:
        if item.kind == "reference":
            settings = reference.Settings(**item.settings)
            note(
                **reference.run_reference(
                    settings, "cpu" if tiny else "cuda", epochs=item.steps, shapes="tiny" if tiny else "real"
                )
            )
        else:
            from genalign.training.trainer import Trainer

            start = time.perf_counter()
            trainer = Trainer(load_config(item.recipe, item.overrides))
            note(load_s=time.perf_counter() - start)
            with rollout_profile(trainer) if item.kind == "profile" else contextlib.nullcontext() as profile:
                train_steps(trainer, item.steps)
            note(profile=profile)
            if torch.cuda.is_available():
                note(peak_gib=torch.cuda.max_memory_allocated() / GIB)
        note(done=True)
    except BaseException as exc:  # noqa: BLE001 - the item's failure is its result, never the suite's
        traceback.print_exc()
        note(error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[:400])
    finally:
        log.flush()
        os._exit(0)


def train_steps(trainer, steps: int) -> None:
    """The trainer's own steps (`Trainer.train_step`: rollout, reward, parity on step 1, update),
    each row logged to metrics.csv as it ends; no evaluation, checkpoint or export (a full
    fine-tune's final checkpoint alone would write its optimizer state to disk: tens of GB)."""
    try:
        trainer.output_dir.mkdir(parents=True, exist_ok=True)
        for step in range(1, steps + 1):
            trainer.metrics.log(step, trainer.train_step(step))
    finally:
        trainer.close()


@contextlib.contextmanager
def rollout_profile(trainer):
    """Seconds per step spent, during the rollout only, in the transformer, the VAE's decoder and
    the text encoders (synchronised forward hooks), and the rollout's total."""
    policy, totals = trainer.policy, {"transformer_s": 0.0, "vae_decode_s": 0.0, "text_encoders_s": 0.0}
    modules = [("transformer_s", policy.transformer)]
    if getattr(policy, "vae", None) is not None and hasattr(policy.vae, "decoder"):
        modules.append(("vae_decode_s", policy.vae.decoder))
    modules += [("text_encoders_s", encoder) for encoder in getattr(policy, "text_encoders", [])]
    in_rollout, started, handles = [False], {}, []

    def sync() -> None:
        if policy.device.type == "cuda":
            torch.cuda.synchronize(policy.device)

    for name, module in modules:

        def before(_module, _args, name=name):
            if in_rollout[0]:
                sync()
                started[name] = time.perf_counter()

        def after(_module, _args, _output, name=name):
            if in_rollout[0] and name in started:
                sync()
                totals[name] += time.perf_counter() - started.pop(name)

        handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    collect = trainer.source.collect
    rollouts: list[float] = []

    def timed_collect(step):
        in_rollout[0] = True
        try:
            data = collect(step)
        finally:
            in_rollout[0] = False
        rollouts.append(data.times["time_rollout_s"])
        return data

    trainer.source.collect = timed_collect
    try:
        yield totals
    finally:
        for handle in handles:
            handle.remove()
        steps = max(len(rollouts), 1)
        for name in list(totals):
            totals[name] /= steps
        totals["rollout_s"] = sum(rollouts) / steps
        totals["other_s"] = (
            totals["rollout_s"] - totals["transformer_s"] - totals["vae_decode_s"] - totals["text_encoders_s"]
        )


# ------------------------------------------------------------------ the parent
def probe_card(tiny: bool) -> dict:
    """The card's name and memory, read in a forked child (the parent never initialises CUDA)."""
    if tiny or not torch.cuda.is_available():
        return {"name": "CPU (tiny shapes, float32: a smoke test, not speed figures)", "memory_gib": None}
    reader, writer = processes().Pipe(duplex=False)
    process = processes().Process(target=read_card, args=(writer,))
    process.start()
    process.join(120)
    return reader.recv() if reader.poll() else {"name": "unknown CUDA device", "memory_gib": None}


def read_card(writer) -> None:
    props = torch.cuda.get_device_properties(0)
    writer.send(
        {"name": props.name, "memory_gib": props.total_memory / GIB, "capability": f"{props.major}.{props.minor}"}
    )


def item_record(item: Item) -> dict:
    """An item as the JSON records it (its overrides, not the whole config they compose)."""
    record = dataclasses.asdict(item)
    record.pop("config")
    return record


def result_of(item: Item, item_dir: Path, elapsed_s: float, killed: bool) -> dict:
    state = json.loads((item_dir / "child.json").read_text()) if (item_dir / "child.json").is_file() else {}
    rows = []
    metrics = item_dir / "run" / "metrics.csv"
    if metrics.is_file():
        with open(metrics, newline="") as handle:
            rows = list(csv.DictReader(handle))
    out = {**item_record(item), "elapsed_s": elapsed_s, **{k: v for k, v in state.items() if k != "done"}}
    if rows:

        def number(row, key):
            return float(row[key]) if row.get(key) not in (None, "") else None

        steps = [
            {
                "step": int(r["step"]),
                "images_per_s": number(r, "step_images_per_s"),
                "rollout_s": number(r, "time_rollout_s"),
                "reward_s": number(r, "time_reward_s"),
                "train_s": number(r, "time_train_s"),
                "loss": number(r, "loss"),
                "peak_gib": number(r, "gpu_peak_allocated_gib"),
            }
            for r in rows
        ]
        losses = [s["loss"] for s in steps if s["loss"] is not None]
        peaks = [s["peak_gib"] for s in steps if s["peak_gib"] is not None]
        out.update(
            steps=steps,
            images_per_s=steps[-1]["images_per_s"],
            parity=number(rows[0], "parity_max_abs_log_prob_diff"),
            # the trainer raises on a non-finite loss or gradient norm (FloatingPointError)
            finite=all(math.isfinite(v) for v in losses)
            and not state.get("error", "").startswith(("FloatingPointError", "NonFiniteError")),
            peak_gib=max(peaks) if peaks else state.get("peak_gib"),
        )
        if out.get("plan_gib") and out.get("peak_gib"):
            out["peak_over_plan"] = out["peak_gib"] / out["plan_gib"]
    if state.get("error"):
        out.update(status="failed", reason=state["error"])
    elif killed:
        out.update(status="stopped", reason=f"stopped at the budget after {len(rows)} of {item.steps} steps")
    elif state.get("done"):
        out["status"] = "ok"
    else:
        out.update(status="failed", reason="the child ended without a result (killed by the system?)")
    return out


def ratios(results: list[dict]) -> dict:
    by_key = {r["key"]: r for r in results if r.get("status") == "ok" and r.get("images_per_s")}
    ref = by_key.get("flow_grpo")
    if not ref:
        return {}
    return {
        f"{by_key[k]['title']} / Flow-GRPO": by_key[k]["images_per_s"] / ref["images_per_s"]
        for k in ("genalign", *(key for key, _, _ in LEVERS))
        if k in by_key
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, float32, on the CPU (the smoke test)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall-clock seconds for the whole suite")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu_suite_out"), help="folder for the JSON and table")
    parser.add_argument(
        "--only", nargs="*", help="run only these item keys, in this order (the time plan lists the keys)"
    )
    parser.add_argument(
        "--debug-cuda",
        action="store_true",
        help="diagnose a CUDA fault: CUDA_LAUNCH_BLOCKING=1 and autograd anomaly mode in every item (slower)",
    )
    args = parser.parse_args(argv)
    if args.debug_cuda:
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # read when a child initialises CUDA
    start, out = time.perf_counter(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "items" if args.tiny else Path(os.environ.get("TMPDIR", "/tmp")) / "gpu_suite_items"
    if not args.tiny and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU, or pass --tiny for the CPU smoke test")
    card = probe_card(args.tiny)
    items = build_items(work, args.tiny, card.get("memory_gib"))
    if args.only:
        try:
            items = select(items, args.only)
        except ValueError as exc:
            parser.error(str(exc))
    reuse_runs(items)
    warm_imports(items)
    if torch.cuda.is_initialized():
        print(
            "warning: CUDA was initialised before the items started; they start as spawned processes "
            "(slower: each imports everything again)",
            flush=True,
        )
    header = {
        "mode": "tiny" if args.tiny else "real",
        "card": card,
        "budget_s": args.budget_s,
        "versions": versions(),
        "prepared": prepared(),
    }
    print(
        f"GPU suite on {card['name']}"
        + (f" ({card['memory_gib']:.0f} GiB)" if card.get("memory_gib") else "")
        + f", budget {args.budget_s:.0f} s; time plan:",
        flush=True,
    )
    planned = 0.0
    for item in items:
        if not item.skip:
            planned += item.estimate_s
        print(
            f"  [{item.section}] {item.key:<20} "
            + (
                f"skip: {item.skip}"
                if item.skip
                else f"the run of {item.same_as}"
                if item.same_as
                else f"~{item.estimate_s:4.0f} s (cumulative {planned:4.0f} s)"
                + (f", plan {item.plan_gib:.1f} GiB" if item.plan_gib else "")
                + (f", shrunk: {'; '.join(item.shrunk)}" if item.shrunk else "")
            ),
            flush=True,
        )
    results: list[dict] = []
    for item in items:
        left = args.budget_s - (time.perf_counter() - start) - FINISH_S
        if item.skip is None and not item.estimate_s <= left:
            item.skip = f"not run: ~{item.estimate_s:.0f} s planned, {max(left, 0):.0f} s of the budget left"
        if item.skip is not None:
            results.append({**item_record(item), "status": "skipped", "reason": item.skip})
        elif item.same_as is not None:
            earlier = next(r for r in results if r["key"] == item.same_as)
            results.append(
                {**earlier, **{k: getattr(item, k) for k in ("key", "section", "title", "same_as")}, "elapsed_s": 0.0}
            )
        else:
            results.append(run_item(item, work / item.key, args.tiny, left, args.debug_cuda))
        line = results[-1]
        print(
            f"[{item.section}] {item.key}: {line['status']}"
            + (f" ({line['reason']})" if line.get("reason") else "")
            + (f", {line['images_per_s']:.3g} images/s" if line.get("images_per_s") else "")
            + (f", peak {line['peak_gib']:.1f} GiB" if line.get("peak_gib") else "")
            + (f", plan {line['plan_gib']:.1f} GiB" if line.get("plan_gib") else ""),
            flush=True,
        )
        write_outputs(
            out, {**header, "elapsed_s": time.perf_counter() - start, "items": results, "ratios": ratios(results)}
        )
    report = {**header, "elapsed_s": time.perf_counter() - start, "items": results, "ratios": ratios(results)}
    write_outputs(out, report)
    for name, value in report["ratios"].items():
        print(f"{name}: {value:.2f}x")
    print(f"wrote {out / 'gpu_suite.json'} and {out / 'gpu_suite.md'} in {report['elapsed_s']:.0f} s", flush=True)
    return 0


def processes():
    """Forked children (they inherit the imports: an item starts in a second), unless this
    process has initialised CUDA, which a forked child cannot use: then spawned ones."""
    return multiprocessing.get_context("spawn" if torch.cuda.is_initialized() else "fork")


def run_item(item: Item, item_dir: Path, tiny: bool, limit_s: float, debug_cuda: bool = False) -> dict:
    context = processes()
    begin = time.perf_counter()
    process = context.Process(target=child, args=(item, item_dir, tiny, debug_cuda))
    process.start()
    process.join(limit_s)
    killed = process.is_alive()
    if killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGUSR1)  # its stacks into its log (faulthandler, in `child`)
            time.sleep(2.0)
        process.kill()
        process.join()
    result = result_of(item, item_dir, time.perf_counter() - begin, killed)
    if result["status"] == "stopped":
        # where it was: the item's own log stays on the GPU machine; its last lines hold the stacks
        lines = (
            (item_dir / "log.txt").read_text(errors="replace").splitlines() if (item_dir / "log.txt").is_file() else []
        )
        result["log_tail"] = lines[-80:]
        print("\n".join(f"    | {line}" for line in result["log_tail"]), flush=True)
    if result["status"] == "failed":
        # the whole last traceback, in the log and the JSON: the item's own log stays on the GPU
        # machine, and an asynchronous CUDA error's last lines name only the call that noticed it
        lines = (
            (item_dir / "log.txt").read_text(errors="replace").splitlines() if (item_dir / "log.txt").is_file() else []
        )
        starts = [n for n, line in enumerate(lines) if line.startswith("Traceback")]
        first = starts[-1] if starts else len(lines) - 12
        # anomaly mode (--debug-cuda) prints the forward call of a failing backward node just before
        anomaly = [n for n, line in enumerate(lines[:first]) if "Error detected in" in line]
        result["traceback"] = lines[max(anomaly[-1] if anomaly else first, 0) :][-200:]
        print("\n".join(f"    | {line}" for line in result["traceback"]), flush=True)
    return result


def versions() -> dict:
    import importlib.metadata

    found = {}
    for name in ("torch", "diffusers", "transformers", "peft", "accelerate"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def prepared() -> dict:
    """What `prepare_gpu.sh` prepared (wheels, commits); genalign's commit from git where the
    repository is one (the GPU machine gets the working tree without .git: the prepared one)."""
    import subprocess

    marker = REPO / ".gpu_prepared.json"
    found = json.loads(marker.read_text()) if marker.is_file() else {}
    found["flow_grpo_commit"] = reference.prepared_commit()
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        found["genalign_commit"] = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    return found


if __name__ == "__main__":
    sys.exit(main())
