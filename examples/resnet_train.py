"""ResNet-50-like CNN training fed by a DataLoader with pin_memory=True and non_blocking copies
(written for a CUDA GPU; synthetic images, random init).

    python examples/resnet_train.py --steps 3
    python examples/resnet_train.py --image-size 224 --batch 64 --width 64   # real ResNet-50 size
    python examples/resnet_train.py --image-size 224 --batch 64 --width 64 --classes 1000 --log-every 1
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, width=64, layers=(3, 4, 6, 3), classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, n in enumerate(layers):
            w = width * 2 ** i
            for j in range(n):
                blocks.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10, help="read the loss back (.item()) every N steps")
    args = p.parse_args()

    device = "cuda"
    torch.manual_seed(0)
    n = args.batch * args.steps
    data = TensorDataset(torch.randn(n, 3, args.image_size, args.image_size), torch.randint(0, args.classes, (n,)))
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, pin_memory=True, num_workers=args.workers,
                        drop_last=True)
    model = ResNet(args.width, classes=args.classes).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    model.train()
    for step, (images, labels) in enumerate(loader):
        images = images.to(device, non_blocking=True).to(memory_format=torch.channels_last)
        labels = labels.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
