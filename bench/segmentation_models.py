"""DeepLabV3 with a MobileNetV3-Large backbone, written in plain torch (torchvision's wheel does
not import beside the CPU torch here) and exported to ONNX with random weights: the
depthwise-heavy segmentation model of issue 32 item 2.

``deeplabv3_mobilenet_v3(size=520)`` returns ``(onnx model, {"x": array})`` like
tests/relay/onnx_models.py. The architecture is the published one: MobileNetV3-Large (hardswish,
squeeze-and-excitation with hardsigmoid, 5x5 depthwise convs), its last stage dilated by 2 for
output stride 16, then an ASPP head (1x1, three 3x3 convs dilated 12/24/36, an image-pooling
branch) into 21 classes, upsampled bilinearly to the input size. Batch norms are folded by the
exporter (eval mode).
"""

from __future__ import annotations

import io

import numpy as np

# (kernel, expanded channels, out channels, squeeze-excite, hardswish, stride, dilation)
MOBILENET_V3_LARGE = [
    (3, 16, 16, False, False, 1, 1), (3, 64, 24, False, False, 2, 1), (3, 72, 24, False, False, 1, 1),
    (5, 72, 40, True, False, 2, 1), (5, 120, 40, True, False, 1, 1), (5, 120, 40, True, False, 1, 1),
    (3, 240, 80, False, True, 2, 1), (3, 200, 80, False, True, 1, 1), (3, 184, 80, False, True, 1, 1),
    (3, 184, 80, False, True, 1, 1), (3, 480, 112, True, True, 1, 1), (3, 672, 112, True, True, 1, 1),
    (5, 672, 160, True, True, 1, 2), (5, 960, 160, True, True, 1, 2), (5, 960, 160, True, True, 1, 2),
]


def _net():
    import torch
    from torch import nn

    def divisible(v, d=8):  # the nearest multiple of d, not more than 10% below v
        r = max(d, int(v + d / 2) // d * d)
        return r + d if r < 0.9 * v else r

    def cba(cin, cout, k=1, stride=1, dilation=1, groups=1, act=nn.ReLU):
        pad = (k - 1) // 2 * dilation
        layers = [nn.Conv2d(cin, cout, k, stride, pad, dilation, groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)

    class SqueezeExcite(nn.Module):
        def __init__(self, c):
            super().__init__()
            mid = divisible(c // 4)
            self.fc1, self.fc2 = nn.Conv2d(c, mid, 1), nn.Conv2d(mid, c, 1)

        def forward(self, x):
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    class Block(nn.Module):
        def __init__(self, cin, k, exp, cout, se, hs, stride, dilation):
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            layers = [] if exp == cin else [cba(cin, exp, act=act)]
            layers.append(cba(exp, exp, k, stride, dilation, exp, act))
            if se:
                layers.append(SqueezeExcite(exp))
            layers.append(cba(exp, cout, act=None))
            self.body, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    class ASPP(nn.Module):
        def __init__(self, cin, rates=(12, 24, 36), c=256):
            super().__init__()
            self.branches = nn.ModuleList([cba(cin, c)] + [cba(cin, c, 3, dilation=r) for r in rates])
            self.pool = cba(cin, c)
            self.project = cba(c * (len(rates) + 2), c)

        def forward(self, x):
            pooled = self.pool(nn.functional.adaptive_avg_pool2d(x, 1))
            pooled = nn.functional.interpolate(pooled, size=x.shape[-2:], mode="bilinear", align_corners=False)
            return self.project(torch.cat([b(x) for b in self.branches] + [pooled], 1))

    class DeepLabV3(nn.Module):
        def __init__(self, classes=21):
            super().__init__()
            layers, cin = [cba(3, 16, 3, 2, act=nn.Hardswish)], 16
            for k, exp, cout, se, hs, stride, dilation in MOBILENET_V3_LARGE:
                layers.append(Block(cin, k, exp, cout, se, hs, stride, dilation))
                cin = cout
            layers.append(cba(cin, 960, act=nn.Hardswish))
            self.backbone = nn.Sequential(*layers)
            self.head = nn.Sequential(ASPP(960), cba(256, 256, 3), nn.Conv2d(256, classes, 1))

        def forward(self, x):
            y = self.head(self.backbone(x))
            return nn.functional.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)

    torch.manual_seed(0)
    net = DeepLabV3().eval()
    with torch.no_grad():  # batch-norm statistics away from 0/1, as a trained net's
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return net


def deeplabv3_mobilenet_v3(size: int = 520):
    """(ONNX model, {"x": 1x3xSIZExSIZE input}) of DeepLabV3-MobileNetV3-Large, random weights."""
    import onnx
    import torch

    net = _net()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32"))
    buf = io.BytesIO()
    torch.onnx.export(net, (x,), buf, input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    return onnx.load_from_string(buf.getvalue()), {"x": x.numpy()}
