"""The GPU suite's tables, from its JSON: `$OUT/gpu_suite.md` and docs/benchmarks.md's section.

    python benchmarks/gpu_suite_report.py gpu_suite.json                        # print the tables
    python benchmarks/gpu_suite_report.py gpu_suite.json --docs docs/benchmarks.md
    python benchmarks/gpu_suite_report.py first.json rerun.json --docs docs/benchmarks.md

Several JSONs of one card (a full run, then `--only KEY ...` reruns of what failed or was left
out) make one report: each item is taken from the last run that ran it (a skip does not replace
a result), each ratio from the last run that measured both sides in one process, and each row
says which run it came from.

`--docs` replaces what stands between the `<!-- gpu-suite:begin -->` and `<!-- gpu-suite:end -->`
lines of the page with the tables of that run, headed by the card's name, so the docs' GPU
figures are always one run's, generated, never typed. `benchmarks/gpu_suite.py` writes the
JSON and calls `write_outputs` after every item.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BEGIN, END = "<!-- gpu-suite:begin -->", "<!-- gpu-suite:end -->"
SECTIONS = {
    1: "Every family at its real shapes (random weights, eager, 2 training steps)",
    2: "SD3.5 Medium against Flow-GRPO's own loop, same settings",
    3: "Rollout profile and levers (SD3.5 Medium, the comparison's settings)",
}


def _number(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def _status(item: dict) -> str:
    status = item.get("status", "?")
    status = status if not item.get("reason") else f"{status}: {item['reason']}"
    return status if "run" not in item else f"{status} (run {item['run']})"


def _settings(item: dict) -> str:
    s = item.get("settings") or {}
    if not s:
        return "-"
    if "train_mode" not in s:  # the reference's Settings
        return (
            f"{s['resolution']}², {s['num_steps']} steps, CFG {s['guidance_scale']}, {s['prompts']}x{s['group']} images"
        )
    steps = "image tokens" if s["denoising_steps"] is None else f"{s['denoising_steps']} steps"
    return (
        f"{s['size']}, {s['dtype']}, {s['train_mode']}, {steps} ({s['trained_steps']} trained), CFG {s['cfg']}, "
        f"{s['prompts']}x{s['group']} (chunk {s['chunk']}, micro {s['micro_batch']})"
    )


def render(report: dict) -> str:
    """The markdown tables of one suite run (the card named in the heading)."""
    card, versions = report["card"], report.get("versions", {})
    memory = f", {card['memory_gib']:.0f} GiB" if card.get("memory_gib") else ""
    prepared = report.get("prepared") or {}
    lines = [
        f"#### GPU suite on {card['name']}{memory}",
        "",
        f"Mode {report['mode']}; {', '.join(f'{k} {v}' for k, v in versions.items())}; genalign "
        f"{prepared.get('genalign_commit', 'unknown')}; "
        f"Flow-GRPO {prepared.get('flow_grpo_commit') or 'not prepared'}; "
        f"budget {report['budget_s']:.0f} s, ran {report['elapsed_s']:.0f} s.",
        "",
    ]
    if report.get("runs"):
        lines += [
            "Runs: "
            + "; ".join(
                f"{n} ({', '.join(run['only']) or 'nothing'}; {run['elapsed_s']:.0f} s)"
                for n, run in enumerate(report["runs"], 1)
            )
            + ".",
            "",
        ]
    items = report["items"]
    for section, title in SECTIONS.items():
        rows = [i for i in items if i["section"] == section]
        if not rows:
            continue
        lines += [f"**{section}. {title}**", ""]
        if section == 1:
            lines += [
                "| item | status | settings | images/s | peak GiB | plan GiB | peak / plan | parity | finite "
                "| shrunk |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for i in rows:
                lines.append(
                    f"| {i['title']} | {_status(i)} | {_settings(i)} | {_number(i.get('images_per_s'))} | "
                    f"{_number(i.get('peak_gib'))} | {_number(i.get('plan_gib'))} | "
                    f"{_number(i.get('peak_over_plan'), 2)} | {_number(i.get('parity'))} | "
                    f"{_number(i.get('finite'))} | {'; '.join(i.get('shrunk') or []) or '-'} |"
                )
        else:
            lines += ["| item | status | settings | images/s | peak GiB | vs Flow-GRPO |", "|---|---|---|---|---|---|"]
            ratios = report.get("ratios", {})
            for i in rows:
                ratio = ratios.get(f"{i['title']} / Flow-GRPO")
                lines.append(
                    f"| {i['title']} | {_status(i)} | {_settings(i)} | {_number(i.get('images_per_s'))} | "
                    f"{_number(i.get('peak_gib'))} | {'-' if ratio is None else f'{ratio:.2f}x'} |"
                )
            profiles = [i for i in rows if i.get("profile")]
            for i in profiles:
                p = i["profile"]
                lines += [
                    "",
                    "| rollout seconds per step | total | transformer | VAE decode | text encoders | other |",
                    "|---|---|---|---|---|---|",
                    f"| {i['title']} | {p['rollout_s']:.3g} | {p['transformer_s']:.3g} | {p['vae_decode_s']:.3g} | "
                    f"{p['text_encoders_s']:.3g} | {p['other_s']:.3g} |",
                ]
        lines.append("")
    return "\n".join(lines)


def merge(reports: list[dict]) -> dict:
    """One report from several runs of the suite on one card (see the module's docstring)."""
    cards = {report["card"]["name"] for report in reports}
    if len(cards) != 1:
        raise ValueError(f"the runs are of different cards ({', '.join(sorted(cards))}): their figures do not mix")
    if len(reports) == 1:
        return reports[0]
    items: dict[str, dict] = {}
    ratios: dict[str, float] = {}
    for number, report in enumerate(reports, 1):
        for item in report["items"]:
            if item["key"] not in items or item["status"] != "skipped":
                items[item["key"]] = {**item, "run": number}
        ratios.update(report.get("ratios", {}))
    order = list(dict.fromkeys(item["key"] for report in reports for item in report["items"]))
    return {
        **reports[-1],
        "items": [items[key] for key in order],
        "ratios": ratios,
        "budget_s": sum(report["budget_s"] for report in reports),
        "elapsed_s": sum(report["elapsed_s"] for report in reports),
        "runs": [
            {
                "genalign_commit": (report.get("prepared") or {}).get("genalign_commit"),
                "elapsed_s": report["elapsed_s"],
                "only": [item["key"] for item in report["items"] if item["status"] != "skipped"],
            }
            for report in reports
        ],
    }


def write_outputs(out: Path, report: dict) -> None:
    """`gpu_suite.json` and `gpu_suite.md` under `out` (rewritten whole each time)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_suite.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu_suite.md").write_text(render(report))


def update_docs(page: Path, report: dict) -> None:
    """Replace the page's generated section with `report`'s tables."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{page}: no {BEGIN} ... {END} section to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{BEGIN}\n{render(report)}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "json", type=Path, nargs="+", help="gpu_suite.json of a run (several: one card's runs, in order)"
    )
    parser.add_argument("--docs", type=Path, help="a page with the generated section to replace (docs/benchmarks.md)")
    args = parser.parse_args(argv)
    report = merge([json.loads(path.read_text()) for path in args.json])
    if args.docs:
        update_docs(args.docs, report)
        print(f"updated {args.docs} from {', '.join(map(str, args.json))} ({report['card']['name']})")
    else:
        print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
