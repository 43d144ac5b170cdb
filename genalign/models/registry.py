"""Model families by `model.family` name: each entry is the `SPEC` (a `FamilySpec`,
models/spec.py) that the family's folder `models/<family>/` exports, one line per family; a
dotted "package.module:SPEC" path is a user's family, accepted only when listed in
model.allow_import."""

from genalign.config.registry import Registry

MODEL_FAMILIES = Registry("model family", "model.family", dotted_key="model.allow_import")
MODEL_FAMILIES.register("sd3", "genalign.models.sd3:SPEC")
MODEL_FAMILIES.register("toy", "genalign.models.toy:SPEC")
MODEL_FAMILIES.register("flux", "genalign.models.flux:SPEC")
MODEL_FAMILIES.register("qwen_image", "genalign.models.qwen_image:SPEC")
MODEL_FAMILIES.register("wan", "genalign.models.wan:SPEC")
MODEL_FAMILIES.register("cosmos", "genalign.models.cosmos:SPEC")
MODEL_FAMILIES.register("janus", "genalign.models.janus:SPEC")
MODEL_FAMILIES.register("flux_kontext", "genalign.models.flux_kontext:SPEC")
MODEL_FAMILIES.register("flux2_klein", "genalign.models.flux2_klein:SPEC")
MODEL_FAMILIES.register("wan_i2v", "genalign.models.wan_i2v:SPEC")
MODEL_FAMILIES.register("hunyuan_video15", "genalign.models.hunyuan_video15:SPEC")
MODEL_FAMILIES.register("hunyuan_video15_i2v", "genalign.models.hunyuan_video15_i2v:SPEC")
MODEL_FAMILIES.register("z_image", "genalign.models.z_image:SPEC")
MODEL_FAMILIES.register("qwen_image_edit", "genalign.models.qwen_image_edit:SPEC")
MODEL_FAMILIES.register("qwen_image_edit_plus", "genalign.models.qwen_image_edit_plus:SPEC")
MODEL_FAMILIES.register("nextstep", "genalign.models.nextstep:SPEC")
MODEL_FAMILIES.register("flux2", "genalign.models.flux2:SPEC")
