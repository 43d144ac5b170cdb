import io

import numpy as np
import pytest
import torch
from PIL import Image

from genalign.rewards.jpeg import JpegCompressibility, JpegIncompressibility, jpeg_round_trip


def test_scores_are_pil_quality95_kilobytes_over_500():
    generator = torch.Generator().manual_seed(0)
    noise = torch.randint(0, 256, (1, 3, 32, 32), generator=generator, dtype=torch.uint8)
    flat = torch.full((1, 3, 32, 32), 128, dtype=torch.uint8)
    images = torch.cat([noise, flat])
    expected = []
    for image in images:  # independent encoding
        buffer = io.BytesIO()
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(buffer, "JPEG", quality=95)
        expected.append(len(buffer.getvalue()) / 1000 / 500)
    up = JpegIncompressibility().score(images, ["x", "y"], [{}, {}])
    down = JpegCompressibility().score(images, ["x", "y"], [{}, {}])
    assert up.dtype == torch.float32
    assert up.tolist() == pytest.approx(expected)
    assert down.tolist() == pytest.approx([-value for value in expected])
    assert down[1] > down[0]  # the flat image is more compressible than noise


def test_no_options_accepted():
    with pytest.raises(TypeError, match=r"reward\.kwargs\.jpeg_compressibility\.quality"):
        JpegCompressibility(quality=90)
    assert np.isfinite(
        JpegCompressibility(device="cpu").score(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), ["p"], [{}]).numpy()
    ).all()


def test_round_trip_is_what_flow_grpos_geneval_client_sends():
    """Transcription of Flow-GRPO's `geneval_score` client (flow_grpo/rewards.py, commit 94e23ee):
    `Image.fromarray(image).save(buffer, format="JPEG")` with no quality, decoded by its reward
    server as `Image.open(BytesIO(d), formats=["jpeg"])`; the round trip at quality 75 (Pillow's
    default) gives the same pixels, on a square and a non-square image."""
    generator = torch.Generator().manual_seed(1)
    for height, width in ((64, 64), (48, 80)):
        images = torch.randint(0, 256, (2, 3, height, width), generator=generator, dtype=torch.uint8)
        expected = []
        for image in images:
            buffer = io.BytesIO()
            Image.fromarray(image.permute(1, 2, 0).numpy()).save(buffer, format="JPEG")
            decoded = Image.open(io.BytesIO(buffer.getvalue()), formats=["jpeg"])
            expected.append(torch.from_numpy(np.array(decoded)).permute(2, 0, 1))
        decoded = jpeg_round_trip(images)
        assert decoded.dtype == torch.uint8 and torch.equal(decoded, torch.stack(expected))
        assert not torch.equal(decoded, images)  # lossy: the scorer sees other pixels than the raw ones
        assert not torch.equal(jpeg_round_trip(images, quality=95), decoded)
