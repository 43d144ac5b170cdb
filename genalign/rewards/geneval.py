"""GenEval reward: object presence, counting, colour and relative position, checked by a detector.

Where it fits: a model-backed reward scored by the reward runtime on decoded uint8 images; it
reads each sample's GenEval metadata (`tag`, `include`, `exclude`), which a `.jsonl` prompt
manifest carries beside the prompt (`data.manifest`; `genalign/datasets/geneval/`).

What it does, as GenEval (djghosh13/geneval `evaluation/evaluate_images.py`, commit af4902f)
and Flow-GRPO's GenEval reward server (yifan123/reward-server `reward_server/gen_eval.py`,
commit 92ac29f) score:
1. Detect instances with Mask2Former (Swin-S, COCO instance segmentation: the detector GenEval
   runs, here through transformers' `Mask2FormerForUniversalSegmentation` instead of mmdet, so
   no second deep-learning framework is needed and the checkpoint loads by hub id or local
   directory like every other reward). Instance score = class probability x mean mask
   probability inside the mask, boxes from the masks (mmdet's Mask2Former post-processing).
2. Keep, per class, detections above `threshold` (0.3; `counting_threshold` 0.9 for counting
   prompts), most confident first, at most `max_objects` (16), optional NMS (`nms_threshold`
   1.0: off).
3. Colour: each object is pasted on a grey (#999) background through its mask, cropped to its
   box and classified zero-shot by CLIP ViT-L/14 among GenEval's ten colours with its three
   templates ("a photo of a {c} {object}", "a photo of a {c}-colored {object}", "a photo of a
   {c} object"; template embeddings averaged).
4. Position: A is "left of" B when the centre offset, shrunk by `position_threshold` (0.1) x
   the summed box sizes per axis, points mostly left (|dx| / |offset| > 0.5), likewise right,
   above, below.

Which number is the score (`score`):
- "reward" (default, Flow-GRPO's training reward): partial credit, the mean over clauses of
  1 - |expected - found| / expected for counts and colours, 0/1 for position. Reproduced as
  the reference computes it, including that a failed position clause also appends a 1.0
  (a failed position prompt scores 0.75, not 0.67).
- "strict": 1 when every include clause matches exactly (count ==, every object the colour,
  position holds), else 0 (Flow-GRPO's strict accuracy).
- "accuracy": GenEval's benchmark correctness: at least `count` objects (the most confident
  `count` checked for colour and position) and no `exclude` clause hit. `geneval_accuracy`
  is this reward with score fixed, for `eval.gold_rewards`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from genalign.rewards.clip_encoder import ClipEncoder
from genalign.rewards.image_transform import ImageTransform
from genalign.rewards.options import parse_options
from genalign.rewards.pretrained import load_pretrained, read_json_file, resolve_dtype

COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
POSITIONS = ("left of", "right of", "above", "below")
COLOR_TEMPLATES = ("a photo of a {c} {object}", "a photo of a {c}-colored {object}", "a photo of a {c} object")
SCORES = ("reward", "strict", "accuracy")


@dataclass
class GenEvalOptions:
    detector_name: str = "facebook/mask2former-swin-small-coco-instance"
    """Hub id or local directory of a transformers `Mask2FormerForUniversalSegmentation` (COCO
    instance segmentation) with its preprocessor_config.json; class names come from its id2label."""
    clip_name: str = "openai/clip-vit-large-patch14"
    """Hub id or local directory of the `CLIPModel` (with tokenizer and preprocessor) that names colours."""
    score: str = "reward"
    """"reward" (Flow-GRPO's partial credit), "strict" or "accuracy" (GenEval's 0/1); see the module doc."""
    threshold: float = 0.3
    """Detection confidence kept for every tag but counting."""
    counting_threshold: float = 0.9
    """Detection confidence kept for counting prompts."""
    max_objects: int = 16
    """Detections kept per class, most confident first."""
    nms_threshold: float = 1.0
    """Drop a detection whose box IoU with a kept one of its class reaches this; 1.0 keeps all."""
    position_threshold: float = 0.1
    """Fraction of the summed box sizes removed from the centre offset before judging a relation."""
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"reward.kwargs.geneval.score={self.score!r}: choose one of {', '.join(SCORES)}")


@dataclass
class Detection:
    box: tuple[float, float, float, float]
    """x0, y0, x1, y1 in pixels (x1, y1 exclusive, as mmdet's mask2bbox)."""
    score: float
    mask: torch.Tensor
    """bool [H, W]."""


ColorsOf = Callable[[str, list[Detection]], list[str]]
"""(class name, detections) -> the colour name of each detection."""


# ------------------------------------------------------------------ detector post-processing

def mask2former_instances(class_logits: torch.Tensor, mask_logits: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One image: class logits [Q, C+1] (last: no object), mask logits [Q, H, W] at image size
    -> labels [Q], scores [Q], masks bool [Q, H, W]: the top Q (query, class) pairs by class
    probability, each scored class prob x mean sigmoid inside its mask (mmdet/transformers)."""
    num_queries, num_classes = class_logits.shape[0], class_logits.shape[1] - 1
    probs = class_logits.float().softmax(-1)[:, :-1]  # [Q, C]
    top, index = probs.flatten().topk(num_queries, sorted=False)  # [Q]
    labels = index % num_classes  # [Q]
    chosen = mask_logits[index // num_classes].float()  # [Q, H, W]
    masks = chosen > 0  # [Q, H, W]
    inside = masks.flatten(1).float()  # [Q, H*W]
    mask_scores = (chosen.sigmoid().flatten(1) * inside).sum(1) / (inside.sum(1) + 1e-6)  # [Q]
    return labels, top * mask_scores, masks


def mask_boxes(masks: torch.Tensor) -> torch.Tensor:
    """bool [Q, H, W] -> [Q, 4] x0, y0, x1 + 1, y1 + 1 of each mask's pixels (zeros when empty)."""
    boxes = torch.zeros(masks.shape[0], 4)
    for q, mask in enumerate(masks):
        ys, xs = mask.nonzero(as_tuple=True)
        if len(xs):
            boxes[q] = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)
    return boxes


def detector_input_size(height: int, width: int, shortest: int, longest: int | None) -> tuple[int, int]:
    """The short side to `shortest`, unless that makes the long side exceed `longest` (as the
    Mask2Former image processor and mmdet's keep-ratio resize compute it)."""
    short, long = min(height, width), max(height, width)
    if longest is not None and long / short * shortest > longest:
        shortest = int(round(longest * short / long))
    if short == shortest:
        return height, width
    if width < height:
        return int(shortest * height / width), shortest
    return shortest, int(shortest * width / height)


def box_iou(a, b) -> float:
    """IoU with GenEval's inclusive-pixel areas ((x1 - x0 + 1) * (y1 - y0 + 1))."""
    def area(box):
        return max(box[2] - box[0] + 1, 0) * max(box[3] - box[1] + 1, 0)

    inter = area([max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])])
    union = area(a) + area(b) - inter
    return inter / union if union else 0.0


def select_detections(candidates: list[Detection], threshold: float, max_objects: int,
                      nms_threshold: float) -> list[Detection]:
    """One class's detections: above threshold, most confident first, at most max_objects, NMS."""
    ordered = sorted((d for d in candidates if d.score > threshold), key=lambda d: -d.score)[:max_objects]
    kept: list[Detection] = []
    while ordered:
        best = ordered.pop(0)
        kept.append(best)
        if nms_threshold < 1:
            ordered = [d for d in ordered if box_iou(best.box, d.box) < nms_threshold]
    return kept


# ------------------------------------------------------------------ GenEval's rules

def relative_position(box_a, box_b, threshold: float) -> set[str]:
    """Relations of box A to box B ("left of", "right of", "above", "below"; y grows downwards)."""
    center_a = ((box_a[0] + box_a[2]) / 2, (box_a[1] + box_a[3]) / 2)
    center_b = ((box_b[0] + box_b[2]) / 2, (box_b[1] + box_b[3]) / 2)
    dims = [abs(box_a[2] - box_a[0]) + abs(box_b[2] - box_b[0]), abs(box_a[3] - box_a[1]) + abs(box_b[3] - box_b[1])]
    offset = [center_a[0] - center_b[0], center_a[1] - center_b[1]]
    revised = [max(abs(o) - threshold * d, 0.0) * math.copysign(1.0, o) if o else 0.0 for o, d in zip(offset, dims)]
    if all(abs(r) < 1e-3 for r in revised):
        return set()
    norm = math.hypot(*offset)
    dx, dy = revised[0] / norm, revised[1] / norm
    relations = set()
    if dx < -0.5:
        relations.add("left of")
    if dx > 0.5:
        relations.add("right of")
    if dy < -0.5:
        relations.add("above")
    if dy > 0.5:
        relations.add("below")
    return relations


def _position_holds(found: list[Detection], targets: list[Detection], relation: str, threshold: float) -> bool:
    return all(relation in relative_position(obj.box, target.box, threshold) for obj in found for target in targets)


def geneval_correct(objects: dict[str, list[Detection]], metadata: dict[str, Any], colors_of: ColorsOf,
                    position_threshold: float) -> bool:
    """GenEval's benchmark correctness: include clauses AND-ed (the `count` most confident
    objects checked for colour and position), any exclude clause hit fails."""
    correct = True
    matched: list[list[Detection] | None] = []
    for clause in metadata.get("include", []):
        found = objects.get(clause["class"], [])[:clause["count"]]
        ok = len(found) >= clause["count"]
        if ok and "color" in clause:
            ok = colors_of(clause["class"], found).count(clause["color"]) >= clause["count"]
        if ok and "position" in clause:
            relation, target = clause["position"]
            ok = matched[target] is not None and _position_holds(found, matched[target], relation, position_threshold)
        correct = correct and ok
        matched.append(found if ok else None)
    for clause in metadata.get("exclude", []):
        if len(objects.get(clause["class"], [])) >= clause["count"]:
            correct = False
    return correct


def flow_grpo_reward(objects: dict[str, list[Detection]], metadata: dict[str, Any], colors_of: ColorsOf,
                     position_threshold: float) -> tuple[bool, float]:
    """Flow-GRPO's (strict correct, partial-credit reward); exclude clauses are not read."""
    strict = True
    parts: list[float] = []
    matched: list[list[Detection] | None] = []
    for clause in metadata.get("include", []):
        count = clause["count"]
        found = objects.get(clause["class"], [])
        parts.append(1 - abs(count - len(found)) / count)
        ok = len(found) == count
        if not ok:
            if "color" in clause or "position" in clause:
                parts.append(0.0)
        else:
            if "color" in clause:
                hits = colors_of(clause["class"], found).count(clause["color"])
                parts.append(1 - abs(count - hits) / count)
                ok = hits == count
            if "position" in clause and ok:
                relation, target = clause["position"]
                if matched[target] is None:
                    ok = False
                    parts.append(0.0)
                else:
                    ok = _position_holds(found, matched[target], relation, position_threshold)
                    if not ok:
                        parts.append(0.0)
                    parts.append(1.0)  # the reference appends 1.0 after its loop whether or not it broke
        strict = strict and ok
        matched.append(found if ok else None)
    return strict, (sum(parts) / len(parts) if parts else 0.0)


def check_metadata(metadata: dict[str, Any], index: int, prompt: str, class_names: set[str]) -> None:
    """A GenEval row (tag, include[, exclude]) naming only detector classes, else ValueError."""
    where = f"geneval: sample {index} (prompt {prompt!r})"
    if metadata.get("tag") not in TAGS or not isinstance(metadata.get("include"), list):
        raise ValueError(f"{where} has no GenEval metadata (a 'tag' in {TAGS} and an 'include' list); score it with "
                         f"a .jsonl manifest whose rows carry them, e.g. datasets/geneval/train.jsonl")
    for clause in metadata["include"] + metadata.get("exclude", []):
        if clause.get("class") not in class_names or not isinstance(clause.get("count"), int) or clause["count"] < 1:
            raise ValueError(f"{where}: clause {clause} needs a detector class and a count >= 1 "
                             f"(the detector knows {len(class_names)} classes)")
        if "color" in clause and clause["color"] not in COLORS:
            raise ValueError(f"{where}: colour {clause['color']!r} is not one of {COLORS}")


# ------------------------------------------------------------------ the scorer

class GenEvalReward:
    name = "geneval"
    fixed_score: str | None = None

    def __init__(self, device: str = "cpu", **kwargs: Any):
        from transformers import Mask2FormerForUniversalSegmentation

        if self.fixed_score is not None and kwargs.get("score", self.fixed_score) != self.fixed_score:
            raise ValueError(f"reward.kwargs.{self.name}.score: this reward always scores {self.fixed_score!r}; "
                             f"use the geneval reward for another score")
        self.options = parse_options(self.name, GenEvalOptions, kwargs)
        opts = self.options
        if self.fixed_score is not None:
            opts.score = self.fixed_score
        self.device = torch.device(device)
        dtype = resolve_dtype(self.name, opts.dtype)
        self.detector = load_pretrained(Mask2FormerForUniversalSegmentation.from_pretrained, opts.detector_name,
                                        reward=self.name, key="detector_name", what="Mask2Former detector",
                                        dtype=dtype).eval().requires_grad_(False).to(self.device)
        self.dtype = dtype
        processor = read_json_file(opts.detector_name, "preprocessor_config.json", reward=self.name,
                                   key="detector_name")
        size = processor.get("size", {"shortest_edge": 800, "longest_edge": 1333})
        self.shortest_edge = size if isinstance(size, int) else int(size["shortest_edge"])
        self.longest_edge = None if isinstance(size, int) else size.get("longest_edge")
        self.mean, self.std = tuple(processor["image_mean"]), tuple(processor["image_std"])
        self.size_divisor = int(processor.get("size_divisor", 32))
        self.class_names = {int(k): v for k, v in self.detector.config.id2label.items()}
        self.clip = ClipEncoder(opts.clip_name, opts.clip_name, device, dtype, reward=self.name)
        self._color_classifiers: dict[str, torch.Tensor] = {}

    # -- detection
    @torch.no_grad()
    def detect(self, images: torch.Tensor) -> list[dict[str, list[Detection]]]:
        """uint8 [B, 3, H, W] -> per image {class name: every detection, any score}."""
        height, width = images.shape[-2:]
        resize = detector_input_size(height, width, self.shortest_edge, self.longest_edge)
        transform = ImageTransform(None, resize, None, self.mean, self.std, mode="bilinear")
        pixels = transform(images.to(self.device))  # [B, 3, h, w]
        resized = pixels.shape[-2:]
        pad = [(-s) % self.size_divisor for s in resized]
        pixels = F.pad(pixels, (0, pad[1], 0, pad[0]))  # bottom/right zeros, as the processor pads
        out = self.detector(pixel_values=pixels.to(self.dtype))
        results = []
        for class_logits, mask_logits in zip(out.class_queries_logits, out.masks_queries_logits):
            logits = F.interpolate(mask_logits[None].float(), size=pixels.shape[-2:], mode="bilinear",
                                   align_corners=False)[..., :resized[0], :resized[1]]  # [1, Q, h, w] unpadded
            logits = F.interpolate(logits, size=(height, width), mode="bilinear", align_corners=False)[0]
            labels, scores, masks = mask2former_instances(class_logits, logits)
            boxes = mask_boxes(masks.cpu())
            found: dict[str, list[Detection]] = {}
            for label, score, mask, box in zip(labels.tolist(), scores.tolist(), masks.cpu(), boxes.tolist()):
                if mask.any():
                    found.setdefault(self.class_names[label], []).append(Detection(tuple(box), score, mask))
            results.append(found)
        return results

    # -- colour
    def _color_classifier(self, class_name: str) -> torch.Tensor:
        """[D, 10]: per colour the mean of its normalised template embeddings, renormalised."""
        if class_name not in self._color_classifiers:
            columns = []
            for color in COLORS:
                texts = [t.format(c=color, object=class_name) for t in COLOR_TEMPLATES]
                columns.append(F.normalize(self.clip.text_embeds(texts).mean(0), dim=-1))
            self._color_classifiers[class_name] = torch.stack(columns, dim=1)
        return self._color_classifiers[class_name]

    @torch.no_grad()
    def colors_of(self, image: torch.Tensor, class_name: str, detections: list[Detection]) -> list[str]:
        """Each object on grey through its mask, cropped to its box, named by zero-shot CLIP."""
        embeds = []
        for det in detections:
            masked = torch.where(det.mask.to(image.device), image, torch.full_like(image, 153))  # [3, H, W]
            x0, y0, x1, y1 = (int(round(v)) for v in det.box)
            embeds.append(self.clip.image_embeds(masked[None, :, y0:y1, x0:x1]))  # [1, D]
        logits = torch.cat(embeds) @ self._color_classifier(class_name)  # [N, 10]
        return [COLORS[i] for i in logits.argmax(1).tolist()]

    # -- contract
    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        opts = self.options
        names = set(self.class_names.values())
        for index, (row, prompt) in enumerate(zip(metadata, prompts)):
            check_metadata(row, index, prompt, names)
        scores = []
        for image, raw, row in zip(images, self.detect(images), metadata):
            threshold = opts.counting_threshold if row["tag"] == "counting" else opts.threshold
            objects = {name: kept for name, found in raw.items()
                       if (kept := select_detections(found, threshold, opts.max_objects, opts.nms_threshold))}
            colors_of = lambda name, dets, image=image: self.colors_of(image, name, dets)  # noqa: E731
            if opts.score == "accuracy":
                scores.append(float(geneval_correct(objects, row, colors_of, opts.position_threshold)))
            else:
                strict, partial = flow_grpo_reward(objects, row, colors_of, opts.position_threshold)
                scores.append(float(strict) if opts.score == "strict" else partial)
        return torch.tensor(scores, dtype=torch.float32)

    def offload(self) -> None:
        self.detector.to("cpu")
        self.clip.offload()

    def onload(self) -> None:
        self.detector.to(self.device)
        self.clip.onload()


class GenEvalAccuracyReward(GenEvalReward):
    """GenEval's benchmark 0/1 correctness (score fixed to "accuracy"), e.g. for eval.gold_rewards."""
    name = "geneval_accuracy"
    fixed_score = "accuracy"
