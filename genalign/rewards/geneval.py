"""GenEval reward: object presence, counting, colour and relative position, checked by a detector.

Where it fits: a model-backed reward scored by the reward runtime on decoded uint8 images; it
reads each sample's GenEval metadata (`tag`, `include`, `exclude`), which a `.jsonl` prompt
manifest carries beside the prompt (`data.manifest`; `genalign/datasets/geneval/`).

What it does, as GenEval (djghosh13/geneval `evaluation/evaluate_images.py`, commit af4902f)
and Flow-GRPO's GenEval reward server (yifan123/reward-server `reward_server/gen_eval.py`,
commit 92ac29f) score:
0. Flow-GRPO's client JPEG-encodes every image (Pillow's default quality, 75) before its reward
   server scores it (yifan123/flow_grpo `flow_grpo/rewards.py` `geneval_score`, commit 94e23ee);
   `jpeg_quality` (75) does the same round trip, None scores the raw pixels.
0b. Flow-GRPO's reward server hands mmdet's `inference_detector` RGB arrays; mmdet takes an
   array for OpenCV's BGR and its test pipeline (`Normalize(to_rgb=True)`) swaps the channels, so
   the detector sees the image with red and blue exchanged. GenEval itself passes PNG file paths,
   which mmdet reads as BGR and swaps to RGB: its detector sees the true colours.
   `detector_channels` chooses: "flow_grpo_swap" (default, the training reward as Flow-GRPO
   computes it) hands the detector the swapped image, "rgb" the true one (GenEval's benchmark,
   which `genalign eval --benchmark geneval` sets). The colour classifier sees the true colours
   in both (both codes crop the PIL image for CLIP).
1. Detect instances with Mask2Former (Swin-S, COCO instance segmentation: the detector GenEval
   runs, here through transformers' `Mask2FormerForUniversalSegmentation` instead of mmdet, so
   no second deep-learning framework is needed and the checkpoint loads by hub id or local
   directory like every other reward). The input is prepared as GenEval's mmdet test pipeline
   prepares it (mask2former_r50_lsj_8x2_50e_coco, which its Swin-S config inherits): resized
   keeping the ratio into 1333 x 800 (mmcv's `rescale_size`, OpenCV's bilinear on uint8),
   padded bottom/right to a multiple of 32 with pixel level 128, then normalised with the
   checkpoint's mean/std (the pipeline pads before it normalises). Instance
   score = class probability x mean mask probability inside the mask over the 100 best
   (query, class) pairs, boxes from the masks (mmdet's Mask2Former post-processing).
   Detections are named by GenEval's class names (`genalign/assets/geneval/object_names.txt`,
   GenEval's `object_names.txt`, which it indexes by the detector's class index): the COCO
   label set of the checkpoint's `id2label` says "mouse", "remote" and "keyboard" where GenEval
   says "computer mouse", "tv remote" and "computer keyboard" (`DETECTOR_SYNONYMS`); a GenEval
   class the checkpoint has no label for is an error when the reward is built.
2. Keep, per class, detections above `threshold` (0.3; `counting_threshold` 0.9 for counting
   prompts), most confident first, at most `max_objects` (16), optional NMS (`nms_threshold`
   1.0: off).
3. Colour: each object is pasted on a grey (#999) background through its mask, cropped to its
   box and classified zero-shot by CLIP ViT-L/14 among GenEval's ten colours with its three
   templates ("a photo of a {c} {object}", "a photo of a {c}-colored {object}", "a photo of a
   {c} object"; template embeddings averaged), the crop preprocessed as open_clip's `openai`
   transform does (torchvision's bicubic `Resize` and `CenterCrop` on the PIL crop).
4. Position: A is "left of" B when the centre offset, shrunk by `position_threshold` (0.1) x
   the summed box sizes per axis, points mostly left (|dx| / |offset| > 0.5), likewise right,
   above, below.

Which number is the score (`score`):
- "reward" (default, Flow-GRPO's training reward): partial credit, the mean over clauses of
  1 - |expected - found| / expected for counts and colours, 0/1 for position. Reproduced as
  the reference computes it, including that a failed position clause also appends a 1.0
  (a failed position prompt scores 0.75, not 0.67) and that a count term goes below 0 when
  more than twice the expected objects are found.
- "strict": 1 when every include clause matches exactly (count ==, every object the colour,
  position holds), else 0 (Flow-GRPO's strict accuracy).
- "accuracy": GenEval's benchmark correctness: at least `count` objects (the most confident
  `count` checked for colour and position) and no `exclude` clause hit. `geneval_accuracy`
  is this reward with score fixed, for `eval.gold_rewards`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, get_args

import torch
import torch.nn.functional as F

from genalign.models.config import ComputeDtype
from genalign.rewards.clip_encoder import ClipEncoder
from genalign.rewards.image_transform import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform
from genalign.rewards.jpeg import PIL_DEFAULT_JPEG_QUALITY, jpeg_round_trip
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options
from genalign.rewards.pretrained import load_pretrained, read_json_file, resolve_dtype

COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
POSITIONS = ("left of", "right of", "above", "below")
COLOR_TEMPLATES = ("a photo of a {c} {object}", "a photo of a {c}-colored {object}", "a photo of a {c} object")
GenEvalScore = Literal["reward", "strict", "accuracy"]
SCORES = get_args(GenEvalScore)
DetectorChannels = Literal["flow_grpo_swap", "rgb"]
DETECTOR_CHANNELS = get_args(DetectorChannels)
OBJECT_NAMES_FILE = Path(__file__).resolve().parents[1] / "assets" / "geneval" / "object_names.txt"
"""GenEval's 80 class names, in the detector's class order (djghosh13/geneval
`evaluation/object_names.txt`, commit af4902f; the same file as reward-server's)."""
DETECTOR_SYNONYMS = {"computer mouse": "mouse", "tv remote": "remote", "computer keyboard": "keyboard"}
"""GenEval class name -> the detector's COCO label, where the two differ. GenEval reads the
detector's class i as line i of its object_names.txt; the COCO label set of the Mask2Former
checkpoints (mmdetection's `CocoDataset.CLASSES`, which transformers' converter turned into
their id2label; also Detectron2's) names these three classes differently."""
MMDET_TEST_SCALE = (1333, 800)
"""GenEval's mmdet test pipeline: `Resize(img_scale=(1333, 800), keep_ratio=True)`."""
SIZE_DIVISOR = 32
PAD_LEVEL = 128
"""... `Pad(size_divisor=32, pad_val=dict(img=(128, 128, 128)))`, before `Normalize`: the padding
is mid-grey in pixel levels, (128 - mean) / std once normalised (mmdet 2.28.2's
mask2former_r50_lsj_8x2_50e_coco.py; tests/fixtures/pypi/mmdet-2.28.2)."""
MAX_PER_IMAGE = 100
"""mmdet's Mask2Former `test_cfg.max_per_image`: instances kept per image before thresholds."""


@lru_cache(maxsize=1)
def geneval_classes() -> tuple[str, ...]:
    """GenEval's 80 class names, in the detector's class order."""
    return tuple(OBJECT_NAMES_FILE.read_text().splitlines())


def detector_names(id2label: dict[int, str], where: str) -> dict[str, str]:
    """Detector label -> GenEval class name, for every GenEval class; a class whose label (its
    `DETECTOR_SYNONYMS` entry or its own name) the detector does not have is a ValueError."""
    labels = set(id2label.values())
    missing = [name for name in geneval_classes() if DETECTOR_SYNONYMS.get(name, name) not in labels]
    if missing:
        raise ValueError(
            f"{where}: the detector's id2label has no label for the GenEval class(es) "
            f"{missing} (looked up as {[DETECTOR_SYNONYMS.get(n, n) for n in missing]}); GenEval needs "
            f"a COCO instance-segmentation detector (genalign/rewards/geneval.py DETECTOR_SYNONYMS)"
        )
    return {DETECTOR_SYNONYMS.get(name, name): name for name in geneval_classes()}


@dataclass
class GenEvalOptions:
    detector_name: str = "facebook/mask2former-swin-small-coco-instance"
    """Hub id or local directory of a transformers `Mask2FormerForUniversalSegmentation` (COCO
    instance segmentation) with its preprocessor_config.json; class names come from its id2label."""
    clip_name: str = "openai/clip-vit-large-patch14"
    """Hub id or local directory of the `CLIPModel` (with tokenizer and preprocessor) that names colours."""
    score: GenEvalScore = "reward"
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
    jpeg_quality: int | None = PIL_DEFAULT_JPEG_QUALITY
    """Score each image after a JPEG round trip at this Pillow quality, as Flow-GRPO's client sends
    images to its GenEval server (flow_grpo/rewards.py `geneval_score`, commit 94e23ee: Pillow's
    default, 75); null scores the raw pixels (GenEval's own benchmark reads lossless PNG files)."""
    detector_channels: DetectorChannels = "flow_grpo_swap"
    """Channel order the detector sees: "flow_grpo_swap" (Flow-GRPO's reward server hands mmdet
    RGB arrays, which mmdet reads as BGR and swaps: red and blue exchanged) or "rgb" (GenEval's own
    evaluation, which mmdet reads from PNG files: true colours). Colour naming always sees RGB."""
    dtype: ComputeDtype = "float32"

    def __post_init__(self) -> None:
        if self.detector_channels not in DETECTOR_CHANNELS:
            raise ValueError(
                f"reward.kwargs.geneval.detector_channels={self.detector_channels!r}: choose one of "
                f"{', '.join(DETECTOR_CHANNELS)}"
            )
        if self.score not in SCORES:
            raise ValueError(f"reward.kwargs.geneval.score={self.score!r}: choose one of {', '.join(SCORES)}")
        if self.jpeg_quality is not None and not 1 <= self.jpeg_quality <= 100:
            raise ValueError(
                f"reward.kwargs.geneval.jpeg_quality={self.jpeg_quality}: a Pillow JPEG quality "
                f"in [1, 100] (75 is Flow-GRPO's), or null for the raw pixels"
            )

    def manifest_problems(self, examples: Iterable) -> list[str]:
        """Rows of a prompt manifest this reward would score that it cannot (no GenEval metadata,
        a class GenEval does not have, a bad count or colour), each naming its file and line:
        preflight runs this on data.manifest and data.eval_manifest before anything loads."""
        names = set(geneval_classes())
        problems = []
        for index, example in enumerate(examples):
            try:
                check_metadata(example.metadata, index, example.prompt, names)
            except ValueError as exc:
                problems.append(f"{example.source}: {exc}")
        return problems

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): the detector and the CLIPModel."""
        return (
            DeviceModel("detector_name", self.detector_name, self.dtype, "Mask2FormerForUniversalSegmentation"),
            DeviceModel("clip_name", self.clip_name, self.dtype, "CLIPModel"),
        )


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


def mask2former_instances(
    class_logits: torch.Tensor, mask_logits: torch.Tensor, max_per_image: int = MAX_PER_IMAGE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One image: class logits [Q, C+1] (last: no object), mask logits [Q, H, W] at image size
    -> labels [K], scores [K], masks bool [K, H, W]: the top K = max_per_image (query, class)
    pairs by class probability, each scored class prob x mean sigmoid inside its mask (mmdet's
    `MaskFormerFusionHead.instance_postprocess`)."""
    num_classes = class_logits.shape[1] - 1
    probs = class_logits.float().softmax(-1)[:, :-1]  # [Q, C]
    top, index = probs.flatten().topk(min(max_per_image, probs.numel()), sorted=False)  # [K]
    labels = index % num_classes  # [K]
    chosen = mask_logits[index // num_classes].float()  # [K, H, W]
    masks = chosen > 0  # [K, H, W]
    inside = masks.flatten(1).float()  # [K, H*W]
    mask_scores = (chosen.sigmoid().flatten(1) * inside).sum(1) / (inside.sum(1) + 1e-6)  # [K]
    return labels, top * mask_scores, masks


def mask_boxes(masks: torch.Tensor) -> torch.Tensor:
    """bool [Q, H, W] -> [Q, 4] x0, y0, x1 + 1, y1 + 1 of each mask's pixels (zeros when empty)."""
    boxes = torch.zeros(masks.shape[0], 4)
    for q, mask in enumerate(masks):
        ys, xs = mask.nonzero(as_tuple=True)
        if len(xs):
            boxes[q] = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)
    return boxes


def detector_input_size(height: int, width: int, scale: tuple[int, int] = MMDET_TEST_SCALE) -> tuple[int, int]:
    """The resized (height, width) of a keep-ratio resize into `scale`: mmcv's `rescale_size`
    (factor = min(long edge / long side, short edge / short side), each side int(x * f + 0.5))."""
    factor = min(max(scale) / max(height, width), min(scale) / min(height, width))
    return int(height * factor + 0.5), int(width * factor + 0.5)


def detector_input(
    images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
) -> tuple[torch.Tensor, tuple[int, int]]:
    """uint8 [B, 3, H, W] -> (float32 [B, 3, h', w'] padded to multiples of 32, (h, w) before
    padding), as GenEval's mmdet test pipeline: OpenCV's bilinear resize of the uint8 image
    (half-pixel centres, edge pixels repeated, rounded to uint8: torch's non-antialiased bilinear,
    within one level of OpenCV's fixed-point weights), padded bottom/right with PAD_LEVEL,
    normalised."""
    resized = detector_input_size(*images.shape[-2:])
    pixels = images.float()  # [B, 3, H, W] in [0, 255]
    if tuple(pixels.shape[-2:]) != resized:
        pixels = torch.floor(F.interpolate(pixels, size=resized, mode="bilinear", align_corners=False) + 0.5)
    pad = [(-side) % SIZE_DIVISOR for side in resized]
    pixels = F.pad(pixels, (0, pad[1], 0, pad[0]), value=PAD_LEVEL)  # [B, 3, h', w']
    mean_255 = pixels.new_tensor(mean).view(1, 3, 1, 1) * 255
    std_255 = pixels.new_tensor(std).view(1, 3, 1, 1) * 255
    return (pixels - mean_255) / std_255, resized


def box_iou(a, b) -> float:
    """IoU with GenEval's inclusive-pixel areas ((x1 - x0 + 1) * (y1 - y0 + 1))."""

    def area(box):
        return max(box[2] - box[0] + 1, 0) * max(box[3] - box[1] + 1, 0)

    inter = area([max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])])
    union = area(a) + area(b) - inter
    return inter / union if union else 0.0


def select_detections(
    candidates: list[Detection], threshold: float, max_objects: int, nms_threshold: float
) -> list[Detection]:
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


def geneval_correct(
    objects: dict[str, list[Detection]], metadata: dict[str, Any], colors_of: ColorsOf, position_threshold: float
) -> bool:
    """GenEval's benchmark correctness: include clauses AND-ed (the `count` most confident
    objects checked for colour and position), any exclude clause hit fails."""
    correct = True
    matched: list[list[Detection] | None] = []
    for clause in metadata.get("include", []):
        found = objects.get(clause["class"], [])[: clause["count"]]
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


def flow_grpo_reward(
    objects: dict[str, list[Detection]], metadata: dict[str, Any], colors_of: ColorsOf, position_threshold: float
) -> tuple[bool, float]:
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
    """A GenEval row (tag, include[, exclude]) naming only GenEval's classes, else ValueError."""
    where = f"geneval: sample {index} (prompt {prompt!r})"
    if metadata.get("tag") not in TAGS or not isinstance(metadata.get("include"), list):
        raise ValueError(
            f"{where} has no GenEval metadata (a 'tag' in {TAGS} and an 'include' list); score it with "
            f"a .jsonl manifest whose rows carry them, e.g. datasets/geneval/train.jsonl"
        )
    for clause in metadata["include"] + metadata.get("exclude", []):
        if clause.get("class") not in class_names or not isinstance(clause.get("count"), int) or clause["count"] < 1:
            raise ValueError(
                f"{where}: clause {clause} needs one of GenEval's {len(class_names)} classes "
                f"(genalign/assets/geneval/object_names.txt) and a count >= 1"
            )
        if "color" in clause and clause["color"] not in COLORS:
            raise ValueError(f"{where}: colour {clause['color']!r} is not one of {COLORS}")


# ------------------------------------------------------------------ the scorer


class GenEvalReward:
    name = "geneval"
    fixed_score: str | None = None

    def __init__(self, device: str = "cpu", **kwargs: Any):
        from transformers import Mask2FormerForUniversalSegmentation

        if self.fixed_score is not None and kwargs.get("score", self.fixed_score) != self.fixed_score:
            raise ValueError(
                f"reward.kwargs.{self.name}.score: this reward always scores {self.fixed_score!r}; "
                f"use the geneval reward for another score"
            )
        self.options = parse_options(self.name, GenEvalOptions, kwargs)
        opts = self.options
        if self.fixed_score is not None:
            opts.score = self.fixed_score
        self.device = torch.device(device)
        dtype = resolve_dtype(self.name, opts.dtype)
        self.detector = (
            load_pretrained(
                Mask2FormerForUniversalSegmentation.from_pretrained,
                opts.detector_name,
                reward=self.name,
                key="detector_name",
                what="Mask2Former detector",
                dtype=dtype,
            )
            .eval()
            .requires_grad_(False)
            .to(self.device)
        )
        self.dtype = dtype
        processor = read_json_file(
            opts.detector_name, "preprocessor_config.json", reward=self.name, key="detector_name"
        )
        self.mean, self.std = tuple(processor["image_mean"]), tuple(processor["image_std"])
        self.class_names = {int(k): v for k, v in self.detector.config.id2label.items()}
        self.geneval_names = detector_names(
            self.class_names, f"reward.kwargs.{self.name}.detector_name={opts.detector_name!r}"
        )
        self.clip = ClipEncoder(opts.clip_name, opts.clip_name, device, dtype, reward=self.name)
        image_size = self.clip.model.config.vision_config.image_size
        # open_clip's `openai` preprocessing of GenEval's colour crops: torchvision's Resize and
        # CenterCrop on the PIL crop (Pillow's bicubic, the crop offset rounded)
        self.clip.transform = ImageTransform(
            mean=OPENAI_CLIP_MEAN,
            std=OPENAI_CLIP_STD,
            shortest_edge=image_size,
            crop_hw=(image_size, image_size),
            crop_rounding="round",
            mode="bicubic",
            resampler="pil",
        )
        self._color_classifiers: dict[str, torch.Tensor] = {}

    # -- detection
    @torch.no_grad()
    def detect(self, images: torch.Tensor) -> list[dict[str, list[Detection]]]:
        """uint8 [B, 3, H, W] RGB (after the JPEG round trip, when one is made) -> per image {GenEval
        class name: every detection, any score}; the detector sees the channels `detector_channels` says."""
        height, width = images.shape[-2:]
        if self.options.detector_channels == "flow_grpo_swap":  # red and blue exchanged, as mmdet sees an RGB array
            images = images.flip(1)  # [B, 3, H, W]
        pixels, resized = detector_input(images.to(self.device), self.mean, self.std)  # [B, 3, h', w']
        out = self.detector(pixel_values=pixels.to(self.dtype))
        results = []
        for class_logits, mask_logits in zip(out.class_queries_logits, out.masks_queries_logits):
            logits = F.interpolate(
                mask_logits[None].float(), size=pixels.shape[-2:], mode="bilinear", align_corners=False
            )[..., : resized[0], : resized[1]]  # [1, Q, h, w] unpadded
            logits = F.interpolate(logits, size=(height, width), mode="bilinear", align_corners=False)[0]
            labels, scores, masks = mask2former_instances(class_logits, logits)
            boxes = mask_boxes(masks.cpu())
            found: dict[str, list[Detection]] = {}
            for label, score, mask, box in zip(labels.tolist(), scores.tolist(), masks.cpu(), boxes.tolist()):
                name = self.geneval_names.get(self.class_names[label])  # None: a label GenEval has no class for
                if name is not None and mask.any():
                    found.setdefault(name, []).append(Detection(tuple(box), score, mask))
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
        names = set(geneval_classes())
        for index, (row, prompt) in enumerate(zip(metadata, prompts)):
            check_metadata(row, index, prompt, names)
        if opts.jpeg_quality is not None:  # the detector and the colour crops both see the decoded JPEG
            images = jpeg_round_trip(images, opts.jpeg_quality)
        scores = []
        for image, raw, row in zip(images, self.detect(images), metadata):
            threshold = opts.counting_threshold if row["tag"] == "counting" else opts.threshold
            objects = {
                name: kept
                for name, found in raw.items()
                if (kept := select_detections(found, threshold, opts.max_objects, opts.nms_threshold))
            }
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
