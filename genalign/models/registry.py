"""Model families by `model.family` name."""

from genalign.config.registry import Registry

MODEL_FAMILIES = Registry("model family", "model.family")
MODEL_FAMILIES.register("sd3", "genalign.models.sd3:SD3Policy")
MODEL_FAMILIES.register("toy", "genalign.models.toy.policy:ToyPolicy")
MODEL_FAMILIES.register("flux", "genalign.models.flux:FluxPolicy")
MODEL_FAMILIES.register("qwen_image", "genalign.models.qwen_image:QwenImagePolicy")
MODEL_FAMILIES.register("wan", "genalign.models.wan:WanPolicy")
MODEL_FAMILIES.register("cosmos", "genalign.models.cosmos:CosmosPolicy")
MODEL_FAMILIES.register("janus", "genalign.models.janus:JanusPolicy")
