"""The six peer-comparison models of tools/gpu-peers (PyTorch definitions, random weights).

Each entry builds an eval-mode float32 torch.nn.Module on the GPU and makes seeded inputs for a batch size:
  resnet50      torchvision ResNet-50,            x [B, 3, 224, 224] float32
  mobilenetv3   torchvision MobileNetV3-Large,    x [B, 3, 224, 224] float32
  vit           torchvision ViT-B/16,             x [B, 3, 224, 224] float32
  bert          transformers BertModel (bert-base config, no pooler), input_ids / attention_mask [B, 128] int64
  gpt2          one GPT-2-small decode step with a static key/value cache of 128 positions (as HF's StaticCache,
                the layout torch.compile users decode with): input_ids [B, 1] int64, position [B, 1] int64,
                write [B, 1, 128, 1] float32 (one-hot of the position), bias [B, 1, 1, 128] float32 (0 where a
                position may be attended, -1e9 where not), past_k / past_v [12, B, 12, 128, 64] float32;
                outputs logits [B, 50257] and the updated caches
  unet          the U-Net of Ronneberger et al. (MICCAI 2015) as in milesial/Pytorch-UNet (transposed-
                convolution upsampling, batch norm, 64..1024 channels), x [B, 3, 256, 256] float32
Outputs are tuples of tensors. Random weights: the machine has no model downloads.
"""
import math

import numpy as np
import torch
from torch import nn


def _seeded(seed):
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------------------------------------
# GPT-2 decode step (GPT2Config sizes; HF's GPT-2 block structure: pre-LayerNorm, fused QKV, tanh GELU).


class _Gpt2Block(nn.Module):
    def __init__(self, c, heads, inner):
        super().__init__()
        self.heads, self.d = heads, c // heads
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.c_fc = nn.Linear(c, inner)
        self.mlp_proj = nn.Linear(inner, c)

    def forward(self, x, write, bias, past_k, past_v):
        b, _, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q = q.view(b, 1, self.heads, self.d).transpose(1, 2)  # [B, H, 1, D]
        k = k.view(b, 1, self.heads, self.d).transpose(1, 2)
        v = v.view(b, 1, self.heads, self.d).transpose(1, 2)
        # The new key/value written at the position: write is 0/1, so these are exact selections.
        kc = past_k * (1.0 - write) + k * write  # [B, H, T, D]
        vc = past_v * (1.0 - write) + v * write
        att = torch.matmul(q, kc.transpose(-1, -2)) * (1.0 / math.sqrt(self.d)) + bias
        att = torch.softmax(att.float(), dim=-1).to(vc.dtype)
        y = torch.matmul(att, vc).transpose(1, 2).reshape(b, 1, c)
        x = x + self.c_proj(y)
        h = self.c_fc(self.ln_2(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.mlp_proj(h), kc, vc


class Gpt2DecodeStep(nn.Module):
    def __init__(self):
        super().__init__()
        try:
            from transformers import GPT2Config
            cfg = GPT2Config()
            vocab, pos, c, layers, heads = cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.n_layer, cfg.n_head
        except Exception:  # the GPT-2-small sizes
            vocab, pos, c, layers, heads = 50257, 1024, 768, 12, 12
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(pos, c)
        self.h = nn.ModuleList([_Gpt2Block(c, heads, 4 * c) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        for p in self.parameters():  # GPT-2's initializer_range
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        self.layers, self.heads, self.c = layers, heads, c

    def forward(self, input_ids, position, write, bias, past_k, past_v):
        x = self.wte(input_ids) + self.wpe(position)  # [B, 1, C]
        ks, vs = [], []
        for i, blk in enumerate(self.h):
            x, k, v = blk(x, write, bias, past_k[i], past_v[i])
            ks.append(k)
            vs.append(v)
        x = self.ln_f(x)
        logits = torch.matmul(x[:, 0, :], self.wte.weight.t())  # tied LM head
        return logits, torch.stack(ks), torch.stack(vs)


GPT2_CACHE = 128


def gpt2_inputs(batch, rng, layers=12, heads=12, d=64, step=96):
    """A decode step at position `step` with `step` positions already in the cache."""
    t = GPT2_CACHE
    past_k = np.zeros((layers, batch, heads, t, d), np.float32)
    past_v = np.zeros((layers, batch, heads, t, d), np.float32)
    past_k[:, :, :, :step] = rng.standard_normal((layers, batch, heads, step, d), dtype=np.float32)
    past_v[:, :, :, :step] = rng.standard_normal((layers, batch, heads, step, d), dtype=np.float32)
    write = np.zeros((batch, 1, t, 1), np.float32)
    write[:, :, step, :] = 1
    bias = np.full((batch, 1, 1, t), -1e9, np.float32)
    bias[:, :, :, : step + 1] = 0
    return {
        "input_ids": rng.integers(0, 50257, (batch, 1), dtype=np.int64),
        "position": np.full((batch, 1), step, np.int64),
        "write": write,
        "bias": bias,
        "past_k": past_k,
        "past_v": past_v,
    }


# ----------------------------------------------------------------------------------------------------------
# U-Net (milesial/Pytorch-UNet, bilinear=False).


class _DoubleConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class _Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = _DoubleConv(cin, cout)

    def forward(self, x1, x2):
        return self.conv(torch.cat([x2, self.up(x1)], dim=1))


class UNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=2):
        super().__init__()
        self.inc = _DoubleConv(n_channels, 64)
        self.downs = nn.ModuleList([nn.Sequential(nn.MaxPool2d(2), _DoubleConv(a, b))
                                    for a, b in ((64, 128), (128, 256), (256, 512), (512, 1024))])
        self.ups = nn.ModuleList([_Up(a, b) for a, b in ((1024, 512), (512, 256), (256, 128), (128, 64))])
        self.outc = nn.Conv2d(64, n_classes, 1)
        for m in self.modules():  # trained-looking batch-norm statistics instead of the identity
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)

    def forward(self, x):
        skips = [self.inc(x)]
        for d in self.downs:
            skips.append(d(skips[-1]))
        y = skips.pop()
        for u in self.ups:
            y = u(y, skips.pop())
        return self.outc(y)


# ----------------------------------------------------------------------------------------------------------


class _Bert(nn.Module):
    def __init__(self):
        super().__init__()
        from transformers import BertConfig, BertModel
        self.m = BertModel(BertConfig(), add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _image(batch, rng, size=224):
    return {"x": rng.standard_normal((batch, 3, size, size), dtype=np.float32)}


def _bert_inputs(batch, rng, seq=128):
    mask = np.ones((batch, seq), np.int64)
    for b in range(batch):  # padded sequences of 64..128 tokens
        mask[b, rng.integers(64, seq + 1):] = 0
    return {"input_ids": rng.integers(0, 30522, (batch, seq), dtype=np.int64), "attention_mask": mask}


def _tv(name):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None)
    return build


class Spec:
    def __init__(self, build, inputs, outputs, dynamic, note):
        self.build, self.inputs, self.outputs, self.dynamic, self.note = build, inputs, outputs, dynamic, note


MODELS = {
    "resnet50": Spec(_tv("resnet50"), _image, ["y"], {"x": {0: "batch"}}, "torchvision ResNet-50, 224x224"),
    "mobilenetv3": Spec(_tv("mobilenet_v3_large"), _image, ["y"], {"x": {0: "batch"}},
                        "torchvision MobileNetV3-Large, 224x224"),
    "vit": Spec(_tv("vit_b_16"), _image, ["y"], {"x": {0: "batch"}}, "torchvision ViT-B/16, 224x224"),
    "bert": Spec(_Bert, _bert_inputs, ["last_hidden_state"],
                 {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
                 "transformers BERT-base encoder, sequence 128 (padded 64..128)"),
    "gpt2": Spec(Gpt2DecodeStep, gpt2_inputs, ["logits", "present_k", "present_v"],
                 {"input_ids": {0: "batch"}, "position": {0: "batch"}, "write": {0: "batch"}, "bias": {0: "batch"},
                  "past_k": {1: "batch"}, "past_v": {1: "batch"}},
                 "GPT-2-small decode step, static KV cache of 128 positions (step 96)"),
    "unet": Spec(UNet, lambda b, rng: _image(b, rng, 256), ["y"], {"x": {0: "batch"}},
                 "U-Net (milesial), 256x256, transposed-conv upsampling"),
}


def build(name, seed=0):
    _seeded(seed)
    return MODELS[name].build().eval()


def make_inputs(name, batch, seed=1):
    return MODELS[name].inputs(batch, np.random.default_rng(seed))
